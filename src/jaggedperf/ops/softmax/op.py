"""The operators ``jaggedperf::jagged_softmax`` and ``jagged_softmax_backward`` as ``triton_op``s, the
forward's autograd, and the pure-torch CPU kernels.

A body branches on device: CUDA launches the planned kernel (``wrap_triton`` when traced, the fast tiers
eagerly: ``jaggedperf.ops.launch.body``); anything else runs the CPU kernel (traceable, so torch.compile
works on the CPU too). Outputs are allocated inside the op (by ``plan``), never passed in. The backward
operator has no autograd of its own: no double backward.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.library import triton_op

from jaggedperf.ops.launch.body import run_in_operator
from jaggedperf.ops.rowwise import acc_dtype, segment_ids
from jaggedperf.ops.softmax.plan import plan_softmax, plan_softmax_backward


@triton_op("jaggedperf::jagged_softmax", mutates_args=())
def _jagged_softmax_op(values: torch.Tensor, offsets: torch.Tensor, max_seqlen: Optional[int] = None) -> torch.Tensor:
    if values.device.type != "cuda":  # CPU (also what torch.compile traces on the CPU)
        return softmax_cpu(values, offsets)
    plan = plan_softmax(values, offsets, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, values, offsets)
    return plan.out


@triton_op("jaggedperf::jagged_softmax_backward", mutates_args=())
def _jagged_softmax_backward_op(out: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor,
                                max_seqlen: Optional[int] = None) -> torch.Tensor:
    """(N, M) y, (N, M) its gradient → (N, M) grad_values = y · (grad − Σ_rows grad·y) per segment and column."""
    if out.device.type != "cuda":
        return softmax_backward_cpu(out, grad, offsets)
    plan = plan_softmax_backward(out, grad, offsets, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, out, offsets, grad)
    return plan.out


def _save(ctx, inputs, output):  # inputs: (values, offsets[, max_seqlen])
    ctx.save_for_backward(output, inputs[1])
    ctx.max_seqlen = inputs[2] if len(inputs) > 2 else None


def _backward(ctx, grad):
    out, offsets = ctx.saved_tensors
    return torch.ops.jaggedperf.jagged_softmax_backward(out, grad.contiguous(), offsets, ctx.max_seqlen), None, None


_jagged_softmax_op.register_autograd(_backward, setup_context=_save)


# CPU kernels (pure torch: eager CPU dispatch, and what torch.compile traces on the CPU)

def softmax_cpu(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The softmax of each segment's rows, per column, in fp32 (float64 stays float64).

    Args:
        values: (N, M); offsets: (B + 1,) valid.

    Returns:
        (N, M) in values' dtype. A column of −inf gives NaN, as torch.softmax does.
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
        out: (N, M) y; grad: (N, M); offsets: (B + 1,) valid.

    Returns:
        (N, M) in y's dtype.
    """
    n_rows, n_cols = out.shape
    seg, lengths = segment_ids(offsets, n_rows)
    acc = acc_dtype(out.dtype)
    y, g = out.to(acc), grad.to(acc)
    dots = torch.zeros((lengths.shape[0], n_cols), dtype=acc, device=out.device).index_add_(0, seg, g * y)
    return (y * (g - dots.index_select(0, seg))).to(out.dtype)


@_jagged_softmax_op.register_kernel("cpu")
def _jagged_softmax_cpu(values, offsets, max_seqlen=None):
    return softmax_cpu(values, offsets)


@_jagged_softmax_backward_op.register_kernel("cpu")
def _jagged_softmax_backward_cpu(out, grad, offsets, max_seqlen=None):
    return softmax_backward_cpu(out, grad, offsets)
