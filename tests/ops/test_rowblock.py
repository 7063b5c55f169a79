"""The row-block decomposition (``ops/reduce/rowblock.py``) against the float64 reference, under
TRITON_INTERPRET=1: tiny tiles and rows per program so that the scan, the carry between tiles, the head/tail
pieces, the combine and the empty-segment pass all run on small inputs; outputs and workspace poisoned so an
unwritten element fails; repeats bitwise equal."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers.interpret import INTERP_EXAMPLES, needs_interpreter
from helpers.reference import assert_matches, case_id, lengths_to_offsets, reference_reduce

from jaggedperf.ops import testing
from jaggedperf.ops.reduce import rowblock
from jaggedperf.ops.reduce.rowblock import RowBlockConfig

FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16


def tiny(block_r=4, block_m=4, combine_block_m=2, block_p=4, empty_group=4, few_segments=2) -> RowBlockConfig:
    return RowBlockConfig(block_r=block_r, block_m=block_m, num_warps=1, programs_per_sm=4,
                          combine_block_m=combine_block_m, block_p=block_p, empty_group=empty_group,
                          few_segments=few_segments)


def run(values, offsets, op, cfg=None, rows=None):
    mean, empty_zero = op != "sum", op == "mean-zero"
    # an unwritten NaN-mean output must not pass as NaN: poison with a number there
    poison = 12345.0 if (mean and not empty_zero) else float("nan")
    out = testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, rowblock=cfg or True,
                                rows_per_chunk=rows, poison=poison)
    return out, mean, empty_zero


def check(values, offsets, op, cfg=None, rows=None):
    out, mean, empty_zero = run(values, offsets, op, cfg, rows)
    ref = reference_reduce(values, offsets, mean=mean, empty_zero=empty_zero)
    scale = reference_reduce(values, offsets, mean=mean, empty_zero=True, absolute=True)
    assert_matches(out, ref, values.dtype, scale=scale)
    again, _, _ = run(values, offsets, op, cfg, rows)
    assert torch.equal(out.view(torch.uint8), again.view(torch.uint8))  # bitwise deterministic
    return out


# (lengths, M, dtype, offsets dtype, rows per program (None: production), note)
CASES = [
    ([], 3, FP32, torch.int64, 4, "none"),
    ([0], 3, FP32, torch.int64, 4, "one-empty"),
    ([0, 0, 0], 5, BF16, torch.int32, 4, "all-empty"),
    ([7], 1, FP32, torch.int64, 4, "one"),
    ([4, 0, 5], 9, BF16, torch.int64, 4, ""),
    ([0, 0, 3, 1, 0, 0], 3, FP16, torch.int32, 4, "lead-trail"),
    ([0, 0, 23, 0, 0], 3, FP32, torch.int64, 8, "one-holds-all"),
    ([1, 30, 2, 0, 9, 1, 1, 12], 6, FP32, torch.int32, 12, "long"),
    ([1, 30, 2, 0, 9, 1, 1, 12], 6, BF16, torch.int64, 5, "R-not-tile-multiple"),
    ([2, 3, 1, 4, 2, 2, 1, 3, 5, 1], 8, FP32, torch.int64, 16, "short"),
    ([0] * 9 + [3] + [0] * 9 + [2], 4, FP32, torch.int64, 4, "empty-heavy"),
    ([3, 5, 2], 11, FP32, torch.int64, None, "production-tiles"),
    ([3, 5, 2, 0, 7, 1] * 6, 4, FP32, torch.int64, None, "production-narrow"),  # M = 4: vectorised, no column mask
    ([40, 0, 9, 1, 300, 2], 64, BF16, torch.int32, None, "production-wide"),
]
IDS = [case_id(ls, M, dt, od, extra=note) for ls, M, dt, od, _, note in CASES]


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,rows,note", CASES, ids=IDS)
@pytest.mark.parametrize("op", ["sum", "mean-nan", "mean-zero"])
def test_rowblock_gives_reference(lengths, M, dtype, offsets_dtype, rows, note, op):
    gen = torch.Generator().manual_seed(len(lengths) + M)
    offsets = lengths_to_offsets(lengths, offsets_dtype)
    values = torch.randn(int(offsets[-1]), M, generator=gen).to(dtype)
    cfg = None if rows is None else tiny()
    check(values, offsets, op, cfg, rows)


@needs_interpreter
@pytest.mark.parametrize("dtype", [FP32, BF16], ids=["fp32", "bf16"])
def test_giant_segment_spans_many_programs(dtype):
    # B = 1 (and with empties around it): one segment over 25 programs of 8 rows, the combine sums 24 heads
    # in 6 tiles of 4 pieces; M = 5 over column blocks of 4 (the combine's of 2)
    gen = torch.Generator().manual_seed(1)
    for lengths in ([200], [0, 200, 0, 0]):
        offsets = lengths_to_offsets(lengths)
        values = (torch.randn(200, 5, generator=gen) + 1.0).to(dtype)
        for op in ("sum", "mean-nan"):
            check(values, offsets, op, tiny(), 8)


@needs_interpreter
def test_one_tile_inside_a_segment_takes_the_plain_sum():
    # every tile of one segment takes the uniform branch; rows that straddle tiles carry: both agree with the
    # reference and with a scan-only tiling (tile of 1 row... the same values through other cuts)
    gen = torch.Generator().manual_seed(2)
    offsets = lengths_to_offsets([5, 37, 6])
    values = torch.randn(48, 3, generator=gen)
    for rows in (4, 8, 48):
        check(values, offsets, "sum", tiny(), rows)


def _batches():
    lengths = st.lists(st.one_of(st.just(0), st.integers(0, 3), st.integers(0, 20)), min_size=0, max_size=14)
    return st.tuples(lengths, st.integers(1, 6), st.sampled_from([torch.int32, torch.int64]))


@needs_interpreter
@settings(max_examples=max(INTERP_EXAMPLES // 2, 10))
@given(batch=_batches(), op=st.sampled_from(["sum", "mean-nan", "mean-zero"]),
       block_r=st.sampled_from([1, 2, 4, 8]), rows=st.integers(1, 12), dtype=st.sampled_from([FP32, BF16]),
       few=st.sampled_from([0, 1, 2, 64]))
def test_rowblock_property(batch, op, block_r, rows, dtype, few):
    # few = 0: every boundary tile scans; 64: every one takes the masked sums
    lengths, M, offsets_dtype = batch
    offsets = lengths_to_offsets(lengths, offsets_dtype)
    values = torch.randn(int(offsets[-1]), M).to(dtype)
    check(values, offsets, op, tiny(block_r=block_r, few_segments=few), rows)


@needs_interpreter
@pytest.mark.parametrize("few", [0, 64], ids=["scan", "masked-sums"])
def test_segments_ending_on_tile_ends(few):
    # segments ending on a tile's last row (accumulate-only tiles that finish their segment, then a tile whose
    # first row starts the next one, after empties), heads and tails ending there, and one program inside a segment
    gen = torch.Generator().manual_seed(3)
    offsets = lengths_to_offsets([8, 4, 0, 0, 4, 12, 0, 3, 1, 16])
    values = torch.randn(48, 4, generator=gen)
    for rows in (4, 8, 12, 16, 48):
        for op in ("sum", "mean-nan"):
            check(values, offsets, op, tiny(few_segments=few), rows)


@needs_interpreter
def test_bad_offsets_stay_in_bounds():
    # decreasing / out-of-range offsets: unspecified values, but the kernels must run (the interpreter raises on
    # an out-of-bounds access) and write only the (B, M) output
    values = torch.randn(10, 3)
    for bad in ([0, 7, 3, 10], [0, 20, 30, 40], [5, 2, 0, 1], [0, 0, 0, 0]):
        offsets = torch.tensor(bad)
        out = testing.launch_reduce(values, offsets, rowblock=tiny(), rows_per_chunk=4)
        assert out.shape == (3, 3)


def test_production_config_tiles():
    for m in (1, 4, 8, 12, 32, 64, 100, 1000):
        cfg = rowblock.rowblock_config(m, FP32)
        assert cfg.block_m & (cfg.block_m - 1) == 0 and cfg.block_r & (cfg.block_r - 1) == 0
        assert cfg.block_r * cfg.block_m <= rowblock.TILE_ELEMENTS
        assert cfg.combine_block_m <= cfg.block_m
