"""The split kernels of the jagged sum/mean and its backward without max_seqlen (``@triton.jit`` only): whole segments
where they are short, the merge path where they are long, in one launch (and the merge path's combine). Planning them
is ``plan``'s (``plan_split``, ``expand_split``).

Why. The merge path (``merge``) balances any length distribution, but every program pays a search of the offsets and
a dependent window step per 64-128 segments before its rows load: on small batches of short segments that chain, not
the bytes, sets the time (the seed shape 512 × 64: 19 µs against 9.3 for one whole-segments launch sized by
max_seqlen). The whole-segments kernel loads a group's offsets and then all its rows in one tile, but it needs the
tile's rows per segment, and a long segment makes its program loop alone while the rest of the GPU idles.

The split. The host knows N and B (shapes, no sync), so the mean length N / B. The kernel's grid is the merge path's,
(P, cdiv(M, BLOCK_M), 2), and axis 2 holds two roles that run side by side:

- z = 0, *whole segments*: the program takes groups p, p + P, p + 2P, ... of up to GROUP segments and reduces each in
  (GROUP, ROWS, BLOCK_M) tiles, one tile when every segment fits (the whole-segments kernel's design, ``kernels``).
  ROWS is chosen on the device from N / B among 1, 4, 16, ... up to a cap (``config.SplitConfig.row_options``): the
  smallest that holds 1.5 × the mean length (1 where it is at most one row); GROUP = TILE / (ROWS · BLOCK_M).
  The group's loop ends at its longest *short* segment. A group's offsets are loaded one group ahead, and within a
  group each tile is loaded one iteration before it is added; a group's first tile is not loaded before the previous
  group is stored (that would keep a second tile of registers live beside the accumulator), so each group costs a
  round trip of its program and the SM's other programs hide it.
- z = 1, *long segments*: the merge path's program (``merge._merge_units``), except that a segment of at most
  LIMIT = ROWS · TILES rows is no lane of its windows. The long ones' rows are split in equal shares of N + B units
  over the P programs whatever their lengths (one segment of 2·10^6 rows, or 2% of 10^4-3·10^4 among short ones), and
  a long segment cut at a program's edge leaves its pieces in the workspace for ``merge._merge_combine_kernel``
  (launched on the same grid; its z = 0 programs return at once).

Every segment is written once: by its group's program when it has at most LIMIT rows, else by the long role (or the
combine). Both roles compute ROWS and LIMIT from N and B by the same integer arithmetic (``_split_choice``). When no
segment is long, the long role's programs search, read their windows' offsets and write their slots only; the
combine's read one slot and return: the second launch and that chain are what the split costs over one launch.

Nothing depends on a host-side length: one compiled kernel for each M and dtype serves every N, B and distribution
(no guard under ``torch.compile(dynamic=True)``, and the native path replays it as a merge plan). No atomics:
bitwise-equal repeats. Memory safety never depends on the offsets: the long role is the merge path's; the whole
segments never read a row outside [0, N) nor write an output outside [0, B).

Backward (``_split_expand_kernel``): the same two roles as stores, one launch (each row written once).
"""

import triton
import triton.language as tl

from jaggedperf.ops.reduce.kernels import _finish
from jaggedperf.ops.reduce.merge import _merge_expand_units, _merge_units


@triton.constexpr_function
def _option_rows(i, n_opts, rows_cap):
    # option i's rows per segment, a compile-time value: 4^i, the last option the cap (config.SplitConfig.row_options)
    return rows_cap if i == n_opts - 1 else 1 << (2 * i)


@triton.jit
def _split_choice(n_rows, n_segments, ROWS_CAP: tl.constexpr, N_OPTS: tl.constexpr, TILES: tl.constexpr):
    # (which option of rows per segment the whole-segments tile takes, LIMIT = its rows · TILES): the smallest option
    # >= 1.5 × N / B (option 0, one row, where N <= B); the last where none is. Integer arithmetic on N and B only.
    rows = tl.program_id(0).to(tl.int64) * 0 + n_rows  # (an int argument equal to 1 may arrive as a constant)
    segments = tl.program_id(0).to(tl.int64) * 0 + n_segments
    choice = ((rows > segments) & (N_OPTS > 1)).to(tl.int32)
    for i in tl.static_range(1, N_OPTS - 1):  # option i < N_OPTS - 1: 4^i rows, below the cap
        choice += (3 * rows > 2 * (1 << (2 * i)) * segments).to(tl.int32)
    limit = rows * 0
    for i in tl.static_range(N_OPTS):
        limit = tl.where(choice == i, _option_rows(i, N_OPTS, ROWS_CAP) * TILES, limit)
    return choice, limit


@triton.jit
def _groups(n_segments, GROUP: tl.constexpr):
    # The whole-segments role's groups, forward and backward alike: groups p, p + P, ... of program p (P = grid axis
    # 0), each of min(GROUP, cdiv(B, P)) segments, so that small batches still spread over every program. Returns
    # (B as int64, segments a group, groups, this program's first group, the step to its next). Arithmetic only.
    step = tl.num_programs(0)
    segments = tl.program_id(0).to(tl.int64) * 0 + n_segments
    per_group = tl.minimum(tl.maximum((segments + step - 1) // step, 1), GROUP)
    n_groups = (segments + per_group - 1) // per_group
    return segments, per_group, n_groups, tl.program_id(0).to(tl.int64), step


@triton.jit
def _group_of(g, per_group, n_segments, GROUP: tl.constexpr):
    # group g's segment indices (GROUP,) (per_group of them used) and which exist. Arithmetic only, no pointer: its
    # results may address stores (Inductor's write analysis: the note in kernels._reduce_kernel).
    lanes = tl.arange(0, GROUP)
    segs = g * per_group + lanes
    return segs, (lanes < per_group) & (segs < n_segments)


@triton.jit
def _bounds_of(offsets_ptr, segs, ok):
    # the [start, end) rows of a group's segments (0, 0 where a lane is no segment). Never a store's address.
    start = tl.load(offsets_ptr + segs, mask=ok, other=0).to(tl.int64)
    end = tl.load(offsets_ptr + segs + 1, mask=ok, other=0).to(tl.int64)
    return start, end


@triton.jit
def _rows_tile(values_ptr, start, length, short, r, n_rows, N_COLS: tl.constexpr, cols, col_mask,
               ROWS: tl.constexpr):
    # rows [r, r + ROWS) of each short segment of a group (GROUP, ROWS, BLOCK_M), 0 elsewhere; never a row outside
    # [0, n_rows)
    steps = tl.arange(0, ROWS)
    rows = start[:, None] + r + steps[None, :]
    row_ok = ((r + steps)[None, :] < length[:, None]) & short[:, None] & (rows >= 0) & (rows < n_rows)
    return tl.load(values_ptr + (rows * N_COLS)[:, :, None] + cols[None, None, :],
                   mask=row_ok[:, :, None] & col_mask[None, None, :], other=0.0)


@triton.jit
def _whole_groups(values_ptr, offsets_ptr, out_ptr, n_rows, n_segments, cols, col_mask, N_COLS: tl.constexpr,
                  MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr, ROWS: tl.constexpr, GROUP: tl.constexpr,
                  BLOCK_M: tl.constexpr, TILES: tl.constexpr):
    # The whole-segments role: program p's groups (``_groups``), each segment of at most ROWS · TILES rows reduced
    # and written.
    limit = ROWS * TILES
    segments, per_group, n_groups, g, step = _groups(n_segments, GROUP)
    segs, ok = _group_of(g, per_group, segments, GROUP)
    start, end = _bounds_of(offsets_ptr, segs, ok)
    long_seen = tl.program_id(0) * 0  # whether a group of this program held a long segment (left to the long role)
    while g < n_groups:
        # the next group's offsets in flight while this group's rows load and add
        next_segs, next_ok = _group_of(g + step, per_group, segments, GROUP)
        next_start, next_end = _bounds_of(offsets_ptr, next_segs, next_ok)
        length = end - start
        short = ok & (length <= limit)
        long_seen = tl.maximum(long_seen, tl.max((ok & (length > limit)).to(tl.int32), axis=0))
        longest = tl.minimum(tl.max(tl.where(short, length, 0), axis=0), n_rows)
        # one tile where every segment fits; up to TILES, each loaded one iteration before it is added (a plain
        # `acc += load` lets ptxas interleave each load with its adds: one load in flight)
        x = _rows_tile(values_ptr, start, length, short, 0, n_rows, N_COLS, cols, col_mask, ROWS)
        acc = tl.zeros([GROUP, ROWS, BLOCK_M], dtype=tl.float32)
        for r in range(ROWS, longest, ROWS):
            ahead = _rows_tile(values_ptr, start, length, short, r, n_rows, N_COLS, cols, col_mask, ROWS)
            acc += x.to(tl.float32)
            x = ahead
        acc += x.to(tl.float32)
        res = _finish(tl.sum(acc, axis=1), length[:, None], MEAN, EMPTY_ZERO)
        tl.store(out_ptr + segs[:, None] * N_COLS + cols[None, :], res.to(out_ptr.dtype.element_ty),
                 mask=(ok & short)[:, None] & col_mask[None, :])
        g += step
        segs, ok, start, end = next_segs, next_ok, next_start, next_end
    return long_seen


# reads N·M·s bytes of values once (+ the offsets about twice, + the long role's search), writes B·M·s of output
# + 2·P·M·4 + 2·P·4 of workspace
@triton.jit(do_not_specialize=["n_rows", "n_segments", "units_per_program", "n_programs"])
def _split_reduce_kernel(
    values_ptr,  # (n_rows, N_COLS) contiguous, fp32/bf16/fp16: each row read once
    offsets_ptr,  # (n_segments + 1,) int32/int64: every load in [0, B]
    out_ptr,  # (n_segments, N_COLS) in values' dtype: short segments by their group, long ones by the long role
    ws_ptr,  # fp32: the merge path's workspace (heads, tails, crossing and first-segment slots) for long segments
    n_rows,  # N = values.shape[0]
    n_segments,  # B
    units_per_program,  # K: the long role's program p owns the units [p·K, (p+1)·K) of the N + B
    n_programs,  # P = grid axis 0
    N_COLS: tl.constexpr,  # M, compiled in (vector accesses)
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    BLOCK_L: tl.constexpr,  # the long role's rows per contiguous tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1 = cdiv(M, BLOCK_M))
    WINDOW: tl.constexpr,  # the long role's segments a window step
    GROUP: tl.constexpr,  # the long role's segments per gathered tile
    SEG_ROWS: tl.constexpr,  # ... rows of each per gathered tile
    SEG_TILES: tl.constexpr,  # ... gathered tiles at most
    SEARCH: tl.constexpr,  # probes a bound a step of the long role's search
    TILE: tl.constexpr,  # elements of the whole-segments role's tile
    TILES: tl.constexpr,  # a segment of more than its tile's ROWS · TILES rows is long
    ROWS_CAP: tl.constexpr,  # the largest rows per segment of the whole-segments tile
    N_OPTS: tl.constexpr,  # how many options of rows per segment (1, 4, 16, ..., ROWS_CAP)
):
    choice, limit = _split_choice(n_rows, n_segments, ROWS_CAP, N_OPTS, TILES)
    if tl.program_id(2) == 1:  # (axis 2's first half, the whole segments, is dispatched first)
        _merge_units(values_ptr, offsets_ptr, out_ptr, ws_ptr, n_rows, n_segments, units_per_program, n_programs,
                     limit, N_COLS, MEAN, EMPTY_ZERO, BLOCK_L, BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH,
                     True)
    else:
        cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        col_mask = cols < N_COLS
        for i in tl.static_range(N_OPTS):
            if choice == i:
                _whole_groups(values_ptr, offsets_ptr, out_ptr, n_rows, n_segments, cols, col_mask, N_COLS, MEAN,
                              EMPTY_ZERO, _option_rows(i, N_OPTS, ROWS_CAP),
                              TILE // (_option_rows(i, N_OPTS, ROWS_CAP) * BLOCK_M), BLOCK_M, TILES)


# The whole-first arrangement (``plan.plan_whole_first``): the same two roles as two launches, then the combine. The
# whole-segments launch runs alone (its registers alone decide its programs an SM, where the split's one kernel
# holds both roles' and 255 registers a lane), and each program writes whether one of its groups held a long segment;
# the long role's programs read those flags first and, where none is set, mark their crossing slot empty and return,
# so the combine's programs return after one load. Three launches where the split has two; no long segment: the
# second and third cost a launch and a load each.

# reads N·M·s bytes of the short segments' values (+ their offsets once), writes their outputs and one flag a program
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _whole_first_kernel(
    values_ptr,  # (n_rows, N_COLS) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64: every load in [0, B]
    out_ptr,  # (n_segments, N_COLS) in values' dtype: the short segments' rows
    flags_ptr,  # (grid axis 0,) int32: 1 where a group of the program held a long segment, else 0 (always written)
    n_rows,  # N
    n_segments,  # B
    N_COLS: tl.constexpr,  # M, compiled in (vector accesses)
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
    TILE: tl.constexpr,  # elements of the (GROUP, ROWS, BLOCK_M) tile
    TILES: tl.constexpr,  # a segment of more than ROWS · TILES rows is long
    ROWS_CAP: tl.constexpr,  # the largest rows per segment of the tile
    N_OPTS: tl.constexpr,  # how many options of rows per segment (1, 4, 16, ..., ROWS_CAP)
    GROUPS_MAX: tl.constexpr,  # > 0: the whole role only where no program takes more groups (else the merge path's)
):
    choice, _ = _split_choice(n_rows, n_segments, ROWS_CAP, N_OPTS, TILES)
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < N_COLS
    long_seen = tl.program_id(0) * 0
    whole = _whole_route(choice, n_segments, tl.num_programs(0), BLOCK_M, TILE, ROWS_CAP, N_OPTS, GROUPS_MAX)
    for i in tl.static_range(N_OPTS):
        if whole & (choice == i):
            long_seen = _whole_groups(values_ptr, offsets_ptr, out_ptr, n_rows, n_segments, cols, col_mask, N_COLS,
                                      MEAN, EMPTY_ZERO, _option_rows(i, N_OPTS, ROWS_CAP),
                                      TILE // (_option_rows(i, N_OPTS, ROWS_CAP) * BLOCK_M), BLOCK_M,
                                      TILES)
    if tl.program_id(1) == 0:
        tl.store(flags_ptr + tl.program_id(0), long_seen)


@triton.jit
def _whole_route(choice, n_segments, n_whole, BLOCK_M: tl.constexpr, TILE: tl.constexpr, ROWS_CAP: tl.constexpr,
                 N_OPTS: tl.constexpr, GROUPS_MAX: tl.constexpr):
    # whether the whole role serves the call: always where GROUPS_MAX is 0, else where none of its n_whole programs
    # takes more than GROUPS_MAX groups (``_groups``' arithmetic, at the tile's rows per segment `choice`, which
    # ``_split_choice`` takes from N / B). Both launches compute it alike from N, B and the first launch's grid: no
    # host decision, no guard.
    segments = tl.program_id(0).to(tl.int64) * 0 + n_segments
    group = segments * 0
    for i in tl.static_range(N_OPTS):
        group = tl.where(choice == i, TILE // (_option_rows(i, N_OPTS, ROWS_CAP) * BLOCK_M), group)
    per_group = tl.minimum(tl.maximum((segments + n_whole - 1) // n_whole, 1), tl.maximum(group, 1))
    n_groups = (segments + per_group - 1) // per_group
    return (GROUPS_MAX == 0) | (n_groups <= GROUPS_MAX * n_whole)


@triton.jit
def _any_flag(flags_ptr, n_flags, FLAGS_BLOCK: tl.constexpr):
    # whether any of the n_flags flags is set (one vector load a FLAGS_BLOCK, independent of each other)
    seen = n_flags * 0
    for f in range(0, n_flags, FLAGS_BLOCK):
        lanes = f + tl.arange(0, FLAGS_BLOCK)
        seen += tl.sum(tl.load(flags_ptr + lanes, mask=lanes < n_flags, other=0), axis=0)
    return seen > 0


# reads P1 flags; where one is set, as the split's long role (its workspace and the long segments' rows)
@triton.jit(do_not_specialize=["n_rows", "n_segments", "units_per_program", "n_programs", "n_flags"])
def _long_after_kernel(
    values_ptr, offsets_ptr, out_ptr, ws_ptr,  # as _split_reduce_kernel's
    flags_ptr,  # (n_flags,) int32: _whole_first_kernel's
    n_rows, n_segments, units_per_program, n_programs,  # as _split_reduce_kernel's
    n_flags,  # the whole-segments launch's programs (its grid axis 0)
    N_COLS: tl.constexpr, MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_M: tl.constexpr, WINDOW: tl.constexpr, GROUP: tl.constexpr, SEG_ROWS: tl.constexpr,
    SEG_TILES: tl.constexpr, SEARCH: tl.constexpr, TILE: tl.constexpr, TILES: tl.constexpr,
    ROWS_CAP: tl.constexpr, N_OPTS: tl.constexpr,  # as _split_reduce_kernel's
    FLAGS_BLOCK: tl.constexpr,  # flags a load
    GROUPS_MAX: tl.constexpr,  # as _whole_first_kernel's: where the whole role did not serve, every segment is long
    WHOLE_BLOCK_M: tl.constexpr,  # _whole_first_kernel's BLOCK_M (its route's groups; this kernel's own columns differ)
):
    choice, limit = _split_choice(n_rows, n_segments, ROWS_CAP, N_OPTS, TILES)
    whole = _whole_route(choice, n_segments, n_flags, WHOLE_BLOCK_M, TILE, ROWS_CAP, N_OPTS, GROUPS_MAX)
    run = whole == 0
    if whole:
        run = _any_flag(flags_ptr, n_flags, FLAGS_BLOCK)
    if run:
        limit = tl.where(whole, limit, -1)  # (-1: every segment, the empty ones included: the merge path itself)
        _merge_units(values_ptr, offsets_ptr, out_ptr, ws_ptr, n_rows, n_segments, units_per_program, n_programs,
                     limit, N_COLS, MEAN, EMPTY_ZERO, BLOCK_L, BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH,
                     True)
    elif tl.program_id(1) == 0:
        # no long segment: no crossing piece (the combine reads this slot alone)
        slots = (ws_ptr + (tl.program_id(0).to(tl.int64) * 0 + n_programs) * 2 * N_COLS).to(tl.pointer_type(tl.int32))
        tl.store(slots + tl.program_id(0), -1)


@triton.jit
def _whole_groups_expand(grad_ptr, offsets_ptr, out_ptr, n_rows, n_segments, cols, col_mask, N_COLS: tl.constexpr,
                         MEAN: tl.constexpr, ROWS: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                         TILES: tl.constexpr):
    # The backward's whole-segments role: each short segment's rows of groups p, p + P, ... get its gradient row.
    limit = ROWS * TILES
    segments, per_group, n_groups, g, step = _groups(n_segments, GROUP)
    steps = tl.arange(0, ROWS)
    while g < n_groups:
        segs, ok = _group_of(g, per_group, segments, GROUP)
        # loaded here, not by a helper: the rows written are addressed from them (Inductor's write analysis)
        start = tl.load(offsets_ptr + segs, mask=ok, other=0).to(tl.int64)
        end = tl.load(offsets_ptr + segs + 1, mask=ok, other=0).to(tl.int64)
        length = end - start
        short = ok & (length <= limit)
        row = tl.load(grad_ptr + segs[:, None] * N_COLS + cols[None, :], mask=short[:, None] & col_mask[None, :],
                      other=0.0).to(tl.float32)
        if MEAN:
            row = row / tl.maximum(length, 1).to(tl.float32)[:, None]  # (an empty segment owns no rows)
        tile = (tl.zeros([GROUP, ROWS, BLOCK_M], dtype=tl.float32) + row[:, None, :]).to(
            out_ptr.dtype.element_ty)
        longest = tl.minimum(tl.max(tl.where(short, length, 0), axis=0), n_rows)
        for r in range(0, longest, ROWS):
            rows = start[:, None] + r + steps[None, :]
            row_ok = ((r + steps)[None, :] < length[:, None]) & short[:, None] & (rows >= 0) & (rows < n_rows)
            tl.store(out_ptr + (rows * N_COLS)[:, :, None] + cols[None, None, :], tile,
                     mask=row_ok[:, :, None] & col_mask[None, None, :])
        g += step


# reads B·M·s bytes of grad (+ offsets as the forward), writes N·M·s: each row once
@triton.jit(do_not_specialize=["n_rows", "n_segments", "units_per_program"])
def _split_expand_kernel(
    grad_ptr,  # (n_segments, N_COLS) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64: every load in [0, B]
    out_ptr,  # (n_rows, N_COLS) in grad's dtype: row r gets grad[segment of r] (/ its length for mean)
    n_rows,  # N
    n_segments,  # B
    units_per_program,  # K, as in _split_reduce_kernel
    N_COLS: tl.constexpr,  # M
    MEAN: tl.constexpr,  # divide by the segment's length
    BLOCK_L: tl.constexpr,  # as in _split_reduce_kernel
    BLOCK_M: tl.constexpr,
    WINDOW: tl.constexpr,
    GROUP: tl.constexpr,
    SEG_ROWS: tl.constexpr,
    SEG_TILES: tl.constexpr,
    SEARCH: tl.constexpr,
    TILE: tl.constexpr,
    TILES: tl.constexpr,
    ROWS_CAP: tl.constexpr,
    N_OPTS: tl.constexpr,
):
    choice, limit = _split_choice(n_rows, n_segments, ROWS_CAP, N_OPTS, TILES)
    if tl.program_id(2) == 1:
        _merge_expand_units(grad_ptr, offsets_ptr, out_ptr, n_rows, n_segments, units_per_program, limit, N_COLS,
                            MEAN, BLOCK_L, BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH, True)
    else:
        cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
        col_mask = cols < N_COLS
        for i in tl.static_range(N_OPTS):
            if choice == i:
                _whole_groups_expand(grad_ptr, offsets_ptr, out_ptr, n_rows, n_segments, cols, col_mask, N_COLS,
                                     MEAN, _option_rows(i, N_OPTS, ROWS_CAP),
                                     TILE // (_option_rows(i, N_OPTS, ROWS_CAP) * BLOCK_M), BLOCK_M,
                                     TILES)
