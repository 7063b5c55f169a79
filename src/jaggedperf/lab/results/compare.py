"""Two runs, cell by cell: did B get slower or faster than A beyond what the measurements can tell apart?

A cell of A matches the cell of B with the same ``Result.key`` (op, implementation, mode, case). For each
matched pair where both were timed, wall time and device time are compared separately:

- the ratio is median(B) / median(A) (above 1: B is slower);
- with raw samples on both sides (method ``bootstrap``): a bootstrap confidence interval of that ratio
  (``stats.bootstrap_ratio``, 95% by default). The change counts when the interval lies wholly above 1
  (a regression) or below 1 (an improvement) *and* the ratio passes the minimum effect ``min_rel``
  (above 1 + min_rel, or below 1 − min_rel): steady but tiny differences do not count. Medians and
  resampling make it robust: one outlier moves neither;
- without samples (results written before they were kept; method ``spread``): the change counts when
  |B − A| passes ``max(k·(σ_A + σ_B), min_rel·A)``, σ estimated from the p20–p80 spread ((p80 − p20) /
  1.683, σ for a normal distribution) where recorded, else the standard deviation.

A cell regresses when either metric does, and improves when one does and neither regresses. A cell that is
unstable on either side (its timing never settled) is ``unstable``: its ratio and interval are shown, but
it is never a regression nor an improvement. Wall time also needs the host to have run at the same speed:
each cell records a fixed host-only call's time before and after it (``timing.host_speed_us``); when the two
runs' figures differ by more than ``HOST_SPEED_REL`` (or one side's moved that much during the cell), a wall
change (regression or improvement) is shown but not counted (``CellComparison.note`` says why): the verdict
is the device time's, or ``unstable`` without it. Under that limit the host's speed still moves a host-bound
wall: the part of the call that is host work (``1 − device / wall``, all of it without device time) is
expected to scale with the probes, so a wall change whose ratio, divided by that expected ratio, no longer
passes the rule above is not counted either (the note gives both ratios). On the shared H200 host two
back-to-back runs' host-bound walls differed by up to 50% while every cell's own samples agreed and the
device times agreed within 2% (``docs/performance.md``). A cell ok in A but wrong or failing in B is
``broken`` (counted with the regressions); the reverse is ``fixed``. Cells in only one run are listed apart.

Where a run's results came from several GPUs (a Ray sweep over a mixed fleet), cells are matched GPU by GPU
(``CellComparison.gpu``); two runs on one GPU each are matched by key alone, whatever the GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jaggedperf.inputs import Case
from jaggedperf.lab.measure import stats
from jaggedperf.lab.result import ERROR, OK, TIMED, UNSTABLE, WRONG, Result, RunRecord
from jaggedperf.lab.results import variants
from jaggedperf.lab.results.views import result_rank

K = 2.0  # without samples: how many (summed) standard deviations a change must exceed
MIN_REL = stats.MIN_CHANGE  # the minimum effect: a change smaller than this fraction of A's median never counts
HOST_SPEED_REL = 0.10  # host speed probes further apart than this: the wall change is not counted
CONFIDENCE = stats.CONFIDENCE  # of the bootstrap interval
SIGMAS_IN_P20_P80 = 2 * 0.8416212335729143  # p80 − p20 of a normal distribution, in σ
BOOTSTRAP, SPREAD = "bootstrap", "spread"  # how a change was judged

REGRESSION, IMPROVEMENT, SAME = "regression", "improvement", "same"
BROKEN, FIXED, NOT_COMPARED = "broken", "fixed", "not compared"
UNSTABLE_VERDICT = UNSTABLE  # timed on both sides, unstable on one: shown, never judged
VERDICTS = (REGRESSION, BROKEN, IMPROVEMENT, FIXED, SAME, UNSTABLE_VERDICT, NOT_COMPARED)
ENVIRONMENT_KEYS = ("gpu", "torch", "triton", "cuda", "driver", "python", "git_commit", "platform", "hostname")


@dataclass
class Change:
    """One metric of one cell, A against B (medians in the unit measured: ms for wall, µs for device)."""

    a: float
    b: float
    threshold: float  # spread method: |b − a| must exceed this; bootstrap: the minimum effect, min_rel·a
    verdict: str  # regression | improvement | same
    method: str = SPREAD  # BOOTSTRAP (raw samples) or SPREAD (summaries only)
    low: float | None = None  # the bootstrap interval of the ratio B/A (None: spread method)
    high: float | None = None
    confidence: float | None = None

    @property
    def ratio(self) -> float:
        """B / A: above 1, B is slower."""
        return self.b / self.a if self.a > 0 else float("inf")

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "ratio": self.ratio, "threshold": self.threshold, "verdict": self.verdict,
                "method": self.method, "ratio_low": self.low, "ratio_high": self.high, "confidence": self.confidence}


@dataclass
class CellComparison:
    op: str
    implementation: str
    mode: str
    case: Case
    status_a: str
    status_b: str
    wall: Change | None  # None unless both cells were timed
    device: Change | None  # None unless both cells have device time
    verdict: str  # one of VERDICTS
    gpu: str | None = None  # matched on the same GPU: a side's results came from several GPUs (``variants``)
    note: str | None = None  # why the wall change was not counted (the host ran at another speed), or None

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
            "gpu": self.gpu,
            "note": self.note,
        }


@dataclass
class Comparison:
    cells: list[CellComparison]  # matched cells, in display order
    only_a: list[Result]  # cells A has and B does not
    only_b: list[Result]
    environment_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # key -> (A's, B's)
    k: float = K
    min_rel: float = MIN_REL
    confidence: float = CONFIDENCE

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
            "confidence": self.confidence,
            "environment_changes": {key: list(v) for key, v in self.environment_changes.items()},
            "counts": self.counts(),
            "cells": [c.to_dict() for c in self.cells],
            "only_a": [brief(r) for r in self.only_a],
            "only_b": [brief(r) for r in self.only_b],
        }


def compare(a: RunRecord, b: RunRecord, *, k: float = K, min_rel: float = MIN_REL,
            confidence: float = CONFIDENCE) -> Comparison:
    """Compare run ``b`` against baseline ``a`` cell by cell (see the module notes for the rule).

    Args:
        a: the baseline run.
        b: the run to judge.
        k: without samples, the standard deviations a change must exceed.
        min_rel: the smallest relative change that counts.
        confidence: of the bootstrap interval of each ratio.

    Returns:
        The cells in both runs with their verdicts, in report order; the cells only in one; the
        environment entries that differ.

    Raises:
        ValueError: ``confidence`` is not in (0, 1).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    # A side whose results ran on several GPUs (a mixed fleet) is matched GPU by GPU: a cell is compared
    # with the same cell on the same GPU, never with another GPU's.
    by_gpu = any(len({variants.where(r, rec.environment).get("gpu") for r in rec.results}) > 1 for rec in (a, b))
    by_a, by_b = _keyed(a, by_gpu), _keyed(b, by_gpu)
    pairs = sorted((key for key in by_a if key in by_b), key=lambda key: (result_rank(by_a[key]), key[0]))
    cells = [_cell(by_a[key], by_b[key], k, min_rel, confidence, key[0]) for key in pairs]
    only_a = sorted((r for key, r in by_a.items() if key not in by_b), key=result_rank)
    only_b = sorted((r for key, r in by_b.items() if key not in by_a), key=result_rank)
    return Comparison(cells, only_a, only_b, environment_changes(a, b), k, min_rel, confidence)


def _keyed(record: RunRecord, by_gpu: bool) -> dict[tuple, Result]:
    """``(gpu, *Result.key)`` -> result; gpu is None unless ``by_gpu``."""
    return {(variants.where(r, record.environment).get("gpu") if by_gpu else None, *r.key): r for r in record.results}


def environment_changes(a: RunRecord, b: RunRecord) -> dict[str, tuple[Any, Any]]:
    """The environment entries (GPU, versions, commit, copy bandwidth, ...) that differ between the runs."""
    out = {key: (a.environment.get(key), b.environment.get(key)) for key in ENVIRONMENT_KEYS}
    out["copy_gbps"] = (a.copy_gbps, b.copy_gbps)
    return {key: v for key, v in out.items() if v[0] != v[1]}


def judge_samples(a, b, min_rel: float = MIN_REL, confidence: float = CONFIDENCE) -> Change:
    """Whether samples ``b`` differ from samples ``a``: the bootstrap interval of median(b)/median(a) lies wholly
    on one side of 1 and the ratio passes the minimum effect ``min_rel`` (see the module notes).

    Args:
        a: the baseline's per-call samples.
        b: the samples to judge, in the same unit.
        min_rel: the minimum effect.
        confidence: of the interval.

    Returns:
        The change, method ``bootstrap``, with the interval.

    Raises:
        ValueError: a side has no samples or a median that is not positive.
    """
    r = stats.bootstrap_ratio(a, b, confidence=confidence)
    ma = float(stats.summarize(a).median)
    if r.low > 1 and r.ratio > 1 + min_rel:
        verdict = REGRESSION
    elif r.high < 1 and r.ratio < 1 - min_rel:
        verdict = IMPROVEMENT
    else:
        verdict = SAME
    return Change(ma, ma * r.ratio, min_rel * ma, verdict, BOOTSTRAP, r.low, r.high, confidence)


def judge(a: float, b: float, sigma_a: float, sigma_b: float, k: float = K, min_rel: float = MIN_REL) -> Change:
    """Without samples: whether ``b`` differs from ``a`` beyond ``max(k·(sigma_a + sigma_b), min_rel·a)``."""
    threshold = max(k * (max(sigma_a, 0.0) + max(sigma_b, 0.0)), min_rel * abs(a))
    if b - a > threshold:
        verdict = REGRESSION
    elif a - b > threshold:
        verdict = IMPROVEMENT
    else:
        verdict = SAME
    return Change(a, b, threshold, verdict)


def _wall_sigma(w) -> float:
    if w.p20_ms is not None and w.p80_ms is not None:
        return (w.p80_ms - w.p20_ms) / SIGMAS_IN_P20_P80
    return w.std_ms


def _metric(a_median: float, b_median: float, a_samples, b_samples, sigma_a: float, sigma_b: float, k: float,
            min_rel: float, confidence: float) -> Change:
    """Bootstrap on the samples when both sides have them (and positive medians), else the spread rule."""
    if a_samples is not None and b_samples is not None and a_samples.size and b_samples.size \
            and a_median > 0 and b_median > 0:
        return judge_samples(a_samples, b_samples, min_rel, confidence)
    return judge(a_median, b_median, sigma_a, sigma_b, k, min_rel)


def _cell(ra: Result, rb: Result, k: float, min_rel: float, confidence: float, gpu: str | None = None) -> CellComparison:
    wall = device = note = None
    if ra.status in TIMED and rb.status in TIMED:
        if ra.wall is not None and rb.wall is not None:
            wall = _metric(ra.wall.median_ms, rb.wall.median_ms, ra.wall.samples_ms(), rb.wall.samples_ms(),
                           _wall_sigma(ra.wall), _wall_sigma(rb.wall), k, min_rel, confidence)
        da, db = ra.device_time, rb.device_time
        if da is not None and db is not None:
            device = _metric(da.median_us, db.median_us, da.samples_us(), db.samples_us(),
                             (da.p80_us - da.p20_us) / SIGMAS_IN_P20_P80, (db.p80_us - db.p20_us) / SIGMAS_IN_P20_P80,
                             k, min_rel, confidence)
        # only a wall *change* needs the host to have run at the same speed: "same" stays same
        note = host_speed_change(ra, rb, wall, min_rel) if wall is not None and wall.verdict != SAME else None
        counted = (device,) if note else (wall, device)
        verdicts = {c.verdict for c in counted if c is not None}
        if UNSTABLE in (ra.status, rb.status) or note and device is None:
            verdict = UNSTABLE_VERDICT  # figures shown, but noise is not a finding either way
        elif REGRESSION in verdicts:
            verdict = REGRESSION
        elif IMPROVEMENT in verdicts:
            verdict = IMPROVEMENT
        elif verdicts:
            verdict = SAME
        else:
            verdict = NOT_COMPARED
    elif ra.status in TIMED and rb.status in (WRONG, ERROR):
        verdict = BROKEN
    elif ra.status in (WRONG, ERROR) and rb.status in TIMED:
        verdict = FIXED
    else:
        verdict = NOT_COMPARED  # skipped on a side, or failing on both
    return CellComparison(ra.op, ra.implementation, ra.mode, ra.case, ra.status, rb.status, wall, device, verdict, gpu,
                          note)


def host_speed_change(ra: Result, rb: Result, wall: Change | None = None, min_rel: float = MIN_REL,
                      rel: float = HOST_SPEED_REL) -> str | None:
    """Why two cells' walls cannot be compared (the host ran at another speed), or None.

    Args:
        ra, rb: the cells, each with ``extra["host_speed_us"]`` (before, after) where it was recorded.
        wall: the cells' wall change; with it, probes within ``rel`` are also asked whether they explain it.
        min_rel: the minimum effect the change is judged with.
        rel: how far apart the probes may be.

    Returns:
        ``host speed 2.10 → 2.61 µs a probe call (1.24×)`` (or ``… moved during A's cell``), or ``wall 0.94×
        follows the host's speed 0.92× (host work 90% of the call: 0.93× expected)``, or None when the probes
        agree and explain no wall change, or a side has none (results written before they were recorded).
    """
    speeds = [r.extra.get("host_speed_us") for r in (ra, rb)]
    if any(not s or len(s) != 2 or min(s) <= 0 for s in speeds):
        return None
    for side, (before, after) in zip("AB", speeds):
        if max(before, after) / min(before, after) > 1 + rel:
            return f"host speed moved during {side}'s cell: {before:.2f} → {after:.2f} µs a probe call"
    sa, sb = (sum(s) / 2 for s in speeds)
    if max(sa, sb) / min(sa, sb) > 1 + rel:
        return f"host speed {sa:.2f} → {sb:.2f} µs a probe call ({sb / sa:.2f}×)"
    if wall is None or wall.verdict == SAME or not wall.a > 0:
        return None
    share = sum(_host_share(r) for r in (ra, rb)) / 2
    expected = 1 + share * (sb / sa - 1)
    ratio, low, high = wall.b / wall.a, wall.low, wall.high
    low, high = (ratio, ratio) if low is None or high is None else (low, high)
    adjusted, low, high = ratio / expected, low / expected, high / expected
    if (low > 1 and adjusted > 1 + min_rel) or (high < 1 and adjusted < 1 - min_rel):
        return None  # a change beyond what the host's speed explains: it counts
    return (f"wall {ratio:.2f}× follows the host's speed {sb / sa:.2f}× (host work {share:.0%} of the call: "
            f"{expected:.2f}× expected)")


def _host_share(r: Result) -> float:
    """The part of ``r``'s wall that is host work: 1 − device / wall, or 1 without device time (a CPU run, whose
    kernels run on the host)."""
    if r.wall is None or r.device_time is None or not r.wall.median_ms > 0:
        return 1.0
    return min(1.0, max(0.0, 1 - r.device_time.median_us / (r.wall.median_ms * 1e3)))
