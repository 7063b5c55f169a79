"""jagged_sum / jagged_mean: Triton kernels balanced over rows, registered as PyTorch operators.

Input: ``values (N, M)`` (N = total_len) and ``offsets (B+1,)``; output ``(B, M)`` in values' dtype,
accumulated in fp32. The layout of this file: kernels → launcher → triton_op → autograd → CPU kernel
→ public functions.

Design (balanced whatever the lengths, and the host never reads them):

- The flat row range [0, N) is cut into C equal *chunks* of R rows; R comes from N and a target
  program count only (``_chunking``), with plain integer arithmetic so that under
  ``torch.compile(dynamic=True)`` one graph serves every N and B. Grid = (C, cdiv(M, BLOCK_M)).
- Each program finds the first segment that starts in its chunk by a galloping search of the
  offsets from the guess lo·B/N (a few cached scalar loads when lengths are even, log2 B at worst),
  then walks the segments that start there, summing rows in BLOCK_L × BLOCK_M tiles in fp32. A
  segment that ends inside the chunk is finished and written directly (mean divides by the length;
  an empty segment gives 0, or NaN/0 for mean per ``empty``).
- Ownership: a segment belongs to the chunk holding row offsets[s]; segments starting at N (trailing
  empties) belong to the last chunk; with N == 0 there is still one chunk, which owns them all.
  So every output row is written by exactly one program.
- A segment that runs past its chunk's end leaves partial sums in an fp32 workspace of 2·C rows:
  ``tail[c]`` (the piece at chunk c's end of a segment that goes on) and ``head[c]`` (the piece at
  chunk c's start of a segment begun earlier), and chunk c records that segment's index in an int32
  slot (−1 when none). A second small kernel (grid (C, ·)) reads the slot and finishes the segment:
  tail[c] + head[c+1] + … + head[last], summed in a fixed order and tiling, so repeated calls are
  bitwise identical (no atomics). It costs one more launch; the host cannot know whether any segment
  crosses without reading the offsets.
- Many short segments share one program; a long one spreads over many programs; narrow rows get
  tall tiles so lanes are not wasted (``_config``).
- With ``max_seqlen`` known on the host and short, ``_segments_kernel`` instead: each program loads the
  offsets of a group of whole segments, then all their rows in one tile (one launch, no search, no
  workspace); the group's real longest segment bounds its loop, so a wrong hint costs only time.
- Rows are addressed in int64 (row·M can pass 2^31).
- Memory safety does not depend on the offsets being valid: every offsets load is in [0, B], every
  row touched is inside the program's chunk, every output row index is in [0, B). Invalid offsets
  (not checked unless ``validate``) give unspecified values, never out-of-bounds accesses.

Backward (``jaggedperf::jagged_expand``): grad (B, M) broadcast to every row of its segment (divided
by the length for mean), by the same chunking: each program writes the rows of its chunk, looking up
the segment holding its first row and walking forward. With ``max_seqlen`` known and short (autograd
passes the forward's), ``_segments_expand_kernel``: a program per group of whole segments, no search; a
segment alone in its program and longer than a tile spreads over programs of 32 rows (``_expand_tiles``).

Eager CUDA calls with no input requiring grad skip the dispatcher and the JIT binder (``_launch``);
everything else goes through the ``triton_op``, whose body branches on device: CUDA launches the
kernels through ``wrap_triton`` when traced (torch.compile, fake or functional tensors) and through
``_launch`` when called eagerly (``torch.ops.jaggedperf.*``, autograd's backward); anything else runs
the pure-torch CPU kernel (traceable, so ``torch.compile`` works on the CPU too). ``max_seqlen``
reaches the operators, so compiled code takes the whole-segments kernel as eager code does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from jaggedperf.ops import _launch, _native
from jaggedperf.checks import check_layout, check_offsets, validation_requested
from jaggedperf.ops._config import (EXPAND_SPLIT_ROWS, EXPAND_SPLIT_WARPS, SEGMENT_TILES, SegmentsConfig,
                                    reduce_config, segments_config, sm_count)

try:  # the jagged NestedTensor's class (private module: without it, the public is_nested check alone)
    from torch.nested._internal.nested_tensor import NestedTensor as _JAGGED_CLASS
except ImportError:  # pragma: no cover
    _JAGGED_CLASS = ()

# ============================================================================================
# kernels
# ============================================================================================


@triton.jit
def _lower_bound(offsets_ptr, n_segments, x, hint):
    # First s in [0, n_segments) with offsets[s] >= x (n_segments when none). Gallops from `hint`
    # (a guess: lo·B/N) with doubling steps, then bisects: O(log |answer − hint|) dependent scalar
    # loads, a handful when lengths are even, log2(B) at worst. Loads stay in [0, max(n_segments-1, 0)].
    n = x * 0 + n_segments  # int64 whether triton passed B as a value or made it a constant
    last = tl.maximum(n - 1, 0)
    g = tl.minimum(tl.maximum(x * 0 + hint, 0), n)
    right = (g < n) & (tl.load(offsets_ptr + tl.minimum(g, last)).to(tl.int64) < x)  # answer > g
    lo = tl.where(right, g + 1, 0)  # invariant: answer in [lo, hi]
    hi = tl.where(right, n, g)
    step = g * 0 + 1
    probe = lo
    go = right
    while go:  # gallop right: probe lo, lo+1, lo+3, lo+7, ...
        below = tl.load(offsets_ptr + tl.minimum(probe, last)).to(tl.int64) < x
        go = (probe < n) & below
        lo = tl.where(go, probe + 1, lo)
        hi = tl.where(go, hi, tl.minimum(probe, n))
        step = step * 2
        probe = lo + step - 1
    step = g * 0 + 1
    probe = hi - 1
    go = (right == 0) & (hi > 0)
    while go:  # gallop left from g (answer <= g)
        at_or_above = tl.load(offsets_ptr + tl.maximum(probe, 0)).to(tl.int64) >= x
        go = (probe >= 0) & at_or_above
        hi = tl.where(go, probe, hi)
        lo = tl.where(go, lo, tl.maximum(probe + 1, 0))
        step = step * 2
        probe = hi - step
    while lo < hi:  # bisect the bracket
        mid = (lo + hi) // 2
        below = tl.load(offsets_ptr + mid).to(tl.int64) < x
        lo = tl.where(below, mid + 1, lo)
        hi = tl.where(below, hi, mid)
    return lo


@triton.jit
def _sum_rows(values_ptr, r0, r1, n_cols, cols, col_mask, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # fp32 sum over rows [r0, r1) of the columns `cols`; (BLOCK_M,). Fixed tiling: deterministic.
    acc = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
    for r in range(r0, r1, BLOCK_L):
        rows = r + tl.arange(0, BLOCK_L)
        mask = (rows < r1)[:, None] & col_mask[None, :]
        ptrs = values_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    return tl.sum(acc, axis=0)


@triton.jit
def _finish(acc, length, MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr):
    # A finished segment's value from its fp32 sum: sum, or mean (empty: 0/0 = NaN, or 0).
    if MEAN:
        acc = acc / length.to(tl.float32)
        if EMPTY_ZERO:
            acc = tl.where(length == 0, 0.0, acc)
    return acc


# reads total_len·M·s bytes of values once (+ offsets), writes B·M·s of output + ≤ 2·C·M·4 (+ C·4) of workspace
@triton.jit(do_not_specialize=["n_rows", "n_segments", "rows_per_chunk", "n_chunks"])
def _reduce_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64: segment s is rows [offsets[s], offsets[s+1])
    out_ptr,  # (n_segments, n_cols) in values' dtype: every segment its owner chunk finishes
    ws_ptr,  # fp32 (2·C, M) pieces (rows [0, C) heads, [C, 2C) tails), then C int32 "crossing" slots
    n_rows,  # N = values.shape[0]
    n_cols,  # M = values.shape[1] (specialised: the fast path keys on it)
    n_segments,  # B
    rows_per_chunk,  # R: chunk c is rows [c·R, min((c+1)·R, N)); it owns the segments that start there
    n_chunks,  # C = max(cdiv(N, R), 1) = grid axis 0
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per tile = columns per program (grid axis 1)
):
    chunk = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    lo = chunk.to(tl.int64) * rows_per_chunk
    hi = tl.minimum(lo + rows_per_chunk, n_rows)
    is_last = chunk == n_chunks - 1  # the last chunk also owns the segments starting at N
    s = _lower_bound(offsets_ptr, n_segments, lo, lo * n_segments // tl.maximum(n_rows, 1))
    start = tl.load(offsets_ptr + s).to(tl.int64)
    if start > lo:  # rows [lo, start) belong to a segment begun in an earlier chunk: its head piece
        head = _sum_rows(values_ptr, lo, tl.minimum(start, hi), n_cols, cols, col_mask, BLOCK_L, BLOCK_M)
        tl.store(ws_ptr + chunk.to(tl.int64) * n_cols + cols, head, mask=col_mask)
    crossing = s * 0 - 1  # the owned segment that goes on past this chunk, if any
    while (s < n_segments) & ((start < hi) | is_last):  # segments starting in this chunk
        end = tl.load(offsets_ptr + s + 1).to(tl.int64)
        stop = tl.minimum(end, hi)
        acc = _sum_rows(values_ptr, tl.maximum(start, lo), stop, n_cols, cols, col_mask, BLOCK_L, BLOCK_M)
        if end <= stop:  # finished here
            res = _finish(acc, end - start, MEAN, EMPTY_ZERO)
            tl.store(out_ptr + s.to(tl.int64) * n_cols + cols, res.to(out_ptr.dtype.element_ty), mask=col_mask)
        else:  # goes on past the chunk: the combine kernel finishes it
            tl.store(ws_ptr + (chunk + n_chunks).to(tl.int64) * n_cols + cols, acc, mask=col_mask)
            crossing = s
        start = end
        s += 1
    if tl.program_id(1) == 0:
        cross_ptr = (ws_ptr + (chunk.to(tl.int64) * 0 + n_chunks) * 2 * n_cols).to(tl.pointer_type(tl.int32))
        tl.store(cross_ptr + chunk, crossing.to(tl.int32))


# reads ≤ 2·C·M·4 + C·4 bytes of workspace (+ offsets), writes ≤ C·M·s (one row per segment that crosses a chunk end)
@triton.jit(do_not_specialize=["rows_per_chunk", "n_chunks"])
def _combine_kernel(
    offsets_ptr,  # (B + 1,) int32/int64
    out_ptr,  # (B, n_cols) in values' dtype: written only for segments that cross a chunk end
    ws_ptr,  # workspace written by _reduce_kernel: (2·C, M) fp32 pieces, then C int32 crossing slots
    n_cols,  # M
    rows_per_chunk,  # R, as in _reduce_kernel
    n_chunks,  # C = grid axis 0
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # (kept for symmetry: a crossing segment is never empty)
    BLOCK_P: tl.constexpr,  # head pieces summed per tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    chunk = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    cross_ptr = (ws_ptr + (chunk.to(tl.int64) * 0 + n_chunks) * 2 * n_cols).to(tl.pointer_type(tl.int32))
    s = tl.load(cross_ptr + chunk)  # segment owned by this chunk that goes on past it, or -1
    if s >= 0:
        start = tl.load(offsets_ptr + s).to(tl.int64)
        end = tl.load(offsets_ptr + s + 1).to(tl.int64)
        acc = tl.load(ws_ptr + (n_chunks + chunk).to(tl.int64) * n_cols + cols, mask=col_mask, other=0.0)
        first = chunk.to(tl.int64) + 1
        last = tl.minimum((end - 1) // rows_per_chunk, n_chunks - 1)  # chunk holding its last row
        part = tl.zeros([BLOCK_P, BLOCK_M], dtype=tl.float32)
        for p in range(first, last + 1, BLOCK_P):
            pieces = p + tl.arange(0, BLOCK_P)
            mask = (pieces <= last)[:, None] & col_mask[None, :]
            part += tl.load(ws_ptr + pieces[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(part, axis=0)
        res = _finish(acc, end - start, MEAN, EMPTY_ZERO)
        tl.store(out_ptr + s.to(tl.int64) * n_cols + cols, res.to(out_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                  MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr, GROUP: tl.constexpr, BLOCK_L: tl.constexpr,
                  BLOCK_M: tl.constexpr):
    # One group of whole segments (`segs`, their rows [start, end)): every row in (GROUP, BLOCK_L, BLOCK_M)
    # tiles, one tile when every segment fits; longer segments loop, to the group's longest (so a max_seqlen
    # that understates the lengths costs time, never correctness). Rows outside [0, n_rows) are never read.
    length = end - start
    acc = tl.zeros([GROUP, BLOCK_L, BLOCK_M], dtype=tl.float32)
    for r in range(0, tl.minimum(tl.max(length, axis=0), n_rows), BLOCK_L):  # bounded by N, even for bad offsets
        ptrs, mask = _group_tile(values_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L)
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    res = _finish(tl.sum(acc, axis=1), length[:, None], MEAN, EMPTY_ZERO)
    out_ptrs = out_ptr + segs[:, None] * n_cols + cols[None, :]
    tl.store(out_ptrs, res.to(out_ptr.dtype.element_ty), mask=seg_ok[:, None] & col_mask[None, :])


@triton.jit
def _group_tile(base_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L: tl.constexpr):
    # Rows [r, r + BLOCK_L) of each segment of a group (rows [start, start + length)) of the (n_rows, n_cols)
    # tensor at base_ptr, columns `cols`: the pointers (GROUP, BLOCK_L, BLOCK_M) and which of them to touch,
    # never a row outside [0, n_rows).
    steps = tl.arange(0, BLOCK_L)
    rows = start[:, None] + r + steps[None, :]  # (GROUP, BLOCK_L)
    row_ok = ((r + steps)[None, :] < length[:, None]) & (rows >= 0) & (rows < n_rows)
    ptrs = base_ptr + (rows * n_cols)[:, :, None] + cols[None, None, :]
    return ptrs, row_ok[:, :, None] & col_mask[None, None, :]


@triton.jit
def _group_bounds(offsets_ptr, g, n_segments, GROUP: tl.constexpr):
    # group g's segment indices (GROUP,), which exist, and their [start, end) rows; two loads of GROUP+1 offsets
    segs = g.to(tl.int64) * GROUP + tl.arange(0, GROUP)
    seg_ok = segs < n_segments
    start = tl.load(offsets_ptr + segs, mask=seg_ok, other=0).to(tl.int64)
    end = tl.load(offsets_ptr + segs + 1, mask=seg_ok, other=0).to(tl.int64)
    return segs, seg_ok, start, end


# reads the rows of its GROUP segments once (+ 2·GROUP offsets), writes GROUP·M·s of output; no search, no workspace
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _segments_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_segments, n_cols) in values' dtype: every row written by the program of its group
    n_rows,  # N: rows outside [0, N) are never read, whatever the offsets say
    n_cols,  # M (specialised)
    n_segments,  # B
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    GROUP: tl.constexpr,  # segments per program: grid axis 0 = cdiv(B, GROUP)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile: a segment of <= BLOCK_L rows is one load
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    # Two dependent memory round trips when every segment fits a tile: the offsets, then all rows of
    # GROUP segments in one (GROUP, BLOCK_L, BLOCK_M) load.
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    segs, seg_ok, start, end = _group_bounds(offsets_ptr, tl.program_id(0), n_segments, GROUP)
    _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                  MEAN, EMPTY_ZERO, GROUP, BLOCK_L, BLOCK_M)


# the same traffic as _segments_kernel, from a fixed grid of programs that each loop over groups
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _segments_loop_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_segments, n_cols) in values' dtype
    n_rows,  # N: rows outside [0, N) are never read
    n_cols,  # M (specialised)
    n_segments,  # B
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    GROUP: tl.constexpr,  # segments per group; program p reduces groups p, p + P, p + 2P, ... (P = grid axis 0)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    # Many small groups: a program's next group's offsets are loaded before this group's rows, so the
    # offsets -> rows round trip is paid once per program, not once per group (run 17: 62.7 µs against the
    # one-group-per-program kernel's 70.8 at 65536 × 16 × ≤64, where a plain read of the bytes takes 53).
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    n_groups = (n_segments + GROUP - 1) // GROUP
    g = tl.program_id(0)
    step = tl.num_programs(0)
    segs, seg_ok, start, end = _group_bounds(offsets_ptr, g, n_segments, GROUP)
    while g < n_groups:
        next_segs, next_ok, next_start, next_end = _group_bounds(offsets_ptr, g + step, n_segments, GROUP)
        _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                      MEAN, EMPTY_ZERO, GROUP, BLOCK_L, BLOCK_M)
        g += step
        segs, seg_ok, start, end = next_segs, next_ok, next_start, next_end


# reads B·M·s bytes of grad (+ offsets), writes total_len·M·s
@triton.jit(do_not_specialize=["n_rows", "n_segments", "rows_per_chunk"])
def _expand_kernel(
    grad_ptr,  # (n_segments, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_rows, n_cols) in grad's dtype: row r gets grad[segment of r] (/ its length for mean)
    n_rows,  # N
    n_cols,  # M (specialised)
    n_segments,  # B
    rows_per_chunk,  # R: this program writes rows [c·R, min((c+1)·R, N))
    MEAN: tl.constexpr,  # divide by the segment's length
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    chunk = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    lo = chunk.to(tl.int64) * rows_per_chunk
    hi = tl.minimum(lo + rows_per_chunk, n_rows)
    hint = lo * n_segments // tl.maximum(n_rows, 1)
    s = tl.maximum(_lower_bound(offsets_ptr, n_segments, lo + 1, hint) - 1, 0)  # the segment holding row lo
    pos = lo
    while (pos < hi) & (s < n_segments):
        start = tl.load(offsets_ptr + s).to(tl.int64)
        end = tl.load(offsets_ptr + s + 1).to(tl.int64)
        r1 = tl.minimum(end, hi)
        if r1 > pos:
            g = tl.load(grad_ptr + s.to(tl.int64) * n_cols + cols, mask=col_mask, other=0.0).to(tl.float32)
            if MEAN:
                g = g / (end - start).to(tl.float32)
            tile = (tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32) + g[None, :]).to(out_ptr.dtype.element_ty)
            for r in range(pos, r1, BLOCK_L):
                rows = r + tl.arange(0, BLOCK_L)
                mask = (rows < r1)[:, None] & col_mask[None, :]
                tl.store(out_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :], tile, mask=mask)
            pos = r1
        s += 1


# reads GROUP·M·s bytes of grad (+ 2·GROUP offsets), writes its tile (axis 2) of its GROUP segments' rows once
@triton.jit(do_not_specialize=["n_rows", "n_segments", "n_tiles"])
def _segments_expand_kernel(
    grad_ptr,  # (n_segments, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_rows, n_cols) in grad's dtype: row r gets grad[segment of r] (/ its length for mean)
    n_rows,  # N: rows outside [0, N) are never written, whatever the offsets say
    n_cols,  # M (specialised)
    n_segments,  # B
    n_tiles,  # grid axis 2: program t writes rows [t·BLOCK_L, (t+1)·BLOCK_L) of each segment; the last, all past
    MEAN: tl.constexpr,  # divide by the segment's length
    GROUP: tl.constexpr,  # segments per program: grid axis 0 = cdiv(B, GROUP)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile: a segment of <= BLOCK_L rows is one store
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    # With max_seqlen known and short: no search, one (GROUP, BLOCK_L, BLOCK_M) store per tile (run 17:
    # 53 µs at 65536 × 16 × ≤64 against the chunked kernel's 68; 4.1 / 6.8 µs at the seed shapes against 5.2 / 7.8).
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    segs, seg_ok, start, end = _group_bounds(offsets_ptr, tl.program_id(0), n_segments, GROUP)
    length = end - start
    g = tl.load(grad_ptr + segs[:, None] * n_cols + cols[None, :], mask=seg_ok[:, None] & col_mask[None, :],
                other=0.0).to(tl.float32)
    if MEAN:
        g = g / tl.maximum(length, 1).to(tl.float32)[:, None]  # (an empty segment owns no rows)
    tile = (tl.zeros([GROUP, BLOCK_L, BLOCK_M], dtype=tl.float32) + g[:, None, :]).to(out_ptr.dtype.element_ty)
    longest = tl.minimum(tl.max(length, axis=0), n_rows)
    first = tl.program_id(2).to(tl.int64) * BLOCK_L
    stop = tl.where(tl.program_id(2) == n_tiles - 1, longest, tl.minimum(first + BLOCK_L, longest))
    for r in range(first, stop, BLOCK_L):  # one tile; the last program loops when max_seqlen understates
        ptrs, mask = _group_tile(out_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L)
        tl.store(ptrs, tile, mask=mask)


# ============================================================================================
# launcher
# ============================================================================================


@dataclass
class Launch:
    """One kernel launch: what ``kernel[grid](*args, num_warps=num_warps)`` needs, and what it writes."""

    kernel: object
    grid: tuple
    args: tuple  # positional, constexprs included (the order of the kernel's signature)
    num_warps: int
    written: tuple  # tensors the kernel writes (the fast path's self-check compares them)
    key: tuple  # kernel name + constexprs: with the caller's dtypes/alignment, what the JIT specialises on
    native: dict | None = None  # what the native path needs to launch it (_native.offer): sources, grid, plan


def _chunking(n_rows, n_cols: int, cfg, device: torch.device, rows_per_chunk=None):
    """(R, C, column blocks). R from N and the target program count only; sym-friendly (no branch on N)."""
    col_blocks = -(-n_cols // cfg.block_m)
    if rows_per_chunk is None:
        target_chunks = max(1, -(-(sm_count(device) * cfg.programs_per_sm) // col_blocks))
        per = (n_rows + target_chunks - 1) // target_chunks
        per = (per + cfg.block_l - 1) // cfg.block_l * cfg.block_l
        rows_per_chunk = _max(per, cfg.min_chunk_rows)
    n_chunks = _max((n_rows + rows_per_chunk - 1) // rows_per_chunk, 1)
    return rows_per_chunk, n_chunks, col_blocks


def _max(a, b):
    # builtin max on ints (eager: ~20x cheaper); torch.sym_max on SymInts (no guard under torch.compile)
    if type(a) is int and type(b) is int:
        return a if a > b else b
    return torch.sym_max(a, b)


def plan_reduce(values, offsets, *, mean: bool, empty_zero: bool, max_seqlen=None, rows_per_chunk=None,
                segments: SegmentsConfig | None = None, poison: float | None = None):
    """Allocate the output (and workspace) and describe the launches of a jagged sum/mean.

    With ``max_seqlen`` known (a host int, or a SymInt under torch.compile: ``_segments_for``) and short
    enough (``segments_config``), one program per group of whole segments: one launch, no search
    (``_segments_kernel``). Otherwise the balanced chunks: chunks stop at their end and a second launch
    combines the pieces of the segments that cross one.
    ``segments`` forces the whole-segments kernel with that config and ``rows_per_chunk`` forces R (tests
    use tiny chunks and groups to exercise every path: each is correct whatever the lengths;
    ``max_seqlen`` only decides the balance); ``poison`` (a value, e.g. NaN) fills output and workspace
    first, so an element nobody writes shows.
    """
    n_rows, n_cols = values.shape
    n_segments = offsets.shape[0] - 1
    if segments is None and max_seqlen is not None and rows_per_chunk is None:
        segments = _segments_for(n_cols, max_seqlen, n_segments, values.device)
    if segments is not None:
        return _plan_segments(values, offsets, mean, empty_zero, segments, poison)
    cfg = reduce_config(n_cols, values.dtype, values.device)
    n_cols = int(n_cols)
    rows, chunks, col_blocks = _chunking(n_rows, n_cols, cfg, values.device, rows_per_chunk)
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    grid = (chunks, col_blocks, 1)
    # (2·C, M) fp32 pieces + C int32 crossing slots, one allocation
    ws = torch.empty((2 * chunks * n_cols + chunks,), dtype=torch.float32, device=values.device)
    if poison is not None:
        out.fill_(poison)
        ws.fill_(poison)
    reduce_args = (values, offsets, out, ws, n_rows, n_cols, n_segments, rows, chunks,
                   mean, empty_zero, cfg.block_l, cfg.block_m)
    combine_args = (offsets, out, ws, n_cols, rows, chunks, mean, empty_zero, cfg.block_p, cfg.block_m)
    # the native path redoes _chunking per call (so one plan serves every N and B) unless R was forced
    plan = None if rows_per_chunk is not None else {
        "block_m": cfg.block_m, "group": 0, "programs": 0, "block_l": cfg.block_l,
        "chunk_programs": sm_count(values.device) * cfg.programs_per_sm, "min_chunk_rows": cfg.min_chunk_rows}
    return out, (Launch(_reduce_kernel, grid, reduce_args, cfg.num_warps, (out, ws), ("reduce", *reduce_args[-4:]),
                        plan and {"sources": REDUCE_SOURCES, "grid": "chunks", "plan": plan}),
                 Launch(_combine_kernel, grid, combine_args, cfg.num_warps, (out,), ("combine", *combine_args[-4:]),
                        plan and {"sources": COMBINE_SOURCES, "grid": "chunks", "plan": plan}))


def _segments_for(n_cols, max_seqlen, n_segments, device) -> SegmentsConfig | None:
    """``segments_config`` of the values of max_seqlen and B: host ints, or under torch.compile SymInts'
    hints, with one guard.

    Traced, the config comes from the values the graph is first compiled with, with no guard on B and
    one on max_seqlen: that every sequence still fits the config's tiles (past it, a recompile takes
    the chunked kernels; for host ints segments_config has already checked it). A later, smaller B or
    max_seqlen runs the same config (correct, maybe a larger tile than it needs); nothing about B or N
    ever recompiles.
    """
    seqlen_hint, segments_hint = _hint(max_seqlen), _hint(n_segments)
    if seqlen_hint is None or segments_hint is None:
        return None
    cfg = segments_config(n_cols, seqlen_hint, segments_hint, device)
    if cfg is not None and not (max_seqlen <= cfg.block_l * SEGMENT_TILES):  # the guard (True for the hint)
        return None
    return cfg


def _hint(n):
    # a host int's value, or a SymInt's example value without installing a guard (None when it has none)
    if type(n) is int:
        return n
    hint = getattr(getattr(n, "node", None), "hint", None)
    return int(hint) if hint is not None else None


def _plan_segments(values, offsets, mean, empty_zero, cfg: SegmentsConfig, poison):
    n_rows, n_cols = values.shape
    n_segments = offsets.shape[0] - 1
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    if poison is not None:
        out.fill_(poison)
    # one program per group, or (cfg.programs) a fixed grid of programs looping over the groups
    kernel, name, programs = (_segments_loop_kernel, "segments_loop", cfg.programs) if cfg.programs else \
        (_segments_kernel, "segments", _max(-(-n_segments // cfg.group), 1))
    grid = (programs, -(-int(n_cols) // cfg.block_m), 1)
    args = (values, offsets, out, n_rows, int(n_cols), n_segments, mean, empty_zero, cfg.group, cfg.block_l,
            cfg.block_m)
    plan = {"block_m": cfg.block_m, "group": 0 if cfg.programs else cfg.group, "programs": cfg.programs,
            "block_l": 0, "chunk_programs": 0, "min_chunk_rows": 0}
    native = {"sources": SEGMENT_SOURCES, "grid": "segments", "plan": plan}
    return out, (Launch(kernel, grid, args, cfg.num_warps, (out,), (name, *args[-5:]), native),)


# what fills the kernels' runtime arguments, in order (the native path's parameter sources)
SEGMENT_SOURCES = ("values", "offsets", "out", "n_rows", "n_cols", "n_segments")
REDUCE_SOURCES = ("values", "offsets", "out", "workspace", "n_rows", "n_cols", "n_segments", "rows_per_chunk",
                  "n_chunks")
COMBINE_SOURCES = ("offsets", "out", "workspace", "n_cols", "rows_per_chunk", "n_chunks")


def plan_expand(grad, offsets, n_rows, *, mean: bool, max_seqlen=None, rows_per_chunk=None,
                segments: SegmentsConfig | None = None, poison: float | None = None):
    """Allocate grad_values (n_rows, M) and describe the launch that fills it: with ``max_seqlen`` known
    and short (as for the forward, ``_segments_for``; ``segments`` forces a config, whose ``programs`` the
    backward ignores), one program per group of whole segments; otherwise the balanced chunks."""
    n_segments, n_cols = grad.shape
    if segments is None and max_seqlen is not None and rows_per_chunk is None:
        segments = _segments_for(n_cols, max_seqlen, n_segments, grad.device)
    out = torch.empty((n_rows, n_cols), dtype=grad.dtype, device=grad.device)
    if poison is not None:
        out.fill_(poison)
    if segments is not None:
        tiles, segments = _expand_tiles(segments, max_seqlen)
        grid = (_max(-(-n_segments // segments.group), 1), -(-int(n_cols) // segments.block_m), tiles)
        args = (grad, offsets, out, n_rows, int(n_cols), n_segments, tiles, mean, segments.group, segments.block_l,
                segments.block_m)
        return out, (Launch(_segments_expand_kernel, grid, args, segments.num_warps, (out,),
                            ("segments_expand", *args[-4:])),)
    cfg = reduce_config(n_cols, grad.dtype, grad.device)
    n_cols = int(n_cols)
    rows, chunks, col_blocks = _chunking(n_rows, n_cols, cfg, grad.device, rows_per_chunk)
    args = (grad, offsets, out, n_rows, n_cols, n_segments, rows, mean, cfg.block_l, cfg.block_m)
    return out, (Launch(_expand_kernel, (chunks, col_blocks, 1), args, cfg.num_warps, (out,), ("expand", *args[-3:])),)


def _expand_tiles(cfg: SegmentsConfig, max_seqlen):
    # Programs on grid axis 2, and the config they run. A segment alone in its program whose rows take more
    # than one tile: its rows spread over programs of EXPAND_SPLIT_ROWS rows each, so that every SM writes
    # about as many rows whatever the lengths (the bars' second seed shape, up to 275 rows: 5.76 against
    # 6.59 µs, run 30; spreading whole 128-row tiles gained nothing, run 25). Decided on max_seqlen's
    # value (a SymInt's hint: no guard); the last program writes whatever lies past the others, so any
    # max_seqlen is correct.
    hint = None if max_seqlen is None else _hint(max_seqlen)
    if cfg.group != 1 or hint is None or hint <= cfg.block_l:
        return 1, cfg
    split = dataclasses.replace(cfg, block_l=EXPAND_SPLIT_ROWS, num_warps=EXPAND_SPLIT_WARPS)
    return _max(-(-max_seqlen // EXPAND_SPLIT_ROWS), 1), split


def run_direct(launches) -> None:
    """Launch through the JIT (``kernel[grid](...)``): the normal path, and the interpreter's."""
    for launch in launches:
        launch.kernel[launch.grid](*launch.args, num_warps=launch.num_warps)


def launch_reduce(values, offsets, *, mean=False, empty_zero=False, max_seqlen=None, rows_per_chunk=None,
                  segments=None, poison=None):
    """Run the sum/mean kernels directly (no operator, no checks). Tests call it under TRITON_INTERPRET=1."""
    out, launches = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen,
                                rows_per_chunk=rows_per_chunk, segments=segments, poison=poison)
    run_direct(launches)
    return out


def launch_expand(grad, offsets, n_rows, *, mean=False, max_seqlen=None, rows_per_chunk=None, segments=None,
                  poison=None):
    """Run the backward kernel directly (no operator, no checks)."""
    out, launches = plan_expand(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen,
                                rows_per_chunk=rows_per_chunk, segments=segments, poison=poison)
    run_direct(launches)
    return out


def _run_wrapped(launches) -> None:
    # Inside a triton_op body: wrap_triton makes the launch traceable under torch.compile.
    for launch in launches:
        kernel = launch.kernel
        wrap_triton(kernel)[launch.grid](*launch.args, num_warps=launch.num_warps)


def _run_fast(launches, device: torch.device, key_extra: tuple) -> None:
    # Eager CUDA: cached compiled kernels, keyed on everything the JIT specialises on.
    if device.index is not None and device.index != torch._C._cuda_getDevice():
        with torch.cuda.device(device):
            return _run_fast(launches, device, key_extra)
    for launch in launches:
        _launch.launch(launch.kernel, launch.grid, launch.args, launch.num_warps, (launch.key, launch.num_warps,
                       key_extra), launch.written)


def _fast_key(values, offsets, n_rows=None) -> tuple:
    # dtypes, 16-byte alignment of the inputs (the JIT specialises on it), the row width (specialised),
    # whether the varying integers fit in int32 (their type in the compiled signature) and the device.
    # n_rows: the row count passed to the kernel when it is not values' (the backward's output rows).
    rows, n_cols = values.shape
    if n_rows is not None:
        rows = max(rows, n_rows)
    return (values.dtype, offsets.dtype, values.data_ptr() % 16 == 0, offsets.data_ptr() % 16 == 0, n_cols,
            max(rows, offsets.shape[0]) < 2**31 - 1, values.get_device())


# ============================================================================================
# operators
# ============================================================================================


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
    out, launches = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
    _run_body(launches, values, offsets)
    return out


@triton_op("jaggedperf::jagged_expand", mutates_args=())
def _jagged_expand_op(grad: torch.Tensor, offsets: torch.Tensor, n_rows: int, mean: bool,
                      max_seqlen: Optional[int] = None) -> torch.Tensor:
    """Backward of sum/mean: (B, M) → (n_rows, M), row r = grad[its segment] (/ length for mean)."""
    if grad.device.type != "cuda":
        return _expand_cpu(grad, offsets, n_rows, mean=mean)
    out, launches = plan_expand(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen)
    _run_body(launches, grad, offsets, n_rows)
    return out


def _run_body(launches, values, offsets, n_rows=None) -> None:
    # An operator's launches: traced (torch.compile, fake or functional tensors) through wrap_triton, so that
    # Inductor sees the kernels; called eagerly on real CUDA tensors (torch.ops..., autograd's backward)
    # through the fast launch path, like the public functions.
    if _plain_eager(values, offsets):
        _run_fast(launches, values.device, _fast_key(values, offsets, n_rows))
    else:
        _run_wrapped(launches)


# ============================================================================================
# autograd
# ============================================================================================


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


# ============================================================================================
# CPU kernel (pure torch: eager CPU dispatch, and what torch.compile traces on the CPU)
# ============================================================================================


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


# ============================================================================================
# public functions
# ============================================================================================

EMPTY_MODES = ("nan", "zero")


def jagged_sum(values, offsets=None, *, max_seqlen=None, validate=None) -> torch.Tensor:
    """Sum over each sequence's rows: ``out[b] = values[offsets[b]:offsets[b+1]].sum(0)``, (B, M).

    ``values (total_len, M)`` float32/bfloat16/float16 (made contiguous if it is not: one copy),
    ``offsets (B+1,)`` int32/int64 on the same device; or a jagged NestedTensor ``(B, j, M)`` alone.
    The result has values' dtype; sums accumulate in fp32; an empty sequence sums to 0; NaN/Inf
    propagate. ``max_seqlen`` (an upper bound on the lengths; a jagged NestedTensor's cached one is used
    when it has it) is optional: without it the kernels still balance the work whatever the lengths, in
    two launches; with it, CUDA calls whose sequences are short (``_config.segments_config``) take one
    launch of the whole-segments kernel, eager or compiled (under torch.compile a max_seqlen past the
    compiled config's tiles recompiles once, to the two-launch kernels). An understated max_seqlen costs
    time, never correctness.
    Shape/dtype/device checks always run; the checks that read the offsets (a device sync) run with
    ``validate=True`` or ``JAGGEDPERF_VALIDATE=1`` (never inside ``torch.compile``, where they would
    break the graph). Unchecked invalid offsets give unspecified
    values (the CUDA kernels never access out of bounds; the CPU kernel may raise a RuntimeError).
    A NestedTensor's ``_values``/``_offsets`` are read directly (the accessors cost ≈45 µs each),
    except when it requires grad or under ``torch.compile``.
    """
    out = _native_call(values, offsets, max_seqlen, False, False, validate)
    if out is not None:
        return out
    return _python_reduce(values, offsets, "jagged_sum", mean=False, empty_zero=False, max_seqlen=max_seqlen,
                          validate=validate)


def jagged_mean(values, offsets=None, *, max_seqlen=None, empty="nan", validate=None) -> torch.Tensor:
    """Mean over each sequence's rows, (B, M); as ``jagged_sum`` divided by the lengths.

    ``empty="nan"`` gives NaN for an empty sequence (like ``torch.mean`` of nothing); ``"zero"`` gives 0.
    """
    if empty not in EMPTY_MODES:
        raise ValueError(f"jagged_mean: empty must be 'nan' or 'zero'; got {empty!r}")
    out = _native_call(values, offsets, max_seqlen, True, empty == "zero", validate)
    if out is not None:
        return out
    return _python_reduce(values, offsets, "jagged_mean", mean=True, empty_zero=empty == "zero",
                          max_seqlen=max_seqlen, validate=validate)


def _native_call(values, offsets, max_seqlen, mean, empty_zero, validate):
    # A call the native module has a plan for, in one C++ call (None: the Python path). is_compiling first:
    # Dynamo folds it and never reads the module's state (no guard on it, no graph break).
    if torch.compiler.is_compiling() or _native.active is None or validate is not None \
            or type(values) is not torch.Tensor or type(offsets) is not torch.Tensor or validation_requested(None):
        return None
    # None -> -1 (no hint); anything but a non-negative int -> -2, which no plan has (the Python path raises)
    hint = -1 if max_seqlen is None else max_seqlen if type(max_seqlen) is int and max_seqlen >= 0 else -2
    return _native.active.reduce(values, offsets, hint, mean, empty_zero)


def _python_reduce(values, offsets, name: str, *, mean: bool, empty_zero: bool, max_seqlen, validate,
                   offer: bool = True):
    # every call the native path does not serve (and the host probe's Python path, offer=False). offer: the
    # launches register their plan with the native path (a no-op once it is registered, but a little Python:
    # the probe times the Python path without it)
    given = values
    values, offsets, max_seqlen = _inputs(values, offsets, name, max_seqlen, validate)
    if values is not given:  # a NestedTensor's values and offsets (or a contiguous copy): a plan may serve them
        out = _native_call(values, offsets, max_seqlen, mean, empty_zero, validate)
        if out is not None:
            return out
    if _fast_ok(values, offsets):
        out, launches = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
        key = _fast_key(values, offsets)
        _run_fast(launches, values.device, key)
        if offer and launches[0].native is not None and _native.offering():
            _offer(launches, key, values, offsets, max_seqlen, mean, empty_zero, out)
        return out
    if mean:
        return torch.ops.jaggedperf.jagged_mean(values, offsets, empty_zero, max_seqlen)
    return torch.ops.jaggedperf.jagged_sum(values, offsets, max_seqlen)


def _inputs(values, offsets, name: str, max_seqlen, validate):
    if _is_nested(values):
        if offsets is not None:
            raise TypeError(f"{name}: pass a NestedTensor alone or (values, offsets), not both")
        if max_seqlen is None:
            max_seqlen = _cached_max_seqlen(values)
        values, offsets = _from_nested(values, name)
    elif offsets is None:
        raise TypeError(f"{name}: offsets is required unless values is a jagged NestedTensor")
    check_layout(values, offsets)
    if max_seqlen is not None and not (isinstance(max_seqlen, (int, torch.SymInt)) and max_seqlen >= 0):
        raise ValueError(f"{name}: max_seqlen must be None or an int >= 0; got {max_seqlen!r}")
    if validation_requested(validate) and not torch.compiler.is_compiling():
        check_offsets(values, offsets)
    if not values.is_contiguous():
        values = values.contiguous()
    if not offsets.is_contiguous():
        offsets = offsets.contiguous()
    return values, offsets, max_seqlen


def _is_nested(x) -> bool:
    # without x.is_nested on a jagged NestedTensor (its __torch_function__ costs ≈10 µs)
    if type(x) is torch.Tensor:
        return x.is_nested  # a strided NestedTensor is a plain Tensor (_from_nested rejects it by name)
    return isinstance(x, _JAGGED_CLASS) or (isinstance(x, torch.Tensor) and x.is_nested)


def _cached_max_seqlen(nt: torch.Tensor):
    # The NJT's cached max_seqlen, or None when it has none. NJT keeps it as the length of a placeholder
    # tensor: eagerly a host int (no sync); under torch.compile a SymInt with a hint, so compiled code takes
    # the whole-segments kernel as eager code does (without it: the two chunked launches).
    value = getattr(nt, "_maybe_max_seqlen", None)  # private API: no hint is always safe
    return value if type(value) is int or isinstance(value, torch.SymInt) else None


def _from_nested(nt: torch.Tensor, name: str):
    # A NestedTensor's own attributes go through its __torch_function__ / __torch_dispatch__ (≈10-40 µs
    # each on the host); eagerly they are read with those off, and its dims from its values.
    # nt._values / nt._offsets are plain attributes; nt.values() / nt.offsets() cost ≈45 µs each. The
    # accessors are still needed where autograd must flow into nt, and under torch.compile.
    compiling = torch.compiler.is_compiling()
    if compiling:
        requires_grad = nt.requires_grad
    else:
        with torch._C.DisableTorchFunctionSubclass():
            requires_grad = nt.requires_grad
    # the jagged class has layout=torch.jagged by construction (reading it costs a dispatch)
    layout = torch.jagged if isinstance(nt, _JAGGED_CLASS) else nt.layout
    if layout != torch.jagged:
        raise ValueError(f"{name}: a NestedTensor argument must have layout=torch.jagged; got {layout}")
    values, offsets = getattr(nt, "_values", None), getattr(nt, "_offsets", None)
    direct = (not compiling and not (requires_grad and torch.is_grad_enabled())
              and isinstance(values, torch.Tensor) and isinstance(offsets, torch.Tensor))
    dims = values.dim() + 1 if direct else nt.dim()
    if dims != 3:
        raise ValueError(f"{name}: a NestedTensor argument must be (B, j, M); got {dims} dims")
    if getattr(nt, "_ragged_idx", 1) != 1:
        raise ValueError(f"{name}: the NestedTensor's ragged dimension must be 1; got {nt._ragged_idx}")
    if getattr(nt, "_lengths", None) is not None:
        raise ValueError(f"{name}: a NestedTensor with lengths (holes between sequences) is not supported")
    return (values, offsets) if direct else (nt.values(), nt.offsets())


def _offer(launches, key: tuple, values, offsets, max_seqlen, mean, empty_zero, out) -> None:
    # the native path may serve the next call with this key (a NestedTensor's call registers the plain one)
    if type(max_seqlen) is not int and max_seqlen is not None:
        return
    kernels = [dict(launch.native, compiled=_launch.compiled((launch.key, launch.num_warps, key)),
                    arg_names=launch.kernel.arg_names) for launch in launches]
    _native.offer(values, offsets, max_seqlen, mean, empty_zero, launches[0].native["plan"], kernels, out)


def _fast_ok(values, offsets) -> bool:
    # the public functions skip the operator: eager plain CUDA tensors, and no autograd to record
    return _plain_eager(values, offsets) and not (values.requires_grad and torch.is_grad_enabled())


def _plain_eager(values, offsets) -> bool:
    # eager, CUDA, plain tensors, no dispatch mode (fake/functional/user modes must see the op or wrap_triton).
    # is_compiling first: Dynamo cannot trace _len_torch_dispatch_stack (a graph break under fullgraph).
    return (
        not torch.compiler.is_compiling()
        and type(values) is torch.Tensor
        and type(offsets) is torch.Tensor
        and values.is_cuda
        and not torch._C._len_torch_dispatch_stack()
    )
