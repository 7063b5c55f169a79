"""The performance bars for jagged_softmax and jagged_layer_norm (H200, device time, one run).

Each (op, shape) is measured once by ``jaggedperf.lab.family.row`` (as ``benchmarks/family_bench.py`` does; every contender checked
against float64 first, on the GPU; CUDA-graph replay, L2 flushed; Inductor's compiled padded program and every torch
eager contender the lab registers, in the same run; the contenders no bar reads left out), and the bars read that
row:

- forward ≤ 1.3× its bandwidth floor on shapes of ≥ 64 MB;
- forward ≥ 3× faster than the best torch eager contender, and faster than Inductor's padded program, on every
  shape;
- backward ≤ 1.5× its floor on shapes of ≥ 64 MB.

A bar missed is a failure: no limit measured beside these bars lies above them. The six shapes take
~4 minutes (Inductor's max-autotune compile of each) from a cold Inductor cache; in ``scripts/test.sh`` the parallel
pass has compiled them (``test_family_gpu.py::test_inductor_padded_peer_matches_float64``), the timed pass loads
them and tunes their kernels again alone (the script drops the autotuners' picks made beside other workers). Run on
the GPU machine:
``PYTHONPATH=src python -m pytest -v -m bars tests/gpu/test_family_bars_gpu.py``.
"""

import pytest

from jaggedperf.inputs import Case
from jaggedperf.lab import family as bench
from jaggedperf.lab.measure import timing

pytestmark = [pytest.mark.gpu, pytest.mark.bars, pytest.mark.timed]

OPS = ("jagged_softmax", "jagged_layer_norm")
SEED_1, SEED_2 = bench.SEED
WIDE, SHORT, LONG = bench.LARGE  # 535 MB (lengths ≤ 1000 × 256), 806 MB (65536 × ≤ 64 × 64), 524 MB (8 × 4000 × 4096)
SHAPES = bench.BAR_CASES  # the seed's two, the first in bf16, then WIDE, SHORT, LONG
LARGE = [WIDE, SHORT, LONG]
LARGE_BYTES = 64e6

# No limit measured beside these bars lies above them: a forward or backward over sequences longer than one tile reads
# its input more than once (the statistics, then the writing pass), so where it misses a bar the miss is the design's,
# a failure (docs/performance.md, the measured limits), not an xfail. Softmax and the layer norm's backward take the
# lean tile (4096 elements, 4 warps) where their programs fill the GPU; with fewer programs than SMs and long sequences
# both forwards split each sequence over parts (ops.rowwise.split_parts).


def params(bar: str, cases) -> list:
    """(op, case) parameters of a bar."""
    return [pytest.param(op, case, id=f"{op}-{case.label}") for op in OPS for case in cases]


@pytest.fixture(scope="module")
def copy_gbps(record_testsuite_property):
    import jaggedperf

    jaggedperf.ops.prepare_native_launch()
    gbps = timing.copy_bandwidth_gbps(bench.DEVICE)
    record_testsuite_property("copy_gbps", round(gbps, 1))
    return gbps


_ROWS: dict = {}
# The bars read ours (with max_seqlen), every torch eager contender (their best), Inductor's padded program and our
# backward. Helion's kernels (a compile for every shape), ours on an NJT and ours without max_seqlen are contenders of
# the family's benchmark (benchmarks/family_bench.py), not of these bars: the timed pass leaves them out.
NOT_JUDGED = ("helion", "jaggedperf_njt", "jaggedperf_no_max_seqlen")


# Torch's per-sequence contenders (unbind, the op on each sequence, cat) launch a kernel a sequence at least: at 65536
# sequences that is past the row's SLOW_US (50 ms; ~5 µs a launch puts it at >= 0.3 s, 2.06-2.09 s measured on the
# H200, family.md), so the row records it untimed and no bar can read it; its three calls took ~12 s of the timed pass.
UNBIND = ("unbind_softmax", "unbind_layer_norm")
UNBIND_UNTIMED_FROM = 65536  # sequences


def measured(op: str, case: Case, gbps: float) -> dict:
    """One ``family.row`` per (op, shape), shared by its bars (cached for the module)."""
    key = (op, case)
    if key not in _ROWS:
        skip = NOT_JUDGED + (UNBIND if case.B >= UNBIND_UNTIMED_FROM else ())
        _ROWS[key] = bench.row(op, case, gbps, skip=skip)
    return _ROWS[key]


def _ours(row: dict, record_property) -> dict:
    ours = row["contenders"]["jaggedperf"]
    assert ours.get("ok"), f"ours incorrect: {ours}"
    assert "median_us" in ours, f"ours not timed: {ours}"
    for name, c in row["contenders"].items():
        if "median_us" in c:
            record_property(f"{name}_us", round(c["median_us"], 2))
    record_property("floor_us", round(row["floor_us"], 2))
    for part, seconds in row["seconds"].items():  # where the row's time went (the suite's time budget)
        record_property(f"{part}_s", seconds)
    return ours


@pytest.mark.parametrize("op,case", params("speed", SHAPES))
def test_forward_3x_faster_than_torch_eager_and_faster_than_inductor(op, case, copy_gbps, record_property):
    row = measured(op, case, copy_gbps)
    ours = _ours(row, record_property)
    best_eager = row["best_torch_eager_us"]
    inductor = row["contenders"].get("inductor_padded", {})
    assert best_eager is not None and "median_us" in inductor, (best_eager, inductor)
    assert ours["median_us"] * 3 <= best_eager, f"ours {ours['median_us']:.1f} µs, best torch eager {best_eager:.1f}"
    assert ours["median_us"] < inductor["median_us"], \
        f"ours {ours['median_us']:.1f} µs, Inductor's padded program {inductor['median_us']:.1f}"


@pytest.mark.parametrize("op,case", params("floor", LARGE))
def test_forward_within_1_3x_of_the_floor_at_64_mb_and_more(op, case, copy_gbps, record_property):
    row = measured(op, case, copy_gbps)
    assert row["values_mb"] >= LARGE_BYTES / 1e6
    ours = _ours(row, record_property)
    assert ours["x_floor"] <= 1.3, f"{ours['median_us']:.1f} µs = {ours['x_floor']:.2f}× the floor"


@pytest.mark.parametrize("op,case", params("backward", LARGE))
def test_backward_within_1_5x_of_its_floor_at_64_mb_and_more(op, case, copy_gbps, record_property):
    row = measured(op, case, copy_gbps)
    _ours(row, record_property)
    back = row["backward"]
    record_property("backward_us", round(back["median_us"], 2))
    assert back["x_floor"] <= 1.5, f"backward {back['median_us']:.1f} µs = {back['x_floor']:.2f}× its floor"
