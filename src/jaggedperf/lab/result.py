"""Plain records of what the lab measured: one ``Result`` per cell, ``RunRecord`` for a whole run.

Everything here serialises to JSON with ``to_dict`` and back with ``from_dict``; a results file is
either one JSON document (``RunRecord``) or JSON lines, one ``Result`` per line (sweeps).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from jaggedperf.inputs import Case

# status of a cell
OK = "ok"  # correct and timed
WRONG = "wrong"  # ran, but the result is off the float64 reference: not timed
SKIPPED = "skipped"  # not run (too large for the byte limit, mode unavailable on this device, ...)
ERROR = "error"  # raised, ran out of memory, failed to compile, timed out
STATUSES = (OK, WRONG, SKIPPED, ERROR)


@dataclass
class WallStats:
    """Wall time per call in milliseconds, by the seed's method (warm-up, then timed calls, sync after each)."""

    mean_ms: float
    std_ms: float
    median_ms: float
    min_ms: float
    max_ms: float
    n: int


@dataclass
class DeviceTime:
    """Device time per call in microseconds."""

    median_us: float
    p20_us: float
    p80_us: float
    method: str  # "graph" (CUDA-graph replay, L2 flushed) or "profiler" (sum of kernel times)
    l2_flushed: bool


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
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["case"] = Case.from_dict(d["case"])
        if kw.get("wall") is not None:
            kw["wall"] = WallStats(**kw["wall"])
        if kw.get("device_time") is not None:
            kw["device_time"] = DeviceTime(**kw["device_time"])
        return cls(**kw)


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
