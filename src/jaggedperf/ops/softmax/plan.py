"""Planning a jagged softmax (and its backward): the output and the one launch that fills it, one program per
(segment, column block) (``kernels``; the shared ``jaggedperf.ops.rowwise.plan_rowwise``); or, with fewer of those
programs than SMs and long sequences, the forward's split over ``parts`` programs each (``plan_softmax_parts``)."""

from __future__ import annotations

from jaggedperf.ops.launch.plan import Plan
from jaggedperf.ops.rowwise import plan_rowwise, split_launcher, split_parts, split_workspace
from jaggedperf.ops.softmax.kernels import (_softmax_backward_kernel, _softmax_kernel, _softmax_parts_kernel,
                                           _softmax_stats_kernel)
from jaggedperf.ops.tiles import LEAN, TileConfig, tile_config


# The split's programs per SM over the batch, its stats pass per element (125 registers a thread at the lean tile:
# at most 4 programs an SM): on the H200 the best or within 2% of the best of 4-16 parts, per column or per
# element, at each of six few-program shapes, fp32 and bf16 (docs/performance.md).
SPLIT_PROGRAMS_PER_SM = 2


def plan_softmax(values, offsets, *, max_seqlen=None, cfg: TileConfig | None = None,
                 per_element: bool | None = None) -> Plan:
    """Allocate the output and describe the launches of a jagged softmax.

    Args:
        values: (N, M) contiguous, fp32/bf16/fp16 (fp64 on the CPU under the interpreter).
        offsets: (B + 1,) contiguous int32/int64 on values' device.
        max_seqlen: an upper bound on the lengths (an int, a SymInt) or None: it sizes the tile only.
        cfg: force the one-program kernel's tile (tests); None: the split where ``split_parts`` asks for it, else
            ``tile_config`` within ``tiles.LEAN``.
        per_element: force the one-program kernel and its long segments' first pass (tests); None: per element
            where the programs (B × column blocks) are fewer than the SMs, each a loop whose latency is the kernel's
            time, and where bf16/fp16 segments may loop (``rowwise.narrow_loads_loop``); per column where fp32
            programs fill the GPU, where the per-element pass's extra exponentials and registers cost more than they
            save (the H200's figures: docs/performance.md).

    Returns:
        the Plan: its ``out`` (N, M) in values' dtype, filled once its launches have run.
    """
    if cfg is None and per_element is None:
        parts = split_parts(offsets.shape[0] - 1, values.shape[0], values.shape[1],
                            lambda: tile_config(values.shape[1], max_seqlen, LEAN), values.device, column_blocks=True,
                            programs_per_sm=SPLIT_PROGRAMS_PER_SM)
        if parts:  # the split's tile: plan_softmax_parts' own default, the one split_parts judged
            return plan_softmax_parts(values, offsets, parts=parts, max_seqlen=max_seqlen, per_element=True)
    return plan_rowwise(_softmax_kernel, "softmax", (values,), offsets, column_blocks=True, max_seqlen=max_seqlen,
                        cfg=cfg, budget=LEAN, per_element="auto" if per_element is None else per_element)


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


def plan_softmax_parts(values, offsets, *, parts: int, max_seqlen=None, cfg: TileConfig | None = None,
                       per_element: bool = False) -> Plan:
    """The softmax split over ``parts`` programs per (segment, column block): per-part column max and sum, then
    each part written.

    Args:
        values, offsets, max_seqlen: as for ``plan_softmax``.
        parts: programs per (segment, column block) (a power of two); any value is correct whatever the lengths.
        cfg: force a tile (tests); None: ``tile_config`` within ``tiles.LEAN``.
        per_element: the stats launch's pass over its part (the one-program kernel's two variants).

    Returns:
        the Plan: two launches (stats, then parts), its ``out`` (N, M) in values' dtype.
    """
    out, launch = split_launcher(values, offsets, parts, cfg or tile_config(values.shape[1], max_seqlen, LEAN),
                                 column_blocks=True)
    # (max, sum) per (segment, part, column)
    ws = split_workspace(offsets.shape[0] - 1, parts, 2 * int(values.shape[1]), values.device)
    return Plan(out, (launch(_softmax_stats_kernel, "softmax_stats", (values, offsets, ws), ws, per_element),
                      launch(_softmax_parts_kernel, "softmax_parts", (values, offsets, ws, out), out)))
