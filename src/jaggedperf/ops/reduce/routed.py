"""The routed kernels of the jagged sum/mean without max_seqlen (``@triton.jit`` only): the whole-segments kernel where
every segment fits its tiles, else the merge path, chosen on the device by every program alike. Planning them is
``plan``'s (``plan_routed``); reached through ``ops.testing`` until measured.

Why. With max_seqlen the whole-segments kernel (``kernels._segments_kernel``) is one launch and two dependent round
trips (a group's offsets, then its rows): 9.6 µs at the seed shape 512 × 64 on the H200. Without it every call takes
the merge path (``merge``): a search, windows of offsets, a second launch: 19.4 µs. The split and whole-first designs
(``split``) chose the tile on the device from N / B among several, in one kernel: the union of those tiles' registers
(255 a lane) left 2-4 programs an SM, and they measured 16-21 µs at the seed.

The routed path. The host knows N and B (shapes, no sync) and picks the whole-segments config for a longest segment
of next_pow2(cdiv(N, B)) rows (``config.whole_segments``): the very kernel, tile and warps max_seqlen would give a
batch of even lengths. Three launches follow, each deciding alike from the offsets alone (``_routes_whole``):

- ``_routed_segments_kernel``: the whole-segments program, where every segment has at most FITS rows (its tiles at
  most ``config.SEGMENT_TILES`` loops) and B <= MAX_SEGMENTS; else it returns at once;
- ``_routed_merge_reduce_kernel`` and ``_routed_merge_combine_kernel``: the merge path's two launches where the first
  returned, else they return at once.

The decision reads all B + 1 offsets in every program of the first launch (B <= MAX_SEGMENTS: at most 8·MAX_SEGMENTS
bytes a program, from L2 after the first), issued beside the group's own offsets, so it adds a reduction, not a round
trip; past MAX_SEGMENTS no program reads them and the merge path serves. Its program (0, 0) writes the decision to a
one-word flag that the other two launches read (stream order: the first launch has ended), so their programs load
one word, not the offsets (which would also hold registers their tiles need). Every segment is written by exactly one
launch; a wrong host guess (lengths far from the mean) costs speed, never correctness: the merge path takes any
lengths, the whole-segments kernel loops over a longer segment's tiles. No atomics: bitwise-equal repeats. Memory
safety never depends on the offsets (both kernels' own guarantees; the decision's loads stay inside [0, B]).

Backward (``_routed_segments_expand_kernel``, ``_routed_merge_expand_kernel``): the same decision over the
whole-segments expand (one tile a program on axis 2) and the merge path's one-launch expand.
"""

from __future__ import annotations

import triton
import triton.language as tl

from jaggedperf.ops.reduce.kernels import _expand_group, _group_bounds, _group_segments, _reduce_group
from jaggedperf.ops.reduce.merge import _combine_owned, _merge_expand_units, _merge_units

__all__ = ["_routed_merge_combine_kernel", "_routed_merge_expand_kernel", "_routed_merge_reduce_kernel",
           "_routed_segments_expand_kernel", "_routed_segments_kernel"]


@triton.jit
def _routes_whole(offsets_ptr, n_segments, FITS: tl.constexpr, MAX_SEGMENTS: tl.constexpr,
                  CHECK_BLOCK: tl.constexpr):
    # True where B <= MAX_SEGMENTS and every segment has at most FITS rows: the same answer in every program (the same
    # loads, the same integer arithmetic). Lengths of invalid (decreasing) offsets are
    # negative and never make a batch take the whole-segments kernel that would not otherwise.
    longest = tl.zeros([CHECK_BLOCK], dtype=tl.int64)
    segments = tl.where(n_segments <= MAX_SEGMENTS, n_segments, 0).to(tl.int64)  # past the bound: nothing read
    for i in range(0, segments, CHECK_BLOCK):
        idx = i + tl.arange(0, CHECK_BLOCK)
        ok = idx < segments
        lo = tl.load(offsets_ptr + idx, mask=ok, other=0).to(tl.int64)
        hi = tl.load(offsets_ptr + idx + 1, mask=ok, other=0).to(tl.int64)
        longest = tl.maximum(longest, hi - lo)
    return (n_segments <= MAX_SEGMENTS) & (tl.max(longest, axis=0) <= FITS)


# reads the rows of its GROUP segments once (+ 2·GROUP offsets, + 2·(B + 1) for the decision), writes GROUP·M·s
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _routed_segments_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_segments, n_cols) in values' dtype: every row written by its group's program, if it routes whole
    route_ptr,  # (1,) int32: 1 where this launch serves (written by program (0, 0)), else 0
    n_rows,  # N: rows outside [0, N) are never read
    n_cols,  # M (specialised)
    n_segments,  # B
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    GROUP: tl.constexpr,  # segments per program: grid axis 0 = cdiv(B, GROUP)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
    FITS: tl.constexpr,  # the longest segment this launch takes (BLOCK_L · SEGMENT_TILES)
    MAX_SEGMENTS: tl.constexpr,  # the most segments it takes
    CHECK_BLOCK: tl.constexpr,  # offsets a step of the decision reads
):
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    segs, seg_ok = _group_segments(tl.program_id(0), n_segments, GROUP)
    start, end = _group_bounds(offsets_ptr, segs, seg_ok)
    whole = _routes_whole(offsets_ptr, n_segments, FITS, MAX_SEGMENTS, CHECK_BLOCK)
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        tl.store(route_ptr, whole.to(tl.int32))
    if whole:
        _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                      MEAN, EMPTY_ZERO, GROUP, BLOCK_L, BLOCK_M)


# the merge path's reduction (``merge._merge_reduce_kernel``: its reads and writes) where the first launch returned
@triton.jit(do_not_specialize=["n_rows", "n_segments", "units_per_program", "n_programs"])
def _routed_merge_reduce_kernel(
    values_ptr, offsets_ptr, out_ptr, ws_ptr,  # as ``_merge_reduce_kernel``'s
    route_ptr,  # (1,) int32: the first launch's decision (0: this launch and the combine serve)
    n_rows, n_segments, units_per_program, n_programs,  # as ``_merge_reduce_kernel``'s
    N_COLS: tl.constexpr, MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_M: tl.constexpr, WINDOW: tl.constexpr, GROUP: tl.constexpr, SEG_ROWS: tl.constexpr,
    SEG_TILES: tl.constexpr, SEARCH: tl.constexpr,  # as ``_merge_reduce_kernel``'s
):
    if tl.load(route_ptr) == 0:
        _merge_units(values_ptr, offsets_ptr, out_ptr, ws_ptr, n_rows, n_segments, units_per_program, n_programs, 0,
                     N_COLS, MEAN, EMPTY_ZERO, BLOCK_L, BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH, False)


# the merge path's combine (``merge._merge_combine_kernel``) where the first launch returned; the workspace is
# read only then (the second launch wrote it)
@triton.jit(do_not_specialize=["units_per_program", "n_programs"])
def _routed_merge_combine_kernel(
    offsets_ptr, out_ptr, ws_ptr,  # as ``_merge_combine_kernel``'s
    route_ptr,  # (1,) int32: the first launch's decision (0: this launch serves)
    units_per_program, n_programs,  # as ``_merge_combine_kernel``'s
    N_COLS: tl.constexpr, MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr, BLOCK_P: tl.constexpr,
    BLOCK_M: tl.constexpr,  # as ``_merge_combine_kernel``'s
):
    if tl.load(route_ptr) == 0:
        _combine_owned(offsets_ptr, out_ptr, ws_ptr, units_per_program, n_programs, N_COLS, MEAN, EMPTY_ZERO,
                       BLOCK_P, BLOCK_M)


# reads GROUP·M·s bytes of grad (+ 2·GROUP offsets, + 2·(B + 1) for the decision), writes its segments' rows once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _routed_segments_expand_kernel(
    grad_ptr,  # (n_segments, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_rows, n_cols) in grad's dtype: every row written by its segment's program, if it routes whole
    route_ptr,  # (1,) int32: 1 where this launch serves (written by program (0, 0)), else 0
    n_rows,  # N: rows outside [0, N) are never written
    n_cols,  # M (specialised)
    n_segments,  # B
    MEAN: tl.constexpr,  # divide by the segment's length
    GROUP: tl.constexpr,  # segments per program: grid axis 0 = cdiv(B, GROUP)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile (a longer segment loops)
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
    FITS: tl.constexpr,  # the longest segment this launch takes
    MAX_SEGMENTS: tl.constexpr,  # the most segments it takes
    CHECK_BLOCK: tl.constexpr,  # offsets a step of the decision reads
):
    whole = _routes_whole(offsets_ptr, n_segments, FITS, MAX_SEGMENTS, CHECK_BLOCK)
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        tl.store(route_ptr, whole.to(tl.int32))
    if whole:  # one program a group on axis 2 (n_tiles 1): its loop covers every row
        _expand_group(grad_ptr, offsets_ptr, out_ptr, n_rows, n_cols, n_segments, 1, MEAN, GROUP, BLOCK_L, BLOCK_M)


# the merge path's expand (``merge._merge_expand_kernel``: its reads and writes) where the first launch returned
@triton.jit(do_not_specialize=["n_rows", "n_segments", "units_per_program"])
def _routed_merge_expand_kernel(
    grad_ptr, offsets_ptr, out_ptr,  # as ``_merge_expand_kernel``'s
    route_ptr,  # (1,) int32: the first launch's decision (0: this launch serves)
    n_rows, n_segments, units_per_program,  # as ``_merge_expand_kernel``'s
    N_COLS: tl.constexpr, MEAN: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr, WINDOW: tl.constexpr,
    GROUP: tl.constexpr, SEG_ROWS: tl.constexpr, SEG_TILES: tl.constexpr,
    SEARCH: tl.constexpr,  # as ``_merge_expand_kernel``'s
):
    if tl.load(route_ptr) == 0:
        _merge_expand_units(grad_ptr, offsets_ptr, out_ptr, n_rows, n_segments, units_per_program, 0, N_COLS, MEAN,
                            BLOCK_L, BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH, False)
