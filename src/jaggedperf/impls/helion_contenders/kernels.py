"""Our Helion kernels for the jagged family (imports helion: load it only where it imports).

Each takes the jagged input as ``(values (total_len, M), offsets (B+1,) int64)``, accumulates in fp32 whatever
the input dtype, and returns the input's dtype. One program per (sequence, column block) for the column-wise
ops (sum/mean, softmax), one per sequence for layer norm (a sequence's len × M elements are contiguous, so it
walks them as one flat range). Written for the lab, after Helion's documented API (``hl.tile`` with tensor
bounds, ``helion.Config``); not a copy of Helion's examples.

Configs: a fixed ``helion.Config`` per kernel (no autotuning, so a lab cell spends no minutes tuning); with
``$JAGGEDPERF_HELION_AUTOTUNE`` set to an effort (``quick`` or ``full``), Helion autotunes instead, once per
shape specialisation.
"""

from __future__ import annotations

import functools
import os

import helion
import helion.language as hl
import torch

AUTOTUNE_ENV = "JAGGEDPERF_HELION_AUTOTUNE"

# block_sizes: one per hl.tile without a fixed size, in order: [column block, row block(s)] for the column-wise
# kernels; [element block] per pass for layer norm
CONFIGS = {
    "segment_sum": dict(block_sizes=[64, 64], num_warps=4, num_stages=3),
    "segment_softmax": dict(block_sizes=[64, 64, 64], num_warps=4, num_stages=3),
    "segment_layer_norm": dict(block_sizes=[2048, 2048, 2048], num_warps=8, num_stages=3),
}


def _segment_sum(values: torch.Tensor, offsets: torch.Tensor, mean: hl.constexpr) -> torch.Tensor:
    # reads total_len·M·s bytes once, writes B·M·s
    n_seq = offsets.size(0) - 1
    n_col = values.size(1)
    out = torch.empty([n_seq, n_col], dtype=values.dtype, device=values.device)
    for seq, cols in hl.tile([n_seq, n_col], block_size=[1, None]):
        first = offsets[seq.begin]  # the sequence's first row
        stop = offsets[seq.begin + 1]  # one past its last row
        total = hl.zeros([cols], dtype=torch.float32)
        for rows in hl.tile(first, stop):
            total = total + values[rows, cols].to(torch.float32).sum(0)
        if mean:
            total = total / (stop - first).to(torch.float32)  # an empty sequence: 0/0 = NaN, as torch.mean
        out[seq.begin, cols] = total.to(out.dtype)
    return out


def _segment_softmax(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    # reads total_len·M·s bytes twice (the second read mostly from L2), writes total_len·M·s
    n_seq = offsets.size(0) - 1
    n_col = values.size(1)
    out = torch.empty_like(values)
    for seq, cols in hl.tile([n_seq, n_col], block_size=[1, None]):
        first = offsets[seq.begin]
        stop = offsets[seq.begin + 1]
        peak = hl.full([cols], float("-inf"), dtype=torch.float32)  # running max per column
        scale = hl.zeros([cols], dtype=torch.float32)  # running sum of exp(x - peak)
        for rows in hl.tile(first, stop):
            x = values[rows, cols].to(torch.float32)
            x = torch.where((rows.index < stop)[:, None], x, float("-inf"))  # rows past the end count for nothing
            new_peak = torch.maximum(peak, torch.amax(x, 0))
            scale = scale * torch.exp(peak - new_peak) + torch.exp(x - new_peak[None, :]).sum(0)
            peak = new_peak
        for rows in hl.tile(first, stop):
            x = values[rows, cols].to(torch.float32)
            out[rows, cols] = (torch.exp(x - peak[None, :]) / scale[None, :]).to(out.dtype)
    return out


def _segment_layer_norm(flat: torch.Tensor, offsets: torch.Tensor, n_col: int, eps: float) -> torch.Tensor:
    # flat: the values viewed as (total_len·M,); reads it three times (two from L2 where a sequence fits), writes once
    n_seq = offsets.size(0) - 1
    out = torch.empty_like(flat)
    for seq in hl.tile(n_seq, block_size=1):
        first = offsets[seq.begin] * n_col  # the sequence's first element
        stop = offsets[seq.begin + 1] * n_col
        count = (stop - first).to(torch.float32)
        total = hl.zeros([seq], dtype=torch.float32)
        for part in hl.tile(first, stop):
            total = total + flat[part].to(torch.float32).sum()
        mean = total / count
        spread = hl.zeros([seq], dtype=torch.float32)  # sum of squared deviations: two-pass, not E[x²] − E[x]²
        for part in hl.tile(first, stop):
            dev = torch.where(part.index < stop, flat[part].to(torch.float32) - mean, 0.0)
            spread = spread + (dev * dev).sum()
        rstd = torch.rsqrt(spread / count + eps)
        for part in hl.tile(first, stop):
            out[part] = ((flat[part].to(torch.float32) - mean) * rstd).to(out.dtype)
    return out


def autotune_effort() -> str | None:
    """The autotuning effort asked for in ``$JAGGEDPERF_HELION_AUTOTUNE`` (``quick``, ``full``), or None: the
    fixed configs."""
    effort = os.environ.get(AUTOTUNE_ENV, "").strip().lower()
    if effort in ("", "0", "none", "off", "no"):
        return None
    if effort in ("1", "yes", "on"):
        return "quick"
    return effort


@functools.cache
def kernel(name: str, effort: str | None = None):
    """The Helion kernel ``name`` (a key of ``CONFIGS``): with its fixed config, or autotuned at ``effort``."""
    fn = {"segment_sum": _segment_sum, "segment_softmax": _segment_softmax,
          "segment_layer_norm": _segment_layer_norm}[name]
    if effort is None:
        return helion.kernel(fn, config=helion.Config(**CONFIGS[name]), static_shapes=False)
    return helion.kernel(fn, static_shapes=False, autotune_effort=effort)


def jagged_sum(values, offsets, max_seqlen=None):
    """Per-sequence sums, (B, M); ``max_seqlen`` is not needed (each program reads its own bounds)."""
    return kernel("segment_sum", autotune_effort())(values, offsets, False)


def jagged_mean(values, offsets, max_seqlen=None):
    """Per-sequence means, (B, M); an empty sequence gives NaN."""
    return kernel("segment_sum", autotune_effort())(values, offsets, True)


def jagged_softmax(values, offsets, max_seqlen=None):
    """Softmax of each sequence along its rows, per column, (total_len, M)."""
    return kernel("segment_softmax", autotune_effort())(values, offsets)


def jagged_layer_norm(values, offsets, max_seqlen=None, eps: float = 1e-5):
    """Each sequence normalised over its len × M elements, no affine, (total_len, M)."""
    flat = values.reshape(-1)
    return kernel("segment_layer_norm", autotune_effort())(flat, offsets, values.shape[1], eps).view_as(values)
