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
from lab.fake_results import make_record, scaled


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
    w, d = r.wall, r.device_time
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
