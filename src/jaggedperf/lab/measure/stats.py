"""Statistics of per-call samples: how they are stored, summarised, judged stable, and compared.

Every timed cell keeps its raw per-call samples (wall, and device where measured). They are stored
as text in the results: ``"f32z:" + base64(zlib(little-endian float32 bytes))`` (``encode`` /
``decode``), about 4 bytes a sample before base64, so a results file stays JSON and every statistic
can be recomputed from it (``result.recompute``).

Spread is given as quantiles, never as a standard deviation beside a median (one outlier moves a
standard deviation as far as it likes): p20/p50/p80 as ``triton.testing.do_bench`` reports them, and
the interquartile range (p75 − p25) as ``torch.utils.benchmark`` does, which also warns when the IQR
passes 10% of the median.

A set of samples is *unstable* (``stability``) when

- its IQR passes ``max_iqr_rel`` of its median (the calls do not agree with each other), or
- it drifts: the medians of its first and last thirds differ by more than ``max_drift_rel`` of the
  overall median (the machine changed under the measurement: load came or went, clocks moved);

and in either case by more than ``Policy.floor_us`` in absolute terms (a 4 µs kernel whose replays differ
by 0.5 µs, the events' resolution, is not unstable).

A steady load slows every call alike and shows in neither test, so the machine is watched too: an
attempt during which other processes kept more than half the CPUs the cell does not need busy
(``contended``; read from ``/proc`` by ``env.CpuLoad``) is suspect. By default (``Policy.load_effect``) the load's
effect is then measured rather than assumed: a fixed host probe (``timing.host_speed_us``) timed right after the
attempt is compared with the fastest it has run in this process, and the attempt counts as contended only when the
probe ran more than ``max_iqr_rel`` slower (a laptop with a browser open still gets a number where the load left its
core alone; one busy loop on an SMT sibling, which doubled a cell's time with tight samples, slows the probe too).
``load_effect=False`` is the stricter rule: the load alone makes the attempt unstable.

Fewer than ``MIN_SAMPLES_TO_JUDGE`` samples are not judged (an IQR of three calls says nothing): the
judgement says so (``judged=False``) and does not call them unstable.

Two sets of samples are compared by a bootstrap confidence interval of the ratio of their medians
(``bootstrap_ratio``): the distribution of each side's median under resampling with replacement,
the ratio of draws from the two, the central ``confidence`` of those ratios. Seeded: the same samples
give the same interval.
"""

from __future__ import annotations

import base64
import functools
import math
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

CODEC_PREFIX = "f32z:"
MAX_IQR_REL = 0.10  # torch.utils.benchmark's warning threshold (IQR / median)
MAX_DRIFT_REL = 0.10  # first-third vs last-third medians, relative to the median
FLOOR_US = 2.0  # CUDA events resolve about 0.5 µs; a host call's own jitter is a µs or two
CPU_SLACK = 0.25  # of a CPU: other processes may use this much beyond their share
# Other processes may keep at most half the CPUs the cell does not need busy. Not all of them: on this
# project's 2-vCPU CI machine one busy loop on the "spare" vCPU doubled a cell's time with tight samples
# (benchmarks/results/cpu/stability/summary.md): vCPUs can be SMT siblings, and cores share
# caches, memory bandwidth and the turbo budget.
MAX_OTHER_SHARE = 0.5
LOAD_WINDOW_S = 0.2
MIN_SAMPLES_TO_JUDGE = 10  # below this, quantiles are too coarse to call a measurement unstable
BOOTSTRAP_RESAMPLES = 4000
CONFIDENCE = 0.95


# --- storage -------------------------------------------------------------------------------------


def encode(samples: Sequence[float] | np.ndarray) -> str:
    """Samples as compact text: ``f32z:`` + base64 of the zlib'd little-endian float32 bytes.

    Args:
        samples: per-call times (any unit; the field that holds them names it).

    Returns:
        The text; ``decode`` gives the samples back rounded to float32.
    """
    raw = np.asarray(samples, dtype="<f4").tobytes()
    return CODEC_PREFIX + base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode(text: str) -> np.ndarray:
    """The samples ``encode`` stored, as a float64 array.

    Args:
        text: what ``encode`` returned.

    Returns:
        The samples, in their stored order (the order they were measured in).

    Raises:
        ValueError: ``text`` is not in this format.
    """
    if not isinstance(text, str) or not text.startswith(CODEC_PREFIX):
        raise ValueError(f"not encoded samples (expected text starting with {CODEC_PREFIX!r})")
    try:
        raw = zlib.decompress(base64.b64decode(text[len(CODEC_PREFIX):], validate=True))
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"corrupt encoded samples: {exc}") from None
    if len(raw) % 4:
        raise ValueError("corrupt encoded samples: not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)


# --- summaries -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Quantiles and extremes of a set of samples, in their unit."""

    n: int
    mean: float
    std: float  # kept for completeness; never shown as the spread
    median: float
    p20: float
    p80: float
    p25: float
    p75: float
    min: float
    max: float

    @property
    def iqr(self) -> float:
        """p75 − p25."""
        return self.p75 - self.p25


def summarize(samples: Sequence[float] | np.ndarray) -> Summary:
    """Quantiles (linear interpolation, as numpy's default), mean, std, min and max.

    Args:
        samples: per-call times.

    Returns:
        The summary.

    Raises:
        ValueError: no samples, or a sample that is not finite.
    """
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples to summarize")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples must be finite")
    p20, p25, p50, p75, p80 = np.quantile(x, [0.2, 0.25, 0.5, 0.75, 0.8])
    return Summary(int(x.size), float(x.mean()), float(x.std()), float(p50), float(p20), float(p80), float(p25),
                   float(p75), float(x.min()), float(x.max()))


# --- stability -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """When samples are unstable, and how many times a cell is measured before it is called so."""

    max_iqr_rel: float = MAX_IQR_REL
    max_drift_rel: float = MAX_DRIFT_REL
    attempts: int = 3  # measurements of a cell at most (1 + re-measurements)
    cpu_slack: float | None = CPU_SLACK  # contended when other processes' CPUs > share·(CPUs − threads) + this;
    #                                      None: not judged (load is still recorded)
    max_other_share: float = MAX_OTHER_SHARE  # ... of the CPUs the cell does not need
    load_effect: bool = True  # a loaded attempt is contended only where the host probe slowed past max_iqr_rel
    load_window_s: float = LOAD_WINDOW_S  # watch other processes' CPU use at least this long per attempt
    floor_us: float = FLOOR_US  # spreads and drifts under this many µs never count (timer resolution, µs jitter)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1; got {self.attempts}")
        if not (self.max_iqr_rel > 0 and self.max_drift_rel > 0):
            raise ValueError("stability thresholds must be positive")


@dataclass
class Judgement:
    """What ``stability`` found in one set of samples."""

    stable: bool  # not found unstable (True also when not judged)
    iqr_rel: float  # IQR / median
    drift_rel: float | None  # (last-third median − first-third median) / median; None: not tested
    reasons: list[str] = field(default_factory=list)  # why unstable, one phrase each
    judged: bool = True  # False: fewer than MIN_SAMPLES_TO_JUDGE samples


def stability(samples: Sequence[float] | np.ndarray, policy: Policy = Policy(), *, what: str = "wall",
              drift: bool = True, to_us: float = 1.0) -> Judgement:
    """Whether ``samples`` are stable enough to report (see the module notes for the two tests).

    Args:
        samples: per-call times in measurement order.
        policy: the thresholds.
        what: the name of the measurement, for the reasons (``wall``, ``device``).
        drift: test for drift too.
        to_us: µs per unit of ``samples`` (1000 for ms), for ``policy.floor_us``.

    Returns:
        The judgement with both figures and the reasons it fails, if it does.

    Raises:
        ValueError: no samples.
    """
    x = np.asarray(samples, dtype=np.float64)
    s = summarize(x)
    scale = s.median if s.median > 0 else max(s.max, 1e-30)
    iqr_rel = s.iqr / scale
    reasons: list[str] = []
    if x.size < MIN_SAMPLES_TO_JUDGE:
        return Judgement(True, float(iqr_rel), None, reasons, judged=False)
    floor = policy.floor_us / to_us
    if iqr_rel > policy.max_iqr_rel and s.iqr > floor:
        reasons.append(f"{what} IQR is {iqr_rel:.0%} of the median (> {policy.max_iqr_rel:.0%})")
    drift_rel = None
    if drift:
        third = x.size // 3
        moved = float(np.median(x[-third:]) - np.median(x[:third]))
        drift_rel = moved / scale
        if abs(drift_rel) > policy.max_drift_rel and abs(moved) > floor:
            direction = "rose" if drift_rel > 0 else "fell"
            reasons.append(f"{what} drifted: the last third's median {direction} {abs(drift_rel):.0%} from the "
                           f"first third's (> {policy.max_drift_rel:.0%})")
    return Judgement(not reasons, float(iqr_rel), drift_rel, reasons)


def contended(other_cpus: float | None, cpus: int | None, threads: int, policy: Policy) -> str | None:
    """Why an attempt was contended, or None: other processes kept more than
    ``max_other_share·(cpus − threads) + cpu_slack`` CPUs busy while it ran (see ``MAX_OTHER_SHARE``).

    Args:
        other_cpus: CPUs other processes kept busy (``env.CpuLoad``), or None when unknown.
        cpus: the machine's CPUs, or None when unknown.
        threads: the CPUs the cell needs (its torch threads on the CPU, 1 for a GPU cell's host).
        policy: the slack (None: not judged).

    Returns:
        The reason, one phrase, or None.
    """
    if policy.cpu_slack is None or other_cpus is None or not cpus:
        return None
    spare = max(cpus - threads, 0)
    allowed = policy.max_other_share * spare + policy.cpu_slack
    if other_cpus > allowed:
        return (f"CPU contended: other processes kept {other_cpus:.2f} of {cpus} CPUs busy while it was timed "
                f"(more than {allowed:.2f} beside its {threads} thread{'s' if threads != 1 else ''})")
    return None


def after_attempts(n: int) -> str:
    """The phrase an unstable cell's reasons end with: ``after 3 attempts``."""
    return f"after {n} attempt{'s' if n != 1 else ''}"


def badness(j: Judgement, policy: Policy) -> float:
    """How far a judgement is past its thresholds (the largest ratio figure / threshold): the attempt to keep
    when none is stable is the one with the least."""
    drift = abs(j.drift_rel) / policy.max_drift_rel if j.drift_rel is not None else 0.0
    return max(j.iqr_rel / policy.max_iqr_rel, drift)


# --- comparing two sets of samples ---------------------------------------------------------------


@dataclass(frozen=True)
class RatioInterval:
    """B's median / A's median with a bootstrap confidence interval."""

    ratio: float
    low: float
    high: float
    confidence: float
    resamples: int


def bootstrap_ratio(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, *,
                    resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE,
                    seed: int = 0) -> RatioInterval:
    """Confidence interval of median(b) / median(a) by the percentile bootstrap.

    The bootstrap distribution of each side's median is computed exactly (``median_distribution``: the
    median of a resample is an order statistic of the samples, with binomial odds) instead of by
    resampling every sample; ``resamples`` medians are then drawn from each and their ratios taken.
    Same distribution as resampling, at a cost of O(n²) once per side instead of O(resamples·n).

    Args:
        a: the baseline's samples.
        b: the samples to judge.
        resamples: bootstrap draws of each side's median.
        confidence: the central fraction of the drawn ratios the interval holds.
        seed: the drawing seed (the same inputs give the same interval).

    Returns:
        The ratio of the medians and its interval.

    Raises:
        ValueError: a side has no samples, a median is not positive, or ``confidence`` is not in (0, 1).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    xa, xb = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    if xa.size == 0 or xb.size == 0:
        raise ValueError("bootstrap needs samples on both sides")
    ma, mb = float(np.median(xa)), float(np.median(xb))
    if ma <= 0 or mb <= 0:
        raise ValueError("bootstrap of a ratio needs positive medians")
    rng = np.random.default_rng(seed)
    da = xa[np.searchsorted(median_distribution(xa.size), rng.random(resamples), side="right").clip(0, xa.size - 1)]
    db = xb[np.searchsorted(median_distribution(xb.size), rng.random(resamples), side="right").clip(0, xb.size - 1)]
    ratios = db / np.maximum(da, 1e-300)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return RatioInterval(mb / ma, float(low), float(high), confidence, resamples)


@functools.lru_cache(maxsize=64)
def median_distribution(n: int) -> np.ndarray:
    """The bootstrap distribution of the median of ``n`` samples, over their order statistics.

    A resample of ``n`` draws with replacement has its median (the m-th smallest draw, m = ⌈n/2⌉; for even
    ``n`` the lower of the two middle draws) at or below the j-th smallest sample exactly when at least m
    draws fall among the j smallest: P = P(Binomial(n, j/n) ≥ m).

    Args:
        n: the number of samples (at least 1).

    Returns:
        The cumulative probabilities, entry j−1 for the j-th smallest sample (non-decreasing, last 1);
        read-only (cached per ``n``).
    """
    m = (n + 1) // 2
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])
    i = np.arange(m, n + 1)  # how many draws fall at or below the j-th smallest
    log_choose = log_fact[n] - log_fact[i] - log_fact[n - i]
    p = np.arange(1, n + 1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = log_choose[None, :] + i[None, :] * np.log(p)[:, None] + (n - i)[None, :] * np.log1p(-p)[:, None]
    log_pmf[-1, :] = -np.inf
    log_pmf[-1, -1] = 0.0  # j = n: every draw is at or below the largest sample
    cdf = np.minimum(np.maximum.accumulate(np.exp(log_pmf).sum(axis=1)), 1.0)
    cdf.flags.writeable = False  # cached and shared between calls
    return cdf


def intervals_overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two closed intervals (low, high) share a point."""
    return a[0] <= b[1] and b[0] <= a[1]


MIN_CHANGE = 0.05  # the least ratio by which two runs' figures of one measure must differ to have moved (``moved``)


def moved(before: float, after: float, before_range: tuple[float, float], after_range: tuple[float, float],
          min_change: float) -> bool:
    """Whether a measure moved between two trees or runs: the ratio of its medians ``after / before`` is past 1 by
    more than ``min_change`` and the two ranges of its values (each tree's lowest to highest) share no point."""
    return abs(after / before - 1.0) > min_change and not intervals_overlap(before_range, after_range)


def relative(x: float, scale: float) -> float:
    """``x / scale``, or inf when ``scale`` is not positive."""
    return x / scale if scale > 0 else math.inf
