"""What each figure shows, worked out from results without drawing anything (no matplotlib needed): the
speedup and ours-vs-best heatmaps (``heatmap_data``), the roofline (``roofline_data``) and the latency
plot (``latency_data``). ``plot`` draws them; the tests check their numbers here.

Cells that failed are left out and counted (``left_out``); unstable cells (timed, never settled) have no
value and are marked, never turned into a ratio. An op without device time gets no roofline.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from jaggedperf.lab.budget import status_text
from jaggedperf.lab.result import OK, UNSTABLE, Result, RunRecord
from jaggedperf.lab.results.views import (
    EAGER,
    OURS,
    Shape,
    device_us,
    impl_rank,
    mode_rank,
    ordered,
    ours_vs_best,
    shape_of,
    speedups,
    wall_ms,
)

NOT_IN_FILE = "not in the file"  # a heatmap's left_out key: an implementation × case with no result in the mode
NO_ROOFLINE = "no roofline: no cell has device time (the CPU, or --no-device-time)"


@dataclass
class Panel:
    name: str  # the implementation (speedup) or our mode (ours vs best torch)
    values: np.ndarray  # (len(seqlens), len(sparsities)); NaN where there is no value
    unstable: np.ndarray | None = None  # same shape, True where a cell the value needs is unstable (no value)
    # same shape: where ``unstable``, the ratio the unstable walls give (NaN where none): shown marked, no colour
    unstable_values: np.ndarray | None = None

    def unstable_mask(self) -> np.ndarray:
        return self.unstable if self.unstable is not None else np.zeros(self.values.shape, dtype=bool)

    def unstable_value(self, index) -> float:
        """The ratio the unstable walls give at ``index`` (NaN where there is none)."""
        return float("nan") if self.unstable_values is None else float(self.unstable_values[index])


@dataclass
class Heatmap:
    """One figure of heatmaps over seqlen (rows) × sparsity (columns), one panel per implementation.

    ``kind == "speedup"``: eager wall median / ``mode``'s wall median, same implementation and case.
    ``kind == "ours_vs_best"``: best torch wall median (any other implementation, any mode) / ours,
    one panel per mode ours ran in; above 1 ours is faster.
    ``kind == "ours_vs_best_device"``: the same from device time medians; our ok cells without device
    time are left out and counted in ``unmeasured``.
    """

    kind: str
    shape: Shape
    mode: str | None
    seqlens: list[int]
    sparsities: list[float]
    panels: list[Panel]
    left_out: Counter  # status -> cells that failed (not ok, not unstable) that this figure would have used
    unmeasured: int = 0  # ok cells without device time (ours_vs_best_device only)
    unstable: int = 0  # cells drawn hatched: a cell the value needs is unstable
    not_cases: int = 0  # seqlen × sparsity positions that are no case of the run (the seed's two shapes: 2 of 4)
    unjudged: int = 0  # values drawn from cells whose run recorded no stability (files older than the check)

    @property
    def bars(self) -> bool:
        """One point on an axis: drawn as bars, not a map."""
        return len(self.seqlens) == 1 or len(self.sparsities) == 1

    @property
    def name(self) -> str:
        if self.kind == "speedup":
            return f"speedup_{_slug(self.shape.label)}_{_slug(self.mode)}"
        return f"{VERSUS[self.kind][0]}_{_slug(self.shape.label)}"

    @property
    def title(self) -> str:
        if self.kind == "speedup":
            return f"{self.mode} vs eager: speedup = eager wall / {self.mode} wall, {self.shape.label}"
        what = VERSUS[self.kind][1]
        return f"{OURS} vs best torch (any implementation, any mode): best torch {what} / {OURS} {what}, {self.shape.label}"


# ours-vs-best kinds: file name prefix, what is compared, how to read it off a cell (None: no value)
VERSUS = {
    "ours_vs_best": ("ours-vs-best", "wall", wall_ms),
    "ours_vs_best_device": ("ours-vs-best-device", "device time", device_us),
}


def heatmap_data(record: RunRecord) -> list[Heatmap]:
    """The heatmaps ``speedup_heatmaps`` draws: for each shape (op, B, M, dtype, distribution, seed), one
    per mode other than eager, then, where ours was measured, one of ours vs the best torch contender by
    wall time and one by device time (the latter only where some cell of the shape has device time)."""
    by_shape: dict[Shape, list[Result]] = defaultdict(list)
    for r in record.results:
        by_shape[shape_of(r)].append(r)
    speedup = speedups(record.results)
    shaky_speedup = speedups(record.results, with_unstable=True)  # the ratios a hatched cell shows, marked
    versus = {kind: ours_vs_best(record.results, value) for kind, (_, _, value) in VERSUS.items()}
    out = []
    for shape in sorted(by_shape, key=lambda s: (s.op, s.distribution, s.B, s.M, s.dtype, s.seed)):
        rs = by_shape[shape]
        seqlens = sorted({r.case.seqlen for r in rs})
        sparsities = sorted({r.case.sparsity for r in rs})

        def grid(cells: list[Result], values: dict) -> np.ndarray:
            g = np.full((len(seqlens), len(sparsities)), np.nan)
            for r in cells:
                if r.key in values:
                    v = values[r.key]
                    g[seqlens.index(r.case.seqlen), sparsities.index(r.case.sparsity)] = v[0] if isinstance(v, tuple) else v
            return g

        def shaky(cells: list[Result], depends_on_eager: bool) -> np.ndarray:
            m = np.zeros((len(seqlens), len(sparsities)), dtype=bool)
            eager_unstable = {(r.implementation, r.case) for r in rs if r.mode == EAGER and r.status == UNSTABLE}
            for r in cells:
                if r.status == UNSTABLE or (depends_on_eager and (r.implementation, r.case) in eager_unstable):
                    m[seqlens.index(r.case.seqlen), sparsities.index(r.case.sparsity)] = True
            return m

        for mode in ordered((r.mode for r in rs if r.mode != EAGER), mode_rank):
            in_mode = [r for r in rs if r.mode == mode]
            panels = []
            for impl in ordered((r.implementation for r in in_mode), impl_rank):
                mine = [r for r in in_mode if r.implementation == impl]
                mask = shaky(mine, True)
                panels.append(Panel(impl, grid(mine, speedup), mask, np.where(mask, grid(mine, shaky_speedup), np.nan)))
            left_out = Counter(status_text(r) for r in rs if r.mode in (EAGER, mode) and r.status not in (OK, UNSTABLE))
            # a panel's implementation × case with no result in this mode (a cut compile a file never recorded) is an
            # empty cell of the figure too: counted, so that its note never says "all cells ok" over a gap
            measured = {(r.implementation, r.case) for r in in_mode}
            missing = sum(1 for impl in {r.implementation for r in in_mode} for case in {r.case for r in rs}
                          if (impl, case) not in measured)
            if missing:
                left_out[NOT_IN_FILE] += missing
            n_unstable = int(sum(p.unstable_mask().sum() for p in panels))
            positions = {(r.case.seqlen, r.case.sparsity) for r in rs}
            eager_of = {(r.implementation, r.case): r for r in rs if r.mode == EAGER}
            unjudged = sum(1 for r in in_mode if r.key in speedup and (
                r.stability is None or getattr(eager_of.get((r.implementation, r.case)), "stability", None) is None))
            out.append(Heatmap("speedup", shape, mode, seqlens, sparsities, panels, left_out, unstable=n_unstable,
                               not_cases=len(seqlens) * len(sparsities) - len(positions), unjudged=unjudged))
        ours = [r for r in rs if r.implementation == OURS]
        if not ours or all(r.implementation == OURS for r in rs):
            continue
        left_out = Counter(r.status for r in ours if r.status not in (OK, UNSTABLE))
        for kind, (_, _, value) in VERSUS.items():
            if kind == "ours_vs_best_device" and all(device_us(r) is None for r in rs):
                continue  # device time was not measured (CPU, or --no-device-time): nothing to draw
            panels = [
                Panel(mode, grid([r for r in ours if r.mode == mode], versus[kind]),
                      shaky([r for r in ours if r.mode == mode], False))
                for mode in ordered((r.mode for r in ours), mode_rank)
            ]
            unmeasured = sum(1 for r in ours if r.status == OK and value(r) is None)
            n_unstable = int(sum(p.unstable_mask().sum() for p in panels))
            out.append(Heatmap(kind, shape, None, seqlens, sparsities, panels, left_out, unmeasured, n_unstable))
    return out


@dataclass
class Series:
    implementation: str
    mode: str
    x: list[float]  # bytes moved
    y: list[float]
    cases: list[str]  # case labels, one per point


@dataclass
class Scatter:
    """One op's points, one series per implementation × mode, against bytes moved."""

    kind: str  # "roofline" or "latency"
    op: str
    metric: str  # roofline: "pct_of_copy" or "gbps"; latency: "device_us" or "wall_us"
    series: list[Series]
    left_out: Counter  # status -> cells not ok (unstable ones included: a scatter has no hatching)
    unmeasured: int  # ok cells without the numbers this figure needs
    copy_gbps: float | None
    note: str | None = None  # one more line for the figure's footer

    @property
    def name(self) -> str:
        return f"{self.kind}_{_slug(self.op)}"

    @property
    def ylabel(self) -> str:
        return {
            "pct_of_copy": "% of copy bandwidth",
            "gbps": "GB/s (bytes moved / device time)",
            "device_us": "device time per call (µs)",
            "wall_us": "wall time per call, median (µs)",
        }[self.metric]

    @property
    def title(self) -> str:
        if self.kind == "roofline":
            return f"{self.op}: {self.ylabel} against bytes moved"
        return f"{self.op}: {self.ylabel.split(' (')[0]} against bytes moved"


def roofline_data(record: RunRecord) -> list[Scatter]:
    """Per op with device time: % of copy bandwidth (GB/s where some cell lacks it) against bytes moved. An op
    with no device time at all gets no roofline (``NO_ROOFLINE``: the latency figure says so)."""
    out = []
    for op, rs in _by_op(record.results).items():
        if not _has_device_time(rs):
            continue
        ok = [r for r in rs if r.status == OK]
        usable = [r for r in ok if r.bytes_moved and r.gbps is not None]
        pct = bool(usable) and all(r.pct_of_copy is not None for r in usable)
        metric = "pct_of_copy" if pct else "gbps"
        series = _series(usable, lambda r: r.pct_of_copy if pct else r.gbps)
        out.append(Scatter("roofline", op, metric, series, _not_ok(rs), len(ok) - len(usable), record.copy_gbps))
    return out


def latency_data(record: RunRecord) -> list[Scatter]:
    """Per op: device time (wall median where some cell lacks device time) against bytes moved."""
    out = []
    for op, rs in _by_op(record.results).items():
        ok = [r for r in rs if r.status == OK and r.bytes_moved and r.wall is not None]
        device = bool(ok) and all(r.device_time is not None for r in ok)
        metric = "device_us" if device else "wall_us"
        series = _series(ok, lambda r: r.device_time.median_us if device else r.wall.median_ms * 1000)
        unmeasured = sum(1 for r in rs if r.status == OK) - len(ok)
        out.append(Scatter("latency", op, metric, series, _not_ok(rs), unmeasured, record.copy_gbps,
                           None if _has_device_time(rs) else NO_ROOFLINE))
    return out


def _has_device_time(results: list[Result]) -> bool:
    return any(r.device_time is not None or r.gbps is not None for r in results)


def _by_op(results: list[Result]) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        out[r.op].append(r)
    return dict(sorted(out.items()))


def _not_ok(results: list[Result]) -> Counter:
    return Counter(r.status for r in results if r.status != OK)


def _series(results: list[Result], y) -> list[Series]:
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        groups[(r.implementation, r.mode)].append(r)
    out = []
    for (impl, mode), rs in sorted(groups.items(), key=lambda kv: (impl_rank(kv[0][0]), mode_rank(kv[0][1]))):
        rs = sorted(rs, key=lambda r: r.bytes_moved)
        out.append(Series(impl, mode, [float(r.bytes_moved) for r in rs], [float(y(r)) for r in rs], [r.case.label for r in rs]))
    return out


def _slug(s: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", s or "").strip("-")
