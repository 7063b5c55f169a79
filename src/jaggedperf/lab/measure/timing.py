"""How the lab times a callable: wall per call (the seed's method), device time, kernels, bandwidth.

- Wall: ``warmup`` calls, then ``iters`` calls each followed by a device sync, timed with
  ``time.perf_counter`` (pytorch/pytorch#160355's method: 50 + 200). Every sample is kept; the
  statistics are quantiles (``stats``). ``measure_wall`` judges the samples (spread, drift) and measures
  again, up to ``Policy.attempts`` times, until they are stable.
- Host: ``host_and_wait_stats`` times each call until it returns, without the sync (after a sync before
  it, so the device queue is empty): the host's own work per call. On the CPU a call returns when it is
  done, so this is a second, independent measurement of the wall. On CUDA it also times the sync after
  each call returns (the wait): the device work the host did not hide, and the sync.
- Device, preferred: capture the call in a CUDA graph and time its replays with
  ``triton.testing.do_bench`` (CUDA events, L2 flushed before every replay). Replays leave the host
  out, so this is the device's own time for the call.
- Device, fallback (callables that cannot be captured: host syncs, compiled code that manages its
  own graphs): run under ``torch.profiler`` and sum the device activity per call, with a flush
  kernel (``bitwise_not`` on a buffer twice the L2, a name no jagged implementation uses) between
  calls and taken out of the sums.
- Kernels per call always come from the profiler.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from jaggedperf.lab.measure import stats
from jaggedperf.lab.measure.env import CpuLoad
from jaggedperf.lab.result import DeviceTime, Stability, WallStats, judge

# The clock of every host-timed loop here (seconds). A module attribute so that tests can put a fake clock
# in its place and script what each call "takes" (outliers, drift) without loading the machine.
clock: Callable[[], float] = time.perf_counter

FLUSH_KERNEL_MARK = "bitwise_not"
_MEMORY_OP_PREFIXES = ("Memcpy", "Memset")


def synchronizer(device: torch.device) -> Callable[[], None]:
    """A no-argument function that waits for ``device``'s queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def wall_samples(fn: Callable[[], object], device: torch.device, *, warmup: int = 50, iters: int = 200) -> list[float]:
    """Wall time of each call by the seed's method: ``warmup`` calls, then ``iters`` calls, each followed by a sync.

    Args:
        fn: the call to time.
        device: where it runs (what to sync).
        warmup: untimed calls first.
        iters: timed calls.

    Returns:
        ms per timed call, in order.
    """
    sync = synchronizer(device)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(iters):
        start = clock()
        fn()
        sync()
        times.append((clock() - start) * 1e3)
    return times


def wall_stats(fn: Callable[[], object], device: torch.device, *, warmup: int = 50, iters: int = 200) -> WallStats:
    """Wall time per call by the seed's method (``wall_samples``), summarised, samples kept; one attempt, not judged.

    Raises:
        ValueError: ``iters`` is 0.
    """
    return summarize_ms(wall_samples(fn, device, warmup=warmup, iters=iters))


def measure_wall(fn: Callable[[], object], device: torch.device, *, warmup: int = 50, iters: int = 200,
                 policy: stats.Policy = stats.Policy()) -> tuple[WallStats, Stability]:
    """Wall time per call, measured again until its samples are stable (at most ``policy.attempts`` times).

    Each attempt is ``wall_samples`` (warm-up included) and is judged by ``stats.stability``, and by
    ``stats.contended`` on the CPUs other processes kept busy meanwhile (watched for at least
    ``policy.load_window_s``). The first stable, uncontended attempt is kept; when none is, the least bad
    one (uncontended first, then ``stats.badness``) is kept and the stability says why.

    Args:
        fn: the call to time.
        device: where it runs.
        warmup: untimed calls before each attempt.
        iters: timed calls per attempt.
        policy: the thresholds and the number of attempts.

    Returns:
        ``(statistics of the kept attempt with its samples, stability)``; the stability judges the wall only
        (``finish_stability`` adds device time).

    Raises:
        ValueError: ``iters`` is 0.
    """
    if iters < 1:
        raise ValueError("no timings to summarize: iters must be at least 1")
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    cpus = machine_cpus()
    # contention is judged with the samples: not for too few of them, nor when the machine's size is unknown
    judge_load = cpus is not None and policy.cpu_slack is not None and iters >= stats.MIN_SAMPLES_TO_JUDGE
    window = policy.load_window_s if judge_load else 0.0
    kept = None
    history = []
    if judge_load and policy.load_effect and _fastest_probe_us is None:
        probe_slowdown()  # the first level to judge a loaded attempt's probe by
    for attempt in range(policy.attempts):
        load = CpuLoad.start()
        times = wall_samples(fn, device, warmup=warmup, iters=iters)
        other = load.other_cpus(window)
        judged = stats.stability(times, policy, what="wall", to_us=1e3)
        busy = stats.contended(other, cpus, threads, policy) if judge_load else None
        slowed = None
        if busy is not None and policy.load_effect:  # the load's effect on this core, measured
            slowed = probe_slowdown()
            busy = None if slowed <= policy.max_iqr_rel else (
                f"{busy}, and a fixed host probe ran {slowed:.0%} slower than its fastest in this process (more than "
                f"{policy.max_iqr_rel:.0%}): the load slowed this cell's core; a clean number needs a quieter machine")
        history.append({"median_ms": float(statistics.median(times)), "iqr_rel": judged.iqr_rel,
                        "drift_rel": judged.drift_rel, "other_cpu": other, "contended": busy is not None,
                        **({"probe_slowdown": slowed} if slowed is not None else {})})
        # the least bad attempt: uncontended first, then the smallest excess over the thresholds, then the quietest
        rank = (busy is not None, stats.badness(judged, policy), other if busy is not None and other else 0.0)
        if kept is None or rank < kept[3]:
            kept = (times, judged, other, rank, busy)
        if judged.stable and busy is None:
            break
    times, judged, other, _, busy = kept
    reasons = list(judged.reasons) + ([busy] if busy else [])
    stability = Stability(not reasons, judged.iqr_rel, judged.drift_rel, len(history), policy.max_iqr_rel,
                          policy.max_drift_rel, reasons, other_cpu=other, history=history, judged=judged.judged,
                          contended=busy)
    if reasons:
        stability.reasons.append(stats.after_attempts(len(history)))
    return summarize_ms(times), stability


HOST_SPEED_CALLS = 500  # calls of the host speed probe: ~1 ms


def host_speed_us(calls: int = HOST_SPEED_CALLS) -> float:
    """How fast the host runs just now: µs per call of a fixed host-only operation (an add of two one-element CPU
    tensors: Python, dispatch and a trivial kernel), the median of five blocks. The shared GPU host's speed
    changes over minutes (other tenants, clocks): two runs' wall times of a host-bound cell differ by that much
    while each run's own samples agree, and only a reference measured beside the cell can tell (``compare``).
    Uses the real clock (``time.perf_counter``), never ``clock``, which tests may script."""
    x, y = torch.ones(1), torch.ones(1)
    block = max(calls // 5, 1)
    for _ in range(block):
        torch.add(x, y)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(block):
            torch.add(x, y)
        times.append((time.perf_counter() - start) / block * 1e6)
    return statistics.median(times)


_fastest_probe_us: float | None = None  # the host probe's fastest in this process: the quiet level it is judged by


def probe_slowdown() -> float:
    """How much slower the host probe (``host_speed_us``) runs now than the fastest it has run in this process, as
    a fraction (0.0 when this is the fastest): the effect a busy machine has on this core just now. Measured twice
    (the faster kept: one probe can land on a scheduler hiccup), ~2 ms."""
    return host_level([min(host_speed_us(), host_speed_us())]) - 1.0


def host_level(probes_us: list[float]) -> float:
    """The slower of ``probes_us`` (``host_speed_us`` readings beside one measurement) over the fastest probe this
    process has seen, these included (``_fastest_probe_us``, which only this lowers): 1.0 at the quiet level."""
    global _fastest_probe_us
    fastest = min(probes_us)
    if _fastest_probe_us is None or fastest < _fastest_probe_us:
        _fastest_probe_us = fastest
    return max(probes_us) / _fastest_probe_us


def host_wall_gap(host: WallStats | None, wait: WallStats | None, wall: WallStats | None) -> float | None:
    """(host timer + wait − wall) / wall, medians: how far the host timer's loop is from the wall loop that times
    the same calls (a call's wall is its host work plus its wait at the sync); None without the host timer.

    Args:
        host: the host timer (``host_and_wait_stats``), or None.
        wait: its waits at the sync (CUDA), or None (the CPU: the call returns when it is done).
        wall: the wall loop's statistics, or None.
    """
    if host is None or wall is None or wall.median_ms <= 0:
        return None
    return (host.median_ms + (wait.median_ms if wait is not None else 0.0) - wall.median_ms) / wall.median_ms


def device_judgement(t: DeviceTime | None, policy: stats.Policy) -> tuple[bool, float]:
    """Whether a device time's spread settled (as ``result.judge`` judges it) and how far past the policy it is
    (``stats.badness``); (True, 0) without samples: nothing to judge."""
    samples = t.samples_us() if t is not None else None
    if samples is None or not len(samples):
        return True, 0.0
    j = stats.stability(samples, policy, what="device", drift=False)
    return j.stable, stats.badness(j, policy)


def machine_cpus() -> int | None:
    """The machine's CPUs (what ``/proc/stat``'s busy time is shared between); None: unknown, contention is
    then not judged (tests put None here so that their verdicts do not depend on the machine's load)."""
    return os.cpu_count()


def finish_stability(stability: Stability, wall: WallStats, device: DeviceTime | None) -> Stability:
    """``stability`` (from ``measure_wall``) judged again with the device samples too: a cell is stable when
    its kept wall attempt and its device samples both are.

    Args:
        stability: the wall's.
        wall: the kept wall statistics (with samples).
        device: the device time (with samples), or None.

    Returns:
        ``stability``, updated in place.
    """
    dev = device.samples_us() if device is not None else None
    judged = judge(wall.samples_ms(), dev, stats.Policy(stability.max_iqr_rel, stability.max_drift_rel,
                                                        max(stability.attempts, 1)))
    reasons = judged.reasons + ([stability.contended] if stability.contended else [])
    stability.device_iqr_rel = judged.device_iqr_rel
    stability.stable, stability.judged = not reasons, judged.judged
    stability.reasons = reasons + ([stats.after_attempts(stability.attempts)] if reasons else [])
    return stability


@dataclass
class WallAndHost:
    """One call's wall loop and, right after it, its host-timer loop (``measure_wall_and_host``)."""

    wall: WallStats
    stability: Stability
    host_call: WallStats
    sync_wait: WallStats | None  # None off CUDA, as ``host_and_wait_stats`` gives it


def measure_wall_and_host(fn: Callable[[], object], device: torch.device, *, warmup: int, iters: int,
                          policy: stats.Policy, on_stage: Callable[[str], None] | None = None) -> WallAndHost:
    """``measure_wall`` then ``host_and_wait_stats`` of the same warm call: the pair whose gap
    (``host_wall_gap``) the runner settles and the doctor's reconcile judges; ``on_stage`` is called with "wall",
    then "host timer". Raises whatever ``fn`` raises."""
    stage = on_stage or (lambda name: None)
    stage("wall")
    wall, stability = measure_wall(fn, device, warmup=warmup, iters=iters, policy=policy)
    stage("host timer")
    host, wait = host_and_wait_stats(fn, device, iters=iters)
    return WallAndHost(wall, stability, host, wait)


def host_and_wait_stats(fn: Callable[[], object], device: torch.device, *, warmup: int = 10,
                        iters: int = 200) -> tuple[WallStats, WallStats | None]:
    """The host timer: each call from its start until it returns, with the device idle before it (a sync
    first) and no sync inside the timing; on CUDA also the wait of the same calls: from a call's return
    until the sync after it returns. A call's wall is its host time plus its wait (the seed's loop times
    both at once), so the wait is the device work the call's own host work did not hide (e.g. a kernel
    launched last), plus the sync's cost: what the device adds to the wall, which device time alone is not
    when kernels overlap the host's launches.

    Args:
        fn: the call.
        device: where it runs.
        warmup: untimed calls first.
        iters: timed calls.

    Returns:
        ``(host, wait)`` ms per call, summarised, samples kept; wait is None off CUDA (the CPU's sync is
        empty and its call returns when it is done).
    """
    sync = synchronizer(device)
    waits_too = device.type == "cuda"
    for _ in range(warmup):
        fn()
    sync()
    times, waits = [], []
    for _ in range(iters):
        start = clock()
        fn()
        times.append((clock() - start) * 1e3)
        if waits_too:  # its own clock pair, so a scripted clock's one-duration-per-pair contract still holds
            start = clock()
            sync()
            waits.append((clock() - start) * 1e3)
        else:
            sync()
    return summarize_ms(times), summarize_ms(waits) if waits_too else None


def summarize_ms(times: list[float]) -> WallStats:
    """Statistics of per-call times in ms, the samples kept.

    Raises:
        ValueError: no times.
    """
    if not len(times):
        raise ValueError("no timings to summarize")
    return WallStats.from_samples(times)


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list, q in [0, 1]."""
    if not sorted_values:
        raise ValueError("percentile of nothing")
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# --- L2 flush ----------------------------------------------------------------------------------

_FLUSH_BUFFERS: dict[torch.device, torch.Tensor] = {}


def flush_buffer(device: torch.device) -> torch.Tensor:
    """A uint8 buffer twice the L2 (at least 64 MiB), kept for the process."""
    if device not in _FLUSH_BUFFERS:
        props = torch.cuda.get_device_properties(device)
        nbytes = max(2 * getattr(props, "L2_cache_size", 0), 64 << 20)
        _FLUSH_BUFFERS[device] = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return _FLUSH_BUFFERS[device]


def flush_l2(device: torch.device) -> None:
    """Overwrite ``device``'s flush buffer (larger than L2), evicting what the measured call left in L2."""
    flush_buffer(device).bitwise_not_()


# --- device time -------------------------------------------------------------------------------


def capture_graph(fn: Callable[[], object], device: torch.device) -> torch.cuda.CUDAGraph | None:
    """The call captured in a CUDA graph, or None when it cannot be captured."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.stream(stream):
            fn()  # warm-up on the capture stream: lazy init must not happen during capture
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)
        with torch.cuda.graph(graph, stream=stream):
            fn()
        torch.cuda.synchronize(device)
    except Exception:  # capture refused (host sync, graph-managing callable, ...)
        _recover_after_failed_capture(device)
        return None
    return graph


def _recover_after_failed_capture(device: torch.device) -> None:
    try:
        torch.cuda.synchronize(device)
    except Exception:
        pass
    # A failed capture can leave the caching allocator's private pool referenced; clearing is safe.
    torch.cuda.empty_cache()
    # ... and the device's default generator registered with the dead capture (its epilogue never ran): its next
    # draw outside a capture raises "Offset increment outside graph capture encountered unexpectedly" (torch 2.11).
    # A clone of its state keeps the seed and offset and carries no capture.
    generator = torch.cuda.default_generators[device.index if device.index is not None else
                                              torch.cuda.current_device()]
    try:
        generator.graphsafe_set_state(generator.clone_state())
    except (AttributeError, RuntimeError):  # a torch without graph-safe generator states: nothing to reset
        pass


def replay_device_time(replay: Callable[[], object], *, flush: bool = True, rep_ms: int = 40) -> DeviceTime:
    """Device time of a CUDA-graph replay (``graph.replay`` or a callable that only replays)."""
    from triton.testing import do_bench

    if flush:
        times = do_bench(replay, warmup=10, rep=rep_ms, return_mode="all")
    else:
        times = _events_no_flush(replay, rep_ms)
    return DeviceTime.from_samples([t * 1e3 for t in times], "graph", flush)


def _events_no_flush(fn: Callable[[], object], rep_ms: int) -> list[float]:
    """Back-to-back replays with events, no flush: per-call ms (for --no-flush-l2)."""
    times = []
    deadline = time.perf_counter() + rep_ms / 1e3
    while time.perf_counter() < deadline or len(times) < 10:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


@dataclass
class KernelStat:
    name: str
    calls_per_call: float  # launches of this kernel per call of the measured callable
    us_per_call: float  # device time of this kernel per call


@dataclass
class KernelProfile:
    calls: int  # how many calls were profiled
    kernels_per_call: float  # device kernels (memcpy/memset excluded) per call
    memory_ops_per_call: float  # memcpy/memset per call
    device_us_per_call: list[float]  # device activity of each profiled call (flush excluded)
    kernels: list[KernelStat] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.device_us_per_call)


def profile_kernels(
    fn: Callable[[], object], device: torch.device, *, calls: int = 10, flush: bool = True, trace_path: str | None = None
) -> KernelProfile:
    """Run ``fn`` ``calls`` times under torch.profiler and attribute device activity to each call."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()  # nothing lazy inside the profiled window
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            if flush:
                flush_l2(device)
            fn()
            torch.cuda.synchronize(device)
    if trace_path:
        prof.export_chrome_trace(trace_path)
    device_events = sorted(
        (e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start
    )
    per_call: list[float] = []
    by_name: dict[str, list[float]] = {}
    n_kernels = n_memory = 0
    current = None
    for event in device_events:
        duration = event.time_range.end - event.time_range.start
        if FLUSH_KERNEL_MARK in event.name:
            current = 0.0
            per_call.append(current)
            continue
        if not flush and not per_call:
            per_call.append(0.0)
        if per_call:
            per_call[-1] += duration
        if event.name.startswith(_MEMORY_OP_PREFIXES):
            n_memory += 1
        else:
            n_kernels += 1
        by_name.setdefault(event.name, []).append(duration)
    if not flush:
        per_call = [sum(per_call) / calls] * calls if per_call else [0.0] * calls
    stats = [
        KernelStat(name, len(durations) / calls, sum(durations) / calls)
        for name, durations in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    ]
    return KernelProfile(calls, n_kernels / calls, n_memory / calls, per_call or [0.0], stats)


def profiler_device_time(profile: KernelProfile, flush: bool) -> DeviceTime:
    """Device time from a kernel profile: median, p20 and p80 of the per-call kernel sums (method ``profiler``),
    the sums kept as the samples."""
    return DeviceTime.from_samples(profile.device_us_per_call, "profiler", flush)


# --- bandwidth ---------------------------------------------------------------------------------


def copy_bandwidth_gbps(device: torch.device, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    from triton.testing import do_bench

    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=200, return_mode="median")  # noqa: F821 - run before the del
    del src, dst
    return 2 * nbytes / (ms * 1e-3) / 1e9


COPY_PROBE_BYTES = (1 << 30, 1 << 28)  # 1 GiB; 256 MiB (still 5× the H200's L2) where the GPU is shared and full


def measure_copy_bandwidth(device: torch.device) -> float | None:
    """``copy_bandwidth_gbps`` of ``device``, or None (not CUDA, or the measurement failed).

    A GPU shared with other processes may not have the 2 GiB the probe wants (beside nine test workers
    an H200 had not): out of memory, the smaller probe is taken instead.
    """
    if device.type != "cuda":
        return None
    for nbytes in COPY_PROBE_BYTES:
        try:
            return copy_bandwidth_gbps(device, nbytes)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
        except Exception:
            return None
    return None
