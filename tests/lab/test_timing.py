import time

import pytest
import torch

from jaggedperf.lab import timing


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
