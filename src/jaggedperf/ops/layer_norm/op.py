"""The operators ``jaggedperf::jagged_layer_norm`` and ``jagged_layer_norm_backward`` as ``triton_op``s, the
forward's autograd (reverse and forward mode), and the pure-torch CPU kernels.

As ``jaggedperf.ops.softmax.op``: a body checks its inputs' metadata, then CUDA launches the planned kernel
(``wrap_triton`` when traced, the fast tiers eagerly) and anything else calls the CPU kernel as an operator
opaque to torch.compile (``jaggedperf::_layer_norm_torch``, ``_layer_norm_backward_torch``), which checks the
offsets' values first, always (traced, the pure-torch kernel returned finite values for invalid offsets, and
Inductor failed to generate its fp64 scatter under ``dynamic=True``). Outputs are allocated inside the op.
The backward operator has no autograd of its own: a higher-order gradient takes the same product from
differentiable ops (``rowwise.Adjoint``).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.library import triton_op

from jaggedperf.ops.batching import register_vmap
from jaggedperf.ops.launch.body import run_in_operator
from jaggedperf.ops.layer_norm.plan import plan_layer_norm, plan_layer_norm_backward
from jaggedperf.ops.rowwise import Adjoint, acc_dtype, check_operator, segment_ids


@triton_op("jaggedperf::jagged_layer_norm", mutates_args=())
def _jagged_layer_norm_op(values: torch.Tensor, offsets: torch.Tensor, eps: float,
                          max_seqlen: Optional[int] = None) -> torch.Tensor:
    check_operator(values, offsets, max_seqlen, "jagged_layer_norm")
    if values.device.type != "cuda":  # the CPU, meta, ...: opaque to torch.compile, offsets checked
        return torch.ops.jaggedperf._layer_norm_torch(values, offsets, eps)
    plan = plan_layer_norm(values, offsets, eps, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, values, offsets)
    return plan.out


@triton_op("jaggedperf::jagged_layer_norm_backward", mutates_args=())
def _jagged_layer_norm_backward_op(values: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor, eps: float,
                                   max_seqlen: Optional[int] = None) -> torch.Tensor:
    """(N, M) x, (N, M) the output's gradient → (N, M) grad_values (the statistics recomputed from x)."""
    check_operator(values, offsets, max_seqlen, "jagged_layer_norm_backward", grad=grad)
    if values.device.type != "cuda":
        return torch.ops.jaggedperf._layer_norm_backward_torch(values, grad, offsets, eps)
    plan = plan_layer_norm_backward(values, grad, offsets, eps, max_seqlen=max_seqlen)
    run_in_operator(plan.launches, values, offsets, grad)
    return plan.out


def _jacobian(saved, vector, rest):
    # J·v = rstd · (v − mean(v) − x̂ · mean(v · x̂)) per segment: the backward's formula (J is symmetric)
    values, offsets = saved
    return torch.ops.jaggedperf.jagged_layer_norm_backward(values, vector, offsets, *rest)


def _composite_jacobian(saved, vector, rest):
    # the same product from differentiable ops (a higher-order gradient's: ``Adjoint``), in fp32 (float64 stays)
    values, offsets = saved
    eps, seqlen = rest[0], tuple(rest[1:])  # rest: (eps,) or (eps, max_seqlen)
    x, v = values.to(acc_dtype(values.dtype)), vector.to(acc_dtype(values.dtype))
    n_rows, n_cols = x.shape

    def segment_mean(t):  # (N, M) → (N, 1): the mean over each row's segment, its len × M elements
        per_segment = torch.ops.jaggedperf.jagged_sum(t, offsets, *seqlen).sum(1, keepdim=True) / n_cols
        return torch.ops.jaggedperf.jagged_expand(per_segment, offsets, n_rows, True, *seqlen)

    centred = x - segment_mean(x)
    rstd = torch.rsqrt(segment_mean(centred * centred) + eps)
    normalised = centred * rstd
    back = rstd * (v - segment_mean(v) - normalised * segment_mean(v * normalised))
    return back.to(values.dtype)


_LIB = torch.library.Library("jaggedperf", "FRAGMENT")  # kept alive: the registrations live as long as it does
Adjoint("jagged_layer_norm", saved=lambda args, out: (args[0], args[1]), jacobian=_jacobian,
        composite=_composite_jacobian).register(_jagged_layer_norm_op, _LIB)
# vmap: a segment's elements are normalised together, so samples become copies of the segments (``ops.batching``)
register_vmap(_jagged_layer_norm_op, "jagged_layer_norm", tensors=1, fold="segments")
register_vmap(_jagged_layer_norm_backward_op, "jagged_layer_norm_backward", tensors=2, fold="segments")


# CPU kernels (pure torch: eager CPU dispatch, and the opaque operators compiled CPU code calls)

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
        values: (N, M); offsets: (B + 1,), layout checked; eps: added to the variance.

    Returns:
        (N, M) in values' dtype.
    """
    return _normalised(values, offsets, eps)[0].to(values.dtype)


def layer_norm_backward_cpu(values: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor, eps: float):
    """The layer norm's backward: rstd · (g − mean(g) − x̂ · mean(g · x̂)) per segment.

    Args:
        values: (N, M) x; grad: (N, M); offsets: (B + 1,), layout checked; eps: as in the forward.

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


@torch.library.custom_op("jaggedperf::_layer_norm_torch", mutates_args=())
def layer_norm_torch(values: torch.Tensor, offsets: torch.Tensor, eps: float) -> torch.Tensor:
    """``layer_norm_cpu`` as an operator opaque to torch.compile (see the module's docstring)."""
    return layer_norm_cpu(values, offsets, eps)


@layer_norm_torch.register_fake
def _layer_norm_torch_fake(values, offsets, eps):
    return torch.empty_like(values, memory_format=torch.contiguous_format)


@torch.library.custom_op("jaggedperf::_layer_norm_backward_torch", mutates_args=())
def layer_norm_backward_torch(values: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor,
                              eps: float) -> torch.Tensor:
    """``layer_norm_backward_cpu`` as an operator opaque to torch.compile."""
    return layer_norm_backward_cpu(values, grad, offsets, eps)


@layer_norm_backward_torch.register_fake
def _layer_norm_backward_torch_fake(values, grad, offsets, eps):
    return torch.empty_like(values, memory_format=torch.contiguous_format)


# Eager CPU calls run the checked kernels directly (one dispatch, not two).

@_jagged_layer_norm_op.register_kernel("cpu")
def _jagged_layer_norm_cpu(values, offsets, eps, max_seqlen=None):
    check_operator(values, offsets, max_seqlen, "jagged_layer_norm")
    return layer_norm_cpu(values, offsets, eps)


@_jagged_layer_norm_backward_op.register_kernel("cpu")
def _jagged_layer_norm_backward_cpu(values, grad, offsets, eps, max_seqlen=None):
    check_operator(values, offsets, max_seqlen, "jagged_layer_norm_backward", grad=grad)
    return layer_norm_backward_cpu(values, grad, offsets, eps)
