"""One way to time a cell: its call, built, warm and checked, measured into its ``Result``.

- ``time_call``: the wall by the seed's method, measured again until stable (``timing.measure_wall``); with
  ``Options.host_timer`` the host timer beside it, measured again while host + wait stays far from the wall; on
  CUDA the kernels (profiler) and the device time (CUDA-graph replay, else the profiler's kernel sums), measured
  again while its spread does not settle; the host's speed just before and after the wall loop, on CUDA the wall
  timed again while that speed is at its slow level (``settle_host_level``); the status (``UNSTABLE`` with the
  reason when the timing did not settle, its figures kept).
- ``retime_wall_and_host``: the same call's wall and host timer measured again, as a copy of its result with
  everything ``time_call`` derives from them (the doctor's reconcile times the eager and compiled calls again
  through it).

The runner (``runner.run_cell``), the Python API (``api.measure``) and the doctor (``doctor.gather``,
``doctor.reconcile``) time cells through this module only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.measure import stats, timing
from jaggedperf.lab.result import OK, UNSTABLE, DeviceTime, Result

DEFAULT_BYTE_LIMIT = 8 * 10**9


@dataclass(frozen=True)
class Cell:
    op: str
    implementation: str
    mode: str
    case: Case

    @property
    def key(self) -> tuple:
        """The ``Result.key`` of this cell's result."""
        return (self.op, self.implementation, self.mode, self.case)


def default_device() -> torch.device:
    """The device cells run on by default: CUDA when a GPU is present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass
class Options:
    """How cells are measured (and, for the runner, which are run: ``byte_limit``, ``cold_compile``, ``threads``)."""

    device: torch.device = field(default_factory=lambda: default_device())
    warmup: int = 50
    iters: int = 200
    byte_limit: int = DEFAULT_BYTE_LIMIT  # skip a cell whose largest tensor would pass this
    flush_l2: bool = True
    device_time: bool = True  # measure device time and kernels (CUDA only)
    profile_calls: int = 10
    dynamic: bool | None = None  # torch.compile(dynamic=...)
    trace_dir: str | None = None  # write a chrome trace per cell here
    cold_compile: bool = True  # turn off Inductor's on-disk caches so compile time is a cold compile
    threads: int | None = 1  # torch's intra-op CPU threads for CPU cells (None: leave torch's setting)
    stability: stats.Policy = field(default_factory=stats.Policy)  # when a cell is re-measured, then unstable
    host_timer: bool = False  # also time each call until it returns, without a sync, and on CUDA the sync after it
    # (Result.host_call, Result.sync_wait; the doctor)

    def __post_init__(self) -> None:
        # Checked here, not only by the CLI: 0 timed calls fails every cell's wall statistics, and a
        # negative count would silently mean none.
        if self.iters < 1 or self.warmup < 0 or self.profile_calls < 1 or self.byte_limit < 0:
            raise ValueError(f"Options need iters >= 1, warmup >= 0, profile_calls >= 1 and byte_limit >= 0; got "
                             f"iters={self.iters}, warmup={self.warmup}, profile_calls={self.profile_calls}, "
                             f"byte_limit={self.byte_limit}")

    def settings(self, device: str | None = None) -> dict:
        """How cells are measured, as a results file's header records it (``environment["settings"]``): a
        resumed sweep must measure its new cells the same way as the old ones.

        Args:
            device: the device type the cells run on (default: this ``device``'s type; a sweep's workers
                each set their own).

        Returns:
            ``{name: value}``, JSON-serialisable; the trace folder is left out (it changes no number).
        """
        return {"device": device or self.device.type, "warmup": self.warmup, "iters": self.iters,
                "byte_limit": self.byte_limit, "flush_l2": self.flush_l2, "device_time": self.device_time,
                "profile_calls": self.profile_calls, "dynamic": self.dynamic, "cold_compile": self.cold_compile,
                "threads": self.threads}


def time_call(call: Callable, cell: Cell, result: Result, options: Options, copy_gbps: float | None, *,
              tag: str = "", on_stage: Callable[[str], None] | None = None) -> None:
    """Time a built call that already ran once into ``result`` (see the module docstring).

    Args:
        call: the cell's no-argument callable (``modes.build``), warm.
        cell: the cell (for trace names).
        result: filled in place: ``wall``, ``stability``, ``host_call``, device fields, status.
        options: how to measure.
        copy_gbps: the run's copy bandwidth, or None.
        tag: added to trace file names.
        on_stage: called with each stage's name as it starts (``wall``, ``host timer``, ``device time``).

    Raises:
        Whatever the call raises.
    """
    device = options.device
    stage = on_stage or (lambda name: None)
    speed_before = timing.host_speed_us()  # the host's speed beside the cell (``compare`` reads it)
    stage("wall")
    result.wall, result.stability = timing.measure_wall(call, device, warmup=options.warmup, iters=options.iters,
                                                        policy=options.stability)
    if options.host_timer:
        stage("host timer")
        result.host_call, result.sync_wait = timing.host_and_wait_stats(call, device, iters=options.iters)
        _settle_host_timer(call, result, options, stage)
    speeds = [speed_before, timing.host_speed_us()]
    if device.type == "cuda":
        speeds = settle_host_level(lambda: _wall_and_host(call, options, stage), result, speeds, options.stability,
                                   timing.host_speed_us)
    if device.type == "cuda" and options.device_time:
        stage("device time")
        measure_device(call, cell, result, options, copy_gbps, tag=tag)
        _settle_device_time(call, cell, result, options, copy_gbps)
    result.extra["host_speed_us"] = speeds  # beside the wall (and host timer) kept
    _judge(result)


# A wall measured while the host probe ran above this many times the fastest probe of the process is measured again
# (``settle_host_level``): the quiet rounds' threshold (``rounds.QUIET_SLACK``), half-way between the shared GPU host's
# two speed levels (~2x apart, each holding for seconds to minutes: docs/decisions/quiet-rounds.md).
HOST_SLOW_LEVEL = 1.5


def settle_host_level(measure: Callable[[], timing.WallAndHost], result: Result, speeds: list[float],
                      policy: stats.Policy, probe: Callable[[], float]) -> list[float]:
    """Measure a wall taken while the host was at its slow level again, up to the policy's attempts.

    The GPU host's speed has two levels ~2x apart: a host-bound call timed at the slow one takes twice as long while
    its own samples agree, so two runs' tables disagreed by 2x on the same cell. A measurement whose slower probe
    (before or after it) is above ``HOST_SLOW_LEVEL`` × the fastest probe this process has seen is taken again; the
    one at the lowest level is kept (the wall, its stability and the host timer with its gap). Still above it after
    every attempt: the stability records why (``contended``: the cell is then unstable, its figures kept). The first
    cells of a process are judged against the probes seen so far, so a process that starts on a slow spell judges it
    quiet.

    Args:
        measure: the wall (and host timer, where the cell has one) measured again.
        result: filled in place where an attempt is kept; ``extra["host_level"]``: the level kept.
        speeds: the probes (µs) just before and after the measurement ``result`` holds.
        policy: its ``attempts`` bound the measurements.
        probe: the host speed probe (µs a call).

    Returns:
        the probes beside the measurement kept.
    """
    level = timing.host_level(speeds)
    attempts = 1
    while level > HOST_SLOW_LEVEL and attempts < policy.attempts:
        attempts += 1
        before = probe()
        t = measure()
        again = [before, probe()]
        new_level = timing.host_level(again)
        level = timing.host_level(speeds)  # the reference may have moved down with the new probes
        if new_level < level:
            result.wall, result.stability = t.wall, t.stability
            if t.host_call is not None:
                result.host_call, result.sync_wait = t.host_call, t.sync_wait
                result.extra["host_wall_gap"] = timing.host_wall_gap(t.host_call, t.sync_wait, t.wall)
            speeds, level = again, new_level
    result.extra["host_level"] = round(level, 3)
    if level > HOST_SLOW_LEVEL:  # kept through ``_judge`` as the machine's reason (a CPU's contention's place)
        slow = (f"host slow: its probe ran at {level:.2f}x the fastest this process saw, in each of {attempts} "
                "measurement(s)")
        result.stability.contended = "; ".join(filter(None, [result.stability.contended, slow]))
    return speeds


def _wall_and_host(call: Callable, options: Options, stage: Callable[[str], None]) -> timing.WallAndHost:
    if options.host_timer:
        return timing.measure_wall_and_host(call, options.device, warmup=options.warmup, iters=options.iters,
                                            policy=options.stability, on_stage=stage)
    stage("wall")
    wall, stability = timing.measure_wall(call, options.device, warmup=options.warmup, iters=options.iters,
                                          policy=options.stability)
    return timing.WallAndHost(wall, stability, None, None)


def retime_wall_and_host(call: Callable, result: Result, options: Options) -> Result:
    """``call``'s wall loop, then its host timer, measured again: a copy of ``result`` with those timings and what
    ``time_call`` derives from them (host − device, the host–wall gap, the stability judged with the device
    samples, the status); ``result`` itself is left as it is. Raises whatever the call raises."""
    t = timing.measure_wall_and_host(call, options.device, warmup=options.warmup, iters=options.iters,
                                     policy=options.stability)
    out = replace(result, wall=t.wall, stability=t.stability, host_call=t.host_call, sync_wait=t.sync_wait,
                  extra={**result.extra, "host_wall_gap": timing.host_wall_gap(t.host_call, t.sync_wait, t.wall)})
    if result.device_time is not None:
        out.host_us = _host_us(out)
    out.status, out.reason = result.status, result.reason
    _judge(out)
    return out


def _judge(result: Result) -> None:
    """The stability judged on the wall and device samples together, and the status it gives a timed result."""
    result.stability = timing.finish_stability(result.stability, result.wall, result.device_time)
    if result.stability.stable:
        if result.status == UNSTABLE:
            result.status, result.reason = OK, None
    else:  # figures kept, but no finding is drawn from them
        result.status, result.reason = UNSTABLE, result.stability.reason


def _settle_host_timer(call: Callable, result: Result, options: Options, stage: Callable[[str], None]) -> None:
    """Measure the wall and the host timer again while they disagree, up to the policy's attempts.

    A call's wall is its host work plus its wait at the sync: the two loops measure the same calls, so host +
    wait far from the wall means the machine changed between them (a slow spell in one loop), and whatever is
    built on both (the doctor's parts) would not add up. The most consistent pair is kept, the gap recorded in
    ``result.extra["host_wall_gap"]``.
    """
    gap = timing.host_wall_gap(result.host_call, result.sync_wait, result.wall)
    for _ in range(options.stability.attempts - 1):
        if gap is None or abs(gap) <= options.stability.max_iqr_rel:
            break
        t = timing.measure_wall_and_host(call, options.device, warmup=options.warmup, iters=options.iters,
                                         policy=options.stability, on_stage=stage)
        again = timing.host_wall_gap(t.host_call, t.sync_wait, t.wall)
        if again is not None and abs(again) < abs(gap) and (t.stability.stable or not result.stability.stable):
            result.wall, result.stability = t.wall, t.stability
            result.host_call, result.sync_wait = t.host_call, t.sync_wait
            gap = again
    result.extra["host_wall_gap"] = gap


def _settle_device_time(call: Callable, cell: Cell, result: Result, options: Options, copy_gbps: float | None) -> None:
    """Measure a device time whose spread did not settle again (graph replay only), up to the policy's attempts,
    keeping the most settled one, as the wall is."""
    best = result.device_time
    for _ in range(options.stability.attempts - 1):
        settled, badness = timing.device_judgement(best, options.stability)
        if settled:
            break
        again = device_time(call, cell.mode, options.device, options.flush_l2)
        if again is None:  # not captured: the profiler's sum is measured once
            break
        if timing.device_judgement(again, options.stability)[1] < badness:
            best = again
    if best is not result.device_time:
        result.device_time = best
        fill_bandwidth(result, copy_gbps)


def measure_device(call: Callable, cell: Cell, result: Result, options: Options, copy_gbps: float | None,
                   *, tag: str = "") -> None:
    """Fill in ``result``'s kernels, device time, host time and bandwidth from the profiler and, where the
    call can be captured, CUDA-graph replay (CUDA only); a chrome trace per cell when ``options.trace_dir``.
    """
    device = options.device
    trace = None
    if options.trace_dir:
        trace = f"{options.trace_dir}/{cell.implementation}{tag}__{cell.mode.replace(':', '-')}__{cell.case.label}.json"
    profile = timing.profile_kernels(call, device, calls=options.profile_calls, flush=options.flush_l2, trace_path=trace)
    result.kernels_per_call = profile.kernels_per_call
    result.kernel_names = [k.name for k in profile.kernels]
    result.extra["kernels"] = [vars(k) for k in profile.kernels]
    result.extra["memory_ops_per_call"] = profile.memory_ops_per_call
    result.device_time = device_time(call, cell.mode, device, options.flush_l2) or timing.profiler_device_time(profile, options.flush_l2)
    fill_bandwidth(result, copy_gbps)


def fill_bandwidth(result: Result, copy_gbps: float | None) -> None:
    """``result``'s host time (wall − device), bandwidth and share of the copy bandwidth, from its device time."""
    result.host_us = _host_us(result)
    if result.device_time.median_us > 0 and result.bytes_moved:
        result.gbps = result.bytes_moved / (result.device_time.median_us * 1e-6) / 1e9
        if copy_gbps:
            result.pct_of_copy = 100 * result.gbps / copy_gbps


def _host_us(result: Result) -> float:
    """The host's µs a call: its wall median less its device time's."""
    return result.wall.median_ms * 1e3 - result.device_time.median_us


def device_time(call: Callable, mode: str, device: torch.device, flush: bool) -> DeviceTime | None:
    """CUDA-graph replay time where the call can be captured, else None (the profiler sum is used)."""
    if mode == modes_mod.GRAPH:  # the call already is a replay
        return timing.replay_device_time(call, flush=flush)
    if modes_mod.uses_cuda_graphs(mode):  # Inductor manages its own graphs: no nested capture
        return None
    graph = timing.capture_graph(call, device)
    return None if graph is None else timing.replay_device_time(graph.replay, flush=flush)
