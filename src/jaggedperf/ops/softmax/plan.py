"""Planning a jagged softmax (and its backward): the output and the one launch that fills it, one program per
(segment, column block) (``kernels``; the shared ``jaggedperf.ops.rowwise.plan_rowwise``)."""

from __future__ import annotations

from jaggedperf.ops.launch.plan import Plan
from jaggedperf.ops.rowwise import plan_rowwise
from jaggedperf.ops.softmax.kernels import _softmax_backward_kernel, _softmax_kernel
from jaggedperf.ops.tiles import LEAN, TileConfig


def plan_softmax(values, offsets, *, max_seqlen=None, cfg: TileConfig | None = None) -> Plan:
    """Allocate the output and describe the launch of a jagged softmax.

    Args:
        values: (N, M) contiguous, fp32/bf16/fp16 (fp64 on the CPU under the interpreter).
        offsets: (B + 1,) contiguous int32/int64 on values' device.
        max_seqlen: an upper bound on the lengths (an int, a SymInt) or None: it sizes the tile only.
        cfg: force a tile (tests); None: ``tile_config`` within ``tiles.LEAN``.

    Returns:
        the Plan: its ``out`` (N, M) in values' dtype, filled once its launch has run.
    """
    return plan_rowwise(_softmax_kernel, "softmax", (values,), offsets, column_blocks=True, max_seqlen=max_seqlen,
                        cfg=cfg, budget=LEAN)


def plan_softmax_backward(out, grad, offsets, *, max_seqlen=None, cfg: TileConfig | None = None) -> Plan:
    """Allocate grad_values and describe the launch of the softmax's backward.

    Args:
        out: the forward's (N, M) output y, contiguous.
        grad: (N, M) the gradient of y, contiguous, y's dtype.
        offsets, max_seqlen, cfg: as for ``plan_softmax``.

    Returns:
        the Plan: its ``out`` (N, M) grad_values = y · (grad − Σ_rows grad·y) per segment and column.
    """
    return plan_rowwise(_softmax_backward_kernel, "softmax_backward", (out, grad), offsets, column_blocks=True,
                        max_seqlen=max_seqlen, cfg=cfg, budget=LEAN)
