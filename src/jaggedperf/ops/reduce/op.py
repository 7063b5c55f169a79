"""The operators: ``jaggedperf::jagged_sum``, ``jagged_mean`` and ``jagged_expand`` (their backward) as
``triton_op``s, with their CPU kernels; their autograd is ``autograd``'s.

The operators are public API: each body (and each CPU kernel) runs the same metadata checks as the
public functions (``jaggedperf.checks``: no sync, traceable). An operator's body then branches on
device: CUDA makes its tensors contiguous (the kernels assume it) and launches the planned kernels
through ``wrap_triton`` when traced (torch.compile, fake or functional tensors) and through the fast
launch tiers when called eagerly (``torch.ops.jaggedperf.*``, autograd's backward); any other device
calls the pure-torch kernels as opaque operators (``cpu``), which check the offsets' values first.
``max_seqlen`` reaches the operators, so compiled code takes the whole-segments kernel as eager code
does. Outputs are allocated inside the op (by ``plan``), never passed in.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.library import triton_op, wrap_triton

from jaggedperf.checks import (CPU_OPERATOR_DTYPES, SUPPORTED_DTYPES, check_expand_layout, check_layout,
                               check_max_seqlen)
from jaggedperf.ops.batching import register_vmap
from jaggedperf.ops.launch import eager_key, launch_all, plain_eager
from jaggedperf.ops.reduce.cpu import expand_checked, reduce_checked
from jaggedperf.ops.reduce.plan import plan_expand, plan_reduce


@triton_op("jaggedperf::jagged_sum", mutates_args=())
def _jagged_sum_op(values: torch.Tensor, offsets: torch.Tensor, max_seqlen: Optional[int] = None) -> torch.Tensor:
    return _reduce_op(values, offsets, mean=False, empty_zero=False, max_seqlen=max_seqlen, name="jagged_sum")


@triton_op("jaggedperf::jagged_mean", mutates_args=())
def _jagged_mean_op(values: torch.Tensor, offsets: torch.Tensor, empty_zero: bool,
                    max_seqlen: Optional[int] = None) -> torch.Tensor:
    return _reduce_op(values, offsets, mean=True, empty_zero=empty_zero, max_seqlen=max_seqlen, name="jagged_mean")


def _reduce_op(values, offsets, *, mean: bool, empty_zero: bool, max_seqlen, name: str) -> torch.Tensor:
    # the body of both reduction operators (eager on CUDA, and whatever torch.compile or export traces)
    _check_reduce(values, offsets, max_seqlen, name)
    if values.device.type != "cuda":  # the CPU, meta, ...: opaque to torch.compile, offsets checked
        return torch.ops.jaggedperf._reduce_torch(values, offsets, mean, empty_zero)
    return reduce_triton(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)


def reduce_triton(values, offsets, *, mean: bool, empty_zero: bool, max_seqlen) -> torch.Tensor:
    """The reduction operators' Triton branch, inputs checked (under TRITON_INTERPRET=1 tests call it on
    CPU tensors).

    Args:
        values, offsets, mean, empty_zero, max_seqlen: as for the operators; any strides.

    Returns:
        (B, M) in values' dtype.
    """
    values, offsets = values.contiguous(), offsets.contiguous()  # the kernels ignore strides
    plan = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
    _run_body(plan.launches, values, offsets)
    return plan.out


@triton_op("jaggedperf::jagged_expand", mutates_args=())
def _jagged_expand_op(grad: torch.Tensor, offsets: torch.Tensor, n_rows: int, mean: bool,
                      max_seqlen: Optional[int] = None) -> torch.Tensor:
    """Backward of sum/mean: (B, M) → (n_rows, M), row r = grad[its segment] (/ length for mean)."""
    _check_expand(grad, offsets, n_rows, max_seqlen)
    if grad.device.type != "cuda":
        return torch.ops.jaggedperf._expand_torch(grad, offsets, n_rows, mean)
    return expand_triton(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen)


def expand_triton(grad, offsets, n_rows, *, mean: bool, max_seqlen) -> torch.Tensor:
    """``jagged_expand``'s Triton branch, inputs checked (as ``reduce_triton``).

    Args:
        grad, offsets, n_rows, mean, max_seqlen: as for the operator; any strides.

    Returns:
        (n_rows, M) in grad's dtype.
    """
    grad, offsets = grad.contiguous(), offsets.contiguous()  # the kernels ignore strides
    plan = plan_expand(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen)
    _run_body(plan.launches, grad, offsets, n_rows)
    return plan.out


def _run_body(launches, values, offsets, n_rows=None) -> None:
    # An operator's launches: traced (torch.compile, fake or functional tensors) through wrap_triton, so that
    # Inductor sees the kernels; called eagerly on real CUDA tensors (torch.ops..., autograd's backward)
    # through the fast launch path, like the public functions.
    if plain_eager(values, offsets):
        launch_all(launches, values.device, eager_key(values, offsets, n_rows))
    else:
        _run_wrapped(launches)


def _run_wrapped(launches) -> None:
    # Inside a triton_op body: wrap_triton makes the launch traceable under torch.compile.
    for launch in launches:
        kernel = launch.kernel
        wrap_triton(kernel)[launch.grid](*launch.args, num_warps=launch.num_warps)


def _check_reduce(values, offsets, max_seqlen, name: str) -> None:
    # the public functions' metadata checks, in every operator body and CPU kernel
    check_layout(values, offsets, dtypes=_dtypes(values))
    check_max_seqlen(max_seqlen, name)


def _check_expand(grad, offsets, n_rows, max_seqlen) -> None:
    check_expand_layout(grad, offsets, n_rows, dtypes=_dtypes(grad))
    check_max_seqlen(max_seqlen, "jagged_expand")


def _dtypes(tensor):
    return SUPPORTED_DTYPES if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda" else CPU_OPERATOR_DTYPES


# The CPU kernels: eager CPU calls run the checked pure-torch kernels directly (one dispatch, not two).

@_jagged_sum_op.register_kernel("cpu")
def _jagged_sum_cpu(values, offsets, max_seqlen=None):
    _check_reduce(values, offsets, max_seqlen, "jagged_sum")
    return reduce_checked(values, offsets, False, False)


@_jagged_mean_op.register_kernel("cpu")
def _jagged_mean_cpu(values, offsets, empty_zero, max_seqlen=None):
    _check_reduce(values, offsets, max_seqlen, "jagged_mean")
    return reduce_checked(values, offsets, True, empty_zero)


@_jagged_expand_op.register_kernel("cpu")
def _jagged_expand_cpu(grad, offsets, n_rows, mean, max_seqlen=None):
    _check_expand(grad, offsets, n_rows, max_seqlen)
    return expand_checked(grad, offsets, n_rows, mean)


# vmap: every column is its own reduction (``jaggedperf.ops.batching``)
for _name, _op in (("jagged_sum", _jagged_sum_op), ("jagged_mean", _jagged_mean_op),
                   ("jagged_expand", _jagged_expand_op)):
    register_vmap(_op, _name, tensors=1, fold="columns")
