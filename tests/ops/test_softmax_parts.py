"""The softmax split over parts (few long sequences: several programs per (segment, column block), per-part column
max and sum combined in a fixed order) against the float64 references, under TRITON_INTERPRET=1: every case of the
family's tests, one to eight parts, tiles smaller than the segments and the automatic tile (every pair of them);
outputs poisoned with NaN so an unwritten element fails; bitwise-equal repeats; where the plan routes to it."""

from __future__ import annotations

import pytest
import torch
from helpers.interpret import needs_interpreter
from helpers.pairwise import pairwise
from helpers.family import CASES, FP32, IDS, assert_close, make, reference

from jaggedperf.ops import testing
from jaggedperf.ops.tiles import TileConfig

# the automatic tile; and one smaller than the segments in both directions: 4 rows, 32 columns (M = 64, 129, 300
# span 2, 5 and 10 column blocks, the last two ragged). Not narrower: under the interpreter the time grows with the
# programs (4 columns made M = 300 take 75 column blocks, 90 s a case, and test nothing 10 blocks do not).
TILES = [None, TileConfig(4, 32, 1)]


def forward(values, offsets, parts, cfg, per_element=False):
    planned = testing.plan_softmax_parts(values, offsets, parts=parts, cfg=cfg, per_element=per_element)
    planned.out.fill_(float("nan"))
    testing.run_direct(planned.launches)
    return planned.out


PASS_IDS = ["per_column", "per_element"]
PASSES = pytest.mark.parametrize("per_element", [False, True], ids=PASS_IDS)


PARTS, TILE_IDS = [1, 2, 8], ["auto", "tiny"]
# every pair of (case, parts, tile, pass) values in some row, 30 rows where the full cross was 120 (helpers.pairwise)
GRID = pairwise([len(CASES), len(PARTS), len(TILES), len(PASS_IDS)])


@needs_interpreter
@pytest.mark.parametrize("case,parts,tile,per_element", GRID,
                         ids=[f"{IDS[c]}-{PARTS[p]}-{TILE_IDS[t]}-{PASS_IDS[e]}" for c, p, t, e in GRID])
def test_split_matches_float64(case, parts, tile, per_element):
    lengths, M, dtype, offsets_dtype, _ = CASES[case]
    parts, cfg, per_element = PARTS[parts], TILES[tile], bool(per_element)
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    assert_close(forward(values, offsets, parts, cfg, per_element), reference("softmax", values, offsets), dtype)


@needs_interpreter
@PASSES
def test_parts_whose_max_differs_or_is_minus_inf_combine_exactly(per_element):
    # one 37-row sequence in 4-row tiles over 8 parts (5 tiles each at most): column 0 climbs by 50 a row (every part's
    # max differs, the early parts' sums rescaled by e^-1500 and less), column 1 is -inf in the first 20 rows (whole
    # parts of -inf: they add nothing), column 2 is -inf but in its first row (one part finite), column 3 all -inf (NaN
    # as torch.softmax); then a short sequence, and more parts than its tiles (empty parts)
    values, offsets = make([37, 3], 4, FP32, seed=4)
    values[:37, 0] += torch.arange(37, dtype=torch.float32) * 50.0
    values[:20, 1] = float("-inf")
    values[1:37, 2] = float("-inf")
    values[:37, 3] = float("-inf")
    expected = torch.cat([torch.softmax(values[:37].double(), 0), torch.softmax(values[37:].double(), 0)])
    assert_close(forward(values, offsets, 8, TileConfig(4, 4, 1), per_element), expected, FP32)


@needs_interpreter
def test_split_repeats_are_bitwise_equal():
    values, offsets = make([1, 30, 2, 0, 9, 1, 1, 12], 16, FP32)
    cfg = TileConfig(4, 4, 1)
    assert torch.equal(forward(values, offsets, 4, cfg), forward(values, offsets, 4, cfg))


def test_the_plan_splits_few_long_sequences_only():
    # on the CPU the SM count is config.DEFAULT_SM_COUNT (4); the split's tile is the lean one (64 × 64 at M = 64)
    values = torch.randn(2000, 64)
    keys = lambda planned: [step.key[0] for step in planned.launches]  # noqa: E731
    two = torch.tensor([0, 700, 2000])  # 2 programs, 15 tiles an average sequence: 4 parts (2 programs an SM: 8)
    planned = testing.plan_softmax(values, two)
    assert keys(planned) == ["softmax_stats", "softmax_parts"] and planned.launches[0].grid == (2, 1, 4)
    assert planned.launches[0].key[-1] is True  # the stats pass per element
    assert testing.plan_softmax(values, torch.tensor([0, 2000])).launches[0].grid == (1, 1, 8)  # 1 program: 8 parts (≤ 15 of 31 tiles)
    assert keys(testing.plan_softmax(values, torch.arange(0, 2001, 500))) == ["softmax"]  # 4 programs: the SMs full
    assert keys(testing.plan_softmax(values[:100], torch.tensor([0, 40, 100]))) == ["softmax"]  # < 1 tile each
    # 3 tiles an average sequence would give one part: the one program's work and an extra launch
    assert keys(testing.plan_softmax(values[:400], torch.tensor([0, 150, 400]))) == ["softmax"]
    assert keys(testing.plan_softmax(values, two, cfg=TileConfig(8, 64, 4))) == ["softmax"]  # forced
    assert keys(testing.plan_softmax(values, two, per_element=True)) == ["softmax"]  # forced
    wide = torch.randn(500, 600)  # 3 column blocks of 256 a sequence: 2 sequences are 6 programs, the SMs full
    assert keys(testing.plan_softmax(wide, torch.tensor([0, 250, 500]))) == ["softmax"]
