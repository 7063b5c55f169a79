"""The layer norm split over parts (few long segments: several programs per segment, per-part moments combined in
a fixed order) against the float64 references, under TRITON_INTERPRET=1: every case of the family's tests, one to
eight parts, tiles smaller than the segments (the looping passes) and the automatic tile (every pair of them);
outputs poisoned with NaN so an unwritten element fails; bitwise-equal repeats."""

from __future__ import annotations

import pytest
import torch
from helpers.interpret import needs_interpreter
from helpers.pairwise import pairwise
from helpers.family import (CASES, EPS, IDS, backward_tolerance, assert_close, make, reference,
                                     reference_backward)

from jaggedperf.ops import testing
from jaggedperf.ops.tiles import TileConfig

pytestmark = needs_interpreter

# the automatic tile; and one smaller than the segments in both directions: 4 rows, 32 columns (M = 64, 129, 300
# span 2, 5 and 10 column blocks, the last two ragged). Not narrower: under the interpreter the time grows with the
# programs (4 columns made M = 300 take 75 column blocks, 90 s a case, and test nothing 10 blocks do not).
TILES = [None, TileConfig(4, 32, 1)]


def forward(values, offsets, parts, cfg):
    planned = testing.plan_layer_norm_parts(values, offsets, EPS, parts=parts, cfg=cfg)
    planned.out.fill_(float("nan"))
    testing.run_direct(planned.launches)
    return planned.out


def backward(values, offsets, grad, parts, cfg):
    planned = testing.plan_layer_norm_backward_parts(values, grad, offsets, EPS, parts=parts, cfg=cfg)
    planned.out.fill_(float("nan"))
    testing.run_direct(planned.launches)
    return planned.out


PARTS, TILE_IDS = [1, 2, 8], ["auto", "tiny"]
# every pair of (case, parts, tile) values in some row, 30 rows where the full cross was 60 (helpers.pairwise)
GRID = pairwise([len(CASES), len(PARTS), len(TILES)])


@pytest.mark.parametrize("case,parts,tile", GRID, ids=[f"{IDS[c]}-{PARTS[p]}-{TILE_IDS[t]}" for c, p, t in GRID])
def test_split_forward_and_backward_match_float64(case, parts, tile):
    lengths, M, dtype, offsets_dtype, _ = CASES[case]
    parts, cfg = PARTS[parts], TILES[tile]
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    ref = reference("layer_norm", values, offsets)
    assert_close(forward(values, offsets, parts, cfg), ref, dtype)
    grad = torch.randn(values.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    assert_close(backward(values, offsets, grad, parts, cfg), reference_backward("layer_norm", values, offsets, grad),
                 dtype, what="grad_values", **backward_tolerance(dtype))  # the one-program kernel's bound


def test_more_parts_than_tiles_leave_empty_parts_that_change_nothing():
    # a 5-row segment in 4-row tiles has two non-empty parts of eight: the empty ones contribute (0, 0, 0)
    values, offsets = make([5, 0, 1], 3, torch.float32)
    cfg = TileConfig(4, 4, 1)
    assert_close(forward(values, offsets, 8, cfg), reference("layer_norm", values, offsets), torch.float32)


def test_split_repeats_are_bitwise_equal():
    values, offsets = make([1, 30, 2, 0, 9, 1, 1, 12], 16, torch.float32)
    grad = torch.randn(values.shape, generator=torch.Generator().manual_seed(2))
    cfg = TileConfig(4, 4, 1)
    first = forward(values, offsets, 4, cfg), backward(values, offsets, grad, 4, cfg)
    again = forward(values, offsets, 4, cfg), backward(values, offsets, grad, 4, cfg)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_the_split_tile_leaves_room_for_several_programs_per_sm():
    from jaggedperf.ops.layer_norm.plan import parts_tile

    assert parts_tile(4096) == TileConfig(8, 256, 4)  # 64-128 registers on sm_90: 4-8 programs per SM
    assert parts_tile(64) == TileConfig(32, 64, 4) and parts_tile(3) == TileConfig(512, 4, 4)
    assert parts_tile(4096, max_seqlen=3) == TileConfig(4, 256, 2)  # never taller than the longest sequence
