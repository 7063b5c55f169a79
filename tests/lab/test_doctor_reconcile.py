"""The doctor's reconcile (``lab.doctor.reconcile``): when the first measurement's parts do not add up to Δ, the eager
and compiled calls, kept warm, are timed again side by side without compiling again; the best round is kept, and the
doctor still refuses when no round adds up.

The wall loop and the host timer are scripted (``Script``): per call, in the order the doctor first times them, and
per measurement of that call (0: the cell's own, 1…: reconcile's rounds), each call "takes" a given number of µs.
On the CPU the parts sum to compiled host − eager host, so the residual is (compiled wall − host) − (eager wall −
host)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from jaggedperf.inputs import Case
from jaggedperf.lab import modes, runner
from jaggedperf.lab.measure import stats, timing
from jaggedperf.lab.doctor import gather, reconcile, verdicts
from jaggedperf.lab.measure.cell import retime_wall_and_host
from jaggedperf.lab.result import OK, SKIPPED, UNSTABLE, Result, Stability, WallStats

CPU = torch.device("cpu")
CASE = Case(8, 3, 12, 0.3)
MODE = "compile:default"
POLICY = stats.Policy(max_iqr_rel=0.25, max_drift_rel=0.25, attempts=4, cpu_slack=None)
EAGER, COMPILED, PLAIN, BOUNDARY = range(4)  # the order in which gather first times the calls


class Script:
    """``timing.measure_wall`` and ``timing.host_and_wait_stats``, scripted: ``walls[i][n]`` and ``hosts[i][n]`` are
    the µs per call of call ``i``'s ``n``-th measurement (the last entry repeats). Each measurement runs the call
    once, so a kept compiled call that had to compile again would show in Dynamo's counters (``graphs_in_rounds``)."""

    def __init__(self, walls: dict[int, list[float]], hosts: dict[int, list[float]], *, noisy: set | None = None,
                 raise_at: tuple[int, int] | None = None) -> None:
        self.walls, self.hosts = walls, hosts
        self.noisy = noisy or set()  # (call, measurement) whose wall samples spread far past the policy
        self.raise_at = raise_at  # (call, measurement) whose wall loop raises
        self.calls: list = []
        self.measured: dict[int, int] = {}  # call -> wall measurements taken
        self.graphs_in_rounds: list[tuple[int, int]] = []  # Dynamo's unique graphs before and after a round's call

    def _at(self, script: dict[int, list[float]], i: int, n: int) -> float:
        seq = script.get(i, script.get(-1))
        return seq[min(n, len(seq) - 1)]

    def index(self, fn) -> int:
        """The call's number: the order in which it was first timed."""
        if not any(fn is c for c in self.calls):
            self.calls.append(fn)
        return next(i for i, c in enumerate(self.calls) if c is fn)

    def measure_wall(self, fn, device, *, warmup=50, iters=200, policy=stats.Policy()):
        i = self.index(fn)
        n = self.measured.get(i, 0)
        self.measured[i] = n + 1
        if (i, n) == self.raise_at:
            raise RuntimeError("the device went away")
        before = counters["stats"]["unique_graphs"]
        fn()
        if n > 0:
            self.graphs_in_rounds.append((before, counters["stats"]["unique_graphs"]))
        ms = self._at(self.walls, i, n) / 1e3
        half = iters // 2 - 1
        samples = ([ms * 0.5] * half + [ms, ms] + [ms * 1.5] * half if (i, n) in self.noisy  # median ms, IQR ~ms
                   else [ms] * iters)
        return (WallStats.from_samples(samples),
                Stability(True, 0.0, 0.0, 1, policy.max_iqr_rel, policy.max_drift_rel))

    def host_and_wait_stats(self, fn, device, *, warmup=10, iters=200):
        i = self.index(fn)
        fn()
        return WallStats.from_samples([self._at(self.hosts, i, self.measured[i] - 1) / 1e3] * iters), None


@pytest.fixture
def builds(monkeypatch):
    """Every ``modes.build`` and ``modes.compile_fn`` call, by mode."""
    seen = {"build": [], "compile_fn": []}
    build, compile_fn = modes.build, modes.compile_fn

    def counting_build(fn, args, mode, device, **kw):
        seen["build"].append(mode)
        return build(fn, args, mode, device, **kw)

    def counting_compile_fn(fn, mode, **kw):
        seen["compile_fn"].append(mode)
        return compile_fn(fn, mode, **kw)

    monkeypatch.setattr(modes, "build", counting_build)
    monkeypatch.setattr(modes, "compile_fn", counting_compile_fn)
    return seen


def _gather(monkeypatch, script: Script, implementation: str):
    monkeypatch.setattr(timing, "measure_wall", script.measure_wall)
    monkeypatch.setattr(timing, "host_and_wait_stats", script.host_and_wait_stats)
    opts = runner.Options(device=CPU, warmup=1, iters=20, stability=POLICY)
    batch, ref = runner.prepare_case("jagged_mean", CASE, opts)
    ev = gather.gather("jagged_mean", implementation, MODE, CASE, batch, ref, opts, None, compile_budget_s=None)
    return ev, verdicts.diagnose(ev)


def test_a_first_measurement_that_does_not_add_up_is_timed_again_until_it_does(monkeypatch, builds):
    # first: eager's host timer reads 120 against its 100 µs wall, the compiled call's 270 against 300 (each within
    # the runner's 25% gap): Δ 200, parts 150, residual +50 (25%); round 1 still +35, round 2 agrees
    script = Script(walls={EAGER: [100], COMPILED: [300], -1: [150]},
                    hosts={EAGER: [120, 115, 100], COMPILED: [270, 280, 300], -1: [150]})
    ev, d = _gather(monkeypatch, script, "sum_padded")
    r = ev.reconcile
    assert (r.delta_before_us, r.residual_before_us) == pytest.approx((200.0, 50.0), abs=1e-3)
    assert r.rounds == 2 and r.residuals_us == pytest.approx([35.0, 0.0], abs=1e-3) and r.kept_round == 2
    assert r.sums_ok and r.residual_after_us == pytest.approx(0.0, abs=1e-3) and r.reason is None
    # the kept round is what the results, the evidence and the diagnosis hold
    assert ev.eager.host_call.median_ms == pytest.approx(0.1) and ev.compiled.host_call.median_ms == pytest.approx(0.3)
    assert ev.eager.extra["host_wall_gap"] == pytest.approx(0.0, abs=1e-6)
    assert ev.compiled.extra["host_wall_gap"] == pytest.approx(0.0, abs=1e-6)
    assert ev.host.eager_call_us == pytest.approx(100.0) and ev.host.compiled_call_us == pytest.approx(300.0)
    assert d.sums_ok and d.refused is None and d.residual_us == pytest.approx(r.residual_after_us, abs=1e-6)
    assert d.delta_us == pytest.approx(r.delta_after_us) and ev.input_form.available  # the twin's host cancelled
    assert any("timed again side by side, 2 rounds" in n and "round 2 kept" in n for n in ev.notes), ev.notes
    # timed again, never built or compiled again: one build per cell, and Dynamo compiled nothing in the rounds
    assert script.measured[EAGER] == script.measured[COMPILED] == 3 and script.measured[PLAIN] == 1
    assert builds["build"] == ["eager", MODE, MODE, modes.boundary_twin(MODE)]
    assert builds["compile_fn"] == [MODE, MODE, modes.boundary_twin(MODE)]
    assert script.graphs_in_rounds and all(before == after for before, after in script.graphs_in_rounds)
    assert "reconcile" in ev.stage_s


def test_when_no_round_adds_up_the_least_bad_is_kept_and_the_doctor_still_refuses(monkeypatch):
    # Δ 200 every time; the compiled call's host timer leaves +50, then +40, +30, +45 µs
    script = Script(walls={EAGER: [100], COMPILED: [300]}, hosts={EAGER: [100], COMPILED: [250, 260, 270, 255]})
    ev, d = _gather(monkeypatch, script, "segment_reduce")
    r = ev.reconcile
    assert r.rounds == POLICY.attempts - 1 == 3
    assert r.residuals_us == pytest.approx([40.0, 30.0, 45.0], abs=1e-3) and r.kept_round == 2
    assert not r.sums_ok and r.residual_after_us == pytest.approx(30.0, abs=1e-3) and "no round" in r.reason
    assert ev.compiled.host_call.median_ms == pytest.approx(0.27)
    assert not d.sums_ok and d.residual_us == pytest.approx(30.0, abs=1e-3)
    assert d.refused.startswith("the measured parts leave +30.0 µs of Δ +200.0 µs unattributed (15% > 10%)")
    assert d.verdict.startswith("no verdict:")
    assert any("residuals +40.0, +30.0, +45.0 µs" in n for n in ev.notes), ev.notes


def test_a_first_measurement_that_adds_up_is_not_timed_again(monkeypatch):
    script = Script(walls={EAGER: [100], COMPILED: [300]}, hosts={EAGER: [100], COMPILED: [295]})
    ev, d = _gather(monkeypatch, script, "segment_reduce")
    assert script.measured == {EAGER: 1, COMPILED: 1}
    assert ev.reconcile.rounds == 0 and ev.reconcile.reason == reconcile.WITHIN and ev.reconcile.sums_ok
    assert ev.reconcile.residual_after_us == pytest.approx(5.0, abs=1e-3) == d.residual_us
    assert d.sums_ok and not any("timed again" in n for n in ev.notes) and "reconcile" not in ev.stage_s


# --- reconcile on its own: hand-built results, no compile ------------------------------------------


def _timed(mode: str, wall_us: float, host_us: float) -> Result:
    r = Result("jagged_mean", "segment_reduce", mode, CASE, "cpu")
    r.wall = WallStats.from_samples([wall_us / 1e3] * 20)
    r.host_call = WallStats.from_samples([host_us / 1e3] * 20)
    r.stability = Stability(True, 0.0, 0.0, 1, POLICY.max_iqr_rel, POLICY.max_drift_rel)
    r.extra["host_wall_gap"] = timing.host_wall_gap(r.host_call, None, r.wall)
    return r


def _reconcile(monkeypatch, script: Script, *, compiled_status: str = OK):
    monkeypatch.setattr(timing, "measure_wall", script.measure_wall)
    monkeypatch.setattr(timing, "host_and_wait_stats", script.host_and_wait_stats)
    eager, compiled = _timed("eager", 100, 100), _timed(MODE, 300, 250)  # residual +50 of Δ 200
    if compiled_status != OK:
        compiled.status, compiled.reason = compiled_status, "wall drifted"
    calls = reconcile.Calls(lambda: None, lambda: None)
    for i, call in enumerate((calls.eager, calls.compiled)):
        script.index(call)
        script.measured[i] = 1  # their first measurement is the results'
    opts = runner.Options(device=CPU, warmup=1, iters=20, stability=POLICY)
    return eager, compiled, reconcile.reconcile(eager, compiled, calls, opts, device_time=False)


def test_a_round_that_would_make_a_stable_timing_unstable_is_not_kept(monkeypatch):
    # round 1 adds up, but the compiled call's wall samples spread past the policy; round 2 is closer than the first
    script = Script(walls={EAGER: [100], COMPILED: [300]}, hosts={EAGER: [100], COMPILED: [250, 300, 270]},
                    noisy={(COMPILED, 1)})
    eager, compiled, r = _reconcile(monkeypatch, script)
    assert r.rounds == 3 and r.residuals_us[0] == pytest.approx(0.0, abs=1e-3) and r.kept_round == 2
    assert compiled.status == OK and compiled.stability.stable and r.residual_after_us == pytest.approx(30.0, abs=1e-3)


def test_a_round_that_raises_keeps_the_first_measurement_and_says_why(monkeypatch):
    script = Script(walls={EAGER: [100], COMPILED: [300]}, hosts={EAGER: [100], COMPILED: [250]},
                    raise_at=(COMPILED, 1))
    eager, compiled, r = _reconcile(monkeypatch, script)
    assert r.rounds == 0 and r.kept_round is None and not r.sums_ok
    assert r.reason == "round 1 stopped: RuntimeError: the device went away"
    assert compiled.host_call.median_ms == pytest.approx(0.25) and compiled.status == OK
    assert "round 1 stopped" in reconcile.describe(r)


def test_an_unstable_round_may_replace_an_already_unstable_timing(monkeypatch):
    script = Script(walls={EAGER: [100], COMPILED: [300]}, hosts={EAGER: [100], COMPILED: [250, 300]},
                    noisy={(COMPILED, 1)})
    eager, compiled, r = _reconcile(monkeypatch, script, compiled_status=UNSTABLE)
    assert r.rounds == 1 and r.kept_round == 1 and r.sums_ok
    assert compiled.status == UNSTABLE and "wall IQR" in compiled.reason


def test_on_par_cells_are_not_timed_again(monkeypatch):
    script = Script(walls={EAGER: [100], COMPILED: [100.5]}, hosts={EAGER: [100], COMPILED: [90]})
    monkeypatch.setattr(timing, "measure_wall", script.measure_wall)
    eager, compiled = _timed("eager", 100, 100), _timed(MODE, 100.5, 90)
    calls = reconcile.Calls(lambda: None, lambda: None)
    r = reconcile.reconcile(eager, compiled, calls, runner.Options(device=CPU, stability=POLICY), device_time=False)
    assert r.rounds == 0 and r.reason == reconcile.ON_PAR and not r.sums_ok and script.measured == {}
    assert reconcile.describe(r) is None


def test_untimed_cells_have_no_reconcile():
    eager, compiled = _timed("eager", 100, 100), _timed(MODE, 300, 250)
    compiled.host_call = None
    assert reconcile.reconcile(eager, compiled, reconcile.Calls(), runner.Options(device=CPU), device_time=False) is None


# --- the warm call the runner keeps ---------------------------------------------------------------


def test_measure_cell_keeps_the_checked_warm_call_it_timed_and_run_cell_lets_it_go(monkeypatch):
    opts = runner.Options(device=CPU, warmup=1, iters=3)
    batch, ref = runner.prepare_case("jagged_mean", CASE, opts)
    timed = []
    time_call = runner.time_call

    def watching_time_call(call, *args, **kw):
        timed.append(call)
        return time_call(call, *args, **kw)

    monkeypatch.setattr(runner, "time_call", watching_time_call)
    measured = runner.measure_cell(runner.Cell("jagged_mean", "segment_reduce", "eager", CASE), batch, ref, opts, None)
    assert measured.result.status in (OK, UNSTABLE) and timed == [measured.call]
    assert measured.call().shape == ref.shape  # warm and runnable
    again = retime_wall_and_host(measured.call, measured.result, opts)
    assert again is not measured.result and again.wall is not measured.result.wall and again.host_call is not None
    measured.release(CPU)
    assert measured.call is None
    skipped = runner.measure_cell(runner.Cell("jagged_mean", "segment_reduce", "graph", CASE), batch, ref, opts, None)
    assert skipped.result.status == SKIPPED and skipped.call is None and len(timed) == 1
