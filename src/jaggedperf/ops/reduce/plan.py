"""Planning a jagged sum/mean (and its backward): the output, the workspace and the launches.

``plan_reduce`` / ``plan_expand`` choose the kernels (``kernels``, ``merge``) and their grids from the call's
shapes and the configs (``jaggedperf.ops.config``), allocate what the kernels write, and return a
``Plan`` (``jaggedperf.ops.launch.plan``); the caller runs its launches (``op``: through the fast tiers
eagerly, ``wrap_triton`` when traced). The whole-segments kernels when ``max_seqlen`` is known and
short (and not far past the mean length: ``merge_beats_whole``), the balanced chunks when it is known and long;
else the merge path. Nothing here reads a tensor's values: under ``torch.compile(dynamic=True)`` N and B may be
SymInts and planning installs no guard on them.
``plan_segments`` / ``plan_merge`` / ``plan_chunks`` (and the expand ones) take the choice as arguments: the
production functions make it, and ``jaggedperf.ops.testing`` forces one to exercise every path.
"""

from __future__ import annotations

import dataclasses

import torch

from jaggedperf.ops.config import (EXPAND_SPLIT_ROWS, EXPAND_SPLIT_WARPS, SEGMENT_TILES, MergeConfig, ReduceConfig,
                                   SegmentsConfig, SplitConfig, merge_config, merge_expand_config, reduce_config,
                                   segments_config, sm_count, split_config)
from jaggedperf.ops.launch.layout import FEW_SEGMENTS, GridKind, Source
from jaggedperf.ops.launch.plan import Launch, NativeKernel, Plan, chunking, sym_max
from jaggedperf.ops.tiles import hint_of
from jaggedperf.ops.reduce.kernels import (_combine_kernel, _expand_kernel, _reduce_kernel, _segments_expand_kernel,
                                          _segments_kernel, _segments_loop_kernel)
from jaggedperf.ops.reduce.merge import _merge_combine_kernel, _merge_expand_kernel, _merge_reduce_kernel
from jaggedperf.ops.reduce.split import (_long_after_kernel, _split_expand_kernel, _split_reduce_kernel,
                                         _whole_first_kernel)

# what fills each forward kernel's runtime arguments, in order, and how its grid is sized (the native path)
SEGMENTS_NATIVE = NativeKernel((Source.VALUES, Source.OFFSETS, Source.OUT, Source.N_ROWS, Source.N_COLS,
                                Source.N_SEGMENTS), GridKind.SEGMENTS)
REDUCE_NATIVE = NativeKernel((Source.VALUES, Source.OFFSETS, Source.OUT, Source.WORKSPACE, Source.N_ROWS,
                              Source.N_COLS, Source.N_SEGMENTS, Source.ROWS_PER_CHUNK, Source.N_CHUNKS),
                             GridKind.CHUNKS)
COMBINE_NATIVE = NativeKernel((Source.OFFSETS, Source.OUT, Source.WORKSPACE, Source.N_COLS, Source.ROWS_PER_CHUNK,
                               Source.N_CHUNKS), GridKind.CHUNKS)
# the backward's: VALUES is the (B, M) gradient, N_ROWS the output's rows (the forward's N)
EXPAND_NATIVE = NativeKernel((Source.VALUES, Source.OFFSETS, Source.OUT, Source.N_ROWS, Source.N_COLS,
                              Source.N_SEGMENTS, Source.ROWS_PER_CHUNK), GridKind.CHUNKS)
SEGMENTS_EXPAND_NATIVE = NativeKernel((Source.VALUES, Source.OFFSETS, Source.OUT, Source.N_ROWS, Source.N_COLS,
                                       Source.N_SEGMENTS, Source.GRID_Z), GridKind.SEGMENTS)
# the merge path's: its units per program K and programs P fill the chunks' two slots (the native plan's ``units``
# makes the C++ chunking count N + B)
MERGE_NATIVE = NativeKernel((Source.VALUES, Source.OFFSETS, Source.OUT, Source.WORKSPACE, Source.N_ROWS,
                             Source.N_SEGMENTS, Source.ROWS_PER_CHUNK, Source.N_CHUNKS), GridKind.CHUNKS)
MERGE_COMBINE_NATIVE = NativeKernel((Source.OFFSETS, Source.OUT, Source.WORKSPACE, Source.ROWS_PER_CHUNK,
                                     Source.N_CHUNKS), GridKind.CHUNKS)
MERGE_EXPAND_NATIVE = NativeKernel((Source.VALUES, Source.OFFSETS, Source.OUT, Source.N_ROWS, Source.N_SEGMENTS,
                                    Source.ROWS_PER_CHUNK), GridKind.CHUNKS)


def plan_reduce(values, offsets, *, mean: bool, empty_zero: bool, max_seqlen=None) -> Plan:
    """Allocate the output (and workspace) and describe the launches of a jagged sum/mean.

    Args:
        values: (N, M) contiguous, fp32/bf16/fp16 (fp64 on the CPU).
        offsets: (B + 1,) contiguous int32/int64 on values' device.
        mean: divide each sum by its segment's length.
        empty_zero: the mean of an empty segment is 0 (else NaN).
        max_seqlen: an upper bound on the lengths (a host int, or a SymInt under torch.compile), or None.
            When known and short enough (``segments_config``, ``merge_beats_whole``), one program per group of
            whole segments: one launch, no search. When known and long, the balanced chunks (equal rows a program,
            then a combine of the segments cut at a chunk's edge). Otherwise the merge path: equal shares of rows plus
            segments a program, and a second launch that combines the pieces of the segments cut at a program's edge.

    Returns:
        the Plan: its ``out`` (B, M) in values' dtype, filled once its launches have run.
    """
    n_cols = values.shape[1]
    if max_seqlen is not None and not merge_beats_whole(values.shape[0], offsets.shape[0] - 1, max_seqlen):
        segments = _segments_for(n_cols, max_seqlen, offsets.shape[0] - 1, values.device)
        if segments is not None:
            return plan_segments(values, offsets, mean, empty_zero, segments)
        # Known long, not skewed lengths: the balanced chunks, which hold the long-row bars at the floor
        # (tests/gpu/test_bars_gpu.py; the merge path measured 1.19x them at 1024 × 256 × <= 1000 rows).
        return plan_sized_chunks(values, offsets, mean, empty_zero)
    # Every call without max_seqlen takes the merge path. The balanced chunks measured faster on small batches of long
    # even segments (benchmarks/results/h200/merge-path.md: B <= 4096 and >= 27 rows a segment, e.g. 512 × 64 14.8
    # against 19.4 µs) and slower below 11 rows a segment or from B = 10^4 up; a rule on B and N / B between those
    # points is not measured, so it is not routed.
    return plan_merge(values, offsets, mean, empty_zero)


# With max_seqlen known, the whole-segments kernels size their tiles by it; where it far exceeds the mean length
# (heavy tails, mostly empty batches) or is at most 1 (one-row tiles of many segments a program), the merge path
# ran faster on the H200 (benchmarks/results/h200/merge-path.md): the 90%- and 95%-empty batches (B = 10^5, 10^6) 140 -> 65 and
# 188 -> 95 µs, power-law 16384 × 20 178 -> 51, all-ones 10^6 × 8 250 -> 52; not the power-law 4096 × 64 batch
# (B = 4096: 23.6 against 26.0), hence the batch bound for the forward. The backward's stores gain at any B (the
# power-law 4096 × 64: 37.8 -> 13.1).
MERGE_SEQLEN_RATIO = 8
MERGE_MIN_SEGMENTS = 16384


def plan_sized_chunks(values, offsets, mean: bool, empty_zero: bool) -> Plan:
    """The balanced chunks at their production sizing: about ``programs_per_sm`` programs an SM, whatever N and B
    (``plan_chunks`` with the bucket's config and ``chunking``'s rows per chunk)."""
    n_cols = values.shape[1]
    cfg = reduce_config(n_cols, values.dtype, values.device, few_segments(offsets.shape[0] - 1))
    chunk_programs = sm_count(values.device) * cfg.programs_per_sm
    rows, chunks = chunking(values.shape[0], -(-int(n_cols) // cfg.block_m), chunk_programs, cfg.block_l,
                            cfg.min_chunk_rows)
    return plan_chunks(values, offsets, mean, empty_zero, cfg, rows, chunks, chunk_programs)


def merge_beats_whole(n_rows, n_segments, max_seqlen, backward: bool = False) -> bool:
    """Whether a call with max_seqlen known takes the merge path instead of the whole-segments kernels.

    Args:
        n_rows, n_segments, max_seqlen: N, B and the bound (ints, or SymInts: their hints, with no guard; a compiled
            graph keeps its first call's choice, which changes only the speed).
        backward: the expand's choice (no batch bound).

    Returns:
        True where max_seqlen <= 1, or max_seqlen >= MERGE_SEQLEN_RATIO × the mean length N / B (and, forward,
        B >= MERGE_MIN_SEGMENTS), or, forward, max_seqlen 2 with B >= MERGE_MIN_SEGMENTS.
    """
    rows, segments, longest = hint_of(n_rows), hint_of(n_segments), hint_of(max_seqlen)
    if rows is None or segments is None or longest is None or segments == 0:
        return False
    if longest <= 1:
        return True
    if longest <= 2 and segments >= MERGE_MIN_SEGMENTS and not backward:
        # 10^6 segments of 2 rows: the whole-segments kernel 474.7 µs against the merge path's 143.0
        # (benchmarks/results/h200/split-narrow-rule.md); the backward there is not measured
        return True
    skewed = longest * segments >= MERGE_SEQLEN_RATIO * max(rows, segments)
    return skewed and (backward or segments >= MERGE_MIN_SEGMENTS)


def few_segments(n_segments) -> bool:
    """Whether a call of the balanced chunks (``plan_chunks``, reached through ``ops.testing``) has at most
    ``layout.FEW_SEGMENTS`` segments: their wide combine.

    Args:
        n_segments: B (an int, or a SymInt: its hint, with no guard).
    """
    hint = hint_of(n_segments)
    return hint is not None and hint <= FEW_SEGMENTS


def plan_chunks(values, offsets, mean: bool, empty_zero: bool, cfg: ReduceConfig, rows_per_chunk, n_chunks,
                chunk_programs: int) -> Plan:
    """The balanced chunks' two launches (reduce, then combine) with their workspace.

    Args:
        values, offsets, mean, empty_zero: as for ``plan_reduce``.
        cfg: the tile, warps and chunk sizing.
        rows_per_chunk: R (any R >= 1 is correct: it decides only the balance).
        n_chunks: C = max(cdiv(N, R), 1).
        chunk_programs: the programs ``chunking`` aimed at, so that the native path redoes it per call
            (one plan for every N and B); 0 when R was chosen otherwise (the plan is then not replayed).

    Returns:
        the Plan.
    """
    n_rows, n_cols = values.shape
    n_segments = offsets.shape[0] - 1
    n_cols = int(n_cols)
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    grid = (n_chunks, -(-n_cols // cfg.block_m), 1)
    # (2·C, M) fp32 pieces + C int32 crossing slots, one allocation
    ws = torch.empty((2 * n_chunks * n_cols + n_chunks,), dtype=torch.float32, device=values.device)
    reduce_args = (values, offsets, out, ws, n_rows, n_cols, n_segments, rows_per_chunk, n_chunks,
                   mean, empty_zero, cfg.block_l, cfg.block_m)
    combine_args = (offsets, out, ws, n_cols, rows_per_chunk, n_chunks, mean, empty_zero, cfg.block_p, cfg.block_m)
    launches = (Launch(_reduce_kernel, grid, reduce_args, cfg.num_warps, (out, ws), ("reduce", *reduce_args[-4:]),
                       REDUCE_NATIVE),
                Launch(_combine_kernel, grid, combine_args, cfg.combine_warps or cfg.num_warps, (out,),
                       ("combine", *combine_args[-4:]), COMBINE_NATIVE))
    return Plan(out, launches, cfg if chunk_programs else None, chunk_programs)


def plan_segments(values, offsets, mean: bool, empty_zero: bool, cfg: SegmentsConfig) -> Plan:
    """The whole-segments kernel's one launch: one program per group of ``cfg.group`` segments, or (with
    ``cfg.programs``) a fixed grid of programs looping over the groups.

    Args:
        values, offsets, mean, empty_zero: as for ``plan_reduce``.
        cfg: the group, tile and warps (any config is correct whatever the lengths: longer segments loop).

    Returns:
        the Plan.
    """
    n_rows, n_cols = values.shape
    n_segments = offsets.shape[0] - 1
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    kernel, name, programs = (_segments_loop_kernel, "segments_loop", cfg.programs) if cfg.programs else \
        (_segments_kernel, "segments", sym_max(-(-n_segments // cfg.group), 1))
    grid = (programs, -(-int(n_cols) // cfg.block_m), 1)
    args = (values, offsets, out, n_rows, int(n_cols), n_segments, mean, empty_zero, cfg.group, cfg.block_l,
            cfg.block_m)
    return Plan(out, (Launch(kernel, grid, args, cfg.num_warps, (out,), (name, int(n_cols), *args[-5:]),
                             SEGMENTS_NATIVE),), cfg)


def _segments_for(n_cols, max_seqlen, n_segments, device) -> SegmentsConfig | None:
    """``segments_config`` of the values of max_seqlen and B: host ints, or under torch.compile SymInts'
    hints, with one guard.

    Traced, the config comes from the values the graph is first compiled with, with no guard on B and
    one on max_seqlen: that every sequence still fits the config's tiles (past it, a recompile takes
    the chunked kernels; for host ints segments_config has already checked it). A later, smaller B or
    max_seqlen runs the same config (correct, maybe a larger tile than it needs); nothing about B or N
    ever recompiles.
    """
    seqlen_hint, segments_hint = hint_of(max_seqlen), hint_of(n_segments)
    if seqlen_hint is None or segments_hint is None:
        return None
    cfg = segments_config(n_cols, seqlen_hint, segments_hint, device)
    if cfg is not None and not (max_seqlen <= cfg.block_l * SEGMENT_TILES):  # the guard (True for the hint)
        return None
    return cfg


def plan_expand(grad, offsets, n_rows, *, mean: bool, max_seqlen=None) -> Plan:
    """Allocate grad_values (n_rows, M) and describe the launch that fills it (the backward of sum/mean).

    Args:
        grad: (B, M) contiguous.
        offsets: (B + 1,) contiguous int32/int64 on grad's device.
        n_rows: N, the forward's values.shape[0].
        mean: divide by each segment's length.
        max_seqlen: as for ``plan_reduce``: when known and short (``_segments_for``), one program per group
            of whole segments; otherwise the merge path.

    Returns:
        the Plan: its ``out`` (n_rows, M) in grad's dtype; row r gets grad[segment of r] (/ its length).
    """
    n_cols = grad.shape[1]
    if max_seqlen is not None and not merge_beats_whole(n_rows, grad.shape[0], max_seqlen, backward=True):
        segments = _segments_for(n_cols, max_seqlen, grad.shape[0], grad.device)
        if segments is not None:
            return expand_segments(grad, offsets, n_rows, mean, segments, max_seqlen)
    return expand_merge(grad, offsets, n_rows, mean)


def expand_chunks(grad, offsets, n_rows, mean: bool, cfg: ReduceConfig, rows_per_chunk, n_chunks,
                  chunk_programs: int = 0) -> Plan:
    """The backward by balanced chunks: each program writes the rows of its chunk.

    Args:
        grad, offsets, n_rows, mean: as for ``plan_expand``.
        cfg: the tile and warps.
        rows_per_chunk: R (any R >= 1 is correct).
        n_chunks: C = max(cdiv(n_rows, R), 1).
        chunk_programs: as for ``plan_chunks`` (0: R chosen otherwise, the plan is not replayed).

    Returns:
        the Plan.
    """
    n_segments, n_cols = grad.shape
    n_cols = int(n_cols)
    out = torch.empty((n_rows, n_cols), dtype=grad.dtype, device=grad.device)
    args = (grad, offsets, out, n_rows, n_cols, n_segments, rows_per_chunk, mean, cfg.block_l, cfg.block_m)
    return Plan(out, (Launch(_expand_kernel, (n_chunks, -(-n_cols // cfg.block_m), 1), args, cfg.num_warps, (out,),
                             ("expand", *args[-3:]), EXPAND_NATIVE),), cfg if chunk_programs else None, chunk_programs)


def expand_segments(grad, offsets, n_rows, mean: bool, cfg: SegmentsConfig, max_seqlen=None) -> Plan:
    """The backward by groups of whole segments (``cfg.programs`` is ignored: one program per group).

    Args:
        grad, offsets, n_rows, mean: as for ``plan_expand``.
        cfg: the group, tile and warps.
        max_seqlen: the lengths' bound, which decides whether a long segment alone in its program spreads
            over several (``_expand_tiles``); None: one program per group.

    Returns:
        the Plan.
    """
    n_segments, n_cols = grad.shape
    out = torch.empty((n_rows, n_cols), dtype=grad.dtype, device=grad.device)
    tiles, cfg = _expand_tiles(cfg, max_seqlen)
    grid = (sym_max(-(-n_segments // cfg.group), 1), -(-int(n_cols) // cfg.block_m), tiles)
    args = (grad, offsets, out, n_rows, int(n_cols), n_segments, tiles, mean, cfg.group, cfg.block_l, cfg.block_m)
    launch = Launch(_segments_expand_kernel, grid, args, cfg.num_warps, (out,),
                    ("segments_expand", int(n_cols), *args[-4:]), SEGMENTS_EXPAND_NATIVE)
    # the config that sized the grid, as the native path replays it: one program per group, whatever cfg.programs
    return Plan(out, (launch,), dataclasses.replace(cfg, programs=0))


def _expand_tiles(cfg: SegmentsConfig, max_seqlen):
    # Programs on grid axis 2, and the config they run. A segment alone in its program whose rows take more
    # than one tile: its rows spread over programs of EXPAND_SPLIT_ROWS rows each, so that every SM writes
    # about as many rows whatever the lengths (faster at the bars' second seed shape, up to 275 rows; spreading
    # whole 128-row tiles gains nothing). Decided on max_seqlen's
    # value (a SymInt's hint: no guard); the last program writes whatever lies past the others, so any
    # max_seqlen is correct.
    hint = None if max_seqlen is None else hint_of(max_seqlen)
    if cfg.group != 1 or hint is None or hint <= cfg.block_l:
        return 1, cfg
    split = dataclasses.replace(cfg, block_l=EXPAND_SPLIT_ROWS, num_warps=EXPAND_SPLIT_WARPS)
    return sym_max(-(-max_seqlen // EXPAND_SPLIT_ROWS), 1), split


def merge_programs(device, cfg: MergeConfig) -> int:
    """The programs the merge path aims at over its grid: the SM count × ``cfg.programs_per_sm``."""
    return sm_count(device) * cfg.programs_per_sm


def merge_grid(n_rows, n_segments, n_cols, device, cfg: MergeConfig):
    """The merge-path grid: (K, P), units per program and programs, from N + B and the config alone.

    Args:
        n_rows, n_segments: N and B (ints, or SymInts: plain arithmetic, no guard).
        n_cols: M.
        device: its SM count sizes the grid.
        cfg: the config.

    Returns:
        (K, P): P = max(cdiv(N + B, K), 1) programs on grid axis 0, about ``programs_per_sm`` × SMs over the grid.
    """
    col_blocks = -(-int(n_cols) // cfg.block_m)
    return chunking(n_rows + n_segments, col_blocks, merge_programs(device, cfg), 1, cfg.min_units)


@dataclasses.dataclass(frozen=True)
class _MergeGrid:
    """The merge path's grid for one forward call and what its reduce and combine launches share: the output and the
    workspace the combine reads (the merge path's and the split's reductions both write it, so it is laid out here
    once)."""

    n_rows: object  # N (an int or a SymInt)
    n_segments: object  # B
    n_cols: int  # M
    units_per_program: object  # K
    n_programs: object  # P
    replayed: bool  # the grid is merge_grid's (the native path replays it), not a forced K
    out: torch.Tensor  # (B, M) in values' dtype
    ws: torch.Tensor  # heads (P, M) and tails (P, M) fp32, then P int32 crossing slots and P int32 first-segment slots

    def grid(self, cfg, roles: int) -> tuple:
        """(P, column blocks, roles): the split puts its two roles on axis 2; the merge path has one."""
        return (self.n_programs, -(-self.n_cols // cfg.block_m), roles)

    def reduce_args(self, values, offsets, mean: bool, empty_zero: bool, cfg) -> tuple:
        """The reduction kernels' arguments up to BLOCK_L (both kernels take these first, in this order)."""
        return (values, offsets, self.out, self.ws, self.n_rows, self.n_segments, self.units_per_program,
                self.n_programs, self.n_cols, mean, empty_zero, cfg.block_l)

    def plan(self, reduce: Launch, offsets, mean: bool, empty_zero: bool, cfg, roles: int, device) -> Plan:
        """``reduce`` then the merge path's combine on the same grid, as a Plan."""
        combine_args = (offsets, self.out, self.ws, self.units_per_program, self.n_programs, self.n_cols, mean,
                        empty_zero, cfg.block_p, cfg.block_m)
        combine = Launch(_merge_combine_kernel, self.grid(cfg, roles), combine_args, cfg.combine_warps, (self.out,),
                         ("merge_combine", *combine_args[-5:]), MERGE_COMBINE_NATIVE)
        return _merge_plan(self.out, (reduce, combine), cfg, self.replayed, device)


def _merge_grid_and_outputs(values, offsets, cfg, units_per_program) -> _MergeGrid:
    """The merge path's grid (``_merge_grid_or_forced``), its output and its workspace for ``values``."""
    n_rows, n_cols = values.shape
    n_cols = int(n_cols)
    n_segments = offsets.shape[0] - 1
    units_per_program, n_programs, replayed = _merge_grid_or_forced(n_rows, n_segments, n_cols, values.device, cfg,
                                                                    units_per_program)
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    ws = torch.empty((2 * n_programs * n_cols + 2 * n_programs,), dtype=torch.float32, device=values.device)
    return _MergeGrid(n_rows, n_segments, n_cols, units_per_program, n_programs, replayed, out, ws)


def plan_merge(values, offsets, mean: bool, empty_zero: bool, cfg: MergeConfig | None = None,
               units_per_program=None) -> Plan:
    """The merge-path reduction's two launches (``_merge_reduce_kernel``, then ``_merge_combine_kernel``) and
    their workspace.

    Args:
        values, offsets, mean, empty_zero: as for ``plan_reduce``.
        cfg: the tiles (``merge_config`` when None).
        units_per_program: K, forced (tests: any K >= 1 is correct); None: ``merge_grid``'s.

    Returns:
        the Plan.
    """
    cfg = cfg or merge_config(int(values.shape[1]), values.dtype)
    grid = _merge_grid_and_outputs(values, offsets, cfg, units_per_program)
    args = grid.reduce_args(values, offsets, mean, empty_zero, cfg) + (cfg.block_m, cfg.window, cfg.group,
                                                                        cfg.seg_rows, cfg.seg_tiles, cfg.search)
    launch = Launch(_merge_reduce_kernel, grid.grid(cfg, 1), args, cfg.num_warps, (grid.out, grid.ws),
                    ("merge", *args[-10:]), MERGE_NATIVE)
    return grid.plan(launch, offsets, mean, empty_zero, cfg, 1, values.device)


def expand_merge(grad, offsets, n_rows, mean: bool, cfg: MergeConfig | None = None, units_per_program=None) -> Plan:
    """The backward by the merge-path split: each program writes the rows it holds, one launch.

    Args:
        grad, offsets, n_rows, mean: as for ``plan_expand``.
        cfg: the tiles (``merge_expand_config`` when None).
        units_per_program: K, forced (any K >= 1 is correct); None: ``merge_grid``'s.

    Returns:
        the Plan.
    """
    cfg = cfg or merge_expand_config(int(grad.shape[1]), grad.dtype)
    constexprs = (cfg.block_m, cfg.expand_window, cfg.group, cfg.seg_rows, cfg.seg_tiles, cfg.search)
    return _expand_on_merge_grid(_merge_expand_kernel, "merge_expand", grad, offsets, n_rows, mean, cfg,
                                 units_per_program, constexprs, roles=1)


def split_constexprs(cfg: SplitConfig) -> tuple:
    """The split kernels' trailing constexprs after BLOCK_L: (BLOCK_M, WINDOW, GROUP, SEG_ROWS, SEG_TILES, SEARCH,
    TILE, TILES, ROWS_CAP, N_OPTS)."""
    options = cfg.row_options
    return (cfg.block_m, cfg.window, cfg.group, cfg.seg_rows, cfg.seg_tiles, cfg.search, cfg.tile, cfg.tiles,
            options[-1], len(options))


def plan_split(values, offsets, mean: bool, empty_zero: bool, cfg: SplitConfig | None = None,
               units_per_program=None) -> Plan:
    """The split reduction's two launches (``_split_reduce_kernel``: whole segments and long ones side by side on
    grid axis 2; then the merge path's combine) and their workspace: the merge path's grid and workspace, so the
    native path replays it as a merge plan.

    Args:
        values, offsets, mean, empty_zero: as for ``plan_reduce``.
        cfg: the tiles (``split_config`` when None).
        units_per_program: the long role's K, forced (tests: any K >= 1 is correct); None: ``merge_grid``'s.

    Returns:
        the Plan.
    """
    cfg = cfg or split_config(int(values.shape[1]), values.dtype)
    grid = _merge_grid_and_outputs(values, offsets, cfg, units_per_program)
    args = grid.reduce_args(values, offsets, mean, empty_zero, cfg) + split_constexprs(cfg)
    launch = Launch(_split_reduce_kernel, grid.grid(cfg, 2), args, cfg.num_warps, (grid.out, grid.ws),
                    ("split", *args[-13:]), MERGE_NATIVE)
    return grid.plan(launch, offsets, mean, empty_zero, cfg, 2, values.device)


FLAGS_BLOCK = 1024  # the whole-first long role's flags a load


def plan_whole_first(values, offsets, mean: bool, empty_zero: bool, cfg: SplitConfig | None = None,
                     units_per_program=None, long_cfg: MergeConfig | None = None) -> Plan:
    """The split's two roles as two launches (``_whole_first_kernel``, then ``_long_after_kernel``, which returns at
    once where no segment is long), then the merge path's combine: reached through ``ops.testing`` only until it is
    measured faster than the split and the merge path.

    Args:
        values, offsets, mean, empty_zero: as for ``plan_reduce``.
        cfg: the whole-segments role's tile (``split_config`` when None); its ``whole_programs_per_sm`` sizes the
            first launch; its ``whole_groups_max`` > 0: the whole role serves only where none of its programs takes
            more groups, decided on the device from N and B (``split._whole_route``), else the second launch is the
            merge path.
        units_per_program: the long role's K, forced (tests: any K >= 1 is correct); None: ``merge_grid``'s.
        long_cfg: the long role's tiles and grid (``merge_config`` when None: a launch of its own, so the merge
            path's).

    Returns:
        the Plan (the Python path's: the native path does not replay it).
    """
    cfg = cfg or split_config(int(values.shape[1]), values.dtype)
    long_cfg = long_cfg or merge_config(int(values.shape[1]), values.dtype)
    grid = _merge_grid_and_outputs(values, offsets, long_cfg, units_per_program)
    n_flags = max(min(sm_count(values.device) * cfg.whole_programs_per_sm, int(grid.n_segments)), 1)  # (none idle)
    flags = torch.empty((n_flags,), dtype=torch.int32, device=values.device)
    whole_tile = split_constexprs(cfg)[-4:]  # TILE, TILES, ROWS_CAP, N_OPTS
    whole_args = (values, offsets, grid.out, flags, grid.n_rows, grid.n_segments, grid.n_cols, mean, empty_zero,
                  cfg.block_m, *whole_tile, cfg.whole_groups_max)
    whole = Launch(_whole_first_kernel, (n_flags, -(-grid.n_cols // cfg.block_m), 1), whole_args, cfg.num_warps,
                   (grid.out, flags), ("whole_first", *whole_args[-9:]))
    reduce_args = grid.reduce_args(values, offsets, mean, empty_zero, long_cfg)
    long_args = (*reduce_args[:4], flags, *reduce_args[4:8], n_flags, *reduce_args[8:], long_cfg.block_m,
                 long_cfg.window, long_cfg.group, long_cfg.seg_rows, long_cfg.seg_tiles, long_cfg.search, *whole_tile,
                 FLAGS_BLOCK, cfg.whole_groups_max, cfg.block_m)
    long = Launch(_long_after_kernel, grid.grid(long_cfg, 1), long_args, long_cfg.num_warps, (grid.out, grid.ws),
                  ("long_after", *long_args[-17:]))
    combined = grid.plan(long, offsets, mean, empty_zero, long_cfg, 1, values.device)
    return Plan(combined.out, (whole, *combined.launches))


def expand_split(grad, offsets, n_rows, mean: bool, cfg: SplitConfig | None = None, units_per_program=None) -> Plan:
    """The backward by the split: short segments' rows by their groups, long ones' by the merge path's split, one
    launch (each row written once).

    Args:
        grad, offsets, n_rows, mean: as for ``plan_expand``.
        cfg: the tiles (``split_config`` when None).
        units_per_program: the long role's K, forced (any K >= 1 is correct); None: ``merge_grid``'s.

    Returns:
        the Plan.
    """
    cfg = cfg or split_config(int(grad.shape[1]), grad.dtype)
    forward = split_constexprs(cfg)  # the backward's window in place of the forward's
    return _expand_on_merge_grid(_split_expand_kernel, "split_expand", grad, offsets, n_rows, mean, cfg,
                                 units_per_program, (forward[0], cfg.expand_window, *forward[2:]), roles=2)


def _expand_on_merge_grid(kernel, name: str, grad, offsets, n_rows, mean: bool, cfg: MergeConfig, units_per_program,
                          constexprs: tuple, roles: int) -> Plan:
    """The merge path's and the split's backward: the (N, M) output and one launch of ``kernel`` on the merge grid
    (``roles`` on axis 2), its arguments (grad, offsets, out, N, B, K, M, MEAN, BLOCK_L, *constexprs); the native path
    replays it where the grid is ``merge_grid``'s. The launch's key names the kernel and every compile-time argument."""
    n_segments, n_cols = grad.shape
    n_cols = int(n_cols)
    units_per_program, n_programs, replayed = _merge_grid_or_forced(n_rows, n_segments, n_cols, grad.device, cfg,
                                                                    units_per_program)
    out = torch.empty((n_rows, n_cols), dtype=grad.dtype, device=grad.device)
    args = (grad, offsets, out, n_rows, n_segments, units_per_program, n_cols, mean, cfg.block_l, *constexprs)
    launch = Launch(kernel, (n_programs, -(-n_cols // cfg.block_m), roles), args, cfg.num_warps, (out,),
                    (name, *args[6:]), MERGE_EXPAND_NATIVE)
    return _merge_plan(out, (launch,), cfg, replayed, grad.device)


def _merge_plan(out, launches: tuple, cfg: MergeConfig, replayed: bool, device) -> Plan:
    """A Plan on the merge path's grid: the native path replays it (the config and its programs) only where the grid
    is ``merge_grid``'s, which it redoes per call; a forced K stays on the Python path."""
    return Plan(out, launches, cfg if replayed else None, merge_programs(device, cfg) if replayed else 0)


def _merge_grid_or_forced(n_rows, n_segments, n_cols, device, cfg, units_per_program):
    """(K, programs, replayed) of a merge-path grid (the split's long role too): ``merge_grid``'s, which the native path
    redoes per call (replayed), or a forced K (any K >= 1 is correct) over cdiv(N + B, K) programs."""
    if units_per_program is None:
        return (*merge_grid(n_rows, n_segments, n_cols, device, cfg), True)
    return units_per_program, sym_max(-(-(n_rows + n_segments) // units_per_program), 1), False
