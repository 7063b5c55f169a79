"""The operators ``jaggedperf::jagged_softmax`` and ``jagged_softmax_backward`` as ``triton_op``s, the
forward's autograd (reverse and forward mode), and the pure-torch CPU kernels.

A body checks its inputs' metadata (the public function's checks and messages), then branches on device:
CUDA launches the planned kernel (``wrap_triton`` when traced, the fast tiers eagerly:
``jaggedperf.ops.launch.body``); anything else calls the CPU kernel as an operator opaque to torch.compile
(``jaggedperf::_softmax_torch``, ``_softmax_backward_torch``), which checks the offsets' values first, always:
traced, the pure-torch kernel could not read them (compiled code returned a finite answer for invalid
offsets), and Inductor's scatter loops for it are slower than the eager kernel. Outputs are allocated inside
the op (by ``plan``), never passed in. The backward operator has no autograd of its own: a higher-order gradient
takes the same product from differentiable ops (``rowwise.Adjoint``).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.library import triton_op

from jaggedperf.ops.batching import register_vmap
from jaggedperf.ops.launch.body import run_in_operator
from jaggedperf.ops.rowwise import Adjoint, acc_dtype, check_operator, segment_ids
from jaggedperf.ops.softmax.plan import plan_softmax, plan_softmax_backward


@triton_op("jaggedperf::jagged_softmax", mutates_args=())
def _jagged_softmax_op(values: torch.Tensor, offsets: torch.Tensor, max_seqlen: Optional[int] = None) -> torch.Tensor:
    check_operator(values, offsets, max_seqlen, "jagged_softmax")
    if values.device.type != "cuda":  # the CPU, meta, ...: opaque to torch.compile, offsets checked
        return torch.ops.jaggedperf._softmax_torch(values, offsets)
    plan = plan_softmax(values, offsets, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, values, offsets)
    return plan.out


@triton_op("jaggedperf::jagged_softmax_backward", mutates_args=())
def _jagged_softmax_backward_op(out: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor,
                                max_seqlen: Optional[int] = None) -> torch.Tensor:
    """(N, M) y, (N, M) its gradient → (N, M) grad_values = y · (grad − Σ_rows grad·y) per segment and column."""
    check_operator(out, offsets, max_seqlen, "jagged_softmax_backward", grad=grad)
    if out.device.type != "cuda":
        return torch.ops.jaggedperf._softmax_backward_torch(out, grad, offsets)
    plan = plan_softmax_backward(out, grad, offsets, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, out, offsets, grad)
    return plan.out


def _jacobian(saved, vector, rest):
    # J·v = y · (v − Σ_rows v·y) per segment and column: the backward's formula (J is symmetric)
    out, offsets = saved
    return torch.ops.jaggedperf.jagged_softmax_backward(out, vector, offsets, *rest)


def _composite_jacobian(saved, vector, rest):
    # the same product from differentiable ops (a higher-order gradient's: ``Adjoint``), in fp32 (float64 stays)
    out, offsets = saved
    y, v = out.to(acc_dtype(out.dtype)), vector.to(acc_dtype(out.dtype))
    per_segment = torch.ops.jaggedperf.jagged_sum(v * y, offsets, *rest)  # rest: (max_seqlen,) or ()
    back = y * (v - torch.ops.jaggedperf.jagged_expand(per_segment, offsets, y.shape[0], False, *rest))
    return back.to(out.dtype)


_LIB = torch.library.Library("jaggedperf", "FRAGMENT")  # kept alive: the registrations live as long as it does
Adjoint("jagged_softmax", saved=lambda args, out: (out, args[1]), jacobian=_jacobian,
        composite=_composite_jacobian).register(_jagged_softmax_op, _LIB)
# vmap: every column is its own softmax (``jaggedperf.ops.batching``)
register_vmap(_jagged_softmax_op, "jagged_softmax", tensors=1, fold="columns")
register_vmap(_jagged_softmax_backward_op, "jagged_softmax_backward", tensors=2, fold="columns")


# CPU kernels (pure torch: eager CPU dispatch, and the opaque operators compiled CPU code calls)

def softmax_cpu(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The softmax of each segment's rows, per column, in fp32 (float64 stays float64).

    Args:
        values: (N, M); offsets: (B + 1,), layout checked.

    Returns:
        (N, M) in values' dtype. A column of −inf gives NaN, as torch.softmax does.

    Raises:
        ValueError: invalid offsets.
    """
    n_rows, n_cols = values.shape
    seg, lengths = segment_ids(offsets, n_rows)
    x = values.to(acc_dtype(values.dtype))
    index = seg.unsqueeze(1).expand(n_rows, n_cols)
    top = torch.full((lengths.shape[0], n_cols), float("-inf"), dtype=x.dtype, device=x.device)
    top = top.scatter_reduce(0, index, x, "amax", include_self=True)
    e = torch.exp(x - top.index_select(0, seg))
    sums = torch.zeros_like(top).index_add_(0, seg, e)
    return (e / sums.index_select(0, seg)).to(values.dtype)


def softmax_backward_cpu(out: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The softmax's backward: y · (grad − Σ_rows grad·y) per segment and column.

    Args:
        out: (N, M) y; grad: (N, M); offsets: (B + 1,), layout checked.

    Returns:
        (N, M) in y's dtype.

    Raises:
        ValueError: invalid offsets.
    """
    n_rows, n_cols = out.shape
    seg, lengths = segment_ids(offsets, n_rows)
    acc = acc_dtype(out.dtype)
    y, g = out.to(acc), grad.to(acc)
    dots = torch.zeros((lengths.shape[0], n_cols), dtype=acc, device=out.device).index_add_(0, seg, g * y)
    return (y * (g - dots.index_select(0, seg))).to(out.dtype)


@torch.library.custom_op("jaggedperf::_softmax_torch", mutates_args=())
def softmax_torch(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``softmax_cpu`` as an operator opaque to torch.compile (see the module's docstring)."""
    return softmax_cpu(values, offsets)


@softmax_torch.register_fake
def _softmax_torch_fake(values, offsets):
    return torch.empty_like(values, memory_format=torch.contiguous_format)


@torch.library.custom_op("jaggedperf::_softmax_backward_torch", mutates_args=())
def softmax_backward_torch(out: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``softmax_backward_cpu`` as an operator opaque to torch.compile."""
    return softmax_backward_cpu(out, grad, offsets)


@softmax_backward_torch.register_fake
def _softmax_backward_torch_fake(out, grad, offsets):
    return torch.empty_like(out, memory_format=torch.contiguous_format)


# Eager CPU calls run the checked kernels directly (one dispatch, not two).

@_jagged_softmax_op.register_kernel("cpu")
def _jagged_softmax_cpu(values, offsets, max_seqlen=None):
    check_operator(values, offsets, max_seqlen, "jagged_softmax")
    return softmax_cpu(values, offsets)


@_jagged_softmax_backward_op.register_kernel("cpu")
def _jagged_softmax_backward_cpu(out, grad, offsets, max_seqlen=None):
    check_operator(out, offsets, max_seqlen, "jagged_softmax_backward", grad=grad)
    return softmax_backward_cpu(out, grad, offsets)
