"""The routed path (``ops.reduce.routed``: the whole-segments kernel sized for the mean length where every segment fits
its tiles, else the merge path's two launches, decided on the device alike by all three) against the float64 reference
under TRITON_INTERPRET=1, outputs and workspace poisoned so an unwritten element fails; and the decision itself: the
first launch alone writes every output row or none. The backward (the whole-segments expand, else the merge path's) the
same way.

Batches stay small (a few hundred rows, B <= 40): the interpreter runs each program in Python, and the host's config
is the production one (``config.whole_segments`` at DEFAULT_SM_COUNT)."""

import pytest
import torch
from helpers.interpret import needs_interpreter
from helpers.reduce_cases import expected, make
from helpers.reference import assert_matches, reference_expand

from jaggedperf.ops import testing
from jaggedperf.ops.config import SEGMENT_TILES
from jaggedperf.ops.reduce import plan
from jaggedperf.ops.testing import run_direct

FP32, BF16 = torch.float32, torch.bfloat16
I32, I64 = torch.int32, torch.int64


POISON = float("nan")  # the backward's rows are never NaN


def _poison(mean: bool, empty_zero: bool) -> float:
    # NaN where a NaN answer is impossible (an empty segment's mean is NaN otherwise), else a wrong finite value
    return 12345.0 if (mean and not empty_zero) else float("nan")


def _written(out: torch.Tensor, poison: float) -> torch.Tensor:
    """Rows of ``out`` a launch wrote (none still holds the poison)."""
    mark = torch.tensor(poison, dtype=out.dtype).float()  # as the poison was stored
    left = torch.isnan(out.float()) if poison != poison else out.float() == mark
    return ~left.all(dim=1)


def _lengths(kind: str, seed: int = 3) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    if kind == "even":  # 12 segments of 4-8 rows: mean ~6, 8-row tiles, every segment fits
        return torch.randint(4, 9, (12,), generator=gen).tolist()
    if kind == "empty-heavy":  # most segments empty, the rest short: fits
        lengths = torch.randint(1, 4, (30,), generator=gen)
        return lengths.masked_fill(torch.rand(30, generator=gen) < 0.8, 0).tolist()
    if kind == "one-long":  # short segments and one far past SEGMENT_TILES tiles of the mean's: the merge path
        return [2, 3, 1, 2] * 4 + [90] + [2, 1, 3]
    raise ValueError(kind)


# (id, lengths, M, dtype, offsets dtype, empty mean zero, whole: the first launch serves, max_segments)
CASES = [
    ("even-M5-fp32", _lengths("even"), 5, FP32, I64, False, True, plan.ROUTED_MAX_SEGMENTS),
    ("even-M64-bf16-i32-zero", _lengths("even"), 64, BF16, I32, True, True, plan.ROUTED_MAX_SEGMENTS),
    ("empty-heavy-M3", _lengths("empty-heavy"), 3, FP32, I64, False, True, plan.ROUTED_MAX_SEGMENTS),
    ("one-long-M3", _lengths("one-long"), 3, FP32, I64, False, False, plan.ROUTED_MAX_SEGMENTS),
    ("one-long-M24-bf16-zero", _lengths("one-long"), 24, BF16, I32, True, False, plan.ROUTED_MAX_SEGMENTS),
    # fits, but more segments than the first launch takes: the merge path
    ("even-past-max-segments-M5", _lengths("even"), 5, FP32, I64, False, False, 8),
]


def _routed(values, offsets, mean, empty_zero, max_segments):
    planned = testing.plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, routed=max_segments,
                                  poison=_poison(mean, empty_zero))
    assert [launch.key[0] for launch in planned.launches] == ["routed_segments", "routed_merge", "routed_combine"]
    return planned


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty_zero,whole,max_segments", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_routed_matches_reference_and_one_launch_serves(lengths, M, dtype, offsets_dtype, empty_zero, whole,
                                                         max_segments):
    values, offsets = make(lengths, M, dtype, offsets_dtype, seed=0)
    for mean in (False, True):
        first = _routed(values, offsets, mean, empty_zero, max_segments)
        run_direct(first.launches[:1])  # the whole-segments launch alone: all rows or none
        written = _written(first.out, _poison(mean, empty_zero))
        assert bool(written.all()) if whole else not bool(written.any()), written
        planned = _routed(values, offsets, mean, empty_zero, max_segments)
        run_direct(planned.launches)
        ref, scale = expected(values, offsets, mean, empty_zero)
        assert_matches(planned.out, ref, dtype, scale=scale, what=f"routed {'mean' if mean else 'sum'} {lengths}")


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty_zero,whole,max_segments", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_routed_expand_matches_reference_and_one_launch_serves(lengths, M, dtype, offsets_dtype, empty_zero, whole,
                                                                max_segments):
    values, offsets = make(lengths, M, dtype, offsets_dtype, seed=0)
    grad = torch.randn(len(lengths), M, generator=torch.Generator().manual_seed(2)).to(dtype)
    for mean in (False, True):
        first = testing.plan_expand(grad, offsets, values.shape[0], mean=mean, routed=max_segments, poison=POISON)
        assert [launch.key[0] for launch in first.launches] == ["routed_segments_expand", "routed_merge_expand"]
        run_direct(first.launches[:1])  # the whole-segments launch alone: every row or none
        written = ~torch.isnan(first.out.float()).all(dim=1)
        assert bool(written.all()) if whole else not bool(written.any()), written
        out = testing.launch_expand(grad, offsets, values.shape[0], mean=mean, routed=max_segments, poison=POISON)
        assert_matches(out, reference_expand(grad, offsets, values.shape[0], mean=mean), dtype,
                       what=f"routed expand mean={mean} {lengths}")


@needs_interpreter
def test_the_decision_is_the_longest_segment_against_the_tiles():
    # the same batch shape (B, N) on either side of FITS: the host's config is the same, only the lengths differ
    n_rows = 160  # 16 segments, mean 10: 16-row tiles, FITS = 16 * SEGMENT_TILES
    fits = SEGMENT_TILES * 16
    for longest, whole in ((fits, True), (fits + 1, False)):
        rest = n_rows - longest  # the other 15 share the rest: N, so the host's mean and config, stay
        lengths = [longest] + [rest // 15 + (i < rest % 15) for i in range(15)]
        assert sum(lengths) == n_rows and min(lengths) >= 0
        values, offsets = make(lengths, 4, FP32, I64, seed=1)
        planned = _routed(values, offsets, False, False, plan.ROUTED_MAX_SEGMENTS)
        assert planned.launches[0].args[-3] == fits  # FITS of the host's config
        run_direct(planned.launches[:1])
        assert bool(_written(planned.out, _poison(False, False)).all()) is whole, (longest, lengths)


def test_routed_takes_the_merge_path_where_the_guess_has_no_whole_segments_config():
    # one segment (too few programs for any whole-segments grid): the merge path's own two launches
    values, offsets = make([40], 8, FP32, I64)
    planned = testing.plan_reduce(values, offsets, routed=True)
    assert [launch.key[0] for launch in planned.launches] == ["merge", "merge_combine"]
    planned = testing.plan_expand(torch.randn(1, 8), offsets, 40, routed=True)
    assert [launch.key[0] for launch in planned.launches] == ["merge_expand"]
