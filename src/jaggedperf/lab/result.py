"""Plain records of what the lab measured: one ``Result`` per cell, ``RunRecord`` for a whole run.

Everything here serialises to JSON with ``to_dict`` and back with ``from_dict``; a results file is
either one JSON document (``RunRecord``) or JSON lines, one ``Result`` per line (sweeps).

Units: ``WallStats`` is in ms and ``DeviceTime`` in µs (their field names say so, and older results
files hold them so); tables, reports and plots show every per-call time in µs. Each keeps its raw
per-call samples, encoded (``stats.encode``), in the same unit; ``recompute`` rebuilds every statistic
of a result from them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from jaggedperf.inputs import Case
from jaggedperf.lab.measure import stats
from jaggedperf.lab.results.typed import from_data

# status of a cell
OK = "ok"  # correct and timed, and the timing was stable
UNSTABLE = "unstable"  # correct and timed, but the timing never settled (see ``Stability``): figures kept, no finding
WRONG = "wrong"  # ran, but the result is off the float64 reference: not timed
SKIPPED = "skipped"  # not run (too large for the byte limit, mode unavailable on this device, ...)
ERROR = "error"  # raised, ran out of memory, failed to compile, timed out
STATUSES = (OK, UNSTABLE, WRONG, SKIPPED, ERROR)
TIMED = (OK, UNSTABLE)  # statuses whose cells carry timings


@dataclass
class WallStats:
    """Wall time per call in milliseconds, by the seed's method (warm-up, then timed calls, sync after each).

    The spread is the quantiles (p20–p80, IQR); ``std_ms`` is kept but never shown as the spread. Results
    written before samples were kept have None for the quantiles and the samples.
    """

    mean_ms: float
    std_ms: float
    median_ms: float
    min_ms: float
    max_ms: float
    n: int
    p20_ms: float | None = None
    p80_ms: float | None = None
    iqr_ms: float | None = None  # p75 − p25
    samples: str | None = None  # every timed call, in ms, in order (``stats.encode``)

    @classmethod
    def from_samples(cls, samples_ms) -> "WallStats":
        """The statistics of per-call times in ms, with the samples kept.

        Raises:
            ValueError: no samples, or one not finite.
        """
        s = stats.summarize(samples_ms)
        return cls(s.mean, s.std, s.median, s.min, s.max, s.n, s.p20, s.p80, s.iqr, stats.encode(samples_ms))

    def samples_ms(self) -> np.ndarray | None:
        """The per-call samples in ms (float32 precision), or None when the record has none."""
        return None if self.samples is None else stats.decode(self.samples)


@dataclass
class DeviceTime:
    """Device time per call in microseconds."""

    median_us: float
    p20_us: float
    p80_us: float
    method: str  # "graph" (CUDA-graph replay, L2 flushed) or "profiler" (sum of kernel times)
    l2_flushed: bool
    iqr_us: float | None = None  # p75 − p25
    samples: str | None = None  # every timed replay or profiled call, in µs, in order (``stats.encode``)

    @classmethod
    def from_samples(cls, samples_us, method: str, l2_flushed: bool) -> "DeviceTime":
        """The statistics of per-call device times in µs, with the samples kept.

        Raises:
            ValueError: no samples, or one not finite.
        """
        s = stats.summarize(samples_us)
        return cls(s.median, s.p20, s.p80, method, l2_flushed, s.iqr, stats.encode(samples_us))

    def samples_us(self) -> np.ndarray | None:
        """The per-call samples in µs (float32 precision), or None when the record has none."""
        return None if self.samples is None else stats.decode(self.samples)


@dataclass
class Stability:
    """Whether a cell's timing settled: the figures of the attempt kept and why it is unstable, if it is.

    A cell is measured up to ``Policy.attempts`` times; the first stable attempt is kept, else the least
    unstable one, and the cell's status becomes ``UNSTABLE``.
    """

    stable: bool
    iqr_rel: float  # wall IQR / wall median of the attempt kept
    drift_rel: float | None  # wall: (last-third median − first-third median) / median; None: too few samples
    attempts: int  # wall measurements taken
    max_iqr_rel: float  # the thresholds the cell was judged by
    max_drift_rel: float
    reasons: list[str] = field(default_factory=list)  # why unstable (empty when stable)
    device_iqr_rel: float | None = None  # device IQR / device median, where device time was measured
    other_cpu: float | None = None  # CPUs kept busy by other processes while the cell was timed (env.CpuLoad)
    history: list[dict] = field(default_factory=list)  # every attempt: median_ms, iqr_rel, drift_rel, other_cpu
    judged: bool = True  # False: too few samples to judge (stats.MIN_SAMPLES_TO_JUDGE); ``stable`` is then True
    contended: str | None = None  # why the machine was too busy while the kept attempt ran (stats.contended), or None

    @property
    def reason(self) -> str:
        """The reasons as one phrase ("" when stable)."""
        return "; ".join(self.reasons)


@dataclass
class Result:
    op: str
    implementation: str
    mode: str
    case: Case
    device: str  # "cuda" or "cpu"
    status: str = OK
    reason: str | None = None  # why skipped / wrong / error
    rel_error: float | None = None  # ‖out − ref‖ / ‖ref‖ over finite reference entries
    compile_s: float | None = None  # first call (compile + run), seconds
    wall: WallStats | None = None
    device_time: DeviceTime | None = None
    host_us: float | None = None  # wall median − device median
    kernels_per_call: float | None = None
    kernel_names: list[str] = field(default_factory=list)
    bytes_moved: int | None = None  # bytes that must move (the op's floor), not what the implementation moved
    gbps: float | None = None  # bytes_moved / device time
    pct_of_copy: float | None = None  # gbps / copy bandwidth measured in the same run, in %
    speedup_vs_eager: float | None = None  # eager wall median / this wall median, same implementation and case
    extra: dict[str, Any] = field(default_factory=dict)
    stability: Stability | None = None  # how settled the timing was (timed cells)
    threads: int | None = None  # torch's intra-op CPU threads while the cell ran
    host_call: WallStats | None = None  # ms per call until the call returns, no sync (host timer; the doctor's)
    sync_wait: WallStats | None = None  # CUDA: ms per call from its return to the sync's end (same loop as host_call)

    @property
    def key(self) -> tuple:
        """Identity of the cell (what a resumed sweep skips)."""
        return (self.op, self.implementation, self.mode, self.case)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["case"] = self.case.to_dict()
        d["case_label"] = self.case.label
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        """A result from its ``to_dict`` form: every field by its annotated type, the parts (case, wall, device
        time, stability) by theirs; unknown keys ignored (``results.typed``, the one reader of results).

        Raises:
            IncompatibleData (a ValueError): a required field is missing or a value is not of its field's type.
        """
        return from_data(cls, d)

    @property
    def timed(self) -> bool:
        """Ran to a wall time (ok or unstable)."""
        return self.status in TIMED and self.wall is not None


@dataclass
class RunRecord:
    """A whole run: the environment it ran in and every cell's result."""

    environment: dict[str, Any]
    results: list[Result]
    copy_gbps: float | None = None  # device-to-device copy bandwidth (read + write) measured in this run

    def to_dict(self) -> dict:
        return {
            "environment": self.environment,
            "copy_gbps": self.copy_gbps,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "RunRecord":
        return cls(d.get("environment", {}), [Result.from_dict(r) for r in d.get("results", [])], d.get("copy_gbps"))


def recompute(result: Result, copy_gbps: float | None = None) -> Result:
    """Every statistic of ``result`` rebuilt from its raw samples (in place), as the runner computes them.

    Wall and device statistics come from their samples; then host time (wall median − device median),
    bandwidth (bytes moved / device median) and, with ``copy_gbps``, its share of copy bandwidth. The
    stability figures of the kept attempt (IQR, drift, device IQR) are recomputed with the thresholds the
    cell was judged by (the CPU contention recorded while it ran stays: it is not in the samples), and its
    status follows them. Speedups need the eager cell: ``attach_speedups``.

    Args:
        result: a result with samples (one without any is returned unchanged).
        copy_gbps: the run's copy bandwidth, for ``pct_of_copy`` (None: left as recorded).

    Returns:
        ``result``.
    """
    wall = result.wall.samples_ms() if result.wall is not None else None
    if wall is not None and wall.size:
        result.wall = WallStats.from_samples(wall)
    dev = result.device_time.samples_us() if result.device_time is not None else None
    if dev is not None and dev.size:
        d = result.device_time
        result.device_time = DeviceTime.from_samples(dev, d.method, d.l2_flushed)
    if result.wall is not None and result.device_time is not None:
        result.host_us = result.wall.median_ms * 1e3 - result.device_time.median_us
        if result.device_time.median_us > 0 and result.bytes_moved:
            result.gbps = result.bytes_moved / (result.device_time.median_us * 1e-6) / 1e9
            if copy_gbps:
                result.pct_of_copy = 100 * result.gbps / copy_gbps
    if result.stability is not None and wall is not None and wall.size:
        st = result.stability
        policy = stats.Policy(st.max_iqr_rel, st.max_drift_rel, max(st.attempts, 1))
        judged = judge(wall, dev, policy)
        st.iqr_rel, st.drift_rel, st.device_iqr_rel = judged.iqr_rel, judged.drift_rel, judged.device_iqr_rel
        reasons = judged.reasons + ([st.contended] if st.contended else [])
        st.stable, st.judged = not reasons, judged.judged
        st.reasons = reasons + ([stats.after_attempts(st.attempts)] if reasons else [])
        if result.status in TIMED:
            result.status = OK if st.stable else UNSTABLE
    return result


@dataclass
class Judged:
    """The stability figures of one wall attempt and, where measured, the device samples."""

    stable: bool
    iqr_rel: float
    drift_rel: float | None
    device_iqr_rel: float | None
    reasons: list[str]
    judged: bool


def judge(wall_ms, device_us, policy: stats.Policy) -> Judged:
    """Judge wall samples (spread and drift) and device samples (spread only: replays are short and few).

    Args:
        wall_ms: the wall samples of one attempt, in order.
        device_us: the device samples, or None.
        policy: the thresholds.

    Returns:
        The figures and the reasons the cell is unstable, if it is.
    """
    w = stats.stability(wall_ms, policy, what="wall", to_us=1e3)
    reasons = list(w.reasons)
    device_iqr = None
    if device_us is not None and len(device_us):
        d = stats.stability(device_us, policy, what="device", drift=False)
        device_iqr = d.iqr_rel
        reasons += d.reasons
    return Judged(not reasons, w.iqr_rel, w.drift_rel, device_iqr, reasons, w.judged)
