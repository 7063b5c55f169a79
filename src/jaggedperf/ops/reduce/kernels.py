"""The jagged reduction kernels (``@triton.jit`` only): sum/mean forward and its backward (expand), the balanced
chunks and the whole segments. Calls without max_seqlen take the merge path (``merge``); the balanced chunks below
are reached through ``ops.testing`` only, the comparison the merge path was measured against.

Input: ``values (N, M)`` (N = total_len) and ``offsets (B+1,)``; output ``(B, M)`` in values' dtype,
accumulated in fp32. Planning the launches is ``plan``'s; registering them as operators ``op``'s.

Design (balanced whatever the lengths, and the host never reads them):

- The flat row range [0, N) is cut into C equal *chunks* of R rows; R comes from N and a target
  program count only (``jaggedperf.ops.launch.plan.chunking``), with plain integer arithmetic so that
  under ``torch.compile(dynamic=True)`` one graph serves every N and B. Grid = (C, cdiv(M, BLOCK_M)).
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
  tall tiles so lanes are not wasted (``jaggedperf.ops.config``).
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
segment alone in its program and longer than a tile spreads over programs of EXPAND_SPLIT_ROWS rows.

The kernels keep their leading underscore: it is part of the names profiler traces and Inductor's
generated code show (the GPU tests look for them there).
"""

import triton
import triton.language as tl


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
    # fp32 tiles of <= 128 columns (32 elements a lane in every such config) load each tile one iteration before it
    # is added: in a plain `acc += load` loop ptxas (Triton 3.6) interleaves the loads with the adds for the sum but
    # not the mean (4 against 8 128-bit loads in a row at M = 128, offline sm_90), and the sum ran 1.42x the floor
    # where the mean ran at it (4096 × 128 heavy). Wider tiles hold 128 elements a lane: a second tile would spill.
    # r0 > r1 (invalid offsets: a start past its end, up to 2**63 - 1) is an empty range: r0 = min(r0, r1) keeps every
    # row index at or below r1 <= N, so neither the first tile's rows nor the loop's r0 + BLOCK_L can overflow int64
    # into an unmasked negative row.
    r0 = tl.minimum(r0, r1)
    acc = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
    steps = tl.arange(0, BLOCK_L)
    if (BLOCK_M <= 128) and (values_ptr.dtype.element_ty == tl.float32):
        rows = r0 + steps
        x = tl.load(values_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :],
                    mask=(rows < r1)[:, None] & col_mask[None, :], other=0.0)
        for r in range(r0 + BLOCK_L, r1, BLOCK_L):
            rows = r + steps
            ahead = tl.load(values_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :],
                            mask=(rows < r1)[:, None] & col_mask[None, :], other=0.0)
            acc += x
            x = ahead
        acc += x
    else:
        for r in range(r0, r1, BLOCK_L):
            rows = r + steps
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
    # The outputs are addressed by s. Inductor decides which arguments of a user kernel are written by
    # walking back from each store's address: the walk stops at loads, but counts every argument of a
    # helper whose result it meets, so s from _lower_bound(offsets_ptr, ...) would make the offsets look
    # written (a clone of them in compiled code, no CUDA graphs under reduce-overhead). s therefore
    # crosses a load that never happens (s >= 0: the mask is false; the address is in bounds anyway),
    # written here, not in a helper, whose result would be met again.
    s = tl.load(offsets_ptr + s, mask=s < 0, other=s).to(tl.int64)
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
def _group_segments(g, n_segments, GROUP: tl.constexpr):
    # group g's segment indices (GROUP,) and which of them exist. Arithmetic only, no pointer: a store
    # address may be computed from what it returns (Inductor's write analysis: the note in the chunks' kernel).
    segs = g.to(tl.int64) * GROUP + tl.arange(0, GROUP)
    return segs, segs < n_segments


@triton.jit
def _group_bounds(offsets_ptr, segs, seg_ok):
    # the [start, end) rows of a group's segments: two loads of GROUP+1 offsets. What it returns may bound
    # loads and masks, never a store address (Inductor's write analysis: the note in the chunks' kernel).
    start = tl.load(offsets_ptr + segs, mask=seg_ok, other=0).to(tl.int64)
    end = tl.load(offsets_ptr + segs + 1, mask=seg_ok, other=0).to(tl.int64)
    return start, end


# reads the rows of its GROUP segments once (+ 2·GROUP offsets), writes GROUP·M·s of output; no search, no workspace
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _segments_kernel(
    values_ptr,  # (n_rows, N_COLS) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_segments, N_COLS) in values' dtype: every row written by the program of its group
    n_rows,  # N: rows outside [0, N) are never read, whatever the offsets say
    N_COLS: tl.constexpr,  # M, compiled in: rows' alignment known, so the accesses vectorise
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
    col_mask = cols < N_COLS
    segs, seg_ok = _group_segments(tl.program_id(0), n_segments, GROUP)
    start, end = _group_bounds(offsets_ptr, segs, seg_ok)
    _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, N_COLS, cols, col_mask,
                  MEAN, EMPTY_ZERO, GROUP, BLOCK_L, BLOCK_M)


# reads the rows of each group's GROUP segments once (+ 2·GROUP offsets a group), writes B·M·s of output; a fixed
# grid of programs that each loop over groups
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _segments_loop_kernel(
    values_ptr,  # (n_rows, N_COLS) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_segments, N_COLS) in values' dtype
    n_rows,  # N: rows outside [0, N) are never read
    N_COLS: tl.constexpr,  # M, compiled in: rows' alignment known, so the accesses vectorise
    n_segments,  # B
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    GROUP: tl.constexpr,  # segments per group; program p reduces groups p, p + P, p + 2P, ... (P = grid axis 0)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    # Many small groups: a program's next group's offsets are loaded before this group's rows, so the
    # offsets -> rows round trip is paid once per program, not once per group.
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < N_COLS
    n_groups = (n_segments + GROUP - 1) // GROUP
    g = tl.program_id(0)
    step = tl.num_programs(0)
    segs, seg_ok = _group_segments(g, n_segments, GROUP)
    start, end = _group_bounds(offsets_ptr, segs, seg_ok)
    while g < n_groups:
        next_segs, next_ok = _group_segments(g + step, n_segments, GROUP)
        next_start, next_end = _group_bounds(offsets_ptr, next_segs, next_ok)
        _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, N_COLS, cols, col_mask,
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
    grad_ptr,  # (n_segments, N_COLS) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_rows, N_COLS) in grad's dtype: row r gets grad[segment of r] (/ its length for mean)
    n_rows,  # N: rows outside [0, N) are never written, whatever the offsets say
    N_COLS: tl.constexpr,  # M, compiled in: rows' alignment known, so the accesses vectorise
    n_segments,  # B
    n_tiles,  # grid axis 2: program t writes rows [t·BLOCK_L, (t+1)·BLOCK_L) of each segment; the last, all past
    MEAN: tl.constexpr,  # divide by the segment's length
    GROUP: tl.constexpr,  # segments per program: grid axis 0 = cdiv(B, GROUP)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile: a segment of <= BLOCK_L rows is one store
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    # With max_seqlen known and short: no search, one (GROUP, BLOCK_L, BLOCK_M) store per tile.
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < N_COLS
    segs, seg_ok = _group_segments(tl.program_id(0), n_segments, GROUP)
    # loaded here, not by _group_bounds: the rows written are addressed from them (Inductor's write
    # analysis: the note in the chunks' kernel)
    start = tl.load(offsets_ptr + segs, mask=seg_ok, other=0).to(tl.int64)
    end = tl.load(offsets_ptr + segs + 1, mask=seg_ok, other=0).to(tl.int64)
    length = end - start
    g = tl.load(grad_ptr + segs[:, None] * N_COLS + cols[None, :], mask=seg_ok[:, None] & col_mask[None, :],
                other=0.0).to(tl.float32)
    if MEAN:
        g = g / tl.maximum(length, 1).to(tl.float32)[:, None]  # (an empty segment owns no rows)
    tile = (tl.zeros([GROUP, BLOCK_L, BLOCK_M], dtype=tl.float32) + g[:, None, :]).to(out_ptr.dtype.element_ty)
    longest = tl.minimum(tl.max(length, axis=0), n_rows)
    first = tl.program_id(2).to(tl.int64) * BLOCK_L
    stop = tl.where(tl.program_id(2) == n_tiles - 1, longest, tl.minimum(first + BLOCK_L, longest))
    for r in range(first, stop, BLOCK_L):  # one tile; the last program loops when max_seqlen understates
        ptrs, mask = _group_tile(out_ptr, start, length, r, n_rows, N_COLS, cols, col_mask, BLOCK_L)
        tl.store(ptrs, tile, mask=mask)
