"""Figures from results: speedup heatmaps, a roofline and a latency plot, each written as PNG and SVG.

Drawing uses matplotlib's object API on the Agg canvas, never pyplot: nothing is left in a global
figure list and the caller's backend is untouched. What each figure shows is worked out first, in ``figures``
(``heatmap_data``, ``roofline_data``, ``latency_data``), which draws nothing and needs no matplotlib (and
is what the tests check the numbers of). Cells that failed are left out of every figure and counted in a note on it;
unstable cells (timed, never settled) are drawn hatched grey without colour, their ratio marked "?": never a "× slower".

Ratio colour scales are centred on 1× (log-symmetric) and clipped robustly (``ratio_limit``): one
outlier cannot stretch the scale and flatten every other cell; a clipped cell takes the end colour and
keeps its true value in its label. Ticks are round numbers. A grid with one point on an axis is drawn
as bars. Without device time (the CPU) no roofline is drawn; the latency figure says why.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import EngFormatter

from jaggedperf.lab.result import RunRecord
from jaggedperf.lab.results.figures import (NOT_IN_FILE, VERSUS, Heatmap, Scatter, heatmap_data, latency_data,
                                            roofline_data)
from jaggedperf.lab.results.views import OURS, environment_line, impl_rank, mode_rank, ordered

DPI = 110
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">")
_MISSING = "#d9d9d9"  # heatmap cells with no value
_UNSTABLE = "#bdbdbd"  # unstable cells: grey, hatched
_HATCH = "///"


@dataclass
class PlotFile:
    """One figure on disk."""

    name: str  # file stem, e.g. ``speedup_jagged_mean-B512-M64-float32-tritonbench_compile-default``
    title: str  # what it shows, one line
    png: Path
    svg: Path

    @property
    def paths(self) -> tuple[Path, Path]:
        return (self.png, self.svg)


# --- drawing --------------------------------------------------------------------------------------


def speedup_heatmaps(record: RunRecord, out_dir: str | Path) -> list[PlotFile]:
    """One figure per shape and non-eager mode (speedup vs eager per implementation), plus two per shape
    of ours vs the best torch contender (wall time, device time) when ours was measured. Returns the
    files written."""
    return [_save(_draw_heatmap(h, record.environment), out_dir, h.name, h.title) for h in heatmap_data(record)]


def roofline(record: RunRecord, out_dir: str | Path) -> list[PlotFile]:
    """Per op: % of copy bandwidth (or GB/s) against bytes moved, log x, one series per implementation × mode."""
    return [_save(_draw_scatter(s, record.environment), out_dir, s.name, s.title) for s in roofline_data(record)]


def latency(record: RunRecord, out_dir: str | Path) -> list[PlotFile]:
    """Per op: device time (or wall median) against bytes moved, log-log, with the copy-bandwidth floor."""
    return [_save(_draw_scatter(s, record.environment), out_dir, s.name, s.title) for s in latency_data(record)]


def plot_all(record: RunRecord, out_dir: str | Path, *, reuse_newer_than: float | None = None) -> list[PlotFile]:
    """Every figure of ``record``: speedup heatmaps, roofline, latency, each as PNG and SVG.

    Args:
        record: the run.
        out_dir: the folder for the figures (made if missing).
        reuse_newer_than: a time (``os.stat`` mtime); a figure whose PNG and SVG are both in ``out_dir`` and
            newer than it is kept as it is, not drawn again (``report`` after ``plot`` of the same results:
            the results file's mtime). None: every figure is drawn.

    Returns:
        The figures, in the order heatmaps, roofline, latency (none when there is nothing to plot).

    Raises:
        OSError: a figure cannot be written.
    """
    figures = ([(h, _draw_heatmap) for h in heatmap_data(record)] + [(s, _draw_scatter) for s in roofline_data(record)]
               + [(s, _draw_scatter) for s in latency_data(record)])
    out = []
    for data, draw in figures:
        kept = PlotFile(data.name, data.title, Path(out_dir) / f"{data.name}.png", Path(out_dir) / f"{data.name}.svg")
        if reuse_newer_than is not None and all(_newer(f, reuse_newer_than) for f in kept.paths):
            out.append(kept)
        else:
            out.append(_save(draw(data, record.environment), out_dir, data.name, data.title))
    return out


def _newer(path: Path, than: float) -> bool:
    try:
        return path.stat().st_mtime >= than
    except OSError:
        return False


def ratio_limit(values: np.ndarray) -> float:
    """The colour scale's end, L (the scale runs 1/L … 1 … L, log-symmetric about 1×), robust to outliers.

    L covers every ratio unless a few lie far out: then it stops at twice the 75th percentile of
    |log ratio| (at least 1.25×), and the far ones take the end colours. One 0.0015× cell among cells
    near 1× no longer turns all of them white.

    Args:
        values: ratios (NaN, non-positive and infinite values are ignored).

    Returns:
        L ≥ 1.25.
    """
    v = values[np.isfinite(values) & (values > 0)]
    if not v.size:
        return 1.25
    logs = np.abs(np.log(v))
    cap = max(2 * float(np.quantile(logs, 0.75)), math.log(1.25))
    return max(math.exp(min(float(logs.max()), cap)) * 1.05, 1.25)


def ratio_ticks(limit: float) -> list[float]:
    """Round ratios within [1/limit, limit] for the colour bar (1× always among them)."""
    return [t for t in _RATIO_TICKS if 1 / limit <= t <= limit]


def _draw_heatmap(h: Heatmap, environment: dict) -> Figure:
    if h.bars:
        return _draw_bars(h, environment)
    n = len(h.panels)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    cell_w, cell_h = max(0.75, 3.2 / len(h.sparsities)), max(0.45, 2.4 / len(h.seqlens))
    fig = Figure(
        figsize=(ncols * (len(h.sparsities) * cell_w + 1.3) + 1.2, nrows * (len(h.seqlens) * cell_h + 1.1) + 1.3),
        layout="constrained",
    )
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)

    lim = ratio_limit(np.concatenate([p.values[~p.unstable_mask()].ravel() for p in h.panels]))
    norm = LogNorm(vmin=1 / lim, vmax=lim, clip=True)  # symmetric in log space: 1 sits in the middle of the colormap
    cmap = colormaps["RdBu"].with_extremes(bad=_MISSING)  # red: slower than the baseline, blue: faster
    fontsize = 9 if len(h.sparsities) <= 4 else 7
    image = None
    for ax, panel in zip(axes.flat, h.panels):
        image = ax.imshow(np.ma.masked_invalid(panel.values), cmap=cmap, norm=norm, aspect="auto")
        ax.set_title(panel.name, fontsize=10)
        ax.set_xticks(range(len(h.sparsities)), [f"{s:g}" for s in h.sparsities])
        ax.set_yticks(range(len(h.seqlens)), [str(L) for L in h.seqlens])
        ax.set_xlabel("sparsity")
        ax.set_ylabel("seqlen")
        ax.label_outer()  # tick labels and axis names on the outer panels only
        shaky = panel.unstable_mask()
        for (i, j), v in np.ndenumerate(panel.values):
            if shaky[i, j]:  # no colour: a grey hatched cell that says why, with the unsettled ratio where there is one
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=_UNSTABLE, hatch=_HATCH,
                                       edgecolor="#777777", linewidth=0))
                ax.text(j, i, _unstable_text(panel.unstable_value((i, j))), ha="center", va="center",
                        fontsize=fontsize - 1, color="#333333")
            elif math.isfinite(v) and v > 0:
                red, green, blue, _ = cmap(norm(v))
                dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
                ax.text(j, i, _times(v), ha="center", va="center", fontsize=fontsize, color="white" if dark else "black")
            else:
                ax.text(j, i, "—", ha="center", va="center", fontsize=fontsize, color="#555555")
    for k, ax in enumerate(axes.flat):
        if k >= n:
            ax.set_axis_off()
        elif k + ncols >= n:  # nothing drawn below this panel: it shows the x axis
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel("sparsity")
    if image is not None:
        clipped = any(np.any((p.values < 1 / lim) | (p.values > lim)) for p in h.panels)
        bar = fig.colorbar(image, ax=axes, shrink=0.9, extend="both" if clipped else "neither")
        ticks = ratio_ticks(lim)
        bar.set_ticks(ticks, labels=[f"{t:g}×" for t in ticks])
        bar.minorticks_off()
        bar.set_label(_ratio_label(h))
    width = int(fig.get_figwidth() * 10)  # characters that fit: about 10 an inch at 11 pt
    head, _, shape = h.title.rpartition(", ")  # too long: the shape on a line of its own
    title = h.title if len(h.title) <= width else f"{textwrap.fill(head + ',', width)}\n{shape}"
    fig.suptitle(f"{title}\n{environment_line(environment)}", fontsize=11)
    fig.supxlabel(_heatmap_note(h), fontsize=8, color="#555555")
    return fig


def _unstable_text(value: float, sep: str = "\n") -> str:
    """What a hatched (unstable) cell says: that, and the ratio its unsettled walls give, where there is one."""
    return f"unstable{sep}{_times(value)}?" if math.isfinite(value) and value > 0 else "unstable"


def _heatmap_note(h: Heatmap) -> str:
    note = _note(h.left_out, h.unmeasured, "without device time")
    if h.unstable:
        shaky = (f"{h.unstable} cell{'s' if h.unstable != 1 else ''} unstable (hatched, no colour: timing never "
                 "settled; '?' marks the ratio its walls gave)")
        note = f"{note}; {shaky}" if note else shaky
    if h.unjudged:
        old = (f"{h.unjudged} value{'s' if h.unjudged != 1 else ''} from cells whose run recorded no stability (an "
               "older file): not judged stable")
        note = f"{note}; {old}" if note else old
    if h.not_cases:
        gaps = (f"{h.not_cases} of {len(h.seqlens) * len(h.sparsities)} seqlen × sparsity positions a panel are no "
                "case of this run (—)")
        note = f"{note}; {gaps}" if note else gaps
    return note or "all cells ok"


def _ratio_label(h: Heatmap) -> str:
    if h.kind == "speedup":
        return "speedup vs eager"
    what = VERSUS[h.kind][1]
    return f"best torch {what} / {OURS} {what}\n(>1: {OURS} faster)"


def _draw_bars(h: Heatmap, environment: dict) -> Figure:
    """A grid with one point on an axis: one group of bars per point of the other axis, one bar per panel, on a
    log scale about 1× (a bar grows up from 1× when faster, down when slower); unstable bars hatched grey."""
    along_seqlen = len(h.sparsities) == 1 and len(h.seqlens) > 1
    labels = [f"seqlen {L}" for L in h.seqlens] if along_seqlen else [f"sparsity {s:g}" for s in h.sparsities]
    if len(h.seqlens) == 1 and len(h.sparsities) == 1:
        labels = [f"seqlen {h.seqlens[0]}, sparsity {h.sparsities[0]:g}"]
    n, k = len(h.panels), len(labels)
    fig = Figure(figsize=(max(6.0, 1.2 + k * (0.5 + 0.35 * n)), 5.2), layout="constrained")
    ax = fig.subplots()
    lim = ratio_limit(np.concatenate([p.values[~p.unstable_mask()].ravel() for p in h.panels]))
    norm = LogNorm(vmin=1 / lim, vmax=lim, clip=True)
    cmap = colormaps["RdBu"]
    width = 0.8 / n
    for b, panel in enumerate(h.panels):
        values, shaky = panel.values.ravel(), panel.unstable_mask().ravel()
        for g, (v, unstable) in enumerate(zip(values, shaky)):
            x = g + (b - (n - 1) / 2) * width
            if unstable:
                ax.bar(x, 0.1, bottom=0.95, width=width * 0.9, color=_UNSTABLE, hatch=_HATCH, edgecolor="#777777")
                ax.text(x, 1.06, _unstable_text(panel.unstable_value(np.unravel_index(g, panel.values.shape)), " "),
                        ha="center", va="bottom", fontsize=7, rotation=90, color="#333333")
            elif math.isfinite(v) and v > 0:
                ax.bar(x, abs(v - 1), bottom=min(v, 1.0), width=width * 0.9, color=cmap(norm(v)),
                       edgecolor="#444444", linewidth=0.5)
                ax.text(x, v, _times(v), ha="center", va="bottom" if v >= 1 else "top", fontsize=7)
            else:
                ax.text(x, 1.0, "—", ha="center", va="center", fontsize=8, color="#555555")
    for b, panel in enumerate(h.panels):  # the panel's name under its bars
        for g in range(k):
            ax.annotate(panel.name, (g + (b - (n - 1) / 2) * width, 0), xycoords=("data", "axes fraction"),
                        xytext=(0, -4), textcoords="offset points", ha="right", va="top", rotation=35, fontsize=7)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.8)
    finite = np.concatenate([p.values[np.isfinite(p.values) & (p.values > 0)] for p in h.panels] + [np.array([1.0])])
    ax.set_ylim(min(finite.min(), 1 / 1.25) / 1.3, max(finite.max(), 1.25) * 1.3)
    ticks = [t for t in _RATIO_TICKS if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    ax.set_yticks(ticks, labels=[f"{t:g}×" for t in ticks])
    ax.minorticks_off()
    ax.set_xticks(range(k), labels)
    ax.tick_params(axis="x", pad=58 if n > 1 else 40)
    ax.set_xlim(-0.6, k - 0.4)
    ax.set_ylabel(_ratio_label(h).replace("\n", " "))
    ax.grid(True, axis="y", alpha=0.3)
    if h.unstable:
        ax.legend(handles=[Patch(facecolor=_UNSTABLE, hatch=_HATCH, edgecolor="#777777", label="unstable")],
                  loc="upper right", fontsize=8)
    title = textwrap.fill(h.title, int(fig.get_figwidth() * 11))  # about 11 characters an inch at 10 pt
    fig.suptitle(f"{title}\n{environment_line(environment)}", fontsize=10)
    fig.supxlabel(_heatmap_note(h), fontsize=8, color="#555555")
    return fig


# Round ratios only: 0.8 and 1.25 mark ±20%; then 1-2-5 steps each way.
_RATIO_TICKS = sorted({0.8, 1.0, 1.25} | {m * 10.0**e for e in range(-3, 3) for m in (1, 2, 5)})


def _draw_scatter(s: Scatter, environment: dict) -> Figure:
    fig = Figure(figsize=(10, 6), layout="constrained")
    ax = fig.subplots()
    impls = ordered((x.implementation for x in s.series), impl_rank)
    modes = ordered((x.mode for x in s.series), mode_rank)
    colors = colormaps["tab10"]
    color = {name: colors(i % 10) for i, name in enumerate(impls)}
    marker = {name: _MARKERS[i % len(_MARKERS)] for i, name in enumerate(modes)}
    for x in s.series:
        ax.plot(x.x, x.y, linestyle="none", marker=marker[x.mode], color=color[x.implementation],
                markersize=6, alpha=0.85, markeredgewidth=0.5, markeredgecolor="white")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(EngFormatter(unit="B"))
    ax.set_xlabel("bytes moved (the op's floor: read the input once, write the output once)")
    ax.set_ylabel(s.ylabel)
    ax.grid(True, which="major", alpha=0.3)
    xs = [v for x in s.series for v in x.x]
    if s.kind == "roofline":
        if s.metric == "pct_of_copy":
            ax.axhline(100, color="black", linestyle="--", linewidth=1)
            ax.set_ylim(bottom=0)
            label = f"copy bandwidth ({s.copy_gbps:.0f} GB/s)" if s.copy_gbps else "copy bandwidth"
            ax.annotate(label, (0.01, 100), xycoords=("axes fraction", "data"), va="bottom", fontsize=8)
        else:
            ax.set_yscale("log")
            if s.copy_gbps:
                ax.axhline(s.copy_gbps, color="black", linestyle="--", linewidth=1, label="copy bandwidth")
    else:
        ax.set_yscale("log")
        if s.copy_gbps and xs:
            lo, hi = min(xs), max(xs)
            floor = np.geomspace(lo, hi, 50) if hi > lo else np.array([lo])
            ax.plot(floor, floor / (s.copy_gbps * 1e9) * 1e6, color="black", linestyle="--", linewidth=1)
            ax.annotate(f"copy floor ({s.copy_gbps:.0f} GB/s)", (lo, lo / (s.copy_gbps * 1e9) * 1e6),
                        xytext=(0, -4), textcoords="offset points", ha="left", va="top", fontsize=8)
    impl_handles = [Line2D([], [], color=color[n], marker="o", linestyle="none", label=n) for n in impls]
    mode_handles = [Line2D([], [], color="#444444", marker=marker[m], linestyle="none", label=m) for m in modes]
    if impl_handles:
        fig.legend(handles=impl_handles, title="implementation", loc="outside right upper", fontsize=8)
        fig.legend(handles=mode_handles, title="mode", loc="outside right lower", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no ok cells to show", transform=ax.transAxes, ha="center", va="center")
    fig.suptitle(f"{s.title}\n{environment_line(environment)}", fontsize=11)
    missing = "without device time" if s.metric == "device_us" else "without the numbers"
    footer = _note(s.left_out, s.unmeasured, missing) or "all cells ok"
    fig.supxlabel(f"{footer}\n{s.note}" if s.note else footer, fontsize=8, color="#555555")
    return fig


def _note(left_out: Counter, unmeasured: int, why: str) -> str:
    parts = []
    absent = left_out.get(NOT_IN_FILE, 0)
    failed = {status: c for status, c in left_out.items() if status != NOT_IN_FILE and c}
    if failed:
        n = sum(failed.values())
        detail = ", ".join(f"{c} {status}" for status, c in sorted(failed.items()))
        parts.append(f"{n} cell{'s' if n != 1 else ''} not ok left out ({detail})")
    if absent:
        parts.append(f"{absent} cell{'s' if absent != 1 else ''} not in the file (—: not run, or its compile was cut "
                     "before the file recorded it)")
    if unmeasured:
        parts.append(f"{unmeasured} ok cell{'s' if unmeasured != 1 else ''} {why} left out")
    return "; ".join(parts)


def _save(fig: Figure, out_dir: str | Path, name: str, title: str) -> PlotFile:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    png, svg = out / f"{name}.png", out / f"{name}.svg"
    fig.savefig(png, dpi=DPI)
    fig.set_layout_engine("none")  # keep the layout the PNG got: the SVG need not work it out again
    fig.savefig(svg, metadata={"Date": None})  # no timestamp: the same results give the same file
    return PlotFile(name, title, png, svg)


def _times(v: float) -> str:
    if v >= 10:
        return f"{v:.0f}×"
    if v >= 0.1:
        return f"{v:.2f}×"
    return f"{v:.2g}×"
