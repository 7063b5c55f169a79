"""The merge-path kernels of the jagged sum/mean and its backward (``@triton.jit`` only): one balanced split for
every length distribution, without max_seqlen. Planning them is ``plan``'s (``plan_merge``, ``expand_merge``).

The split (after Merrill & Garland's merge-path SpMV). A batch of N rows and B segments is N + B *units*: segment
s's unit (its output row) at position offsets[s] + s, then its rows. A fixed grid of P programs (about SMs × k,
``config.MergeConfig``) cuts the positions into P ranges of K = cdiv(N + B, P) units, so every program gets the
same share of rows plus segments whatever the lengths: one giant segment spreads over all programs, a million
empty ones over all programs too. Program p owns the units in [d0, d1) = [p·K, (p+1)·K) ∩ [0, N + B):

- s(d), the segments whose unit lies before d, is the count of s in [0, B) with offsets[s] + s < d (strictly
  increasing in s); it lies in [max(0, d − N), min(d, B)]. Rows before d: r(d) = d − s(d). Program p's rows are
  [r0, r1), the segments it *owns* [s0, s1): it writes their outputs, and only it.
- Both s(d0) and s(d1) come from one vector (k-ary) search of SEARCH lanes per bound: each step loads SEARCH
  probes of the offsets at once and keeps the one interval between the last probe below d and the first at or
  above, so B = 2·10^6 takes 3 dependent steps at 128 lanes (a binary search 21). Its first step probes SEARCH
  consecutive segments around the even-lengths guess d·B / (N + B) instead: where the lengths are near even over
  the share the answer is among them, found in that one step. The interval shrinks on every step whatever the
  offsets hold, so an invalid offsets tensor ends the search too, still inside those bounds.
- The program walks segments s0 − 1, s0, ..., s1 − 1 in *windows* of WINDOW, the next window's offsets loaded while
  this one's rows load. Segment s0 − 1's rows in [r0, r1) are exactly the *head* piece (offsets[s0 − 1] <= r0 <=
  offsets[s0]): the first lane of the first window, not a step of its own; it goes to the workspace (zeros when
  empty: every program with s0 >= 1 writes its own).
- A window whose segments have at most one row each in [r0, r1) (one-row and empty ones) is one (WINDOW, BLOCK_M)
  gather of their rows and one store, when that tile fits (WINDOW <= BLOCK_L).
- Otherwise the window's empty owned segments are one vector store (0, or NaN/0 for a mean), and the others (with
  the head and the tail, empty or not: their slots are read) are compacted by a sort of the window's lane indices
  and taken GROUP at a time: a *gathered* (GROUP, SEG_ROWS, BLOCK_M) tile of each one's rows, looped up to
  SEG_ROWS·SEG_TILES rows (many short segments cost one tile, not a dependent step each); rows of a segment past
  that go by contiguous BLOCK_L × BLOCK_M tiles, one such segment after another (each long enough to pay for its
  step); GROUP outputs in one vector store. Every tile is loaded one iteration before it is added, so a tile's
  loads are in flight together whatever ptxas schedules.
- The last owned segment may run past r1: its piece (the *tail*) goes to the workspace and its index to the
  program's crossing slot. ``_merge_combine_kernel`` finishes it: tail[c] + head[c+1] + head[c+2] + ... over the
  following programs q whose first owned segment is s + 1 (exactly those holding its other rows), in that fixed
  order and tiling: bitwise-equal repeats, no atomics.

Workspace (fp32, one allocation): heads (P, M), tails (P, M), then 2·P int32 slots: crossing[p] (−1: none) and
first[p] = s0. Nothing here depends on a host-side length: no sync, one graph for every N and B under
``torch.compile(dynamic=True)``; the grid and K come from N + B by integer arithmetic (``launch.plan.chunking``).

Memory safety never depends on the offsets being valid: r0 and r1 lie in [0, N] by the search's bounds alone,
every offsets load is in [0, B], every row touched in [r0, r1), every output row in [s0, s1) ⊂ [0, B), and every
loop is bounded by rows, segments or programs. Invalid offsets give unspecified values, never a fault.

Backward (``_merge_expand_kernel``): the same split and windows; each program writes its own rows (the head's get
the gradient of segment s0 − 1, the owned segments theirs, by the same flat, gathered and contiguous tiles as
stores), so every row is written once and nothing needs a second pass.

``N_COLS`` is a compile-time value: a row's address is then a known multiple of M's power-of-two factor and the
loads and stores vectorise (M = 4, 8, 24 take 16-byte accesses; a runtime M only scalar ones).

Inductor's write analysis (``kernels._reduce_kernel``): no store address may come from a helper that received
the offsets pointer, so the search's results cross a load that never happens in the kernel body, and the
kernels load the offsets that bound their stores themselves.
"""

import triton
import triton.language as tl

from jaggedperf.ops.reduce.kernels import _finish


@triton.jit
def _merge_bounds(offsets_ptr, n_rows, n_segments, d0, d1, SEARCH: tl.constexpr):
    # (s(d0), s(d1)): for each d the count of s in [0, B) with offsets[s] + s < d, by a guess, then a k-ary search,
    # of both bounds at once (SEARCH probes of each a step, in one (2·SEARCH,) vector: lanes [0, SEARCH) for d0).
    # Invariant: the answer lies in [lo, hi]; a k-ary step probes q = lo + i·step (i < SEARCH, q < hi), counts c
    # probes below d, and keeps [q_{c-1} + 1, min(q_c, hi)] (or [lo, lo] when c = 0): at most step − 1 wide, so the
    # loop ends whatever the offsets hold. Loads are at q < hi <= B. (One dimension: a 2-D probe tensor shares its
    # layout's order with the kernels' 2-D tiles, and the compiler then gives their loads and stores one element a
    # thread.)
    lane = tl.arange(0, 2 * SEARCH)
    second = lane >= SEARCH
    k = lane % SEARCH
    lo0 = tl.maximum(d0 - n_rows, 0)
    hi0 = tl.minimum(d0, d0 * 0 + n_segments)
    lo1 = tl.maximum(d1 - n_rows, 0)
    hi1 = tl.minimum(d1, d1 * 0 + n_segments)
    lo0, hi0, lo1, hi1 = _guess_step(offsets_ptr, n_rows, n_segments, d0, d1, lo0, hi0, lo1, hi1, SEARCH)
    while (hi0 > lo0) | (hi1 > lo1):
        step0 = (hi0 - lo0 + SEARCH - 1) // SEARCH
        step1 = (hi1 - lo1 + SEARCH - 1) // SEARCH
        q = tl.where(second, lo1 + k * step1, lo0 + k * step0)
        c0, c1 = _count_below(offsets_ptr, q, q < tl.where(second, hi1, hi0), second, d0, d1)
        new_lo0 = tl.where(c0 > 0, lo0 + (c0 - 1) * step0 + 1, lo0)
        new_lo1 = tl.where(c1 > 0, lo1 + (c1 - 1) * step1 + 1, lo1)
        hi0 = tl.minimum(lo0 + c0 * step0, hi0)
        hi1 = tl.minimum(lo1 + c1 * step1, hi1)
        lo0 = new_lo0
        lo1 = new_lo1
    return lo0, lo1


@triton.jit
def _count_below(offsets_ptr, q, valid, second, d0, d1):
    # one search step's counts: of the valid probes q (lanes [0, SEARCH) d0's, the rest d1's), how many lie below
    # their bound (offsets[q] + q < d), for d0 and for d1
    probe = tl.load(offsets_ptr + q, mask=valid, other=0).to(tl.int64)
    below = valid & (probe + q < tl.where(second, d1, d0))
    return tl.sum((below & ~second).to(tl.int64), axis=0), tl.sum((below & second).to(tl.int64), axis=0)


@triton.jit
def _guess_step(offsets_ptr, n_rows, n_segments, d0, d1, lo0, hi0, lo1, hi1, SEARCH: tl.constexpr):
    # _merge_bounds' first step: [lo, hi] of each bound narrowed by SEARCH consecutive probes around the even-lengths
    # guess d·B / (N + B) (inside [lo, hi)). Where the answer lies among them (lengths near even over the share: most
    # batches) it comes back exact (lo = hi) from this one step, not 2–3; elsewhere the side of the probes it lies on.
    lane = tl.arange(0, 2 * SEARCH)
    second = lane >= SEARCH
    k = lane % SEARCH
    # (sizes as int64 tensors: an int argument equal to 1 may arrive as a constant)
    per_unit = (d0 * 0 + n_segments).to(tl.float64) / tl.maximum(d0 * 0 + n_rows + n_segments, 1).to(tl.float64)
    g0 = tl.maximum(tl.minimum((d0.to(tl.float64) * per_unit).to(tl.int64) - SEARCH // 2, hi0 - SEARCH), lo0)
    g1 = tl.maximum(tl.minimum((d1.to(tl.float64) * per_unit).to(tl.int64) - SEARCH // 2, hi1 - SEARCH), lo1)
    q = tl.where(second, g1, g0) + k
    valid = q < tl.where(second, hi1, hi0)
    c0, c1 = _count_below(offsets_ptr, q, valid, second, d0, d1)
    n0 = tl.sum((valid & ~second).to(tl.int64), axis=0)
    n1 = tl.sum((valid & second).to(tl.int64), axis=0)
    # c probes below d: the answer is >= g + c where c > 0, and <= g + c where a probe is not below (c < valid ones)
    hi0 = tl.where(c0 < n0, g0 + c0, hi0)
    hi1 = tl.where(c1 < n1, g1 + c1, hi1)
    lo0 = tl.where(c0 > 0, g0 + c0, lo0)
    lo1 = tl.where(c1 > 0, g1 + c1, lo1)
    return lo0, hi0, lo1, hi1


@triton.jit
def _row_sum(values_ptr, r0, r1, N_COLS: tl.constexpr, cols, col_mask, BLOCK_L: tl.constexpr,
             BLOCK_M: tl.constexpr):
    # fp32 sum over the contiguous rows [r0, r1) of the columns `cols`, (BLOCK_M,), in BLOCK_L × BLOCK_M tiles
    # (fixed tiling: deterministic). Rows outside [r0, r1) are never read. Each tile is loaded one iteration before
    # it is added: the data dependence keeps two tiles in flight, where a plain `acc += load` loop let ptxas
    # interleave each load with its adds (one 16-byte load in flight at a time in the sum's SASS).
    steps = tl.arange(0, BLOCK_L)
    acc = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
    rows = r0 + steps
    x = tl.load(values_ptr + (rows * N_COLS)[:, None] + cols[None, :], mask=(rows < r1)[:, None] & col_mask[None, :],
                other=0.0)
    for r in range(r0 + BLOCK_L, r1, BLOCK_L):
        rows = r + steps
        ahead = tl.load(values_ptr + (rows * N_COLS)[:, None] + cols[None, :],
                        mask=(rows < r1)[:, None] & col_mask[None, :], other=0.0)
        acc += x.to(tl.float32)
        x = ahead
    acc += x.to(tl.float32)
    return tl.sum(acc, axis=0)


@triton.jit
def _row_fill(out_ptr, r0, r1, row, N_COLS: tl.constexpr, cols, col_mask, BLOCK_L: tl.constexpr,
              BLOCK_M: tl.constexpr):
    # rows [r0, r1) of out (N_COLS columns) = `row` (BLOCK_M,) in out's dtype, by BLOCK_L × BLOCK_M tiles.
    tile = (tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32) + row[None, :]).to(out_ptr.dtype.element_ty)
    steps = tl.arange(0, BLOCK_L)
    for r in range(r0, r1, BLOCK_L):
        rows = r + steps
        mask = (rows < r1)[:, None] & col_mask[None, :]
        tl.store(out_ptr + (rows * N_COLS)[:, None] + cols[None, :], tile, mask=mask)


@triton.jit
def _pick(x, lanes, j):
    # x[j] of a (GROUP,) vector, as a scalar
    return tl.sum(tl.where(lanes == j, x, 0), axis=0)


@triton.jit
def _gathered_sum(values_ptr, start, length, N_COLS: tl.constexpr, cols, col_mask, SEG_ROWS: tl.constexpr,
                  SEG_TILES: tl.constexpr, BLOCK_M: tl.constexpr):
    # fp32 sums (GROUP, BLOCK_M) of the first min(length, SEG_ROWS·SEG_TILES) rows of each segment (rows
    # [start, start + length)), by (GROUP, SEG_ROWS, BLOCK_M) tiles, each loaded one iteration before it is added
    # (as _row_sum). Rows outside the segments are never read.
    seg_steps = tl.arange(0, SEG_ROWS)
    longest = tl.minimum(tl.max(length, axis=0), SEG_ROWS * SEG_TILES)
    row_ok = seg_steps[None, :] < tl.minimum(length, longest)[:, None]
    rows = start[:, None] + seg_steps[None, :]
    x = tl.load(values_ptr + (rows * N_COLS)[:, :, None] + cols[None, None, :],
                mask=row_ok[:, :, None] & col_mask[None, None, :], other=0.0)
    acc = tl.zeros(x.shape, dtype=tl.float32)
    for r in range(SEG_ROWS, longest, SEG_ROWS):
        row_ok = (r + seg_steps)[None, :] < length[:, None]
        rows = start[:, None] + r + seg_steps[None, :]
        ahead = tl.load(values_ptr + (rows * N_COLS)[:, :, None] + cols[None, None, :],
                        mask=row_ok[:, :, None] & col_mask[None, None, :], other=0.0)
        acc += x.to(tl.float32)
        x = ahead
    acc += x.to(tl.float32)
    return tl.sum(acc, axis=1)


@triton.jit
def _needing(need, WINDOW: tl.constexpr, GROUP: tl.constexpr):
    # The window's lanes where `need` holds, first and in lane order, as (WINDOW // GROUP, GROUP) rows of lane
    # indices (WINDOW where none), and how many. Arithmetic only: no pointer, so its results may address stores.
    lanes = tl.arange(0, WINDOW)
    order = tl.sort(tl.where(need, lanes, WINDOW))
    return tl.reshape(order, [WINDOW // GROUP, GROUP]), tl.sum(need.to(tl.int32), axis=0)


@triton.jit
def _row_of(rows2, k, GROUP: tl.constexpr, WINDOW: tl.constexpr):
    # row k of a (WINDOW // GROUP, GROUP) tensor, (GROUP,)
    index = tl.arange(0, WINDOW // GROUP)
    return tl.sum(tl.where((index == k)[:, None], rows2, 0), axis=0)


# reads N·M·s bytes of values once (+ ~2·(B + 1) offsets, + 2·SEARCH probes a search step, 2-3 steps a program),
# writes B·M·s of output + 2·P·M·4 + 2·P·4 of workspace
@triton.jit(do_not_specialize=["n_rows", "n_segments", "units_per_program", "n_programs"])
def _merge_reduce_kernel(
    values_ptr,  # (n_rows, N_COLS) contiguous, fp32/bf16/fp16: each row read once, by the program holding it
    offsets_ptr,  # (n_segments + 1,) int32/int64: every load in [0, B]
    out_ptr,  # (n_segments, N_COLS) in values' dtype: every segment its owner finishes (or the combine)
    ws_ptr,  # fp32: heads (P, M), tails (P, M), then P int32 crossing slots and P int32 first-segment slots
    n_rows,  # N = values.shape[0]
    n_segments,  # B
    units_per_program,  # K >= 1: program p owns the units [p·K, (p+1)·K) of the N + B
    n_programs,  # P = grid axis 0 (>= cdiv(N + B, K), >= 1)
    N_COLS: tl.constexpr,  # M, compiled in: the row addresses' alignment is known, so the accesses vectorise
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    BLOCK_L: tl.constexpr,  # rows per contiguous tile (segments past their gathered rows)
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1 = cdiv(M, BLOCK_M))
    WINDOW: tl.constexpr,  # segments whose offsets a step loads (the next window's while this one's rows load)
    GROUP: tl.constexpr,  # segments per gathered tile
    SEG_ROWS: tl.constexpr,  # rows of each segment per gathered tile
    SEG_TILES: tl.constexpr,  # gathered tiles at most: a segment's rows past SEG_ROWS·SEG_TILES go contiguous
    SEARCH: tl.constexpr,  # probes a bound a step of the boundary search
):
    _merge_units(values_ptr, offsets_ptr, out_ptr, ws_ptr, n_rows, n_segments, units_per_program, n_programs, 0,
                 N_COLS, MEAN, EMPTY_ZERO, BLOCK_L, BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH, False)


@triton.jit
def _merge_units(values_ptr, offsets_ptr, out_ptr, ws_ptr, n_rows, n_segments, units_per_program, n_programs, limit,
                 N_COLS: tl.constexpr, MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr, BLOCK_L: tl.constexpr,
                 BLOCK_M: tl.constexpr, WINDOW: tl.constexpr, GROUP: tl.constexpr, SEG_ROWS: tl.constexpr,
                 SEG_TILES: tl.constexpr, SEARCH: tl.constexpr, LONG_ONLY: tl.constexpr):
    # The merge-path reduction of program_id(0)'s share of the units (the arguments: _merge_reduce_kernel's). With
    # LONG_ONLY, only the segments of more than `limit` rows count: the others are no lane of any window (neither
    # summed nor written, nor a head or a tail), so the program writes the outputs and pieces of the long ones alone
    # (the split reduction: reduce.split).
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < N_COLS
    units = pid.to(tl.int64) * 0 + n_rows + n_segments  # (an int argument equal to 1 may arrive as a constant)
    d0 = tl.minimum(pid.to(tl.int64) * units_per_program, units)
    d1 = tl.minimum(d0 + units_per_program, units)
    s0, s1 = _merge_bounds(offsets_ptr, n_rows, n_segments, d0, d1, SEARCH)
    # s0/s1 address outputs below: they cross a load that never happens (the write analysis, module docstring)
    s0 = tl.load(offsets_ptr + s0, mask=s0 < 0, other=s0).to(tl.int64)
    s1 = tl.load(offsets_ptr + s1, mask=s1 < 0, other=s1).to(tl.int64)
    r0 = d0 - s0
    r1 = tl.maximum(d1 - s1, r0)
    head_row = ws_ptr + pid.to(tl.int64) * N_COLS + cols  # this program's head piece
    tail_row = ws_ptr + (n_programs + pid).to(tl.int64) * N_COLS + cols  # ... and its tail piece
    lanes = tl.arange(0, WINDOW)
    empty_row = _finish(tl.zeros([WINDOW, BLOCK_M], dtype=tl.float32), tl.zeros([WINDOW, 1], dtype=tl.int64), MEAN,
                        EMPTY_ZERO).to(out_ptr.dtype.element_ty)
    crossing = s0 * 0 - 1
    # Windows of WINDOW segments from s0 - 1: the first lane of the first window is segment s0 - 1, whose rows in
    # [r0, r1) are exactly the head piece (offsets[s0 - 1] <= r0 <= offsets[s0]), so the head takes no step of its own.
    g = s0 - 1
    win = g + lanes
    w_ok = (win >= 0) & (win < s1)
    next_start = tl.load(offsets_ptr + win, mask=w_ok, other=0)
    next_stop = tl.load(offsets_ptr + win + 1, mask=w_ok, other=0)
    while g < s1:
        win = g + lanes
        w_ok = (win >= 0) & (win < s1)
        seg_start = next_start.to(tl.int64)
        seg_stop = next_stop.to(tl.int64)
        ahead = win + WINDOW
        next_start = tl.load(offsets_ptr + ahead, mask=ahead < s1, other=0)
        next_stop = tl.load(offsets_ptr + ahead + 1, mask=ahead < s1, other=0)
        if LONG_ONLY:
            w_ok = w_ok & (seg_stop - seg_start > limit)
        start = tl.minimum(tl.maximum(seg_start, r0), r1)
        length = tl.where(w_ok, tl.minimum(tl.maximum(seg_stop, start), r1) - start, 0)
        owned = w_ok & (win >= s0)
        done = owned & (seg_stop <= r1)
        is_head = w_ok & (win < s0)
        is_tail = owned & (seg_stop > r1)  # only the last owned segment, for valid offsets
        crossing = tl.maximum(crossing, tl.max(tl.where(is_tail, win, -1), axis=0))
        if (WINDOW <= BLOCK_L) & (tl.max(length, axis=0) <= 1):
            # one-row and empty segments: the whole window in one gather of its rows
            x = tl.load(values_ptr + (start * N_COLS)[:, None] + cols[None, :],
                        mask=(length > 0)[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
            res = _finish(x, length[:, None], MEAN, EMPTY_ZERO)
            tl.store(out_ptr + win[:, None] * N_COLS + cols[None, :], res.to(out_ptr.dtype.element_ty),
                     mask=done[:, None] & col_mask[None, :])
            tl.store(head_row[None, :] + win[:, None] * 0, x, mask=is_head[:, None] & col_mask[None, :])
            tl.store(tail_row[None, :] + win[:, None] * 0, x, mask=is_tail[:, None] & col_mask[None, :])
        else:
            # empty owned segments: one vector store for the window
            tl.store(out_ptr + win[:, None] * N_COLS + cols[None, :], empty_row,
                     mask=(done & (length == 0))[:, None] & col_mask[None, :])
            # the others (and the head and tail pieces, empty or not: their slots are read), GROUP at a time
            picked, n_picked = _needing(w_ok & ((length > 0) | is_head | is_tail), WINDOW, GROUP)
            for k in range(0, (n_picked + GROUP - 1) // GROUP):
                lane = _row_of(picked, k, GROUP, WINDOW)
                sub_ok = lane < WINDOW
                segs = g + lane
                sub_start = tl.load(offsets_ptr + segs, mask=sub_ok, other=0).to(tl.int64)
                sub_stop = tl.load(offsets_ptr + segs + 1, mask=sub_ok, other=0).to(tl.int64)
                first = tl.minimum(tl.maximum(sub_start, r0), r1)
                count = tl.where(sub_ok, tl.minimum(tl.maximum(sub_stop, first), r1) - first, 0)
                acc = _gathered_sum(values_ptr, first, count, N_COLS, cols, col_mask, SEG_ROWS, SEG_TILES, BLOCK_M)
                sub_lanes = tl.arange(0, GROUP)
                rest = count > SEG_ROWS * SEG_TILES  # their later rows by contiguous tiles, one segment after another
                while tl.max(rest.to(tl.int32), axis=0) > 0:
                    j = tl.min(tl.where(rest, sub_lanes, GROUP), axis=0)
                    part = _row_sum(values_ptr, _pick(first, sub_lanes, j) + SEG_ROWS * SEG_TILES,
                                    _pick(first + count, sub_lanes, j), N_COLS, cols, col_mask, BLOCK_L, BLOCK_M)
                    acc += tl.where((sub_lanes == j)[:, None], part[None, :], 0.0)
                    rest = rest & (sub_lanes != j)
                sub_owned = sub_ok & (segs >= s0)
                res = _finish(acc, count[:, None], MEAN, EMPTY_ZERO)
                tl.store(out_ptr + segs[:, None] * N_COLS + cols[None, :], res.to(out_ptr.dtype.element_ty),
                         mask=(sub_owned & (sub_stop <= r1))[:, None] & col_mask[None, :])
                tl.store(head_row[None, :] + segs[:, None] * 0, acc,
                         mask=(sub_ok & (segs < s0))[:, None] & col_mask[None, :])
                tl.store(tail_row[None, :] + segs[:, None] * 0, acc,
                         mask=(sub_owned & (sub_stop > r1))[:, None] & col_mask[None, :])
        g += WINDOW
    if tl.program_id(1) == 0:
        slots = (ws_ptr + (pid.to(tl.int64) * 0 + n_programs) * 2 * N_COLS).to(tl.pointer_type(tl.int32))
        tl.store(slots + pid, crossing.to(tl.int32))
        tl.store(slots + n_programs + pid, s0.to(tl.int32))


COMBINE_STEP_P = tl.constexpr(16)  # the pieces of the combine's one-step case (a power of two)


# reads ≤ 2·P·M·4 + 2·P·4 bytes of workspace (+ 2 offsets a crossing segment), writes a row a crossing segment
@triton.jit(do_not_specialize=["units_per_program", "n_programs"])
def _merge_combine_kernel(
    offsets_ptr,  # (B + 1,) int32/int64
    out_ptr,  # (B, N_COLS) in values' dtype: written only for segments that run past their owner's rows
    ws_ptr,  # the workspace _merge_reduce_kernel wrote
    units_per_program,  # K, as the reduction's: program p owns the units [p·K, (p+1)·K)
    n_programs,  # P = grid axis 0
    N_COLS: tl.constexpr,  # M
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # (a crossing segment is never empty)
    BLOCK_P: tl.constexpr,  # head pieces summed per tile where a segment runs over more than COMBINE_STEP_P programs
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    # Program c finishes the segment s it owns that runs on, if any: its tail + the heads of the programs after it
    # whose first owned segment is s + 1, in program order. Those are exactly the programs c + 1 ... last, last the
    # one holding s's last row (its unit offsets[s + 1] + s). The first COMBINE_STEP_P of them take one small tile
    # (not BLOCK_P slots and heads: 8192 // BLOCK_M, 2048 at M = 4, whose instructions a mask does not remove),
    # loaded beside the offsets; past them the count is known before any head loads, so no step waits on the one
    # before it. The slots gate each head (first == s + 1), so invalid offsets cost no fault and a miscount no wrong
    # piece; every index stays below P.
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < N_COLS
    slots = (ws_ptr + (pid.to(tl.int64) * 0 + n_programs) * 2 * N_COLS).to(tl.pointer_type(tl.int32))
    # (a grid of two on axis 2 is the split's: its second half's programs own the long segments' pieces)
    s = tl.load(slots + pid, mask=tl.program_id(2) == tl.num_programs(2) - 1, other=-1).to(tl.int64)
    if s >= 0:
        start = tl.load(offsets_ptr + s).to(tl.int64)
        end = tl.load(offsets_ptr + s + 1).to(tl.int64)
        acc = tl.load(ws_ptr + (n_programs + pid).to(tl.int64) * N_COLS + cols, mask=col_mask, other=0.0)
        # the first COMBINE_STEP_P pieces load beside the offsets (their slots say which are s's), so a segment over
        # at most that many programs waits on no count; the count is for the pieces after them
        first_pieces = pid + 1 + tl.arange(0, COMBINE_STEP_P)
        acc += tl.sum(_heads(slots, ws_ptr, first_pieces, first_pieces < n_programs, s, n_programs, cols, col_mask,
                             N_COLS), axis=0)
        last = tl.minimum(tl.maximum(end + s, 0) // units_per_program, n_programs - 1)
        if last - pid > COMBINE_STEP_P:
            part = tl.zeros([BLOCK_P, BLOCK_M], dtype=tl.float32)
            for q in range(pid + 1 + COMBINE_STEP_P, last + 1, BLOCK_P):
                pieces = q + tl.arange(0, BLOCK_P)
                part += _heads(slots, ws_ptr, pieces, pieces <= last, s, n_programs, cols, col_mask, N_COLS)
            acc += tl.sum(part, axis=0)
        res = _finish(acc, end - start, MEAN, EMPTY_ZERO)
        tl.store(out_ptr + s * N_COLS + cols, res.to(out_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _heads(slots, ws_ptr, pieces, inside, s, n_programs, cols, col_mask, N_COLS: tl.constexpr):
    # the heads of ``pieces`` (rows of a (pieces, BLOCK_M) tile) that belong to s: loaded beside their slots (one
    # round trip), zero where a slot says the program's first segment is not s + 1 or the piece is outside
    first = tl.load(slots + n_programs + pieces, mask=inside, other=-1).to(tl.int64)
    heads = tl.load(ws_ptr + pieces.to(tl.int64)[:, None] * N_COLS + cols[None, :],
                    mask=inside[:, None] & col_mask[None, :], other=0.0)
    return tl.where((inside & (first == s + 1))[:, None], heads, 0.0)


# reads B·M·s bytes of grad (+ offsets as the forward), writes N·M·s: each row once, by the program holding it
@triton.jit(do_not_specialize=["n_rows", "n_segments", "units_per_program"])
def _merge_expand_kernel(
    grad_ptr,  # (n_segments, N_COLS) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64: every load in [0, B]
    out_ptr,  # (n_rows, N_COLS) in grad's dtype: row r gets grad[segment of r] (/ its length for mean)
    n_rows,  # N
    n_segments,  # B
    units_per_program,  # K, as in _merge_reduce_kernel
    N_COLS: tl.constexpr,  # M
    MEAN: tl.constexpr,  # divide by the segment's length
    BLOCK_L: tl.constexpr,  # rows per contiguous tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
    WINDOW: tl.constexpr,  # segments whose offsets a step loads
    GROUP: tl.constexpr,  # segments per gathered tile
    SEG_ROWS: tl.constexpr,  # rows of each segment per gathered tile
    SEG_TILES: tl.constexpr,  # gathered tiles at most
    SEARCH: tl.constexpr,  # probes a bound a step of the boundary search
):
    _merge_expand_units(grad_ptr, offsets_ptr, out_ptr, n_rows, n_segments, units_per_program, 0, N_COLS, MEAN,
                        BLOCK_L, BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH, False)


@triton.jit
def _merge_expand_units(grad_ptr, offsets_ptr, out_ptr, n_rows, n_segments, units_per_program, limit,
                        N_COLS: tl.constexpr, MEAN: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr,
                        WINDOW: tl.constexpr, GROUP: tl.constexpr, SEG_ROWS: tl.constexpr, SEG_TILES: tl.constexpr,
                        SEARCH: tl.constexpr, LONG_ONLY: tl.constexpr):
    # The forward's split and windows (from segment s0 - 1: the head's rows), as stores: no workspace, no second pass.
    # With LONG_ONLY, only the rows of segments of more than `limit` rows (as _merge_units).
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < N_COLS
    units = pid.to(tl.int64) * 0 + n_rows + n_segments
    d0 = tl.minimum(pid.to(tl.int64) * units_per_program, units)
    d1 = tl.minimum(d0 + units_per_program, units)
    s0, s1 = _merge_bounds(offsets_ptr, n_rows, n_segments, d0, d1, SEARCH)
    s0 = tl.load(offsets_ptr + s0, mask=s0 < 0, other=s0).to(tl.int64)
    s1 = tl.load(offsets_ptr + s1, mask=s1 < 0, other=s1).to(tl.int64)
    r0 = d0 - s0
    r1 = tl.maximum(d1 - s1, r0)
    lanes = tl.arange(0, WINDOW)
    seg_steps = tl.arange(0, SEG_ROWS)
    g = s0 - 1
    win = g + lanes
    w_ok = (win >= 0) & (win < s1)
    next_start = tl.load(offsets_ptr + win, mask=w_ok, other=0)
    next_stop = tl.load(offsets_ptr + win + 1, mask=w_ok, other=0)
    while g < s1:
        win = g + lanes
        w_ok = (win >= 0) & (win < s1)
        seg_start = next_start.to(tl.int64)
        seg_stop = next_stop.to(tl.int64)
        ahead = win + WINDOW
        next_start = tl.load(offsets_ptr + ahead, mask=ahead < s1, other=0)
        next_stop = tl.load(offsets_ptr + ahead + 1, mask=ahead < s1, other=0)
        if LONG_ONLY:
            w_ok = w_ok & (seg_stop - seg_start > limit)
        start = tl.minimum(tl.maximum(seg_start, r0), r1)
        length = tl.where(w_ok, tl.minimum(tl.maximum(seg_stop, start), r1) - start, 0)
        if (WINDOW <= BLOCK_L) & (tl.max(length, axis=0) <= 1):
            # one-row and empty segments: the window's gradient rows, stored at their rows in one step
            row = tl.load(grad_ptr + win[:, None] * N_COLS + cols[None, :],
                          mask=(length > 0)[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
            if MEAN:  # by the segment's length, not its rows here (the head's segment may be long)
                row = row / tl.maximum(seg_stop - seg_start, 1).to(tl.float32)[:, None]
            tl.store(out_ptr + (start * N_COLS)[:, None] + cols[None, :], row.to(out_ptr.dtype.element_ty),
                     mask=(length > 0)[:, None] & col_mask[None, :])
        else:
            picked, n_picked = _needing(length > 0, WINDOW, GROUP)
            for k in range(0, (n_picked + GROUP - 1) // GROUP):
                lane = _row_of(picked, k, GROUP, WINDOW)
                sub_ok = lane < WINDOW
                segs = g + lane
                sub_start = tl.load(offsets_ptr + segs, mask=sub_ok, other=0).to(tl.int64)
                sub_stop = tl.load(offsets_ptr + segs + 1, mask=sub_ok, other=0).to(tl.int64)
                first = tl.minimum(tl.maximum(sub_start, r0), r1)
                count = tl.where(sub_ok, tl.minimum(tl.maximum(sub_stop, first), r1) - first, 0)
                g_rows = tl.load(grad_ptr + segs[:, None] * N_COLS + cols[None, :],
                                 mask=sub_ok[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
                if MEAN:
                    g_rows = g_rows / tl.maximum(sub_stop - sub_start, 1).to(tl.float32)[:, None]
                tile = (tl.zeros([GROUP, SEG_ROWS, BLOCK_M], dtype=tl.float32) + g_rows[:, None, :]).to(
                    out_ptr.dtype.element_ty)
                for r in range(0, tl.minimum(tl.max(count, axis=0), SEG_ROWS * SEG_TILES), SEG_ROWS):
                    row_ok = (r + seg_steps)[None, :] < count[:, None]
                    rows = first[:, None] + r + seg_steps[None, :]
                    tl.store(out_ptr + (rows * N_COLS)[:, :, None] + cols[None, None, :], tile,
                             mask=row_ok[:, :, None] & col_mask[None, None, :])
                sub_lanes = tl.arange(0, GROUP)
                rest = count > SEG_ROWS * SEG_TILES
                while tl.max(rest.to(tl.int32), axis=0) > 0:
                    j = tl.min(tl.where(rest, sub_lanes, GROUP), axis=0)
                    row = tl.sum(tl.where((sub_lanes == j)[:, None], g_rows, 0.0), axis=0)
                    _row_fill(out_ptr, _pick(first, sub_lanes, j) + SEG_ROWS * SEG_TILES,
                              _pick(first + count, sub_lanes, j), row, N_COLS, cols, col_mask, BLOCK_L, BLOCK_M)
                    rest = rest & (sub_lanes != j)
        g += WINDOW
