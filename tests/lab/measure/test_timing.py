import time

import pytest
import torch

from jaggedperf.lab.measure import timing


def test_wall_stats_measures_a_known_duration():
    stats = timing.wall_stats(lambda: time.sleep(0.004), torch.device("cpu"), warmup=2, iters=15)
    assert stats.n == 15
    assert 3.9 <= stats.median_ms <= 8.0  # sleep never returns early; a loaded machine may add a little
    assert stats.min_ms <= stats.median_ms <= stats.max_ms
    assert stats.std_ms >= 0


def test_wall_stats_runs_warmup_then_iters():
    calls = []
    timing.wall_stats(lambda: calls.append(1), torch.device("cpu"), warmup=5, iters=7)
    assert len(calls) == 12


def test_summarize_known_values():
    s = timing.summarize_ms([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (s.mean_ms, s.median_ms, s.min_ms, s.max_ms, s.n) == (4.0, 3.0, 1.0, 10.0, 5)
    assert s.std_ms == pytest.approx(3.1623, rel=1e-4)
    with pytest.raises(ValueError):
        timing.summarize_ms([])


def test_percentile_interpolates():
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert timing.percentile(values, 0.5) == 30.0
    assert timing.percentile(values, 0.2) == pytest.approx(18.0)
    assert timing.percentile(values, 0.0) == 10.0 and timing.percentile(values, 1.0) == 50.0
    assert timing.percentile([7.0], 0.8) == 7.0


@pytest.mark.gpu
@pytest.mark.timed
def test_replay_device_time_of_a_known_copy():
    device = torch.device("cuda")
    src = torch.randn(64 << 20, device=device)  # 256 MB
    dst = torch.empty_like(src)
    graph = timing.capture_graph(lambda: dst.copy_(src), device)
    assert graph is not None
    dt = timing.replay_device_time(graph.replay)
    gbps = 2 * src.numel() * 4 / (dt.median_us * 1e-6) / 1e9
    copy = timing.copy_bandwidth_gbps(device)
    assert 0.5 * copy < gbps < 1.5 * copy
    assert dt.p20_us <= dt.median_us <= dt.p80_us


@pytest.mark.gpu
def test_profiler_counts_kernels_and_excludes_the_flush():
    device = torch.device("cuda")
    x = torch.randn(1 << 20, device=device)
    prof = timing.profile_kernels(lambda: (x * 2).sum(), device, calls=5)
    assert prof.kernels_per_call == pytest.approx(2.0)
    assert len(prof.device_us_per_call) == 5 and all(t > 0 for t in prof.device_us_per_call)
    assert not any(timing.FLUSH_KERNEL_MARK in k.name for k in prof.kernels)


@pytest.mark.gpu
def test_uncapturable_call_returns_none():
    device = torch.device("cuda")
    x = torch.randn(100, device=device)
    assert timing.capture_graph(lambda: x.sum().item(), device) is None
    torch.cuda.synchronize()
    assert float((x * 1).sum()) == pytest.approx(float(x.sum()), rel=1e-5)  # CUDA still usable
    # and the default generator too: the failed capture must not leave it registered with the dead graph
    state = torch.cuda.get_rng_state()
    first = torch.randn(1000, device=device)
    torch.cuda.set_rng_state(state)
    assert torch.equal(torch.randn(1000, device=device), first)


# --- samples, stability and re-measurement, on a scripted clock ---------------------------------

from jaggedperf.lab.measure import stats  # noqa: E402
from helpers.fake_clock import FakeClock, drifting, noisy, steady, with_outliers  # noqa: E402

CPU = torch.device("cpu")


def test_wall_stats_keeps_every_sample_in_order(monkeypatch):
    script = [1.0, 2.0, 3.0, 4.0, 10.0]
    monkeypatch.setattr(timing, "clock", FakeClock(script))
    w = timing.wall_stats(lambda: None, CPU, warmup=3, iters=5)
    assert w.samples_ms().tolist() == pytest.approx(script)
    assert (w.median_ms, w.p20_ms, w.p80_ms, w.iqr_ms) == pytest.approx((3.0, 1.8, 5.2, 2.0))


def test_outliers_leave_a_cell_stable_at_its_median(monkeypatch):
    monkeypatch.setattr(timing, "clock", FakeClock(with_outliers(1.0, every=20, factor=400)))
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=200)
    assert st.stable and st.attempts == 1 and st.reasons == []
    assert wall.median_ms == pytest.approx(1.0, rel=0.01) and wall.max_ms == pytest.approx(400, rel=0.02)


def test_a_noisy_attempt_is_measured_again_and_the_stable_one_kept(monkeypatch):
    script = noisy(1.0, n=200) + noisy(1.0, n=200) + steady(2.0, n=200)
    monkeypatch.setattr(timing, "clock", FakeClock(script))
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=200, policy=stats.Policy(attempts=3))
    assert st.stable and st.attempts == 3 and len(st.history) == 3
    assert [h["iqr_rel"] > 0.1 for h in st.history] == [True, True, False]
    assert wall.median_ms == pytest.approx(2.0, rel=0.02)  # the third attempt's samples
    assert wall.samples_ms().size == 200


def test_drift_in_every_attempt_makes_the_cell_unstable_with_its_figures(monkeypatch):
    monkeypatch.setattr(timing, "clock", FakeClock(drifting(1.0, step_at=150, factor=1.3, n=200) * 2))
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=200, policy=stats.Policy(attempts=2))
    assert not st.stable and st.attempts == 2
    assert st.drift_rel == pytest.approx(0.3, rel=0.05) and st.iqr_rel <= 0.1
    assert "drifted" in st.reason and st.reason.endswith("after 2 attempts")
    assert wall.median_ms == pytest.approx(1.0, rel=0.02)


def test_least_unstable_attempt_is_kept(monkeypatch):
    wild = [0.1, 9.0] * 100  # IQR far past the median
    mild = noisy(1.0, n=200)
    monkeypatch.setattr(timing, "clock", FakeClock(wild + mild + wild))
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=200, policy=stats.Policy(attempts=3))
    assert not st.stable and st.attempts == 3
    assert wall.samples_ms().tolist() == pytest.approx(mild, rel=1e-6)


def test_host_and_wait_stats_time_until_return_with_no_wait_on_the_cpu(monkeypatch):
    monkeypatch.setattr(timing, "clock", FakeClock(steady(0.5, n=50)))
    h, wait = timing.host_and_wait_stats(lambda: None, CPU, warmup=2, iters=50)
    assert h.n == 50 and h.median_ms == pytest.approx(0.5, rel=0.02)
    assert wait is None


def test_host_and_wait_stats_time_the_sync_after_each_call_on_cuda(monkeypatch):
    # each call "takes" 0.5 ms until it returns, then its sync 0.1 ms: two clock pairs per call on CUDA
    monkeypatch.setattr(timing, "clock", FakeClock([0.5, 0.1] * 40))
    monkeypatch.setattr(timing, "synchronizer", lambda device: (lambda: None))
    host, wait = timing.host_and_wait_stats(lambda: None, torch.device("cuda"), warmup=0, iters=40)
    assert host.n == wait.n == 40
    assert host.median_ms == pytest.approx(0.5) and wait.median_ms == pytest.approx(0.1)


def test_measure_wall_refuses_no_iters():
    with pytest.raises(ValueError):
        timing.measure_wall(lambda: None, CPU, iters=0)


def test_a_steady_load_is_caught_by_watching_the_machine(monkeypatch):
    # every call takes 1 ms ± 1%: nothing in the samples shows that another process shared the core
    monkeypatch.setattr(timing, "clock", FakeClock(steady(1.0)))
    monkeypatch.setattr(timing, "machine_cpus", lambda: 2)
    monkeypatch.setattr(timing.torch, "get_num_threads", lambda: 1)  # the runner's default for CPU cells
    seen = iter([1.9, 1.95, 0.3])  # other processes' CPUs during each attempt: busy, busy, then quiet
    monkeypatch.setattr(timing.CpuLoad, "other_cpus", lambda self, window=0.0: next(seen))
    strict = stats.Policy(attempts=3, load_effect=False)  # the load alone counts
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=50, policy=strict)
    assert st.stable and st.attempts == 3 and st.other_cpu == 0.3 and st.contended is None
    assert [h["contended"] for h in st.history] == [True, True, False]
    seen = iter([1.9, 1.8])
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=50, policy=stats.Policy(attempts=2,
                                                                                               load_effect=False))
    assert not st.stable and st.contended.startswith("CPU contended: other processes kept 1.80 of 2 CPUs busy")
    assert st.reasons == [st.contended, "after 2 attempts"] and st.iqr_rel < 0.1
    assert stats.contended(1.9, 2, 1, stats.Policy(cpu_slack=None)) is None  # judged only when asked
    # a busy loop on the other vCPU of a 2-vCPU machine: half its spare CPU plus the slack is all it may use
    assert stats.contended(1.0, 2, 1, stats.Policy()) is not None and stats.contended(0.7, 2, 1, stats.Policy()) is None
    assert stats.contended(0.3, 16, 1, stats.Policy()) is None and stats.contended(7.8, 16, 1, stats.Policy())


def test_a_busy_machine_counts_where_it_slowed_the_host_probe(monkeypatch):
    # the default rule: a loaded attempt is judged by its effect, a fixed host probe against its fastest here
    monkeypatch.setattr(timing, "clock", FakeClock(steady(1.0)))
    monkeypatch.setattr(timing, "machine_cpus", lambda: 2)
    monkeypatch.setattr(timing.torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(timing.CpuLoad, "other_cpus", lambda self, window=0.0: 1.7)  # always busy
    monkeypatch.setattr(timing, "_fastest_probe_us", None)
    probes = iter([2.0, 2.0, 2.1, 2.1])  # the first level, then 5% slower: the load left this core alone
    monkeypatch.setattr(timing, "host_speed_us", lambda: next(probes))
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=50, policy=stats.Policy(attempts=3))
    assert st.stable and st.attempts == 1 and st.contended is None and st.other_cpu == 1.7
    assert st.history[0]["probe_slowdown"] == pytest.approx(0.05)
    probes = iter([3.0] * 6)  # 50% slower than its fastest (2.0) on every attempt: the load slowed this core
    wall, st = timing.measure_wall(lambda: None, CPU, warmup=0, iters=50, policy=stats.Policy(attempts=3))
    assert not st.stable and st.attempts == 3
    assert "a fixed host probe ran 50% slower than its fastest" in st.contended and "quieter machine" in st.contended
