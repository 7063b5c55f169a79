"""Interleaved rounds: several calls timed back to back, round after round, with the host's speed beside each round.

A ratio of two host-bound calls taken within one round cancels the host's slow drift, but not a slowed host: two
calls whose host work differs in kind (more Python in one) do not slow by the same factor when the shared host
slows, so their ratio itself moves with the host's speed. Each round therefore records the host-speed probe
(``timing.host_speed_us``, a fixed host-only call) just before and just after its calls, and keeps the slower of
the two. A round is *quiet* when that probe is within ``slack`` of the fastest probe seen: this run's, or any
earlier run's in this process (a process that has seen its host run faster knows that a uniformly slow run is not
quiet). Every round is kept for the record; a judgement may use the quiet ones alone (``Rounds.judged``). A
process's first run, slow throughout, is quiet against itself: the rule needs the process to have seen its host at
speed before (earlier runs in it), and says nothing about a host slow for the whole process.

``run`` can keep measuring, up to a deadline, until enough rounds are quiet: a slowed spell of a few seconds then
costs time instead of the verdict, and a host slow for the whole deadline leaves too few quiet rounds, which the
caller reports as such.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from jaggedperf.lab.measure import timing

__all__ = ["QUIET_SLACK", "Round", "Rounds", "run", "median_ratio", "fastest_probe_us"]

# How far above the fastest probe a quiet round's probe may be. On the shared H200 host the probe sits at one of two
# levels ~2x apart (1.1-1.6 µs and 2.3-4.1 µs a call: docs/decisions/quiet-rounds.md) and moves between them
# within seconds; half-way between them sorts a round by its level, not by the spread within a level.
QUIET_SLACK = 0.5

# The fastest host probe any ``run`` in this process has seen (µs): the reference a later run's quietness is
# judged against, together with its own rounds. Only ``run`` writes it; a probe only ever lowers it.
_fastest_probe_us: float | None = None


def fastest_probe_us() -> float | None:
    """The fastest host-speed probe (µs a call) seen by ``run`` in this process; None before the first."""
    return _fastest_probe_us


@dataclass(frozen=True)
class Round:
    """One round: each callable's wall per call (µs, the seed's method) and the host probe beside them."""

    walls_us: dict[str, float]
    probe_us: float  # the slower of the probes just before and just after the round's calls


@dataclass(frozen=True)
class Rounds:
    """Every round of one ``run``, in order, and how quietness is judged.

    ``reference_us`` is the fastest probe known when the run ended (this run's rounds and the process's earlier
    runs); a round is quiet when ``probe_us <= (1 + slack) * reference_us``.
    """

    rounds: tuple[Round, ...]
    reference_us: float
    slack: float
    deadline_hit: bool = False

    def is_quiet(self, r: Round) -> bool:
        return r.probe_us <= (1.0 + self.slack) * self.reference_us

    @property
    def quiet(self) -> tuple[Round, ...]:
        return tuple(r for r in self.rounds if self.is_quiet(r))

    def walls(self, name: str, *, quiet_only: bool = False) -> list[float]:
        """``name``'s wall in each round (µs), in order; only the quiet rounds' with ``quiet_only``."""
        return [r.walls_us[name] for r in (self.quiet if quiet_only else self.rounds)]

    def ratios(self, a: str, b: str, *, quiet_only: bool = False) -> list[float]:
        """Within-round ratios ``a / b``, in order; only the quiet rounds' with ``quiet_only``."""
        return [r.walls_us[a] / r.walls_us[b] for r in (self.quiet if quiet_only else self.rounds)]

    def judged(self, min_quiet: int) -> tuple[Round, ...]:
        """The rounds a verdict rests on: the quiet ones when there are at least ``min_quiet``, else every round
        (the caller says which by comparing lengths, and may refuse to judge)."""
        quiet = self.quiet
        return quiet if len(quiet) >= min_quiet else self.rounds


def _wall_us(fn: Callable[[], object], device: torch.device) -> float:
    return timing.wall_stats(fn, device).median_ms * 1e3


def run(fns: dict[str, Callable[[], object]], device: torch.device, *, rounds: int, alternate: bool = True,
        quiet: int = 0, deadline_s: float = 0.0, slack: float = QUIET_SLACK,
        probe: Callable[[], float] = timing.host_speed_us,
        wall_us: Callable[[Callable[[], object], torch.device], float] = _wall_us,
        clock: Callable[[], float] = time.monotonic) -> Rounds:
    """Time ``fns`` in interleaved rounds, each round every callable once (the seed's method) between two host probes.

    Args:
        fns: the callables by name, each timed once a round, in this order (reversed every other round when
            ``alternate``, so neither always goes first).
        device: where they run (the wall loop syncs it).
        rounds: rounds to run at least.
        quiet: keep running rounds until at least this many are quiet (against the reference as it stands after
            each round) or ``deadline_s`` has passed since the start; 0: exactly ``rounds`` rounds.
        slack: a round is quiet when its probe is at most ``1 + slack`` times the fastest probe known.
        probe, wall_us, clock: the host probe, the per-callable timing and the deadline's clock (tests script them).

    Returns:
        Every round, in order, with the reference the quietness is judged against.

    Raises:
        ValueError: no callable, or ``rounds`` < 1.
    """
    global _fastest_probe_us
    if not fns or rounds < 1:
        raise ValueError(f"need at least one callable and one round; got {len(fns)} callables, {rounds} rounds")
    items = list(fns.items())
    start = clock()
    done: list[Round] = []
    deadline_hit = False
    while True:
        i = len(done)
        before = probe()
        walls = {name: wall_us(fn, device) for name, fn in (reversed(items) if alternate and i % 2 else items)}
        after = probe()
        done.append(Round({name: walls[name] for name, _ in items}, max(before, after)))
        fastest = min(before, after)
        if _fastest_probe_us is None or fastest < _fastest_probe_us:
            _fastest_probe_us = fastest
        if len(done) < rounds:
            continue
        so_far = Rounds(tuple(done), _fastest_probe_us, slack)
        if len(so_far.quiet) >= quiet:
            break
        if clock() - start >= deadline_s:
            deadline_hit = True
            break
    return Rounds(tuple(done), _fastest_probe_us, slack, deadline_hit)


def median_ratio(rounds: Rounds, a: str, b: str, min_quiet: int) -> tuple[float, int]:
    """The median within-round ratio ``a / b`` over the rounds ``judged(min_quiet)`` returns, and how many
    rounds that was."""
    judged = rounds.judged(min_quiet)
    return statistics.median(r.walls_us[a] / r.walls_us[b] for r in judged), len(judged)
