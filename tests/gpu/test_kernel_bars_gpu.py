"""The reductions' bars on one shape of each class of the lab's ``kernels`` preset (the whole grid:
``benchmarks/kernel_grid_bench.py``; both measure and judge a shape by ``jaggedperf.lab.reduce_row``, so that the
bars mean the same in both).

- Device time by CUDA-graph replay with L2 flushed; the peers (``torch.segment_reduce``, Inductor's
  compiled padded sum where the padded tensor fits) measured in the same test; correctness of every
  contender against float64 first; the floor from the copy bandwidth measured in the same pytest session.
- Bar 4 by the seed's wall method, three interleaved rounds.

A bar is judged against the limit measured beside it (``reduce_row.practical_floor``: an empty kernel's graph replay
+ the same bytes at the session's copy bandwidth): where the bar's threshold lies below that floor and ours is within
``reduce_row.AT_LIMIT`` of it, the hardware's limit, an xfail naming both numbers; anywhere else a miss is a failure,
the design's (``docs/decisions/strict-xfail-measured-limit.md``).

Run on the GPU machine: ``PYTHONPATH=src python -m pytest -v -m bars tests/gpu/test_kernel_bars_gpu.py
--junitxml kernel-bars.xml`` (the XML holds every measured number).
"""

from pathlib import Path

import pytest
import torch

from helpers.limits import at_limit

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import reduce_row
from jaggedperf.lab.measure import timing
from jaggedperf.lab.grid import SEED_CASES

# The bars (``bars``: timed, alone after the untimed tests) and, untimed beside them, their contenders compiled and
# checked in the parallel pass.
pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")

# one shape per class (lab.grid.KERNEL_CLASSES)
NARROW = Case(100_000, 8, 16, 0.5)
ODD = Case(2048, 1000, 256, 0.2)
POWER_SMALL = Case(4096, 128, 1000, 0.0, "heavy")
POWER_LARGE = Case(4096, 128, 32768, 0.0, "heavy")
GIANT = Case(1, 64, 2_000_000, 0.0, "fixed")
EMPTY = Case(100_000, 64, 64, 0.9, "empty")
SEED = SEED_CASES[0]
BAR = Case(65536, 16, 64, 0.5)
SHAPES = {"narrow": NARROW, "odd_width": ODD, "powerlaw_small": POWER_SMALL, "powerlaw_large": POWER_LARGE,
          "giant": GIANT, "empty": EMPTY, "seed": SEED, "bars": BAR}

TRAINING = ("the autograd engine's own floor, measured in the same rounds (``reduce_row.training_walls``: a Python "
            "autograd node launching no kernel, stepped) + a forward and a backward launch of ours: where that exceeds "
            "3× our forward or 0.5× segment_reduce's step, no step through autograd holds bar 4, and ours within it is "
            "at the limit")


def cells(classes) -> list:
    """(class, variant) parameters of a bar: each judged against the peers measured in the same run, whatever
    Inductor's autotuner picked there (``_judged``)."""
    return [pytest.param(cls, variant, id=f"{cls}-{variant}") for cls in classes
            for variant in ("ours_hinted", "ours_plain")]


@pytest.fixture(scope="module")
def copy_gbps(record_testsuite_property):
    from jaggedperf import ops

    ops.prepare_native_launch()
    gbps = timing.copy_bandwidth_gbps(CUDA)
    record_testsuite_property("copy_gbps", round(gbps, 1))
    return gbps


_ROWS: dict = {}
PADDED_MAX_BYTES = 8e9  # Inductor's padded peer only where its padded tensor fits under this


@pytest.mark.parametrize("cls", list(SHAPES))
def test_contenders_compile_and_ours_match_float64(cls, record_property):
    """Each shape's compiled contenders in the parallel pass, as ``measured`` builds them: Inductor's padded sum
    (``reduce_row.measure_case``: a Dynamo reset, then ``torch.compile(dynamic=False)`` of the same function at the same
    shape) into the run's Inductor cache, and our kernels with and without max_seqlen into Triton's, ours checked
    against float64. The timed pass loads them instead of compiling while nothing else may run (and checks every
    contender again before timing; a peer that does not compile is recorded there, not a failure, as here)."""
    batch = make_batch(SHAPES[cls], CUDA)
    values, offsets, hint = batch.values, batch.offsets, batch.max_seqlen
    ref = reduce_row.reference(values, offsets, mean=False)
    for name, out in (("with max_seqlen", jaggedperf.jagged_sum(values, offsets, max_seqlen=hint)),
                      ("without", jaggedperf.jagged_sum(values, offsets))):
        err = reduce_row.rel_error(out, ref)
        assert err <= reduce_row.tolerance(values.dtype), f"ours {name}: relative error {err:.2e}"
    if batch.B * max(hint, 1) * batch.M * values.element_size() <= PADDED_MAX_BYTES:
        torch._dynamo.reset()
        try:
            torch.compile(reduce_row.padded_fn("sum", max(hint, 1)), dynamic=False)(values, offsets)
        except Exception as exc:  # noqa: BLE001 - as the row: a peer that does not compile is no peer
            record_property("inductor_padded", f"compile failed: {type(exc).__name__}: {str(exc)[:300]}")


def measured(cls: str, gbps: float) -> dict:
    """One measurement per shape for every bar of it (cached for the module)."""
    if cls not in _ROWS:
        row = reduce_row.measure_case(cls, SHAPES[cls], gbps, op="sum", padded_max_bytes=PADDED_MAX_BYTES,
                                      inductor_left=[120.0])
        _ROWS[cls] = row
    return _ROWS[cls]


def _record(record_property, row: dict) -> None:
    for key in ("floor_us", "practical_floor_us", "empty_kernel_us", "copy_us", "best_peer_us"):
        if row.get(key) is not None:
            record_property(key, round(row[key], 3))
    for key in ("ours_hinted", "ours_plain", "segment_reduce", "inductor_padded"):
        value = row.get(key)
        record_property(key, round(value["median_us"], 3) if isinstance(value, dict) else str(value))


def _assert_correct(row: dict) -> None:
    assert row.get("ours_hinted_correct") and row.get("ours_plain_correct"), \
        f"ours incorrect: {row.get('ours_hinted_rel_error')}, {row.get('ours_plain_rel_error')}"


def _judged(row: dict, key: str, us: float, said: str) -> None:
    """Bar ``key`` for a call of ``us``: held; or missed at the hardware's limit (an xfail naming it); or a failure."""
    if row["bars"][key]:
        return
    limit, practical = reduce_row.thresholds(row)[key], row["practical_floor_us"]
    where = (f"{said}; the bar {limit:.1f} µs, the practical floor measured beside it {practical:.1f} µs (an empty "
             f"kernel {row['empty_kernel_us']:.1f} + the bytes at the copy bandwidth {row['floor_us']:.1f})")
    if reduce_row.at_the_limit(row, key, us):
        pytest.xfail(f"{where}: out of any kernel's reach here, and ours within {reduce_row.AT_LIMIT}× of that floor")
    pytest.fail(f"{where}: " + ("out of reach, but ours is past " if reduce_row.out_of_reach(row)[key] else
                                "within reach: ours misses it at ") + f"{us / practical:.2f}× the practical floor")


@pytest.mark.bars
@pytest.mark.parametrize("cls,variant", cells(SHAPES))
def test_ahead_of_the_best_peer(cls, variant, copy_gbps, record_property):
    row = measured(cls, copy_gbps)
    _record(record_property, row)
    _assert_correct(row)
    if row["best_peer_us"] is None:
        pytest.skip("no peer timed correctly")
    us = row[variant]["median_us"]
    _judged(row, f"1_{variant}", us, f"{variant} {us:.1f} µs against the best peer {row['best_peer_us']:.1f} µs, "
                                     f"floor {row['floor_us']:.1f} µs")


BAR2 = [c for c in SHAPES if c not in ("seed", "narrow")]  # bar 2 applies at >= 64 MB and to power-law < 100 MB


@pytest.mark.bars
@pytest.mark.parametrize("cls,variant", cells(BAR2))
def test_near_the_floor(cls, variant, copy_gbps, record_property):
    row = measured(cls, copy_gbps)
    _record(record_property, row)
    _assert_correct(row)
    if row["bars"][f"2_{variant}"] is None:
        pytest.skip("bar 2 does not apply to this shape")
    us = row[variant]["median_us"]
    _judged(row, f"2_{variant}", us, f"{variant} {us:.1f} µs = {us / row['floor_us']:.2f}× the floor")


@pytest.mark.bars
@pytest.mark.parametrize("cls", list(SHAPES))
def test_without_max_seqlen_within_15_percent_of_with_it(cls, copy_gbps, record_property):
    row = measured(cls, copy_gbps)
    _record(record_property, row)
    _assert_correct(row)
    h, p = row["ours_hinted"]["median_us"], row["ours_plain"]["median_us"]
    _judged(row, "3", p, f"without max_seqlen {p:.1f} µs = {p / h:.2f}× with it ({h:.1f} µs)")


@pytest.mark.bars
@pytest.mark.parametrize("cls", list(SHAPES))
def test_bitwise_deterministic(cls, copy_gbps):
    row = measured(cls, copy_gbps)
    assert row["deterministic"], "repeats differ bitwise"


@pytest.mark.bars
@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
def test_training_step_within_3x_the_forward_and_half_segment_reduce(case, copy_gbps, record_property):
    t = reduce_row.training_walls(case, rounds=3, iters=200)
    for key in ("ours_forward", "ours_forward_backward", "segment_reduce_forward_backward",
                "engine_floor_forward_backward"):
        record_property(f"{key}_wall_us", round(t[key]["median_us"], 2))
    record_property("limit4_us", round(t["limit4_us"], 2))
    assert t["backward_correct"], f"backward relative error {t['backward_rel_error']:.2e}"
    if not t["bar4"]:
        at_limit(t["bar4_at_limit"], f"fwd+bwd {t['ours_forward_backward']['median_us']:.1f} µs = "
                                     f"{t['fb_over_forward']:.2f}× our forward, {t['fb_over_segment_reduce']:.2f}× "
                                     f"segment_reduce's fwd+bwd; the engine's floor + two forward calls "
                                     f"{t['limit4_us']:.1f} µs", TRAINING)


def test_no_atomics_in_the_reduction_kernels():
    for name in ("kernels.py", "merge.py"):
        source = (Path(__file__).resolve().parents[2] / "src/jaggedperf/ops/reduce" / name).read_text()
        assert "atomic" not in source.replace("no atomics", ""), name
