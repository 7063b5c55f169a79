"""``lab.measure.cell``: a built call timed into its result, each measurement taken again until it settles, and the
doctor's re-timing of a kept call."""

import pytest
import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import runner
from jaggedperf.lab.measure import cell as measure_cell
from jaggedperf.lab.measure import timing
from jaggedperf.lab.result import OK, UNSTABLE, DeviceTime, Result, Stability, WallStats
from helpers.fake_clock import noisy, steady

CPU = torch.device("cpu")
SMALL = Case(16, 4, 30, 0.3)


def test_a_device_time_that_did_not_settle_is_measured_again_and_the_settled_one_kept(monkeypatch):
    # the wall settles at once; the first device replays spread 40% (another tenant's kernels), the second do not
    wall = steady(0.05, n=40)
    monkeypatch.setattr(timing, "measure_wall", lambda call, device, **kw: (
        WallStats.from_samples(wall), timing.Stability(True, 0.01, 0.0, 1, kw["policy"].max_iqr_rel,
                                                       kw["policy"].max_drift_rel)))
    noisy_dev = DeviceTime.from_samples(noisy(20.0, n=40), "graph", True)
    settled = DeviceTime.from_samples(steady(20.0, jitter=0.01, n=40), "graph", True)
    again = iter([noisy_dev, settled])
    monkeypatch.setattr(measure_cell, "measure_device",
                        lambda call, cell, result, options, gbps, tag="": setattr(result, "device_time", noisy_dev))
    monkeypatch.setattr(measure_cell, "device_time", lambda call, mode, device, flush: next(again))
    monkeypatch.setattr(timing, "host_speed_us", lambda: 1.0)  # a host at one level (settle_host_level: below)
    (cell,) = runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager"])
    result = Result("jagged_mean", "segment_reduce", "eager", SMALL, "cuda")
    options = runner.Options(device=torch.device("cuda"), warmup=1, iters=40)
    options.host_timer = False
    measure_cell.time_call(lambda: None, cell, result, options, None)
    assert result.device_time is settled and result.stability.stable and result.status != UNSTABLE
    assert result.host_us == pytest.approx(result.wall.median_ms * 1e3 - settled.median_us)


def test_a_host_timer_that_disagrees_with_the_wall_loop_is_measured_again_with_it(monkeypatch):
    # the first host timer ran through a slow spell (190 µs against a 122 µs wall); the second pair agrees
    def stable(kw):
        return timing.Stability(True, 0.01, 0.0, 1, kw["policy"].max_iqr_rel, kw["policy"].max_drift_rel)

    walls = iter([steady(0.122, n=40), steady(0.110, n=40)])
    hosts = iter([steady(0.190, n=40), steady(0.108, n=40)])
    monkeypatch.setattr(timing, "measure_wall", lambda call, device, **kw: (WallStats.from_samples(next(walls)),
                                                                           stable(kw)))
    monkeypatch.setattr(timing, "host_and_wait_stats", lambda call, device, **kw: (WallStats.from_samples(next(hosts)),
                                                                                  None))
    (cell,) = runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager"])
    result = Result("jagged_mean", "segment_reduce", "eager", SMALL, "cpu")
    options = runner.Options(device=CPU, warmup=1, iters=40)
    options.host_timer = True
    measure_cell.time_call(lambda: None, cell, result, options, None)
    assert result.wall.median_ms == pytest.approx(0.110, rel=0.02)
    assert result.host_call.median_ms == pytest.approx(0.108, rel=0.02)
    assert abs(result.extra["host_wall_gap"]) < 0.05


def test_a_retimed_call_is_a_copy_judged_again_with_the_device_samples(monkeypatch):
    """``retime_wall_and_host``: new wall and host timer in a copy (host − device, the gap, the status from the
    stability judged with the device samples kept from the first measurement); the result itself unchanged."""
    def stable(kw):
        return timing.Stability(True, 0.01, 0.0, 1, kw["policy"].max_iqr_rel, kw["policy"].max_drift_rel)

    monkeypatch.setattr(timing, "measure_wall", lambda call, device, **kw: (WallStats.from_samples(steady(0.1, n=40)),
                                                                           stable(kw)))
    monkeypatch.setattr(timing, "host_and_wait_stats", lambda call, device, **kw: (
        WallStats.from_samples(steady(0.098, n=40)), None))
    first = Result("jagged_mean", "segment_reduce", "eager", SMALL, "cuda", status=UNSTABLE, reason="drifted",
                   wall=WallStats.from_samples(noisy(0.2, n=40)), stability=Stability(False, 0.5, 0.0, 3, 0.25, 0.25),
                   device_time=DeviceTime.from_samples(steady(20.0, jitter=0.01, n=40), "graph", True))
    again = measure_cell.retime_wall_and_host(lambda: None, first, runner.Options(device=CPU, warmup=1, iters=40))
    assert first.status == UNSTABLE and first.host_call is None  # left as it was
    assert again.status == OK and again.reason is None and again.stability.stable
    assert again.host_us == pytest.approx(100.0 - 20.0, rel=0.02)
    assert abs(again.extra["host_wall_gap"]) < 0.05


def _slow_host_run(monkeypatch, probes, walls, device="cuda"):
    """``time_call`` on ``device`` (nothing touches it: wall loops and probes scripted), the process's fastest probe
    so far 1.2 µs; returns the result and how many wall loops ran."""
    loops = []

    def wall(call, device, **kw):
        loops.append(1)
        return WallStats.from_samples(steady(next(walls), n=40)), timing.Stability(
            True, 0.01, 0.0, 1, kw["policy"].max_iqr_rel, kw["policy"].max_drift_rel)

    monkeypatch.setattr(timing, "measure_wall", wall)
    monkeypatch.setattr(timing, "host_speed_us", lambda: next(probes))
    monkeypatch.setattr(timing, "_fastest_probe_us", 1.2)
    (cell,) = runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager"])
    result = Result("jagged_mean", "segment_reduce", "eager", SMALL, device)
    options = runner.Options(device=torch.device(device), warmup=1, iters=40, device_time=False)
    measure_cell.time_call(lambda: None, cell, result, options, None)
    return result, len(loops)


def test_a_wall_timed_at_the_hosts_slow_level_is_timed_again_and_the_quiet_one_kept(monkeypatch):
    # the GPU host's two speed levels: the first loop ran with the probe at 2.4 µs (2x the quiet 1.2) and took twice
    # as long while its samples agreed; the second ran at the quiet level
    result, loops = _slow_host_run(monkeypatch, iter([2.4, 2.5, 1.2, 1.3]), iter([0.54, 0.28]))
    assert loops == 2 and result.wall.median_ms == pytest.approx(0.28, rel=0.02)
    assert result.extra["host_speed_us"] == [1.2, 1.3] and result.extra["host_level"] == pytest.approx(1.3 / 1.2, abs=1e-3)
    assert result.stability.stable and result.status != UNSTABLE


def test_a_host_slow_in_every_attempt_leaves_the_cell_unstable_with_its_figures_and_why(monkeypatch):
    result, loops = _slow_host_run(monkeypatch, iter([2.4, 2.4, 2.6, 2.5, 2.4, 2.4]), iter([0.54, 0.57, 0.55]))
    assert loops == 3 and result.wall.median_ms == pytest.approx(0.54, rel=0.02)  # the lowest level's (first) kept
    assert result.status == UNSTABLE and not result.stability.stable
    assert any("host slow: its probe ran at 2.00x" in r and "3 measurement(s)" in r for r in result.stability.reasons)


def test_on_the_cpu_a_slow_probe_is_left_to_the_contention_rule(monkeypatch):
    # a CPU cell's host is the machine it measures: its load is judged by watching the other processes
    result, loops = _slow_host_run(monkeypatch, iter([2.4, 2.4]), iter([0.54]), device="cpu")
    assert loops == 1 and "host_level" not in result.extra
