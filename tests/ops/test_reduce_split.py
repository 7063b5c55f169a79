"""The split kernels (``ops.reduce.split``: whole segments sized on the device by N / B beside the merge path for the
long ones) against the float64 reference under TRITON_INTERPRET=1: the forward (split + combine) and the backward,
at the production config and at tiny ones whose tiles, limits, windows and search steps are smaller than the batches
(so every path runs: each option of rows per segment, segments past one tile, long segments beside short ones, long
ones cut at program edges and combined over several programs, the long role's flat, gathered and contiguous tiles),
outputs and workspace poisoned so an unwritten element fails.

The interpreter runs each program in Python (~40 ms a program and role): every batch here is a few hundred rows at
most and its K keeps the grid at <= 10 programs, so the file stays within seconds of CI time."""

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers.interpret import needs_interpreter
from helpers.reduce_cases import expected, make
from helpers.reference import assert_matches, reference_expand

from jaggedperf.ops import testing
from jaggedperf.ops.config import SplitConfig, split_config
from jaggedperf.ops.reduce import merge, split

FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16
I32, I64 = torch.int32, torch.int64
# The merge path's tiny tiles (tests/ops/test_reduce_merge.py) for the long role; whole-segments tiles of 1, 4 or 16
# rows a segment (options (1, 4, 16)), a segment of more than 2 × those rows is long (LIMIT 2, 8 or 32).
TINY = SplitConfig(block_m=128, block_l=8, group=2, seg_rows=2, seg_tiles=2, window=8, expand_window=4, search=4,
                   num_warps=1, programs_per_sm=1, min_units=1, block_p=2, tile=2048, tiles=2, rows_cap=16)
# one option alone (1 row a segment): every segment of more than 2 rows is long
ONE_ROW = dataclasses.replace(TINY, rows_cap=1)


def _lengths(kind: str, seed: int = 7) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    if kind == "bimodal":  # 60 of 1-2 rows and 2 of 15: mean ~1.9, the 4-row option, LIMIT 8 (TINY)
        short = torch.randint(1, 3, (60,), generator=gen).tolist()
        return short[:30] + [15] + short[30:] + [15]
    if kind == "95pct-empty":  # N < B: the one-row option
        lengths = torch.randint(1, 9, (80,), generator=gen)
        return lengths.masked_fill(torch.rand(80, generator=gen) < 0.95, 0).tolist()
    if kind == "even-long":  # mean ~12: the 16-row option, segments past one tile
        return torch.randint(6, 19, (12,), generator=gen).tolist()
    if kind == "power-law":
        return torch.floor(2 * torch.rand(40, generator=gen).clamp_min(1e-3).pow(-1 / 1.5)).clamp(max=40).long() \
            .tolist()
    raise ValueError(kind)


# (id, lengths, M, dtype, offsets dtype, empty mean (nan/zero), config, K, the backward's mean)
CASES = [
    ("B0-M3-production", [], 3, FP32, I64, "nan", None, None, True),
    ("all-empty-M5-bf16-zero-production", [0] * 5, 5, BF16, I64, "zero", None, None, False),
    ("all-ones-M24-fp16-i32-production", [1] * 40, 24, FP16, I32, "nan", None, None, True),
    # one segment of 300 rows among empties: long at the production config (LIMIT 256), cut over its 8 programs
    ("one-giant-M3-production", [0] * 3 + [300] + [0] * 3, 3, FP32, I64, "nan", None, None, True),
    # 60 rows over ~8 one-unit-wide programs, combined over several; flat, gathered and contiguous long-role tiles
    ("one-giant-M3-tiny-K8", [0, 0, 60, 0, 0], 3, FP32, I64, "nan", TINY, 8, False),
    ("bimodal-M1-zero-tiny-K23", _lengths("bimodal"), 1, FP32, I64, "zero", TINY, 23, True),
    ("even-long-M129-bf16-i32-zero-tiny-K27", _lengths("even-long"), 129, BF16, I32, "zero", TINY, 27, True),
    ("M1000-bf16-empty-production", [3, 0, 5, 2], 1000, BF16, I64, "nan", None, None, False),
    ("power-law-M24-production", _lengths("power-law"), 24, FP32, I64, "nan", None, None, True),
    ("95pct-empty-M3-fp16-one-row-K13", _lengths("95pct-empty"), 3, FP16, I64, "nan", ONE_ROW, 13, True),
    # one-unit programs: every long segment cut at every row, its pieces combined over all of them
    ("lead-trail-M3-fp16-i32-zero-one-row-K1", [0, 0, 3, 1, 0, 0], 3, FP16, I32, "zero", ONE_ROW, 1, False),
]


def poison_for(mean: bool, empty_zero: bool) -> float:
    # NaN where a NaN answer is impossible, else a wrong finite value
    return 12345.0 if (mean and not empty_zero) else float("nan")


def run_reduce(values, offsets, mean, empty_zero=False, cfg=None, units=None, poison=None, whole_first=False):
    path = {"whole_first": cfg or True} if whole_first else {"split": cfg or True}
    return testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, rows_per_chunk=units,
                                 poison=poison, **path)


def run_expand(grad, offsets, n_rows, mean, cfg=None, units=None, poison=None):
    return testing.launch_expand(grad, offsets, n_rows, mean=mean, split=cfg or True, rows_per_chunk=units,
                                 poison=poison)


def check(lengths, M, dtype, offsets_dtype, empty_zero, cfg, units, back_mean, seed=0):
    """Sum and mean forward, and the backward (mean or sum), against float64."""
    values, offsets = make(lengths, M, dtype, offsets_dtype, seed=seed)
    for mean in (False, True):
        out = run_reduce(values, offsets, mean, empty_zero, cfg, units, poison_for(mean, empty_zero))
        ref, scale = expected(values, offsets, mean, empty_zero)
        assert_matches(out, ref, dtype, scale=scale, what=f"{'mean' if mean else 'sum'} K={units} {lengths}")
    grad = torch.randn(len(lengths), M, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    back = run_expand(grad, offsets, values.shape[0], back_mean, cfg, units, poison=float("nan"))
    assert_matches(back, reference_expand(grad, offsets, values.shape[0], mean=back_mean), dtype,
                   what=f"expand mean={back_mean} K={units} {lengths}")


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,cfg,units,back_mean",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_split_matches_reference(lengths, M, dtype, offsets_dtype, empty, cfg, units, back_mean):
    check(lengths, M, dtype, offsets_dtype, empty == "zero", cfg, units, back_mean)


# and 20 segments of 8-15 rows at TINY's 16-row option (GROUP 1): more groups than the interpreter's 16 first-launch
# programs, so the routed call takes the merge path
WHOLE_FIRST_CASES = CASES + [("routed-to-merge-M5-tiny-K29", list(range(8, 16)) * 2 + [9, 15, 11, 8], 5, FP32, I64,
                              "nan", TINY, 29, True)]


@needs_interpreter
@pytest.mark.parametrize("groups_max", [0, 1], ids=["always", "routed"])
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,cfg,units", [case[1:-1] for case in WHOLE_FIRST_CASES],
                         ids=[case[0] for case in WHOLE_FIRST_CASES])
def test_whole_first_matches_reference(lengths, M, dtype, offsets_dtype, empty, cfg, units, groups_max):
    # the same two roles as two launches (plan.plan_whole_first): the long role runs only where a whole-segments
    # program saw a long segment; its flags are poisoned too (-7: a flag left unwritten skips the long role). Routed
    # (one group a program at most, else the merge path): batches of more segments than the first launch's programs
    # hold at TINY's groups take the merge path, the others the whole role
    values, offsets = make(lengths, M, dtype, offsets_dtype, seed=0)
    cfg = dataclasses.replace(cfg or split_config(M, dtype), whole_groups_max=groups_max)
    for mean in (False, True):
        out = run_reduce(values, offsets, mean, empty == "zero", cfg, units, poison_for(mean, empty == "zero"),
                         whole_first=True)
        ref, scale = expected(values, offsets, mean, empty == "zero")
        assert_matches(out, ref, dtype, scale=scale, what=f"whole-first {'mean' if mean else 'sum'} {lengths}")


@needs_interpreter
def test_whole_first_routes_on_the_device_by_groups_a_program():
    import triton
    import triton.language as tl

    @triton.jit
    def route_kernel(out_ptr, n_rows, n_segments, n_whole, BLOCK_M: tl.constexpr, TILE: tl.constexpr,
                     TILES: tl.constexpr, ROWS_CAP: tl.constexpr, N_OPTS: tl.constexpr, GROUPS_MAX: tl.constexpr):
        choice, _ = split._split_choice(n_rows, n_segments, ROWS_CAP, N_OPTS, TILES)
        tl.store(out_ptr, split._whole_route(choice, n_segments, n_whole, BLOCK_M, TILE, ROWS_CAP, N_OPTS,
                                             GROUPS_MAX).to(tl.int32))

    got = torch.zeros(1, dtype=torch.int32)
    cfg = split_config(64, FP32)  # rows options (1, 4, 16, 64, 128), 8192-element tiles of 64 columns
    for n_rows, n_segments, n_whole, groups_max in ((41_000, 512, 528, 1), (41_000, 512, 100, 1), (10**5, 10**5, 528, 1),
                                                    (10**5, 10**5, 528, 0), (6400, 1000, 528, 1), (6400, 1000, 528, 2)):
        rows = choice(n_rows, n_segments, cfg)[0]
        group = cfg.tile // (rows * cfg.block_m)
        per_group = min(max(-(-n_segments // n_whole), 1), group)
        expected_route = groups_max == 0 or -(-n_segments // per_group) <= groups_max * n_whole
        route_kernel[(1,)](got, n_rows, n_segments, n_whole, cfg.block_m, cfg.tile, cfg.tiles, cfg.row_options[-1],
                           len(cfg.row_options), groups_max)
        assert bool(got) == expected_route, (n_rows, n_segments, n_whole, groups_max)


@st.composite
def batches(draw):
    """Short batches of a mixture of lengths (empty, one row, short, long), any M of 1, 3, 24, a dtype, an empty mode,
    TINY or ONE_ROW, and K keeping the grid at <= 8 programs."""
    kinds = st.sampled_from([0, 1, 2, 3, 4, 20, 35])
    lengths = draw(st.lists(kinds, min_size=0, max_size=14))
    M = draw(st.sampled_from([1, 3, 24]))
    dtype = draw(st.sampled_from([FP32, BF16, FP16]))
    cfg = draw(st.sampled_from([TINY, ONE_ROW]))
    units = max(draw(st.integers(1, 12)), -(-(sum(lengths) + len(lengths)) // 8))
    return lengths, M, dtype, draw(st.sampled_from([I32, I64])), draw(st.booleans()), cfg, units, draw(st.booleans())


@needs_interpreter
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches())
def test_split_matches_reference_on_any_mixture_of_lengths(batch):
    check(*batch, seed=len(batch[0]))


@needs_interpreter
def test_split_repeats_bitwise():
    # no atomics, every piece combined in program order: repeats are bitwise equal
    values, offsets = make(_lengths("bimodal"), 3, FP32, I64, seed=3)
    first = run_reduce(values, offsets, True, False, TINY, 23)
    again = run_reduce(values, offsets, True, False, TINY, 23)
    assert torch.equal(first.view(torch.int32), again.view(torch.int32)), "repeats differ bitwise"


def choice(n_rows: int, n_segments: int, cfg: SplitConfig) -> tuple[int, int]:
    """``split._split_choice`` in Python: (the option's rows per segment, LIMIT): the smallest option >= 1.5 × N / B
    (the first where N <= B), the last where none is."""
    options = cfg.row_options
    if n_rows <= n_segments:
        pick = 0
    else:
        pick = next((i for i in range(1, len(options) - 1) if 3 * n_rows <= 2 * options[i] * n_segments),
                    len(options) - 1)
    return options[pick], options[pick] * cfg.tiles


@needs_interpreter
def test_the_device_chooses_the_rows_per_segment_from_n_over_b():
    import triton
    import triton.language as tl

    @triton.jit
    def limit_kernel(out_ptr, n_rows, n_segments, ROWS_CAP: tl.constexpr, N_OPTS: tl.constexpr, TILES: tl.constexpr):
        _, limit = split._split_choice(n_rows, n_segments, ROWS_CAP, N_OPTS, TILES)
        tl.store(out_ptr, limit)

    got = torch.zeros(1, dtype=torch.int64)
    for cfg in (split_config(8, FP32), split_config(64, FP32), TINY, ONE_ROW):
        for n_rows, n_segments in ((0, 0), (0, 5), (10, 10), (11, 10), (40, 10), (60, 10), (61, 10), (10**6, 1),
                                   (1000, 10), (2000, 10), (10**9, 10**6)):
            limit_kernel[(1,)](got, n_rows, n_segments, cfg.row_options[-1], len(cfg.row_options), cfg.tiles)
            assert int(got) == choice(n_rows, n_segments, cfg)[1], (cfg.row_options, n_rows, n_segments)


def test_row_options_are_powers_of_four_then_the_cap():
    # the cap is min(rows_cap, tile // block_m): the largest option holds one segment a tile (GROUP 1)
    assert split_config(8, FP32).row_options == (1, 4, 16, 64, 256)
    assert split_config(64, FP32).row_options == (1, 4, 16, 64, 128)
    assert split_config(1000, FP32).row_options == (1, 4, 16, 32)
    assert TINY.row_options == (1, 4, 16) and ONE_ROW.row_options == (1,)
    for M in (1, 3, 8, 24, 64, 129, 1000, 4096):
        for dtype in (FP32, BF16, FP16):
            cfg = split_config(M, dtype)
            assert all(cfg.tile // (rows * cfg.block_m) >= 1 for rows in cfg.row_options)


def test_split_kernels_use_no_atomics():
    from pathlib import Path

    for module in (split, merge):
        source = Path(module.__file__).read_text()
        assert "tl.atomic" not in source, module.__name__
