"""The row-block decomposition of the jagged sum/mean forward: kernel and plan.

Why: the balanced chunks walk segments one by one (a few dependent loads and a loop per segment: slow on
many short ones, ~118 µs at 10^4 × 4 without max_seqlen) and finish a long segment by summing every
chunk's piece in one program (the giant segment: 277 µs against Inductor's 173); the whole-segments kernel
sizes its tiles by max_seqlen (empty-heavy or heavy-tailed batches waste them). Here every program takes a
fixed range of consecutive ROWS, whatever the lengths:

- Program p owns rows [p·R, min((p+1)·R, N)) (R a multiple of BLOCK_R, from ``launch.plan.chunking``:
  about ``programs_per_sm`` × SMs programs over the grid), walked in BLOCK_R × BLOCK_M tiles loaded
  coalesced (one warp a program: no cross-warp step anywhere; rows VEC-aligned, so M = 4 loads 16 bytes).
  Three scalar searches at the start: lower_bound(lo), lower_bound(hi) and the segment ``cur`` of row lo.
- A tile whose rows all lie in ``cur`` (one scalar compare with cur's end, loaded once per change of cur)
  only adds into a 2-D accumulator: no search, no reduction, no store (giant and long segments), and
  finishes cur with one 1-D store when cur ends on its last row.
- Any other tile (a boundary in it) finds each row's segment by a vectorized binary search of the offsets
  in [cur, lower_bound(hi)) (log2 of that window gathers, every one in [0, B]). With at most
  ``few_segments`` segments in it, each one's sum is a masked column sum (``tl.sum`` of its rows), finished
  as a 1-D row; with more, an inclusive ``tl.associative_scan`` over rows with the segmented combine
  (s1, v1) ⊕ (s2, v2) = (s2, v2 + [s1 == s2]·v1), associative because segment ids are nondecreasing along
  the rows, stored from each segment's last row. Both keep each segment's sum its own rows' (fp32 error
  relative to the segment, not to the tile's running sum as a cumulative-sum difference would be).
  A segment running on into the next tile is carried (its partial sum and id) and added there.
- A segment that starts and ends in the program is stored from the row where it ends. The piece of the
  segment begun before the program (its *head*) and the piece of the one going on past it (its *tail*)
  go to the fp32 workspace in exactly the balanced chunks' layout (``kernels._reduce_kernel``): heads
  in rows [0, P), tails in [P, 2P), then P int32 "crossing" slots; so ``kernels._combine_kernel`` finishes
  the crossing segments unchanged, in a fixed order (deterministic, no atomics). A program whose rows all
  lie inside one segment that began earlier and goes on writes its whole sum as that segment's head.
- Empty segments: program p owns the segments with offsets[s] in [lo, hi) (the last program also those
  starting at N, and with N = 0 the one program owns them all); it counts the non-empty segments that
  start among its rows and, only when it owns more, walks its owned ids and writes 0 (sum), NaN or 0
  (mean, per ``empty``) where offsets[s] == offsets[s + 1].
- Memory safety does not depend on the offsets being valid: every offsets load is in [0, B], every row
  read is inside the program's range, every output row index in [0, B); invalid offsets give unspecified
  values (the scan is then not associative; still deterministic). Loops are bounded by rows or by the
  searches' windows, never by offsets' values alone.

Two launches whatever the lengths, no max_seqlen, no host sync. No call is routed here yet: it is reached
through ``ops.testing`` (``rowblock=``) until a GPU measurement shows where it wins (``docs/performance.md``);
the native C++ path does not know this kernel (its plans have no row-block grid kind).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from jaggedperf.ops.config import next_pow2, sm_count
from jaggedperf.ops.launch.plan import Launch, Plan, chunking
from jaggedperf.ops.reduce.kernels import _combine_kernel, _finish, _lower_bound

# --- the config ------------------------------------------------------------------------------------------------
TILE_ELEMENTS = 1024  # BLOCK_R × BLOCK_M per tile (4 KiB fp32): 32 elements a thread at one warp
NARROW_TILE_ELEMENTS = 512  # M <= 8: rows sit across the lanes, so the scan and masked sums cost more a tile


@dataclass(frozen=True)
class RowBlockConfig:
    block_r: int  # rows per tile (power of two)
    block_m: int  # columns per tile = per program (grid axis 1 = cdiv(M, block_m))
    num_warps: int
    programs_per_sm: int  # programs aimed at over the whole grid ≈ SM count × this
    combine_block_m: int  # columns per combine program (split finer than block_m: the giant's last pass)
    block_p: int = 128  # workspace pieces summed per tile by the combine (the giant has one a program: ~2000)
    empty_group: int = 32  # owned segment ids checked for emptiness per step
    few_segments: int = 4  # boundary tiles with at most this many non-empty segments take masked sums, not the scan


def rowblock_config(n_cols, dtype: torch.dtype) -> RowBlockConfig:
    """The row blocks' tiles for rows of ``n_cols`` elements (sized offline from registers and SASS under Triton
    3.6 for sm_90, docs/performance.md; unmeasured on the GPU yet).

    One warp a program: no cross-warp step in any reduction or scan (no ``bar.sync`` on the accumulate-only
    path), ≤ 143 registers a thread, so 14–16 programs resident per SM, and 16 per SM aimed at over the grid.

    Args:
        n_cols: M (specialised under torch.compile, as for the other kernels).
        dtype: the values' dtype (unused yet: the same element budget for 2-byte types).

    Returns:
        the config.
    """
    block_m = min(next_pow2(int(n_cols)), 128)
    tile = NARROW_TILE_ELEMENTS if block_m <= 8 else TILE_ELEMENTS
    block_r = max(8, tile // block_m)
    return RowBlockConfig(block_r=block_r, block_m=block_m, num_warps=1, programs_per_sm=16,
                          combine_block_m=min(block_m, 16))


# --- the kernel ------------------------------------------------------------------------------------------------
@triton.jit
def _segmented_add(s1, v1, s2, v2):
    # the segmented scan's combine: (s1, v1) then (s2, v2); associative when s1 <= s2 <= s3 (ids nondecreasing)
    return s2, tl.where(s1 == s2, v1 + v2, v2)


# reads N·M·s bytes of values once (+ per boundary tile log2(window) gathers of L2-resident offsets a row, + 3·P
# scalar searches, + owned offsets again only where empties are), writes B·M·s of output + ≤ 2·P·M·4 + P·4 of
# workspace
@triton.jit(do_not_specialize=["n_rows", "n_segments", "rows_per_program", "n_programs"])
def _rowblock_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16: read once, BLOCK_R × BLOCK_M tiles
    offsets_ptr,  # (n_segments + 1,) int32/int64: every load in [0, B]
    out_ptr,  # (n_segments, n_cols) in values' dtype: segments starting and ending in the program, empties
    ws_ptr,  # fp32 (2·P, M) pieces (rows [0, P) heads, [P, 2P) tails), then P int32 crossing slots
    n_rows,  # N = values.shape[0]
    n_cols,  # M (specialised)
    n_segments,  # B
    rows_per_program,  # R (a multiple of BLOCK_R in production; any R >= 1 is correct)
    n_programs,  # P = max(cdiv(N, R), 1) = grid axis 0
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    BLOCK_R: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per tile (grid axis 1)
    EMPTY_G: tl.constexpr,  # owned segment ids checked per step for emptiness
    EVEN_M: tl.constexpr,  # M % BLOCK_M == 0: no column mask (the loads vectorise)
    FEW_SEGMENTS: tl.constexpr,  # boundary tiles with <= this many non-empty segments sum each by a mask, not a scan
    VEC: tl.constexpr,  # a power of two dividing M: rows start VEC-aligned (M = 4 loads 16 bytes at once)
):
    pid = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    lo = pid.to(tl.int64) * rows_per_program
    hi = tl.minimum(lo + rows_per_program, n_rows)
    n_seg = lo * 0 + n_segments
    top_seg = tl.maximum(n_seg - 1, 0)
    first = _lower_bound(offsets_ptr, n_segments, lo, lo * n_segments // tl.maximum(n_rows, 1))
    past = _lower_bound(offsets_ptr, n_segments, hi, hi * n_segments // tl.maximum(n_rows, 1))
    cur = _lower_bound(offsets_ptr, n_segments, lo + 1, first) - 1  # the segment of row lo (after empties at lo)
    # first/past/cur address outputs below: they cross a load that never happens (mask false), so Inductor's write
    # analysis stops there instead of counting _lower_bound's offsets_ptr as written (kernels._reduce_kernel)
    first = tl.load(offsets_ptr + first, mask=first < 0, other=first).to(tl.int64)
    past = tl.load(offsets_ptr + past, mask=past < 0, other=past).to(tl.int64)
    cur = tl.load(offsets_ptr + cur, mask=cur < -1, other=cur).to(tl.int64)
    cur = tl.minimum(tl.maximum(cur, 0), top_seg)  # in [0, B) (B = 0: 0, and no store below happens)
    # Loop state. cur: the segment of the tile's first row, unless a segment ended on the previous tile's last row
    # (then cur_end <= t, which sends the tile to the searching path); its start and end, loaded once per change.
    # The partial sum of segment carry_seg (-1: none) over the program's rows so far is carry + sum(acc, axis 0):
    # tiles inside one segment only add to acc (no reduction, no search, no store).
    cur_start = tl.load(offsets_ptr + cur).to(tl.int64)
    cur_end = tl.load(offsets_ptr + tl.minimum(cur + 1, n_seg)).to(tl.int64)
    acc = tl.zeros([BLOCK_R, BLOCK_M], dtype=tl.float32)
    carry = tl.zeros([BLOCK_M], dtype=tl.float32)
    carry_seg = cur * 0 - 1
    started = cur * 0  # non-empty segments starting among the program's rows
    steps = tl.arange(0, BLOCK_R)
    tile_offs = tl.multiple_of(steps * n_cols, VEC)[:, None] + cols[None, :]  # int32: BLOCK_R·M < 2^31
    for t in range(lo, hi, BLOCK_R):
        tile_ptr = values_ptr + tl.multiple_of(t * n_cols, VEC)
        row_ok = steps < hi - t
        if EVEN_M:
            mask = row_ok[:, None]
        else:
            mask = row_ok[:, None] & col_mask[None, :]
        x = tl.load(tile_ptr + tile_offs, mask=mask, other=0.0).to(tl.float32)  # issued first
        last_row = tl.minimum(t + BLOCK_R, hi) - 1
        if cur_end > last_row:  # every row of the tile lies in segment cur (cur_start <= t): accumulate only
            started += (cur_start == t).to(tl.int64)
            carry_seg = cur
            acc += x
            if cur_end == last_row + 1:  # ... and it ends on the tile's last row: finish it
                total = carry + tl.sum(acc, axis=0)
                if cur_start >= lo:
                    res = _finish(total, cur_end - cur_start, MEAN, EMPTY_ZERO)
                    tl.store(out_ptr + cur * n_cols + cols, res.to(out_ptr.dtype.element_ty),
                             mask=col_mask & (cur < n_seg))
                else:  # the piece of the segment begun before this program (its head)
                    tl.store(ws_ptr + pid.to(tl.int64) * n_cols + cols, total, mask=col_mask)
                acc = tl.zeros([BLOCK_R, BLOCK_M], dtype=tl.float32)
                carry = tl.zeros([BLOCK_M], dtype=tl.float32)
                carry_seg = cur * 0 - 1
        else:  # a boundary in the tile: each row's segment, then masked sums (few segments) or the segmented scan
            rows = t + steps  # int64
            carry += tl.sum(acc, axis=0)
            acc = tl.zeros([BLOCK_R, BLOCK_M], dtype=tl.float32)
            top = cur * 0 + 1  # the search's first step: a power of two, 2·top > past − cur
            while top * 2 <= past - cur:
                top = top * 2
            pos = rows * 0 + cur  # the last s in [cur, past) with offsets[s] <= row (offsets[cur] <= t)
            step = top
            while step > 0:
                probe = pos + step
                inside = row_ok & (probe < past)
                below = tl.load(offsets_ptr + tl.minimum(probe, n_seg), mask=inside, other=0).to(tl.int64) <= rows
                pos = tl.where(inside & below, probe, pos)
                step = step // 2
            ok = row_ok & (pos < n_seg)
            cur_last = tl.max(tl.where(row_ok, pos, 0), axis=0)  # the segment of the tile's last row
            cur_first = tl.min(tl.where(row_ok, pos, cur_last), axis=0)  # cur, or past it when cur ended at t - 1
            start = tl.load(offsets_ptr + pos, mask=ok, other=0).to(tl.int64)
            n_parts = tl.sum((ok & (rows == start) & (rows > t)).to(tl.int32), axis=0)  # non-empty ones, less one
            # few non-empty segments (the empties between them cost a scalar check each, so their ids are bounded
            # too: 90%-empty batches put ~9 between two non-empty ones): one masked column sum each, 1-D rows
            if (n_parts < FEW_SEGMENTS) & (cur_last - cur_first < 16 * FEW_SEGMENTS):
                goes_on = carry * 0.0
                for s in range(cur_first, cur_last + 1):
                    s_start = tl.load(offsets_ptr + s).to(tl.int64)
                    s_end = tl.load(offsets_ptr + tl.minimum(s + 1, n_seg)).to(tl.int64)
                    if s_end > s_start:  # an empty one has no rows here (the empties pass writes it)
                        part = tl.sum(tl.where((pos == s)[:, None], x, 0.0), axis=0)
                        part += tl.where(s == carry_seg, carry, 0.0)
                        started += ((s_start >= t) & (s < n_seg)).to(tl.int64)
                        if s_end > last_row + 1:  # goes on past the tile (s is cur_last)
                            goes_on = part
                        elif s_start >= lo:
                            res = _finish(part, s_end - s_start, MEAN, EMPTY_ZERO)
                            tl.store(out_ptr + s * n_cols + cols, res.to(out_ptr.dtype.element_ty),
                                     mask=col_mask & (s < n_seg))
                        else:  # the head
                            tl.store(ws_ptr + pid.to(tl.int64) * n_cols + cols, part, mask=col_mask)
                carry = goes_on
            else:  # many: the segmented scan, stored from each segment's last row
                end = tl.load(offsets_ptr + tl.minimum(pos + 1, n_seg), mask=ok, other=0).to(tl.int64)
                rel = (pos - cur).to(tl.int32)  # nondecreasing along the tile's valid rows
                x += tl.where(((steps == 0) & (pos == carry_seg))[:, None], carry[None, :], 0.0)
                _, run = tl.associative_scan((tl.broadcast_to(rel[:, None], [BLOCK_R, BLOCK_M]), x), 0,
                                             _segmented_add)
                ends = ok & (rows + 1 == end)  # the segment's last row
                started += tl.sum((ok & (rows == start)).to(tl.int64), axis=0)
                res = _finish(run, (end - start)[:, None], MEAN, EMPTY_ZERO)
                tl.store(out_ptr + pos[:, None] * n_cols + cols[None, :], res.to(out_ptr.dtype.element_ty),
                         mask=(ends & (start >= lo))[:, None] & col_mask[None, :])
                if (cur_start < lo) & (cur_end > t):  # the head ends in this tile
                    ws_row = ws_ptr + pid.to(tl.int64) * n_cols + cols[None, :] + steps[:, None] * 0
                    tl.store(ws_row, run, mask=(ends & (start < lo))[:, None] & col_mask[None, :])
                carry = tl.sum(tl.where((rows == last_row)[:, None], run, 0.0), axis=0)
            cur = cur_last
            cur_start = tl.load(offsets_ptr + cur).to(tl.int64)
            cur_end = tl.load(offsets_ptr + tl.minimum(cur + 1, n_seg)).to(tl.int64)
            carry_seg = tl.where(cur_end > last_row + 1, cur, -1)
    crossing = carry_seg * 0 - 1
    if carry_seg >= 0:  # segment cur goes on past this program: its piece is a tail (begun here) or a head
        total = carry + tl.sum(acc, axis=0)
        if cur_start >= lo:
            tl.store(ws_ptr + (pid + n_programs).to(tl.int64) * n_cols + cols, total, mask=col_mask)
            crossing = carry_seg
        else:
            tl.store(ws_ptr + pid.to(tl.int64) * n_cols + cols, total, mask=col_mask)
    if tl.program_id(1) == 0:
        cross_ptr = (ws_ptr + (pid.to(tl.int64) * 0 + n_programs) * 2 * n_cols).to(tl.pointer_type(tl.int32))
        tl.store(cross_ptr + pid, crossing.to(tl.int32))
    owned_end = tl.where(pid == n_programs - 1, n_seg, past)  # owned ids: [first, owned_end)
    if owned_end - first > started:  # some owned segment is empty
        empty_val = _finish(tl.zeros([EMPTY_G, BLOCK_M], dtype=tl.float32), tl.zeros([EMPTY_G, 1], dtype=tl.int64),
                            MEAN, EMPTY_ZERO)
        for g in range(first, owned_end, EMPTY_G):
            ids = g + tl.arange(0, EMPTY_G)
            in_range = ids < owned_end
            seg_start = tl.load(offsets_ptr + ids, mask=in_range, other=0)
            seg_end = tl.load(offsets_ptr + ids + 1, mask=in_range, other=0)
            empty = in_range & (seg_start == seg_end)
            tl.store(out_ptr + ids[:, None] * n_cols + cols[None, :], empty_val.to(out_ptr.dtype.element_ty),
                     mask=empty[:, None] & col_mask[None, :])


# --- the plan --------------------------------------------------------------------------------------------------
def plan_rowblock(values, offsets, mean: bool, empty_zero: bool, cfg: RowBlockConfig | None = None,
                  rows_per_program=None) -> Plan:
    """The row blocks' two launches (rows, then ``_combine_kernel``) with their workspace, allocated here.

    Args:
        values: (N, M) contiguous, fp32/bf16/fp16.
        offsets: (B + 1,) contiguous int32/int64 on values' device.
        mean, empty_zero: as for ``plan.plan_reduce``.
        cfg: the tiles (``rowblock_config`` when None).
        rows_per_program: R, forced (tests: any R >= 1); None: ``chunking``'s, a multiple of block_r.

    Returns:
        the Plan (no config: the native path never replays it; the Python path launches it).
    """
    n_rows, n_cols = values.shape
    n_cols = int(n_cols)
    n_segments = offsets.shape[0] - 1
    cfg = cfg or rowblock_config(n_cols, values.dtype)
    col_blocks = -(-n_cols // cfg.block_m)
    if rows_per_program is None:
        rows_per_program, n_programs = chunking(n_rows, col_blocks, sm_count(values.device) * cfg.programs_per_sm,
                                                cfg.block_r, cfg.block_r)
    else:
        n_programs = max(-(-n_rows // rows_per_program), 1)
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    # (2·P, M) fp32 pieces + P int32 crossing slots, one allocation (the chunks' layout: _combine_kernel reads it)
    ws = torch.empty((2 * n_programs * n_cols + n_programs,), dtype=torch.float32, device=values.device)
    vec = min(n_cols & -n_cols, 16) if n_cols else 1  # the largest power of two dividing M, up to 16
    args = (values, offsets, out, ws, n_rows, n_cols, n_segments, rows_per_program, n_programs, mean, empty_zero,
            cfg.block_r, cfg.block_m, cfg.empty_group, n_cols % cfg.block_m == 0, cfg.few_segments, vec)
    combine_args = (offsets, out, ws, n_cols, rows_per_program, n_programs, mean, empty_zero, cfg.block_p,
                    cfg.combine_block_m)
    launches = (
        Launch(_rowblock_kernel, (n_programs, col_blocks, 1), args, cfg.num_warps, (out, ws),
               ("rowblock", *args[-8:])),
        Launch(_combine_kernel, (n_programs, -(-n_cols // cfg.combine_block_m), 1), combine_args, 4, (out,),
               ("combine", *combine_args[-4:])),
    )
    return Plan(out, launches)


