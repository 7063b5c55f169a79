"""A scripted clock for ``timing.clock``: every timed call "takes" the next duration of a script, so that
tests can inject outliers and drift into a measurement without loading the machine.

The timing loops read the clock exactly twice per timed call (start, end); the fake returns the same
instant for a start and advances by the next scripted duration for the end.
"""

from __future__ import annotations

import itertools
from typing import Iterable


class FakeClock:
    def __init__(self, durations_ms: Iterable[float]) -> None:
        self._durations = iter(durations_ms)
        self._now = 1000.0
        self._started = False
        self.calls = 0  # timed calls so far

    def __call__(self) -> float:
        if self._started:
            self._now += next(self._durations) / 1e3
            self.calls += 1
        self._started = not self._started
        return self._now


def steady(ms: float = 1.0, jitter: float = 0.01, n: int | None = None):
    """``ms`` ± ``jitter`` (relative), a repeating deterministic pattern."""
    pattern = [ms * (1 + jitter * ((i * 7) % 11 - 5) / 5) for i in range(11)]
    cycle = itertools.cycle(pattern)
    return cycle if n is None else list(itertools.islice(cycle, n))


def with_outliers(ms: float = 1.0, every: int = 20, factor: float = 400.0, n: int | None = None):
    """Steady, but every ``every``-th call takes ``factor`` times longer (a preempted call)."""
    base = steady(ms)
    out = (ms * factor if i % every == every - 1 else next(base) for i in itertools.count())
    return out if n is None else list(itertools.islice(out, n))


def noisy(ms: float = 1.0, n: int | None = None):
    """Calls spread from 0.5× to 2× ``ms``: the IQR is far past 10% of the median."""
    pattern = [ms * f for f in (0.5, 2.0, 0.7, 1.6, 1.0, 0.6, 1.9, 1.2)]
    cycle = itertools.cycle(pattern)
    return cycle if n is None else list(itertools.islice(cycle, n))


def drifting(ms: float = 1.0, step_at: int = 100, factor: float = 1.5, n: int = 200):
    """Steady at ``ms``, then at ``factor``·``ms`` from call ``step_at`` on (load arrived mid-measurement)."""
    base = steady(ms, n=n)
    return [x * (factor if i >= step_at else 1.0) for i, x in enumerate(base)]
