import json
from dataclasses import replace

import pytest

from jaggedperf.lab.results.compare import (
    BROKEN,
    FIXED,
    IMPROVEMENT,
    NOT_COMPARED,
    REGRESSION,
    SAME,
    compare,
    judge,
)
from jaggedperf.lab.result import ERROR, OK, DeviceTime, RunRecord, WallStats
from helpers.fake_results import make_record, scaled


@pytest.fixture(scope="module")
def a() -> RunRecord:
    return make_record(seed=0)


def is_sum_padded_eager(r):
    return (r.implementation, r.mode) == ("sum_padded", "eager")


def test_same_run_has_no_changes(a):
    c = compare(a, a)
    assert len(c.cells) == len(a.results) and not c.only_a and not c.only_b
    assert not c.has_regression and not c.improvements
    assert {x.verdict for x in c.cells} == {SAME, NOT_COMPARED}
    ok = [x for x in c.cells if x.status_a == OK]
    assert all(x.wall.ratio == 1 and x.device.ratio == 1 for x in ok)
    assert c.environment_changes == {}


def test_rerun_noise_is_within_spread(a):
    # a second run with other random device times (±2%) and everything 3% slower: within the spread
    b = scaled(make_record(seed=1), 1.03, lambda r: True)
    c = compare(a, b)
    assert not c.has_regression and not c.improvements


def test_slower_beyond_spread_is_a_regression(a):
    b = scaled(a, 1.5, is_sum_padded_eager)
    c = compare(a, b)
    flagged = {x.key for x in c.regressions}
    expected = {r.key for r in a.results if is_sum_padded_eager(r) and r.status == OK}
    assert flagged == expected and len(expected) == 11
    x = c.regressions[0]
    assert x.verdict == REGRESSION and x.wall.verdict == REGRESSION and x.device.verdict == REGRESSION
    assert x.wall.ratio == pytest.approx(1.5) and x.device.ratio == pytest.approx(1.5)


def test_faster_beyond_spread_is_an_improvement(a):
    c = compare(a, scaled(a, 0.6, is_sum_padded_eager))
    assert not c.has_regression
    assert {x.key for x in c.improvements} == {r.key for r in a.results if is_sum_padded_eager(r) and r.status == OK}
    assert all(x.wall.ratio == pytest.approx(0.6) for x in c.improvements)


def test_wall_noise_hides_a_change_that_steady_device_time_shows(a):
    r = next(r for r in a.results if r.status == OK)
    w = r.wall
    noisy = WallStats(w.mean_ms, w.median_ms * 0.2, w.median_ms, w.min_ms, w.max_ms, w.n)
    ra = replace(r, wall=noisy, device_time=DeviceTime(100.0, 99.5, 100.5, "graph", True))
    rb = replace(r, wall=replace(noisy, median_ms=w.median_ms * 1.2),
                 device_time=DeviceTime(110.0, 109.5, 110.5, "graph", True))
    (x,) = compare(RunRecord({}, [ra]), RunRecord({}, [rb])).cells
    assert x.wall.verdict == SAME  # 20% slower, but 2·(σa + σb) = 80% of the median
    assert x.device.verdict == REGRESSION  # 10% slower, spread well under 5%
    assert x.verdict == REGRESSION


def test_judge_threshold():
    assert judge(1.0, 1.04, 0.0, 0.0).verdict == SAME  # under the 5% floor
    assert judge(1.0, 1.06, 0.0, 0.0).verdict == REGRESSION
    assert judge(1.0, 0.94, 0.0, 0.0).verdict == IMPROVEMENT
    assert judge(1.0, 1.3, 0.05, 0.1).verdict == SAME  # 0.3 == 2 * (0.05 + 0.1): not beyond
    assert judge(1.0, 1.31, 0.05, 0.1).verdict == REGRESSION
    assert judge(1.0, 1.06, 0.0, 0.0, min_rel=0.1).verdict == SAME
    assert judge(1.0, 1.2, 0.05, 0.05, k=1.0).verdict == REGRESSION


def test_status_changes_and_cells_on_one_side(a):
    first_ok = next(r for r in a.results if r.status == OK)
    first_error = next(r for r in a.results if r.status == ERROR)
    dropped = a.results[-1]
    changed = []
    for r in a.results[:-1]:
        if r.key == first_ok.key:
            r = replace(r, status=ERROR, reason="CUDA out of memory", wall=None, device_time=None)
        elif r.key == first_error.key:
            r = replace(r, status=OK, wall=first_ok.wall, device_time=first_ok.device_time)
        changed.append(r)
    extra = replace(a.results[0], mode="compile:new-mode")
    b = RunRecord(dict(a.environment, torch="2.14.0", git_commit="abc1234"), changed + [extra], 3000.0)
    c = compare(a, b)
    verdicts = {x.key: x.verdict for x in c.cells}
    assert verdicts[first_ok.key] == BROKEN and verdicts[first_error.key] == FIXED
    assert c.has_regression and [x.key for x in c.regressions] == [first_ok.key]
    assert [r.key for r in c.only_a] == [dropped.key] and [r.key for r in c.only_b] == [extra.key]
    assert c.environment_changes == {"torch": ("2.13.0+cu130", "2.14.0"), "git_commit": ("8cc3b2c", "abc1234"),
                                     "copy_gbps": (3900.0, 3000.0)}
    d = json.loads(json.dumps(c.to_dict()))
    assert d["counts"][BROKEN] == 1 and d["counts"][FIXED] == 1
    assert d["only_b"][0]["mode"] == "compile:new-mode"
    assert d["environment_changes"]["torch"] == ["2.13.0+cu130", "2.14.0"]


# --- the robust test on raw samples -------------------------------------------------------------

import numpy as np  # noqa: E402

from jaggedperf.lab.result import UNSTABLE  # noqa: E402
from jaggedperf.lab.results.compare import BOOTSTRAP, UNSTABLE_VERDICT, judge_samples  # noqa: E402


def _cell_with_samples(r, wall_ms):
    return replace(r, wall=WallStats.from_samples(wall_ms), device_time=None)


def test_one_outlier_does_not_hide_a_real_change(a):
    rng = np.random.default_rng(3)
    base = rng.normal(0.100, 0.002, 200)
    faster = base * 0.72
    base[7] = 50.0  # one preempted call in A: σ_A is now 3.5 ms, 35× the median
    r = next(r for r in a.results if r.status == OK)
    ra, rb = _cell_with_samples(r, base), _cell_with_samples(r, faster)
    old = judge(ra.wall.median_ms, rb.wall.median_ms, ra.wall.std_ms, rb.wall.std_ms)
    assert old.verdict == SAME  # what k·(σA+σB) concluded
    (x,) = compare(RunRecord({}, [ra]), RunRecord({}, [rb])).cells
    assert x.verdict == IMPROVEMENT and x.wall.method == BOOTSTRAP
    assert x.wall.ratio == pytest.approx(0.72, rel=0.02) and x.wall.low < x.wall.ratio < x.wall.high < 0.8
    d = x.to_dict()["wall_ms"]
    assert d["ratio_low"] == x.wall.low and d["confidence"] == 0.95


def test_bootstrap_rule_needs_the_interval_off_1_and_the_minimum_effect():
    rng = np.random.default_rng(4)
    a = rng.normal(1.0, 0.01, 200)
    assert judge_samples(a, a * 1.03).verdict == SAME  # certain, but under the 5% minimum effect
    assert judge_samples(a, a * 1.03, min_rel=0.01).verdict == REGRESSION
    wide = rng.normal(1.0, 0.6, 30).clip(0.05)
    assert judge_samples(wide, wide * 1.2).verdict == SAME  # 20% slower, but the interval holds 1
    assert judge_samples(a, a * 0.9).verdict == IMPROVEMENT


def test_an_unstable_cell_is_shown_but_never_a_regression(a):
    r = next(r for r in a.results if r.status == OK)
    slow = replace(scaled(RunRecord({}, [r]), 2.0, lambda _: True).results[0], status=UNSTABLE,
                   reason="wall drifted")
    (x,) = compare(RunRecord({}, [r]), RunRecord({}, [slow])).cells
    assert x.verdict == UNSTABLE_VERDICT and x.wall.ratio == pytest.approx(2.0)
    c = compare(RunRecord({}, [r]), RunRecord({}, [slow]))
    assert not c.has_regression and c.counts()[UNSTABLE_VERDICT] == 1


def test_results_without_samples_fall_back_to_the_quantile_spread(a):
    r = next(r for r in a.results if r.status == OK)
    w = r.wall
    bare = replace(r, wall=WallStats(w.mean_ms, w.std_ms, w.median_ms, w.min_ms, w.max_ms, w.n), device_time=None)
    slower = replace(bare, wall=replace(bare.wall, median_ms=w.median_ms * 1.5))
    (x,) = compare(RunRecord({}, [bare]), RunRecord({}, [slower])).cells
    assert x.wall.method == "spread" and x.wall.low is None and x.verdict == REGRESSION


def _with_speed(r, before, after):
    return replace(r, extra={**r.extra, "host_speed_us": [before, after]})


def test_a_wall_change_while_the_host_ran_slower_is_not_counted(a):
    # the H200 proof's case: B's host-bound wall 1.5× A's, the host probe 1.4× slower beside it, device unchanged
    r = next(r for r in a.results if r.status == OK and r.device_time is not None)
    slow = scaled(RunRecord({}, [r]), 1.5, lambda _: True).results[0]
    slow = replace(slow, device_time=r.device_time)
    ra, rb = _with_speed(r, 2.0, 2.1), _with_speed(slow, 2.9, 2.8)
    (x,) = compare(RunRecord({}, [ra]), RunRecord({}, [rb])).cells
    assert x.wall.verdict == REGRESSION and x.device.verdict == SAME  # shown as measured...
    assert x.verdict == SAME and x.note == "host speed 2.05 → 2.85 µs a probe call (1.39×)"  # ...judged on device
    # without device time there is nothing left to judge by
    (y,) = compare(RunRecord({}, [replace(ra, device_time=None)]), RunRecord({}, [replace(rb, device_time=None)])).cells
    assert y.verdict == UNSTABLE_VERDICT and y.to_dict()["note"] == x.note


def test_a_host_that_changed_speed_during_a_cell_is_named(a):
    r = next(r for r in a.results if r.status == OK)
    slow = scaled(RunRecord({}, [r]), 1.5, lambda _: True).results[0]
    (x,) = compare(RunRecord({}, [_with_speed(r, 2.0, 2.6)]), RunRecord({}, [_with_speed(slow, 2.0, 2.0)])).cells
    assert x.note == "host speed moved during A's cell: 2.00 → 2.60 µs a probe call"


def test_a_steady_host_leaves_the_wall_verdict_alone(a):
    r = next(r for r in a.results if r.status == OK)
    slow = scaled(RunRecord({}, [r]), 1.5, lambda _: True).results[0]
    for speeds in (((2.0, 2.05), (2.1, 2.0)), None):  # probes within 10%, or results written before them
        ra, rb = (_with_speed(r, *speeds[0]), _with_speed(slow, *speeds[1])) if speeds else (r, slow)
        (x,) = compare(RunRecord({}, [ra]), RunRecord({}, [rb])).cells
        assert x.verdict == REGRESSION and x.note is None


def test_a_run_compared_with_itself_is_the_same_whatever_its_host_did(a):
    r = _with_speed(next(r for r in a.results if r.status == OK), 2.0, 2.9)  # the host slowed during the cell
    (x,) = compare(RunRecord({}, [r]), RunRecord({}, [r])).cells
    assert x.verdict == SAME and x.note is None


def _host_bound_pair(a, wall_b_over_a: float):
    """A host-bound cell (wall ~137 µs, device ~13.5 µs: our op compiled at a seed shape on the H200) and B's
    copy whose wall is ``wall_b_over_a`` times A's, device unchanged; tight samples, so the interval is narrow."""
    rng = np.random.default_rng(7)
    r = next(r for r in a.results if r.status == OK and r.device_time is not None)
    wall = rng.normal(0.1368, 0.002, 200)
    device = DeviceTime.from_samples(rng.normal(13.5, 0.05, 200), r.device_time.method, r.device_time.l2_flushed)
    ra = replace(r, wall=WallStats.from_samples(wall), device_time=device)
    return ra, replace(ra, wall=WallStats.from_samples(wall * wall_b_over_a))


def test_a_wall_change_that_follows_the_host_speed_under_the_limit_is_not_counted(a):
    # the H200 stability proof's one finding between identical runs: wall 0.94×, the probes 0.92× (under the
    # 10% limit), 90% of the call host work: 0.93× expected from the host alone
    ra, rb = _host_bound_pair(a, 0.939)
    ra, rb = _with_speed(ra, 3.31, 3.12), _with_speed(rb, 2.96, 2.94)
    (x,) = compare(RunRecord({}, [ra]), RunRecord({}, [rb])).cells
    assert x.wall.verdict == IMPROVEMENT and x.verdict == SAME  # shown as measured, judged on device time
    assert x.note.startswith("wall 0.94× follows the host's speed 0.92× (host work 90% of the call: 0.93×")
    # a change the host's speed does not explain still counts
    ra2, rb2 = _host_bound_pair(a, 0.80)
    (y,) = compare(RunRecord({}, [_with_speed(ra2, 3.31, 3.12)]), RunRecord({}, [_with_speed(rb2, 2.96, 2.94)])).cells
    assert y.verdict == IMPROVEMENT and y.note is None
    # against the host's speed (host faster, wall slower) nothing is explained
    ra3, rb3 = _host_bound_pair(a, 1.07)
    (z,) = compare(RunRecord({}, [_with_speed(ra3, 3.31, 3.12)]), RunRecord({}, [_with_speed(rb3, 2.96, 2.94)])).cells
    assert z.verdict == REGRESSION and z.note is None


def test_a_device_bound_wall_is_not_excused_by_the_host_speed(a):
    # a graph-mode call: the device is 90% of the wall, so a 9% faster host explains ~1% of it, not 7%
    ra, rb = _host_bound_pair(a, 0.93)
    ra = replace(ra, device_time=DeviceTime.from_samples(ra.device_time.samples_us() * 9.1, ra.device_time.method,
                                                          ra.device_time.l2_flushed))
    rb = replace(rb, device_time=ra.device_time)
    (x,) = compare(RunRecord({}, [_with_speed(ra, 3.31, 3.12)]), RunRecord({}, [_with_speed(rb, 2.96, 2.94)])).cells
    assert x.verdict == IMPROVEMENT and x.note is None
