"""The public function ``jagged_softmax``: the checks, NestedTensor in and out, and the eager CUDA fast path
in front of the operator (``op``), all through ``jaggedperf.ops.rowwise.call``."""

from __future__ import annotations

import torch

from jaggedperf.ops import rowwise
from jaggedperf.ops.softmax import op  # noqa: F401  (registers torch.ops.jaggedperf.jagged_softmax*)
from jaggedperf.ops.softmax.plan import plan_softmax


def jagged_softmax(values, offsets=None, *, max_seqlen=None, validate=None) -> torch.Tensor:
    """Softmax along the ragged dimension: for each sequence b and column j, the softmax of
    ``values[offsets[b]:offsets[b+1], j]``; ``(total_len, M)`` like the input.

    Computed in fp32 whatever the dtype, the per-column max subtracted first (no overflow). An empty sequence
    has no rows: nothing to write. A column of a sequence that is all −inf gives NaN, as ``torch.softmax``.
    Deterministic (no atomics); autograd (no double backward); ``torch.compile`` (no graph break). One CUDA
    program per (sequence, column block); ``max_seqlen`` sizes its tile (a sequence that fits one is read
    once; a longer one, or any when max_seqlen understates the lengths, is read twice). Unchecked invalid
    offsets give unspecified values (the CUDA kernels never access out of bounds; the CPU kernel may raise).

    Args:
        values: (total_len, M) float32/bfloat16/float16 (made contiguous if it is not); or a jagged
            NestedTensor (B, j, M) alone.
        offsets: (B + 1,) int32/int64 on values' device; None with a NestedTensor.
        max_seqlen: an upper bound on the lengths, or None (a NestedTensor's cached one is used when it has it).
        validate: as for ``jagged_mean``: check the offsets' values (a device sync); None:
            ``JAGGEDPERF_VALIDATE`` decides.

    Returns:
        (total_len, M) in values' dtype; a jagged NestedTensor (same offsets) when given one.

    Raises:
        TypeError, ValueError: as ``jagged_mean`` (the same checks and messages).
        ModuleNotFoundError: triton is not installed (``jaggedperf.ops.has_triton()``).
    """
    return rowwise.call(values, offsets, "jagged_softmax", max_seqlen=max_seqlen, validate=validate,
                        plan=plan_softmax, operator=torch.ops.jaggedperf.jagged_softmax)
