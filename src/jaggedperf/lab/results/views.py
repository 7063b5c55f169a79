"""Derived views of results shared by the plots, the Markdown report and compare: display order,
speedups recomputed from wall times, the best torch contender per case, titles from the environment."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

from jaggedperf.inputs import DEFAULT_SEED, Case
from jaggedperf.lab.modes import MODES
from jaggedperf.lab.result import OK, STATUSES, TIMED, Result

OURS = "jaggedperf"  # our Triton op's implementation name
EAGER = "eager"
MODE_ORDER = MODES  # the order `jaggedperf list` shows
IMPL_ORDER = ("unbind_mean", "nanmean_padded", "sum_padded", "njt_mean", "segment_reduce", OURS)


# --- order ----------------------------------------------------------------------------------------


def mode_rank(mode: str) -> tuple:
    """Modes in the order of ``MODE_ORDER``, unknown ones after, by name."""
    return (MODE_ORDER.index(mode), "") if mode in MODE_ORDER else (len(MODE_ORDER), mode)


def impl_rank(name: str) -> tuple:
    """Implementations in the order of ``IMPL_ORDER``, unknown ones after, by name."""
    return (IMPL_ORDER.index(name), "") if name in IMPL_ORDER else (len(IMPL_ORDER), name)


def case_rank(case: Case) -> tuple:
    """Cases by distribution, B, M, dtype and seed, then seqlen and sparsity (the axes a table varies last)."""
    return (case.distribution, case.B, case.M, case.dtype, case.seed, case.seqlen, case.sparsity)


def result_rank(r: Result) -> tuple:
    """Results in report order: op, case, implementation, mode."""
    return (r.op, case_rank(r.case), impl_rank(r.implementation), mode_rank(r.mode))


def ordered(values: Iterable[str], rank) -> list[str]:
    """The distinct ``values`` sorted by ``rank``."""
    return sorted(set(values), key=rank)


def status_counts(results: Iterable[Result]) -> Counter:
    """How many cells have each status (every status present as a key, 0 when none)."""
    counts = Counter({s: 0 for s in STATUSES})
    counts.update(r.status for r in results)
    return counts


# --- numbers --------------------------------------------------------------------------------------


def wall_ms(r: Result | None) -> float | None:
    """Wall median of an ok cell, else None."""
    return r.wall.median_ms if r is not None and r.status == OK and r.wall is not None else None


def device_us(r: Result | None) -> float | None:
    """Device median of an ok cell, else None."""
    return r.device_time.median_us if r is not None and r.status == OK and r.device_time is not None else None


def timed_wall_ms(r: Result | None) -> float | None:
    """Wall median of a timed cell, unstable ones included (to be shown as such), else None."""
    return r.wall.median_ms if r is not None and r.status in TIMED and r.wall is not None else None


def speedups(results: Iterable[Result], *, with_unstable: bool = False) -> dict[tuple, float]:
    """Speedup vs eager of every ok non-eager cell, by ``Result.key``: eager wall median / its wall median,
    same op, implementation and case. Computed from the walls when the eager cell is in ``results``;
    the recorded ``speedup_vs_eager`` is used only when it is not. ``with_unstable``: unstable walls count too (a
    ratio a figure shows marked, never a finding)."""
    results = list(results)
    wall = timed_wall_ms if with_unstable else wall_ms
    eager = {(r.op, r.implementation, r.case): r for r in results if r.mode == EAGER}
    out: dict[tuple, float] = {}
    for r in results:
        mine = wall(r)
        if r.mode == EAGER or mine is None:
            continue
        key = (r.op, r.implementation, r.case)
        if key in eager:
            base = wall(eager[key])
            if base is not None and mine > 0:
                out[r.key] = base / mine
        elif r.speedup_vs_eager is not None:
            out[r.key] = r.speedup_vs_eager
    return out


@dataclass(frozen=True)
class Best:
    """The fastest ok torch cell of a case (any implementation but ours, any mode) by one measure."""

    value: float  # the measure's value: wall median in ms, or device median in µs
    implementation: str
    mode: str


def best_torch(results: Iterable[Result], value=wall_ms) -> dict[tuple[str, Case], Best]:
    """By (op, case): the ok cell with the lowest ``value`` (``wall_ms`` or ``device_us``) among
    implementations other than ``OURS``."""
    best: dict[tuple[str, Case], Best] = {}
    for r in sorted(results, key=result_rank):
        v = value(r)
        if r.implementation == OURS or v is None:
            continue
        k = (r.op, r.case)
        if k not in best or v < best[k].value:
            best[k] = Best(v, r.implementation, r.mode)
    return best


def ours_vs_best(results: Iterable[Result], value=wall_ms) -> dict[tuple, tuple[float, Best]]:
    """By ``Result.key`` of each ok ``OURS`` cell with a ``value``: (best torch value / ours, the best
    torch cell), by wall time (``wall_ms``) or device time (``device_us``). Above 1: ours is faster than
    anything torch offers for that case."""
    results = list(results)
    best = best_torch(results, value)
    out = {}
    for r in results:
        v = value(r)
        b = best.get((r.op, r.case))
        if r.implementation == OURS and v is not None and v > 0 and b is not None:
            out[r.key] = (b.value / v, b)
    return out


# --- grouping and words ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What stays fixed across one heatmap: everything in a case but seqlen and sparsity, and the op."""

    op: str
    B: int
    M: int
    dtype: str
    distribution: str
    seed: int

    @property
    def label(self) -> str:
        seed = f" seed{self.seed}" if self.seed != DEFAULT_SEED else ""
        return f"{self.op} B{self.B} M{self.M} {self.dtype} {self.distribution}{seed}"


def shape_of(r: Result) -> Shape:
    """The heatmap ``r`` belongs to: its op and its case less seqlen and sparsity."""
    c = r.case
    return Shape(r.op, c.B, c.M, c.dtype, c.distribution, c.seed)


def environment_line(environment: dict[str, Any]) -> str:
    """``NVIDIA H200 · torch 2.13.0 · triton 3.6.0`` from a run's environment (``?`` where unknown)."""
    gpu = environment.get("gpu") or ("CPU" if "torch" in environment else "unknown device")
    return f"{gpu} · torch {environment.get('torch') or '?'} · triton {environment.get('triton') or '?'}"
