"""The operators ``jaggedperf::jagged_layer_norm`` and ``jagged_layer_norm_backward`` as ``triton_op``s, the
forward's autograd, and the pure-torch CPU kernels.

As ``jaggedperf.ops.softmax.op``: CUDA launches the planned kernel (``wrap_triton`` when traced, the fast
tiers eagerly), anything else runs the CPU kernel; outputs are allocated inside the op. The backward
operator has no autograd of its own: no double backward.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.library import triton_op

from jaggedperf.ops.launch.body import run_in_operator
from jaggedperf.ops.layer_norm.plan import plan_layer_norm, plan_layer_norm_backward
from jaggedperf.ops.rowwise import acc_dtype, segment_ids


@triton_op("jaggedperf::jagged_layer_norm", mutates_args=())
def _jagged_layer_norm_op(values: torch.Tensor, offsets: torch.Tensor, eps: float,
                          max_seqlen: Optional[int] = None) -> torch.Tensor:
    if values.device.type != "cuda":  # CPU (also what torch.compile traces on the CPU)
        return layer_norm_cpu(values, offsets, eps)
    plan = plan_layer_norm(values, offsets, eps, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, values, offsets)
    return plan.out


@triton_op("jaggedperf::jagged_layer_norm_backward", mutates_args=())
def _jagged_layer_norm_backward_op(values: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor, eps: float,
                                   max_seqlen: Optional[int] = None) -> torch.Tensor:
    """(N, M) x, (N, M) the output's gradient → (N, M) grad_values (the statistics recomputed from x)."""
    if values.device.type != "cuda":
        return layer_norm_backward_cpu(values, grad, offsets, eps)
    plan = plan_layer_norm_backward(values, grad, offsets, eps, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, values, offsets, grad)
    return plan.out


def _save(ctx, inputs, output):  # inputs: (values, offsets, eps[, max_seqlen])
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.eps = inputs[2]
    ctx.max_seqlen = inputs[3] if len(inputs) > 3 else None


def _backward(ctx, grad):
    values, offsets = ctx.saved_tensors
    back = torch.ops.jaggedperf.jagged_layer_norm_backward(values, grad.contiguous(), offsets, ctx.eps,
                                                           ctx.max_seqlen)
    return back, None, None, None


_jagged_layer_norm_op.register_autograd(_backward, setup_context=_save)


# CPU kernels (pure torch: eager CPU dispatch, and what torch.compile traces on the CPU)

def _normalised(values, offsets, eps):
    # x̂ = (x − mean) · rstd per segment (two-pass variance), with the row → segment index and rstd per row
    n_rows, n_cols = values.shape
    seg, lengths = segment_ids(offsets, n_rows)
    x = values.to(acc_dtype(values.dtype))
    counts = (lengths * n_cols).to(x.dtype)  # an empty segment: 0/0, never gathered (it owns no rows)
    # the means summed in float64: a segment's fp32 sum of len × M values is off by ~len·M·ε·|mean|, which shifts
    # every x − mean of it (1e-3 at 8,000 values near 1e4); B floats, so the cost is the rows' sums
    sums = torch.zeros(lengths.shape[0], dtype=torch.float64, device=x.device).index_add_(
        0, seg, x.sum(1, dtype=torch.float64))
    d = x - (sums / counts).to(x.dtype).index_select(0, seg).unsqueeze(1)
    squares = torch.zeros_like(counts).index_add_(0, seg, (d * d).sum(1))
    rstd = torch.rsqrt(squares / counts + eps).index_select(0, seg).unsqueeze(1)
    return d * rstd, seg, counts, rstd


def layer_norm_cpu(values: torch.Tensor, offsets: torch.Tensor, eps: float) -> torch.Tensor:
    """Each segment normalised over its len × M elements, no affine, in fp32 (float64 stays float64).

    Args:
        values: (N, M); offsets: (B + 1,) valid; eps: added to the variance.

    Returns:
        (N, M) in values' dtype.
    """
    return _normalised(values, offsets, eps)[0].to(values.dtype)


def layer_norm_backward_cpu(values: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor, eps: float):
    """The layer norm's backward: rstd · (g − mean(g) − x̂ · mean(g · x̂)) per segment.

    Args:
        values: (N, M) x; grad: (N, M); offsets: (B + 1,) valid; eps: as in the forward.

    Returns:
        (N, M) in x's dtype.
    """
    xhat, seg, counts, rstd = _normalised(values, offsets, eps)
    g = grad.to(xhat.dtype)
    zeros = torch.zeros_like(counts)
    centred = g - (zeros.index_add(0, seg, g.sum(1)) / counts).index_select(0, seg).unsqueeze(1)
    # mean(g · x̂) as mean((g − mean(g)) · x̂), equal since Σ x̂ = 0: the fp32 mean's rounding shifts every x̂ of a
    # segment alike, which then adds nothing (Σ (g − mean(g)) = 0) where with g itself it adds mean(g) · shift
    mean_gx = (zeros.index_add(0, seg, (centred * xhat).sum(1)) / counts).index_select(0, seg).unsqueeze(1)
    return (rstd * (centred - xhat * mean_gx)).to(values.dtype)


@_jagged_layer_norm_op.register_kernel("cpu")
def _jagged_layer_norm_cpu(values, offsets, eps, max_seqlen=None):
    return layer_norm_cpu(values, offsets, eps)


@_jagged_layer_norm_backward_op.register_kernel("cpu")
def _jagged_layer_norm_backward_cpu(values, grad, offsets, eps, max_seqlen=None):
    return layer_norm_backward_cpu(values, grad, offsets, eps)
