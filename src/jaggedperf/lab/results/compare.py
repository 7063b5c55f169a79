"""Two runs, cell by cell: did B get slower or faster than A beyond what the measurements can tell apart?

A cell of A matches the cell of B with the same ``Result.key`` (op, implementation, mode, case). For each
matched pair where both are ok, wall median and device median are compared separately:

- the ratio is B / A (above 1: B is slower);
- the change counts only when it passes a threshold: ``max(k·(σ_A + σ_B), min_rel·A)``, with σ the wall
  standard deviation for wall time, and for device time the p20–p80 spread taken as a σ estimate
  ((p80 − p20) / 1.683, which is σ for a normal distribution); ``min_rel`` keeps tiny but very steady
  differences (device time spreads are often well under 1%) from counting;
- B − A above the threshold is a regression, A − B above it an improvement.

A cell regresses when either metric does, and improves when one does and neither regresses. A cell ok in A
but wrong or failing in B is ``broken`` (counted with the regressions); the reverse is ``fixed``. Cells in
only one run are listed apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jaggedperf.inputs import Case
from jaggedperf.lab.result import ERROR, OK, WRONG, Result, RunRecord
from jaggedperf.lab.results.views import result_rank

K = 2.0  # how many (summed) standard deviations a change must exceed
MIN_REL = 0.05  # ... and at least this fraction of A's median
SIGMAS_IN_P20_P80 = 2 * 0.8416212335729143  # p80 − p20 of a normal distribution, in σ

REGRESSION, IMPROVEMENT, SAME = "regression", "improvement", "same"
BROKEN, FIXED, NOT_COMPARED = "broken", "fixed", "not compared"
VERDICTS = (REGRESSION, BROKEN, IMPROVEMENT, FIXED, SAME, NOT_COMPARED)
ENVIRONMENT_KEYS = ("gpu", "torch", "triton", "cuda", "driver", "python", "git_commit", "platform", "hostname")


@dataclass
class Change:
    """One metric of one cell, A against B (same unit as measured: ms for wall, µs for device)."""

    a: float
    b: float
    threshold: float  # |b − a| must exceed this to count
    verdict: str  # regression | improvement | same

    @property
    def ratio(self) -> float:
        """B / A: above 1, B is slower."""
        return self.b / self.a if self.a > 0 else float("inf")

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "ratio": self.ratio, "threshold": self.threshold, "verdict": self.verdict}


@dataclass
class CellComparison:
    op: str
    implementation: str
    mode: str
    case: Case
    status_a: str
    status_b: str
    wall: Change | None  # None unless both cells are ok with wall stats
    device: Change | None  # None unless both cells are ok with device time
    verdict: str  # one of VERDICTS

    @property
    def key(self) -> tuple:
        return (self.op, self.implementation, self.mode, self.case)

    def to_dict(self) -> dict:
        return {
            "op": self.op,
            "implementation": self.implementation,
            "mode": self.mode,
            "case": self.case.to_dict(),
            "case_label": self.case.label,
            "status_a": self.status_a,
            "status_b": self.status_b,
            "wall_ms": self.wall.to_dict() if self.wall else None,
            "device_us": self.device.to_dict() if self.device else None,
            "verdict": self.verdict,
        }


@dataclass
class Comparison:
    cells: list[CellComparison]  # matched cells, in display order
    only_a: list[Result]  # cells A has and B does not
    only_b: list[Result]
    environment_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # key -> (A's, B's)
    k: float = K
    min_rel: float = MIN_REL

    @property
    def regressions(self) -> list[CellComparison]:
        """Slower beyond the spread, or broken (ok in A, wrong or failing in B)."""
        return [c for c in self.cells if c.verdict in (REGRESSION, BROKEN)]

    @property
    def improvements(self) -> list[CellComparison]:
        return [c for c in self.cells if c.verdict in (IMPROVEMENT, FIXED)]

    @property
    def has_regression(self) -> bool:
        return bool(self.regressions)

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for c in self.cells:
            out[c.verdict] += 1
        return out

    def to_dict(self) -> dict:
        def brief(r: Result) -> dict:
            return {"op": r.op, "implementation": r.implementation, "mode": r.mode, "case": r.case.to_dict(),
                    "case_label": r.case.label, "status": r.status}

        return {
            "k": self.k,
            "min_rel": self.min_rel,
            "environment_changes": {key: list(v) for key, v in self.environment_changes.items()},
            "counts": self.counts(),
            "cells": [c.to_dict() for c in self.cells],
            "only_a": [brief(r) for r in self.only_a],
            "only_b": [brief(r) for r in self.only_b],
        }


def compare(a: RunRecord, b: RunRecord, *, k: float = K, min_rel: float = MIN_REL) -> Comparison:
    """Compare run ``b`` against baseline ``a`` cell by cell (see the module notes for the rule).

    Args:
        a: the baseline run.
        b: the run to judge.
        k: standard deviations a change must exceed.
        min_rel: the smallest relative change that counts.

    Returns:
        The cells in both runs with their verdicts, in report order; the cells only in one; the
        environment entries that differ.
    """
    by_a = {r.key: r for r in a.results}
    by_b = {r.key: r for r in b.results}
    cells = [_cell(by_a[key], by_b[key], k, min_rel) for key in by_a if key in by_b]
    cells.sort(key=lambda c: result_rank(by_a[c.key]))
    only_a = sorted((r for key, r in by_a.items() if key not in by_b), key=result_rank)
    only_b = sorted((r for key, r in by_b.items() if key not in by_a), key=result_rank)
    return Comparison(cells, only_a, only_b, environment_changes(a, b), k, min_rel)


def environment_changes(a: RunRecord, b: RunRecord) -> dict[str, tuple[Any, Any]]:
    """The environment entries (GPU, versions, commit, copy bandwidth, ...) that differ between the runs."""
    out = {key: (a.environment.get(key), b.environment.get(key)) for key in ENVIRONMENT_KEYS}
    out["copy_gbps"] = (a.copy_gbps, b.copy_gbps)
    return {key: v for key, v in out.items() if v[0] != v[1]}


def judge(a: float, b: float, sigma_a: float, sigma_b: float, k: float = K, min_rel: float = MIN_REL) -> Change:
    """Whether ``b`` differs from ``a`` beyond ``max(k·(sigma_a + sigma_b), min_rel·a)``."""
    threshold = max(k * (max(sigma_a, 0.0) + max(sigma_b, 0.0)), min_rel * abs(a))
    if b - a > threshold:
        verdict = REGRESSION
    elif a - b > threshold:
        verdict = IMPROVEMENT
    else:
        verdict = SAME
    return Change(a, b, threshold, verdict)


def _cell(ra: Result, rb: Result, k: float, min_rel: float) -> CellComparison:
    wall = device = None
    if ra.status == OK and rb.status == OK:
        if ra.wall is not None and rb.wall is not None:
            wall = judge(ra.wall.median_ms, rb.wall.median_ms, ra.wall.std_ms, rb.wall.std_ms, k, min_rel)
        da, db = ra.device_time, rb.device_time
        if da is not None and db is not None:
            sigma_a = (da.p80_us - da.p20_us) / SIGMAS_IN_P20_P80
            sigma_b = (db.p80_us - db.p20_us) / SIGMAS_IN_P20_P80
            device = judge(da.median_us, db.median_us, sigma_a, sigma_b, k, min_rel)
        verdicts = {c.verdict for c in (wall, device) if c is not None}
        if REGRESSION in verdicts:
            verdict = REGRESSION
        elif IMPROVEMENT in verdicts:
            verdict = IMPROVEMENT
        elif verdicts:
            verdict = SAME
        else:
            verdict = NOT_COMPARED
    elif ra.status == OK and rb.status in (WRONG, ERROR):
        verdict = BROKEN
    elif ra.status in (WRONG, ERROR) and rb.status == OK:
        verdict = FIXED
    else:
        verdict = NOT_COMPARED  # skipped on a side, or failing on both
    return CellComparison(ra.op, ra.implementation, ra.mode, ra.case, ra.status, rb.status, wall, device, verdict)
