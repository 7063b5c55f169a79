"""The public function ``jagged_layer_norm``: the checks, NestedTensor in and out, and the eager CUDA fast
path in front of the operator (``op``), all through ``jaggedperf.ops.rowwise.call``."""

from __future__ import annotations

import math

import torch

from jaggedperf.ops import rowwise
from jaggedperf.ops.layer_norm import op  # noqa: F401  (registers torch.ops.jaggedperf.jagged_layer_norm*)
from jaggedperf.ops.layer_norm.plan import plan_layer_norm


def jagged_layer_norm(values, offsets=None, *, eps=1e-5, max_seqlen=None, validate=None) -> torch.Tensor:
    """Layer norm of each sequence over all of its len × M elements, no affine: ``torch.layer_norm(t, t.shape,
    eps=eps)`` for each sequence t = ``values[offsets[b]:offsets[b+1]]``; ``(total_len, M)`` like the input.

    Statistics in fp32 whatever the dtype; the variance is the mean squared deviation from the mean (two
    passes, or Welford/Chan merges of tiles: never E[x²] − E[x]²). An empty sequence has no rows: nothing to
    write. Deterministic (no atomics); autograd (no double backward); ``torch.compile`` (no graph break). One
    CUDA program per sequence; ``max_seqlen`` sizes its tile (a sequence that fits one is read once; a longer
    one twice). Unchecked invalid offsets give unspecified values (the CUDA kernels never access out of
    bounds; the CPU kernel may raise).

    Args:
        values: (total_len, M) float32/bfloat16/float16 (made contiguous if it is not); or a jagged
            NestedTensor (B, j, M) alone.
        offsets: (B + 1,) int32/int64 on values' device; None with a NestedTensor.
        eps: added to the variance; a finite float >= 0.
        max_seqlen: an upper bound on the lengths, or None (a NestedTensor's cached one is used when it has it).
        validate: as for ``jagged_mean``.

    Returns:
        (total_len, M) in values' dtype; a jagged NestedTensor (same offsets) when given one.

    Raises:
        TypeError, ValueError: as ``jagged_mean`` (the same checks and messages); ValueError also for an eps
            that is not a finite float >= 0.
        ModuleNotFoundError: triton is not installed (``jaggedperf.ops.has_triton()``).
    """
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < math.inf:  # NaN fails too
        raise ValueError(f"jagged_layer_norm: eps must be a finite float >= 0; got {eps!r}")
    return rowwise.call(values, offsets, "jagged_layer_norm", max_seqlen=max_seqlen, validate=validate,
                        plan=plan_layer_norm, operator=torch.ops.jaggedperf.jagged_layer_norm,
                        params=(float(eps),))
