"""The operators: ``jaggedperf::jagged_sum``, ``jagged_mean`` and ``jagged_expand`` (their backward) as
``triton_op``s, their autograd, and the pure-torch CPU kernel.

An operator's body branches on device: CUDA launches the planned kernels through ``wrap_triton`` when
traced (torch.compile, fake or functional tensors) and through the fast launch tiers when called
eagerly (``torch.ops.jaggedperf.*``, autograd's backward); anything else runs the CPU kernel
(traceable, so ``torch.compile`` works on the CPU too). ``max_seqlen`` reaches the operators, so
compiled code takes the whole-segments kernel as eager code does. Outputs are allocated inside the op
(by ``plan``), never passed in.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.library import triton_op, wrap_triton

from jaggedperf.ops.launch import eager_key, launch_all, plain_eager
from jaggedperf.ops.reduce.plan import plan_expand, plan_reduce


@triton_op("jaggedperf::jagged_sum", mutates_args=())
def _jagged_sum_op(values: torch.Tensor, offsets: torch.Tensor, max_seqlen: Optional[int] = None) -> torch.Tensor:
    return _reduce_op(values, offsets, mean=False, empty_zero=False, max_seqlen=max_seqlen)


@triton_op("jaggedperf::jagged_mean", mutates_args=())
def _jagged_mean_op(values: torch.Tensor, offsets: torch.Tensor, empty_zero: bool,
                    max_seqlen: Optional[int] = None) -> torch.Tensor:
    return _reduce_op(values, offsets, mean=True, empty_zero=empty_zero, max_seqlen=max_seqlen)


def _reduce_op(values, offsets, *, mean: bool, empty_zero: bool, max_seqlen) -> torch.Tensor:
    # the body of both reduction operators
    if values.device.type != "cuda":  # CPU (also what torch.compile traces on the CPU)
        return _reduce_cpu(values, offsets, mean=mean, empty_zero=empty_zero)
    plan = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
    _run_body(plan.launches, values, offsets)
    return plan.out


@triton_op("jaggedperf::jagged_expand", mutates_args=())
def _jagged_expand_op(grad: torch.Tensor, offsets: torch.Tensor, n_rows: int, mean: bool,
                      max_seqlen: Optional[int] = None) -> torch.Tensor:
    """Backward of sum/mean: (B, M) → (n_rows, M), row r = grad[its segment] (/ length for mean)."""
    if grad.device.type != "cuda":
        return _expand_cpu(grad, offsets, n_rows, mean=mean)
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


def _save_reduce(ctx, values, offsets, max_seqlen):
    ctx.save_for_backward(offsets)
    ctx.n_rows = values.shape[0]
    ctx.max_seqlen = max_seqlen  # the backward takes the whole-segments kernel where the forward could


def _save_sum(ctx, inputs, output):  # inputs: (values, offsets[, max_seqlen])
    _save_reduce(ctx, inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None)


def _save_mean(ctx, inputs, output):  # inputs: (values, offsets, empty_zero[, max_seqlen])
    _save_reduce(ctx, inputs[0], inputs[1], inputs[3] if len(inputs) > 3 else None)


def _sum_backward(ctx, grad):
    (offsets,) = ctx.saved_tensors
    back = torch.ops.jaggedperf.jagged_expand(grad.contiguous(), offsets, ctx.n_rows, False, ctx.max_seqlen)
    return back, None, None


def _mean_backward(ctx, grad):
    (offsets,) = ctx.saved_tensors
    back = torch.ops.jaggedperf.jagged_expand(grad.contiguous(), offsets, ctx.n_rows, True, ctx.max_seqlen)
    return back, None, None, None


def _save_expand(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])
    ctx.mean = inputs[3]
    ctx.max_seqlen = inputs[4] if len(inputs) > 4 else None


def _expand_backward(ctx, grad):
    # expand is linear: its adjoint is the sum (or, for mean, the mean with empty segments 0).
    (offsets,) = ctx.saved_tensors
    grad = grad.contiguous()
    if ctx.mean:
        back = torch.ops.jaggedperf.jagged_mean(grad, offsets, True, ctx.max_seqlen)
    else:
        back = torch.ops.jaggedperf.jagged_sum(grad, offsets, ctx.max_seqlen)
    return back, None, None, None, None


_jagged_sum_op.register_autograd(_sum_backward, setup_context=_save_sum)
_jagged_mean_op.register_autograd(_mean_backward, setup_context=_save_mean)
_jagged_expand_op.register_autograd(_expand_backward, setup_context=_save_expand)



# CPU kernel (pure torch: eager CPU dispatch, and what torch.compile traces on the CPU)

def _segment_ids(offsets: torch.Tensor, n_rows) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = (offsets[1:] - offsets[:-1]).to(torch.int64)
    ids = torch.arange(lengths.shape[0], device=offsets.device)
    return torch.repeat_interleave(ids, lengths, output_size=n_rows), lengths


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    # fp32 for the supported dtypes; float64 stays float64 (the operators accept it on the CPU, for gradcheck).
    return torch.promote_types(dtype, torch.float32)


def _reduce_cpu(values, offsets, *, mean: bool, empty_zero: bool) -> torch.Tensor:
    n_rows, n_cols = values.shape
    seg, lengths = _segment_ids(offsets, n_rows)
    acc = _acc_dtype(values.dtype)
    sums = torch.zeros((lengths.shape[0], n_cols), dtype=acc, device=values.device)
    sums.index_add_(0, seg, values.to(acc))
    if mean:
        sums = sums / lengths.unsqueeze(1).to(acc)
        if empty_zero:
            sums = torch.where(lengths.unsqueeze(1) == 0, 0.0, sums)
    return sums.to(values.dtype)


def _expand_cpu(grad, offsets, n_rows, *, mean: bool) -> torch.Tensor:
    seg, lengths = _segment_ids(offsets, n_rows)
    acc = _acc_dtype(grad.dtype)
    g = grad.to(acc)
    if mean:
        g = g / lengths.clamp_min(1).unsqueeze(1).to(acc)  # empty segments own no rows
    return g.index_select(0, seg).to(grad.dtype)


@_jagged_sum_op.register_kernel("cpu")
def _jagged_sum_cpu(values, offsets, max_seqlen=None):
    return _reduce_cpu(values, offsets, mean=False, empty_zero=False)


@_jagged_mean_op.register_kernel("cpu")
def _jagged_mean_cpu(values, offsets, empty_zero, max_seqlen=None):
    return _reduce_cpu(values, offsets, mean=True, empty_zero=empty_zero)


@_jagged_expand_op.register_kernel("cpu")
def _jagged_expand_cpu(grad, offsets, n_rows, mean, max_seqlen=None):
    return _expand_cpu(grad, offsets, n_rows, mean=mean)
