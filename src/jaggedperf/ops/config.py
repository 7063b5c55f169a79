"""Block and warp choice for the jagged reduction kernels, from coarse buckets.

A config depends only on the row width M, the element size and the device's SM count (read once per
device and cached). It never depends on the total length N or the batch size B, so a new N or B
never triggers a recompile, an autotune pause or a guard under ``torch.compile(dynamic=True)``.

``override`` replaces the bucket table (benchmarks use it to try alternatives); it is a plain
process-wide setting, not meant for concurrent use. Whoever must know when an override starts or ends
(the native launch path, whose plans keep the configs they were made with) says so through
``watch_override``: this module imports nothing of ops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

# SM count assumed for devices that report none (the CPU, where the kernels run in the interpreter).
DEFAULT_SM_COUNT = 4


@dataclass(frozen=True)
class ReduceConfig:
    block_l: int  # rows per tile (power of two)
    block_m: int  # columns per tile (power of two); the grid's second axis is cdiv(M, block_m)
    num_warps: int
    programs_per_sm: int  # target programs over the whole grid ≈ SM count × this
    min_chunk_rows: int  # a chunk holds at least this many rows (multiple of block_l)
    block_p: int = 32  # workspace pieces summed per tile by the combine kernel (power of two)
    combine_warps: int = 0  # the combine kernel's warps (0: num_warps)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_override: ReduceConfig | dict | None = None
_watchers: list[Callable[[bool], None]] = []


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1).

    Args:
        n: an int.

    Returns:
        a power of two.
    """
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _sm_count(device_type: str, index: int) -> int:
    if device_type == "cuda":
        return torch.cuda.get_device_properties(index).multi_processor_count
    return DEFAULT_SM_COUNT


def sm_count(device: torch.device) -> int:
    """SMs of ``device`` (cached per device).

    Args:
        device: any torch device.

    Returns:
        its SM count on CUDA; DEFAULT_SM_COUNT elsewhere.
    """
    if device.type != "cuda":
        return DEFAULT_SM_COUNT
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _sm_count("cuda", index)


def _bucket(n_cols: int, element_size: int) -> ReduceConfig:
    # Chosen from config grids measured on the H200 (docs/performance.md). fp32: wide rows run best with one
    # warp per program and 16-row tiles (many independent 16-byte loads per thread); rows of <= 128 columns
    # with 32-row tiles and 2-4 warps; 16-column rows with 64-row tiles and one warp. 2-byte types: fewer
    # warps or taller tiles, so that each program keeps as many bytes in flight as in fp32.
    if n_cols <= 16:
        block_m = next_pow2(n_cols)
        return ReduceConfig(block_l=max(64, 1024 // block_m), block_m=block_m, num_warps=1, programs_per_sm=32,
                            min_chunk_rows=4 * max(64, 1024 // block_m))
    if n_cols <= 64:
        # fp32: 32 programs per SM (faster than 16 on long sequences, alike at the seed shapes)
        return ReduceConfig(block_l=32, block_m=next_pow2(n_cols), num_warps=2,
                            programs_per_sm=32 if element_size >= 4 else 16, min_chunk_rows=128)
    if n_cols <= 128:
        # 2-byte types: one warp (4 warps are much slower in the bf16 grid)
        return ReduceConfig(block_l=32, block_m=next_pow2(n_cols), num_warps=4 if element_size >= 4 else 1,
                            programs_per_sm=16, min_chunk_rows=128)
    # Wide rows: fp32 16-row tiles, one warp. 2-byte types: 32-row tiles (the same bytes in flight per load as
    # fp32's 16) and two warps (faster than 16-row tiles in the bf16 grid; the 256-column bucket takes the same
    # tile by analogy, unmeasured).
    block_l, warps = (16, 1) if element_size >= 4 else (32, 2)
    if n_cols <= 256:
        # fp32: 8 programs per SM (a little faster than 16 in the fp32 grid)
        return ReduceConfig(block_l=block_l, block_m=next_pow2(n_cols), num_warps=warps,
                            programs_per_sm=8 if element_size >= 4 else 16, min_chunk_rows=4 * block_l)
    return ReduceConfig(block_l=block_l, block_m=256, num_warps=warps, programs_per_sm=8, min_chunk_rows=4 * block_l)


def reduce_config(n_cols: int, dtype: torch.dtype, device: torch.device, few_segments: bool = False) -> ReduceConfig:
    """The chunked kernels' config for rows of ``n_cols`` elements of ``dtype`` on ``device``.

    Args:
        n_cols: M (under torch.compile a SymInt is specialised: M only, never N or B).
        dtype: the values' dtype (its element size picks the bucket).
        device: where the kernels run.
        few_segments: the call has at most ``launch.layout.FEW_SEGMENTS`` segments: the wide combine.

    Returns:
        the bucket's config (with the wide combine for few segments), or the override's while one is set.
    """
    n_cols = int(n_cols)  # under torch.compile this specialises M (the feature width), never N or B
    if isinstance(_override, ReduceConfig):
        return _override
    cfg = _cached_bucket(n_cols, dtype.itemsize) if not few_segments or _override else \
        _cached_wide_combine(n_cols, dtype.itemsize)
    if _override:
        cfg = dataclasses.replace(cfg, **_override)
        if "min_chunk_rows" not in _override:
            cfg = dataclasses.replace(cfg, min_chunk_rows=4 * cfg.block_l)
    return cfg


@functools.lru_cache(maxsize=None)
def _cached_bucket(n_cols: int, element_size: int) -> ReduceConfig:
    return _bucket(n_cols, element_size)


# The combine for few segments, each crossing many chunks (one segment of 2·10^6 × 64 crosses ~4,200): 256 pieces a
# step at 8 warps, not 32 at the bucket's 1-4, took that giant from 275 to 151 µs on the H200 (a row-block probe,
# since removed). Not for many segments: there it cost 3 µs at the seed shape and 26 µs at 10^5
# segments (3,268 programs of 8 warps, each summing at most a piece or two). Its fp32 tile, pieces × BLOCK_M, stays
# within the 256 × 64 measured (64 registers a thread at 8 warps): fewer pieces a step for wider column blocks.
WIDE_COMBINE_PIECES = 256
WIDE_COMBINE_ELEMENTS = 256 * 64
WIDE_COMBINE_WARPS = 8


@functools.lru_cache(maxsize=None)
def _cached_wide_combine(n_cols: int, element_size: int) -> ReduceConfig:
    cfg = _bucket(n_cols, element_size)
    pieces = max(cfg.block_p, min(WIDE_COMBINE_PIECES, WIDE_COMBINE_ELEMENTS // cfg.block_m))
    return dataclasses.replace(cfg, block_p=pieces, combine_warps=WIDE_COMBINE_WARPS)


def set_override(cfg: ReduceConfig | dict | None) -> None:
    """Use ``cfg`` (a whole config, or fields replacing the bucket's) for every call; None restores.

    Args:
        cfg: a ReduceConfig, a dict of ReduceConfig fields, or None.

    Raises:
        ValueError: a dict naming a field ReduceConfig does not have.
    """
    global _override
    if isinstance(cfg, dict):
        unknown = set(cfg) - {f.name for f in dataclasses.fields(ReduceConfig)}
        if unknown:
            raise ValueError(f"override: unknown config fields {sorted(unknown)}")
    _override = cfg
    for watcher in _watchers:
        watcher(cfg is not None)


def watch_override(watcher: Callable[[bool], None]) -> None:
    """Call ``watcher(active)`` now and whenever an override is set (True) or cleared (False).

    Args:
        watcher: a callable taking whether an override is active.
    """
    _watchers.append(watcher)
    watcher(_override is not None)


@dataclass(frozen=True)
class SegmentsConfig:
    """The whole-segments kernel: each program reduces ``group`` whole segments, ``block_l`` rows of each
    per tile (a segment of at most ``block_l`` rows is one load)."""

    group: int  # segments per program (power of two); grid axis 0 = cdiv(B, group)
    block_l: int  # rows per segment per tile (power of two)
    block_m: int  # columns per program (power of two); grid axis 1 = cdiv(M, block_m)
    num_warps: int
    programs: int = 0  # > 0: that many programs on grid axis 0, each looping over groups (many small groups)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# The whole-segments kernel holds group × block_l × block_m fp32 in registers: this many elements at
# most (8192 = 32 KiB per program: with two or three programs per SM, the ~40-100 KiB in flight per SM
# that the H200's DRAM latency asks for, in one round trip). It is used only when every segment takes at
# most SEGMENT_TILES tiles and the grid still has SM-count programs; otherwise the chunked kernels
# (balanced whatever the lengths) run.
SEGMENT_TILE_ELEMENTS = 8192
SEGMENT_TILES = 4
# Tiles whose measured best warp count differs from the rule in whole_segments (2 per 8192 elements).
# (4, 32, 64): with 2 warps ptxas keeps a mean's tile in ~190 registers a thread and issues its loads in
# batches; with 4 warps each thread holds half the tile and the mean runs far faster.
SEGMENT_WARPS_MEASURED = {(4, 32, 64): 4}
# Many small groups (several segments per tile, at least LOOP_GROUPS_PER_PROGRAM groups for each of
# LOOP_PROGRAMS_PER_SM programs per SM): a fixed grid of programs that loop over groups, each loading its
# next group's offsets ahead (faster there than one program per group; 2-16 programs per SM alike). One
# program per group stays elsewhere: at the seed shapes (one segment per group) the looping form is slower.
LOOP_PROGRAMS_PER_SM = 8
LOOP_GROUPS_PER_PROGRAM = 4
LOOP_MIN_GROUP = 4
# The backward of a segment alone in its program and longer than its tile: its rows in programs of this many
# rows each, with this many warps (the best of 8-64 rows × 1-4 warps at the second seed shape).
EXPAND_SPLIT_ROWS = 32
EXPAND_SPLIT_WARPS = 4


def segments_config(n_cols: int, max_seqlen: int, n_segments: int, device: torch.device) -> SegmentsConfig | None:
    """The whole-segments config for rows of ``n_cols`` and sequences of at most ``max_seqlen`` rows.

    Args:
        n_cols: M.
        max_seqlen: the longest sequence's length (a bound on it).
        n_segments: B.
        device: where the kernels run (its SM count sizes the grid).

    Returns:
        the config, or None when the chunked kernels should run instead (long sequences, or too few
        programs). Cached: the eager path asks on every call.
    """
    return whole_segments(int(n_cols), int(max_seqlen), int(n_segments), sm_count(device), SEGMENT_TILE_ELEMENTS)


@functools.lru_cache(maxsize=4096)
def whole_segments(n_cols: int, max_seqlen: int, n_segments: int, sms: int, budget: int) -> SegmentsConfig | None:
    """``segments_config``'s rule with the SM count and the tile budget (elements a program holds) given.

    Args:
        n_cols, max_seqlen, n_segments: as for ``segments_config``.
        sms: the device's SM count.
        budget: the most elements a tile may hold (``SEGMENT_TILE_ELEMENTS`` in production; benchmarks try others).

    Returns:
        the config, or None.
    """
    longest = max(max_seqlen, 1)
    block_m = min(next_pow2(n_cols), 256, budget)
    col_blocks = -(-n_cols // block_m)
    whole = next_pow2(longest)
    block_l = min(whole, max(budget // block_m, 1))
    if -(-longest // block_l) > SEGMENT_TILES:
        return None
    group = max(budget // (block_l * block_m), 1) if block_l == whole else 1
    while group > 1 and -(-n_segments // group) * col_blocks < 4 * sms:  # keep >= 4 programs per SM
        group //= 2
    if -(-n_segments // group) * col_blocks < sms:
        return None
    # 2 warps per 8192-element tile (128 fp32 per thread): the best of 2/4/8/16 on the H200 at both seed
    # shapes and at 65536×16×64
    num_warps = max(1, min(8, group * block_l * block_m // 4096))
    num_warps = SEGMENT_WARPS_MEASURED.get((group, block_l, block_m), num_warps)
    programs = 0
    loop_programs = max(sms * LOOP_PROGRAMS_PER_SM // col_blocks, 1)
    if group >= LOOP_MIN_GROUP and -(-n_segments // group) >= LOOP_GROUPS_PER_PROGRAM * loop_programs:
        programs = loop_programs
    return SegmentsConfig(group=group, block_l=block_l, block_m=block_m, num_warps=num_warps, programs=programs)


@dataclass(frozen=True)
class MergeConfig:
    """The merge-path kernels (``reduce.merge``): tiles, the search, and the grid's size."""

    block_m: int  # columns per program (power of two); grid axis 1 = cdiv(M, block_m)
    block_l: int  # rows per contiguous tile (power of two)
    group: int  # owned segments per gathered tile (power of two)
    seg_rows: int  # rows of each segment per gathered tile (power of two)
    seg_tiles: int  # gathered tiles at most per group: a segment's rows past seg_rows · seg_tiles go contiguous
    window: int  # segments whose offsets a step loads (power of two; a window of one-row or empty segments is one
    # gather when it fits a tile, window <= block_l)
    expand_window: int  # the backward's
    search: int  # probes per step of the boundary search (power of two)
    num_warps: int
    programs_per_sm: int  # programs aimed at over the whole grid ≈ SM count × this
    min_units: int  # a program owns at least this many units (rows + segments)
    block_p: int = 128  # head pieces summed per tile by the combine (its columns are block_m's: one grid for both)
    combine_warps: int = 4

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# The merge-path tiles: (tile elements, warps, window, programs an SM aimed at) by element size and row width. Rows of
# up to 64 columns: 1024-element tiles at one warp (32 a lane: no cross-warp step in any reduction); wider rows
# 4096-element tiles at 4 warps (16 rows of 256 fp32: the bytes a program of the balanced chunks' 16 × 256 tile, which
# measured best for wide rows). Compiled for sm_90 by Triton 3.6.0 (the H200's) they take 125-168 registers a lane:
# 12-16 one-warp programs resident an SM, 3-4 of 4 warps. Every program has the same share of units, so the grid
# aims at one wave or less; on the H200 (benchmarks/results/h200/merge-path.md) fp32 rows of 32-64 columns ran 8-26% faster at
# 8 programs an SM than at 16 (16 is 1.33 waves at 166 registers) and rows of <= 16 columns 26-35% slower at 6 than
# at 12; a 128-segment window took the 95%-empty 10^6 × 16 batch from 105 to 95 µs and a 64-segment one the
# 1024 × 256 rows from 224 to 167 µs. fp32 rows of more than 64 columns: 4096-element tiles at 2 warps, 4 programs an
# SM (246 registers a lane on Triton 3.6: 4 resident; sixteen 128-bit loads of a tile in flight a lane). The
# 4096-element tile at 8 warps and 3 an SM ran the *mean* at 1.0-2.3x the sum on the same bytes, though both compile to
# the same registers and load runs (benchmarks/results/h200/merge-tiles-wide.md); 2048/4/4 fixed that (sum and mean
# within 2%), and 4096/2/4, the tile that made the bf16 rows 1.3-2x faster, ran 1.3-6.2% faster than 2048/4/4 on all
# ten fp32 shapes of one H100 run, sum and mean within 1%, at 0.85-1.01x the balanced chunks
# (benchmarks/results/h100/merge-tiles-wide.md).
# bf16 rows of more than 64 columns: 4096-element tiles at 2 warps, 4 programs an SM (254-255 registers a lane on
# Triton 3.6: 4 resident; eight 128-bit loads of a tile in flight a lane). The 4096/4 tile aimed at 3 takes 218-222
# registers, 2 resident: 1.5 waves; aimed at 2, one wave. Over ten bf16 shapes in one run (H100,
# benchmarks/results/h100/merge-tiles-wide-bf16.md) 4096/2/4 ran 1.16-1.73x faster than 4096/4/2 and 1.31-2.03x than
# 4096/4/3 (chosen on these ten: the fastest on each), sum and mean within 1%, at 0.63-1.21x the balanced chunks (4096
# x 512: 570 against 554 us).
MERGE_EXPAND_WINDOW = 64  # the backward's window at most (its stores measured at 64 on the H200; 128 not measured)
MERGE_SEARCH = 128  # probes a bound a step: B = 10^4 in 2 dependent steps, 2·10^6 in 3
MERGE_TILES = {  # (element size, column bucket) -> (elements, warps, window, programs an SM)
    (4, "narrow"): (1024, 1, 128, 12), (4, "mid"): (1024, 1, 64, 8), (4, "wide"): (4096, 2, 64, 4),
    (2, "narrow"): (1024, 1, 64, 12), (2, "mid"): (1024, 1, 64, 12), (2, "wide"): (4096, 2, 64, 4)}
# The backward's stores keep the tiles they were measured at (the forward's wide tiles are not measured for them; its
# kernel takes 72-96 registers a lane at 4096 elements and 4 warps, 5-7 programs an SM resident: one wave either way).
MERGE_EXPAND_TILES = {**MERGE_TILES, (4, "wide"): (4096, 4, 64, 3), (2, "wide"): (4096, 4, 64, 3)}


def merge_config(n_cols: int, dtype: torch.dtype) -> MergeConfig:
    """The merge-path kernels' config for rows of ``n_cols`` elements of ``dtype``.

    The gathered tile (group × seg_rows × block_m) and the contiguous one (block_l × block_m) hold the same
    elements. Narrow rows take 16 rows of each segment per gathered tile (the narrow class's 4-12-row segments
    in one load), wider rows fewer, so that a tile still spans several segments.

    Args:
        n_cols: M (specialised under torch.compile, never N or B).
        dtype: the values' dtype (its element size sets the tile's elements).

    Returns:
        the config (cached).
    """
    return _merge_bucket(int(n_cols), dtype.itemsize, False)


def merge_expand_config(n_cols: int, dtype: torch.dtype) -> MergeConfig:
    """``merge_config`` for the backward (``MERGE_EXPAND_TILES``)."""
    return _merge_bucket(int(n_cols), dtype.itemsize, True)


# Odd M (masked columns, scalar accesses) takes 206-255 registers a lane in the forward's one-warp tiles on Triton 3.6
# (M = 1, 3, 5, 7, 9, 15 in fp32 and bf16, 17 and 33 in bf16; even M 128-168), which leaves 8-9 programs an SM: the
# grid aims at no more (12 would be 1.33-1.5 waves). Measured on ten odd-M shapes in one H100 run (fp32 and bf16,
# benchmarks/results/h100/merge-tiles-odd.md): aim 8 the fastest of 6, 8, 10, 12, 16 on all ten, 1.19-1.33x faster
# than 12. The backward's one-warp tiles at odd M take 166 registers on Triton 3.6 (12 resident) but 228 on Triton
# 3.7 (8): it aims at 8 as well (on the H100 with Triton 3.6, against 12: faster on 7 of the ten shapes, 1.12x slower
# on the all-ones one). Offline sm_90 compiles, checked in CPU CI (merge_compile).
ODD_M_PROGRAMS = 8


@functools.lru_cache(maxsize=None)
def _merge_bucket(n_cols: int, element_size: int, backward: bool) -> MergeConfig:
    block_m = min(next_pow2(n_cols), 256)
    bucket = "narrow" if block_m <= 16 else "mid" if block_m <= 64 else "wide"
    tiles = MERGE_EXPAND_TILES if backward else MERGE_TILES
    elements, warps, window, programs = tiles[(min(element_size, 4), bucket)]
    if n_cols % 2 and warps == 1:
        programs = min(programs, ODD_M_PROGRAMS)
    return merge_tiles(n_cols, elements, warps, window, programs)


def merge_tiles(n_cols: int, elements: int, warps: int, window: int, programs: int) -> MergeConfig:
    """The merge-path config of rows of ``n_cols`` columns for one ``MERGE_TILES`` entry (tile elements, warps,
    window, programs an SM): ``merge_config``'s, and a benchmark's variants of it."""
    block_m = min(next_pow2(n_cols), 256)
    rows = max(elements // block_m, 1)  # rows of a contiguous tile
    seg_rows = min(16 if block_m <= 8 else 8 if block_m <= 32 else 4, rows)
    return MergeConfig(block_m=block_m, block_l=rows, group=max(rows // seg_rows, 1), seg_rows=seg_rows, seg_tiles=4,
                       window=window, expand_window=min(window, MERGE_EXPAND_WINDOW), search=MERGE_SEARCH,
                       num_warps=warps, programs_per_sm=programs, min_units=16,
                       block_p=max(8192 // block_m, 16), combine_warps=4)


@dataclass(frozen=True)
class SplitConfig(MergeConfig):
    """The split reduction (``reduce.split``): the merge path's fields for the long segments' role (its grid, search,
    windows and tiles), and the whole-segments role's tile. The grid is the merge path's, so the native path replays it
    as a merge plan (``launch.plan.Plan.native_plan``); its axis 2 holds the two roles."""

    tile: int = 8192  # elements of the whole-segments role's (GROUP, ROWS, BLOCK_M) tile (power of two)
    tiles: int = 4  # a segment of more than ROWS·tiles rows is long: the merge role takes it
    rows_cap: int = 256  # the most rows of each segment a whole-segments tile holds (power of two)
    whole_programs_per_sm: int = 4  # the whole-first arrangement's whole-segments launch (plan.plan_whole_first)
    whole_groups_max: int = 0  # ... > 0: it serves only where no program takes more groups (else the merge path)

    @property
    def row_options(self) -> tuple[int, ...]:
        """The whole-segments tile's rows per segment the kernel chooses from on the device (by N / B): 1, 4, 16, ...
        up to the cap (``tile // block_m`` at most), the cap included."""
        cap = max(min(self.rows_cap, self.tile // self.block_m), 1)
        options, rows = [], 1
        while rows < cap:
            options.append(rows)
            rows *= 4
        return (*options, cap)


# The split reduction's tiles, by element size: (tile elements, warps, programs an SM aimed at, long-role tile
# elements). Two roles share a kernel (grid axis 2), so an SM holds 2 × programs_per_sm programs: one wave at the
# registers the offline sm_90 compile reports (tests/ops/test_merge_compile.py). The whole-segments tile keeps 16 KB
# of a program's rows in flight, as the whole-segments kernel's 8192-element fp32 tile does at half the programs; the
# long role's contiguous and gathered tiles hold 32 elements a lane, as the merge path's.
SPLIT_TILES = {4: (8192, 2, 2, 2048), 2: (8192, 2, 2, 2048)}
SPLIT_TILES_PER_SEGMENT = 4


def split_config(n_cols: int, dtype: torch.dtype) -> SplitConfig:
    """The split reduction's config for rows of ``n_cols`` elements of ``dtype`` (cached; M specialised under
    torch.compile, never N or B: the whole-segments tile's shape is chosen on the device from N / B).

    Args:
        n_cols: M.
        dtype: the values' dtype.

    Returns:
        the config.
    """
    return _split_bucket(int(n_cols), dtype.itemsize)


@functools.lru_cache(maxsize=None)
def _split_bucket(n_cols: int, element_size: int) -> SplitConfig:
    tile, warps, programs, long_tile = SPLIT_TILES[min(element_size, 4)]
    block_m = min(next_pow2(n_cols), 256)
    long_rows = max(long_tile // block_m, 1)
    seg_rows = min(16 if block_m <= 8 else 8 if block_m <= 32 else 4, long_rows)
    window = 128 if block_m <= 16 else 64
    return SplitConfig(block_m=block_m, block_l=long_rows, group=max(long_rows // seg_rows, 1), seg_rows=seg_rows,
                       seg_tiles=4, window=window, expand_window=min(window, MERGE_EXPAND_WINDOW), search=MERGE_SEARCH,
                       num_warps=warps, programs_per_sm=programs, min_units=16, block_p=max(8192 // block_m, 16),
                       combine_warps=4, tile=max(tile, block_m), tiles=SPLIT_TILES_PER_SEGMENT)


@contextlib.contextmanager
def override(cfg: ReduceConfig | dict | None = None, **fields):
    """``with override(block_l=64, num_warps=2): ...`` — temporarily replace the bucket choice.

    Args:
        cfg: a whole ReduceConfig or a dict of fields (as ``set_override``), or None to use ``fields``.
        fields: ReduceConfig fields replacing the bucket's.

    Raises:
        ValueError: a field ReduceConfig does not have.
    """
    previous = _override
    set_override(cfg if cfg is not None else (fields or None))
    try:
        yield
    finally:
        set_override(previous)
