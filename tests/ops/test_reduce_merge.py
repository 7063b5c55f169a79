"""The merge-path kernels (``ops.reduce.merge``) against the float64 reference under TRITON_INTERPRET=1: the forward
(reduce + combine) and the backward (expand), at the production config and at a tiny one whose windows, groups,
gathered tiles and search steps are smaller than the batches (so every path runs: flat windows, empties stored by
window, several groups a window, segments past their gathered rows, heads and tails cut at program edges, pieces
combined over several programs), outputs and workspace poisoned so an unwritten element fails."""

import pytest
import torch
from helpers.interpret import needs_interpreter
from helpers.reduce_cases import CASES, IDS, expected, make
from helpers.reference import assert_matches, lengths_to_offsets, reference_expand

from jaggedperf.ops import testing
from jaggedperf.ops.config import MergeConfig
from jaggedperf.ops.reduce import kernels, merge, plan

FP32, BF16 = torch.float32, torch.bfloat16
# windows of 8 segments, groups of 2, 2 rows a gathered tile, 2 tiles (a segment past 4 rows goes contiguous), 4 probes
# a search step, 2 head pieces a combine step (128 columns a program: few column blocks, the interpreter's cost)
TINY = MergeConfig(block_m=128, block_l=8, group=2, seg_rows=2, seg_tiles=2, window=8, expand_window=4, search=4,
                   num_warps=1, programs_per_sm=1, min_units=1, block_p=2)
# (config, units per program K): production sizes; tiny tiles with one-unit programs (every segment cut at every
# row: the combine's longest walks) and with 7-unit programs
PATHS = [(None, None), (TINY, 1), (TINY, 7)]
PATH_IDS = ["production", "tiny-K1", "tiny-K7"]


def poison_for(mean: bool, empty_zero: bool) -> float:
    # NaN where a NaN answer is impossible, else a wrong finite value
    return 12345.0 if (mean and not empty_zero) else float("nan")


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES, ids=IDS)
@pytest.mark.parametrize("cfg,units", PATHS, ids=PATH_IDS)
def test_merge_reduce_matches_reference(cfg, units, lengths, M, dtype, offsets_dtype, empty, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    empty_zero = empty == "zero"
    for mean in (False, True):
        out = testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, merge=cfg or True,
                                    rows_per_chunk=units, poison=poison_for(mean, empty_zero))
        ref, scale = expected(values, offsets, mean, empty_zero)
        assert_matches(out, ref, dtype, scale=scale, what=f"{'mean' if mean else 'sum'} {cfg} K={units}")


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES[::2], ids=IDS[::2])
@pytest.mark.parametrize("cfg,units", PATHS, ids=PATH_IDS)
def test_merge_expand_matches_reference(cfg, units, lengths, M, dtype, offsets_dtype, empty, note):
    _, offsets = make(lengths, M, dtype, offsets_dtype)
    n_rows = int(offsets[-1])
    grad = torch.randn(len(lengths), M).to(dtype)
    for mean in (False, True):
        out = testing.launch_expand(grad, offsets, n_rows, mean=mean, merge=cfg or True, rows_per_chunk=units,
                                    poison=float("nan"))
        assert_matches(out, reference_expand(grad, offsets, n_rows, mean=mean), dtype, what=f"expand mean={mean}")


@needs_interpreter
@pytest.mark.parametrize("n_pieces", [5, 16, 17, 40])
@pytest.mark.parametrize("cfg", [None, TINY], ids=["production", "tiny"])
def test_combine_one_step_and_the_counted_steps(n_pieces, cfg):
    # K = 1: a segment of n - 1 rows is n units, so its owner's tail and n - 1 heads. Up to COMBINE_STEP_P heads the
    # combine takes one small tile, past it BLOCK_P a step (production: 2048 at M = 3, one step; TINY: 2, many), the
    # count from the segment's last row: fewer heads than the small tile, as many, one more, and many more
    assert int(merge.COMBINE_STEP_P) == 16
    lengths = [2, n_pieces - 1, 0, 3, n_pieces + 2, 1]
    values, offsets = make(lengths, 3, FP32, torch.int64)
    for mean in (False, True):
        out = testing.launch_reduce(values, offsets, mean=mean, merge=cfg or True, rows_per_chunk=1,
                                    poison=poison_for(mean, False))
        ref, scale = expected(values, offsets, mean, False)
        assert_matches(out, ref, FP32, scale=scale, what=f"{n_pieces} pieces {'mean' if mean else 'sum'}")


def _distribution(name: str) -> list[int]:
    gen = torch.Generator().manual_seed(7)
    if name == "all-ones":
        return [1] * 150
    if name == "95pct-empty":
        lengths = torch.randint(1, 9, (200,), generator=gen)
        return lengths.masked_fill(torch.rand(200, generator=gen) < 0.95, 0).tolist()
    if name == "bimodal":
        short = torch.randint(1, 5, (40,), generator=gen)
        return torch.where(torch.rand(40, generator=gen) < 0.1, torch.randint(20, 40, (40,), generator=gen),
                           short).tolist()
    if name == "one-holds-all":
        return [0] * 10 + [150] + [0] * 10
    raise ValueError(name)


DISTRIBUTIONS = ["all-ones", "95pct-empty", "bimodal", "one-holds-all"]


@needs_interpreter
@pytest.mark.parametrize("name", DISTRIBUTIONS)
@pytest.mark.parametrize("cfg,units", [(None, None), (TINY, 5)], ids=["production", "tiny-K5"])
def test_merge_over_length_distributions(name, cfg, units):
    # one-row windows (the flat gather), windows of mostly empty segments (their vector store and the gathered rest),
    # short segments beside long ones, one segment over every program; forward and backward, bitwise repeats
    lengths = _distribution(name)
    values, offsets = make(lengths, 4, FP32, torch.int64, seed=3)
    out = testing.launch_reduce(values, offsets, mean=True, merge=cfg or True, rows_per_chunk=units,
                                poison=12345.0)
    ref, scale = expected(values, offsets, True, False)
    assert_matches(out, ref, FP32, scale=scale, what=name)
    again = testing.launch_reduce(values, offsets, mean=True, merge=cfg or True, rows_per_chunk=units)
    assert torch.equal(out.view(torch.int32), again.view(torch.int32)), "repeats differ bitwise"
    grad = torch.randn(len(lengths), 4)
    back = testing.launch_expand(grad, offsets, values.shape[0], mean=True, merge=cfg or True,
                                 rows_per_chunk=units, poison=float("nan"))
    assert_matches(back, reference_expand(grad, offsets, values.shape[0], mean=True), FP32, what=f"{name} expand")


@needs_interpreter
def test_merge_kernels_stay_in_bounds_on_invalid_offsets():
    # offsets far outside values (negative, past N, decreasing): unspecified values, no fault, every loop ends
    values = torch.randn(6, 3)
    offsets = torch.tensor([0, -10**12, 10**12, 3, 2**40], dtype=torch.int64)
    for cfg, units in PATHS:
        out = testing.launch_reduce(values, offsets, mean=True, merge=cfg or True, rows_per_chunk=units)
        assert out.shape == (4, 3)
        back = testing.launch_expand(out.nan_to_num(), offsets, 6, mean=True, merge=cfg or True, rows_per_chunk=units)
        assert back.shape == (6, 3)


@needs_interpreter
def test_merge_bounds_split_units_evenly_whatever_the_lengths():
    # s(d) = #{s < B: offsets[s] + s < d} for every d in [0, N + B], by the guess and the k-ary search of 4 probes a
    # step, against a direct count: valid offsets of every kind (empties, one long segment, all ones; lengths far
    # from even, where the guess's probes miss on either side); then invalid offsets: every answer still in [0, B]
    import triton
    import triton.language as tl

    @triton.jit
    def bounds_kernel(offsets_ptr, out_ptr, n_rows, n_segments, SEARCH: tl.constexpr):
        d = tl.program_id(0).to(tl.int64)
        s0, s1 = merge._merge_bounds(offsets_ptr, n_rows, n_segments, d, n_rows + n_segments - d, SEARCH)
        tl.store(out_ptr + 2 * d, s0)
        tl.store(out_ptr + 2 * d + 1, s1)

    skewed = [0] * 20 + [60] + [1] * 20 + [0] * 9 + [25, 25]
    for lengths in ([], [0, 0], [5], [0, 9, 0, 0, 1], [1] * 13, [3, 0, 7, 2, 0, 0, 11, 1], skewed, skewed[::-1]):
        offsets = lengths_to_offsets(lengths, torch.int64)
        n, b = int(offsets[-1]), len(lengths)
        got = torch.full((2 * (n + b + 1),), -1, dtype=torch.int64)
        bounds_kernel[(n + b + 1,)](offsets, got, n, b, 4)
        for d in range(n + b + 1):  # both lanes of the search: d, and N + B - d
            for lane, at in ((0, d), (1, n + b - d)):
                want = sum(1 for s in range(b) if int(offsets[s]) + s < at)
                assert int(got[2 * d + lane]) == want, (lengths, at)
    for offsets in ([0, 50, 3, 9, 2, 40], [7, 1, 0, 0, 30], [0, -5, 12, 4]):
        offsets = torch.tensor(offsets, dtype=torch.int64)
        n, b = 40, len(offsets) - 1
        got = torch.full((2 * (n + b + 1),), -1, dtype=torch.int64)
        bounds_kernel[(n + b + 1,)](offsets, got, n, b, 4)
        assert bool(((got >= 0) & (got <= b)).all()), (offsets.tolist(), got.tolist())


@needs_interpreter
def test_the_guess_step_finds_even_lengths_bounds_at_once_and_narrows_the_rest():
    # _guess_step alone (4 probes a bound): where the lengths are even the answer comes back exact (lo = hi), so the
    # k-ary loop takes no step; where they are not, [lo, hi] still holds the answer inside the bounds it was given
    import triton
    import triton.language as tl

    @triton.jit
    def guess_kernel(offsets_ptr, out_ptr, n_rows, n_segments, SEARCH: tl.constexpr):
        d = tl.program_id(0).to(tl.int64)
        e = n_rows + n_segments - d
        lo0, hi0, lo1, hi1 = merge._guess_step(offsets_ptr, n_rows, n_segments, d, e, tl.maximum(d - n_rows, 0),
                                               tl.minimum(d, d * 0 + n_segments), tl.maximum(e - n_rows, 0),
                                               tl.minimum(e, e * 0 + n_segments), SEARCH)
        tl.store(out_ptr + 4 * d, lo0)
        tl.store(out_ptr + 4 * d + 1, hi0)
        tl.store(out_ptr + 4 * d + 2, lo1)
        tl.store(out_ptr + 4 * d + 3, hi1)

    for lengths, even in (([3] * 40, True), ([0, 0, 1] * 20, True), ([0] * 20 + [60] + [1] * 20, False)):
        offsets = lengths_to_offsets(lengths, torch.int64)
        n, b = int(offsets[-1]), len(lengths)
        got = torch.full((4 * (n + b + 1),), -1, dtype=torch.int64).view(-1, 4)
        guess_kernel[(n + b + 1,)](offsets, got, n, b, 4)
        exact = 0
        for d in range(n + b + 1):
            for (lo, hi), at in (((got[d, 0], got[d, 1]), d), ((got[d, 2], got[d, 3]), n + b - d)):
                want = sum(1 for s in range(b) if int(offsets[s]) + s < at)
                assert max(0, at - n) <= int(lo) <= want <= int(hi) <= min(at, b), (lengths, at, int(lo), int(hi))
                exact += int(lo) == int(hi)
        assert (exact == 2 * (n + b + 1)) if even else (exact < 2 * (n + b + 1)), (lengths, exact)


def test_without_max_seqlen_the_merge_path_plans_both_ways():
    values, offsets = make([3, 0, 7, 1], 5, FP32, torch.int64)
    launches = plan.plan_reduce(values, offsets, mean=True, empty_zero=False).launches
    assert [step.kernel for step in launches] == [merge._merge_reduce_kernel, merge._merge_combine_kernel]
    back = plan.plan_expand(torch.randn(4, 5), offsets, values.shape[0], mean=True).launches
    assert [step.kernel for step in back] == [merge._merge_expand_kernel]
    # a max_seqlen past the whole-segments tiles: the forward takes the balanced chunks, the backward the merge path
    long_values, long_offsets = make([3000, 2], 5, FP32, torch.int64)
    launches = plan.plan_reduce(long_values, long_offsets, mean=True, empty_zero=False, max_seqlen=3000).launches
    assert launches[0].kernel is kernels._reduce_kernel
    back = plan.plan_expand(torch.randn(2, 5), long_offsets, 3002, mean=True, max_seqlen=3000).launches
    assert [step.kernel for step in back] == [merge._merge_expand_kernel]


def test_merge_grid_comes_from_n_plus_b_and_the_config_alone():
    # P ≈ SMs × programs_per_sm whatever the lengths; K = cdiv(N + B, P) units, at least min_units; every unit owned
    cfg = testing.merge_config(64, FP32)
    device = torch.device("cpu")
    for n_rows, n_segments in ((0, 0), (0, 10**6), (10**6, 1), (2 * 10**6, 10**6), (17, 3)):
        units, programs = plan.merge_grid(n_rows, n_segments, 64, device, cfg)
        assert units >= cfg.min_units and programs == max(-(-(n_rows + n_segments) // units), 1)
        assert programs <= testing.sm_count(device) * cfg.programs_per_sm
        assert (programs - 1) * units < max(n_rows + n_segments, 1) <= programs * units or n_rows + n_segments == 0


def test_merge_plan_is_replayable_by_the_native_path_unless_forced():
    values, offsets = make([3, 0, 7, 1], 8, FP32, torch.int64)
    planned = plan.plan_merge(values, offsets, False, False)
    native = planned.native_plan()
    assert native.units == 1 and native.block_l == 1 and native.chunk_programs > 0
    assert all(step.native is not None for step in planned.launches)
    # the combine's grid is the reduce kernel's (the native path sizes every kernel's axis 1 by block_m)
    assert planned.launches[0].grid == planned.launches[1].grid
    assert plan.plan_merge(values, offsets, False, False, units_per_program=3).native_plan() is None


def test_merge_kernels_use_no_atomics():
    from pathlib import Path

    source = Path(merge.__file__).read_text()
    assert "atomic" not in source.replace("no atomics", "")


def test_a_known_max_seqlen_of_two_over_many_segments_takes_the_merge_path_forward():
    # tiles of <= 2 rows over 10^6 segments: the merge path, as for one row; the backward and small batches keep
    # the whole-segments kernels
    def first_kernel(n_segments, max_seqlen, backward=False):
        offsets = torch.empty(n_segments + 1, dtype=torch.int64, device="meta")
        if backward:
            return plan.plan_expand(torch.empty(n_segments, 8, device="meta"), offsets, 2 * n_segments, mean=True,
                                    max_seqlen=max_seqlen).launches[0].kernel
        values = torch.empty(2 * n_segments, 8, device="meta")
        return plan.plan_reduce(values, offsets, mean=True, empty_zero=False, max_seqlen=max_seqlen).launches[0].kernel

    assert first_kernel(10**6, 2) is merge._merge_reduce_kernel
    assert first_kernel(10**6, 1) is merge._merge_reduce_kernel
    assert first_kernel(512, 2) is not merge._merge_reduce_kernel
    assert first_kernel(10**6, 3) is not merge._merge_reduce_kernel
    assert first_kernel(10**6, 2, backward=True) is not merge._merge_expand_kernel
