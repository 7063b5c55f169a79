"""Tables and sentences made from results (rich renderables; the CLI prints them).

Per-call times are in µs and spreads are quantiles (p20–p80); an unstable cell shows its figures marked
``unstable``, and so does a speedup with an unstable side (the ratio of the two walls, without colour): a busy machine
still gives an answer, never a finding (``findings`` takes ok cells only), and ``unstable_advice`` says how to get a
clean one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rich import box
from rich.table import Table

from jaggedperf.lab.budget import cut_after_s, status_text, timed_out
from jaggedperf.lab.modes import EAGER
from jaggedperf.lab.result import OK, SKIPPED, TIMED, UNSTABLE, Result


def _fmt(value: float | None, spec: str, missing: str = "—") -> str:
    return missing if value is None else format(value, spec)


def _by_key(results: list[Result]) -> dict[tuple, Result]:
    return {(r.op, r.implementation, r.mode, r.case): r for r in results}


def seed_rows(results: list[Result], compiled_mode: str, boundary_mode: str | None = None) -> list[dict]:
    """The seed's table: per case and implementation, eager vs ``compiled_mode`` wall medians, and
    ``boundary_mode`` (the same torch mode through ``jaggedperf.compile``) beside them when given."""
    index = _by_key(results)
    rows = []
    seen = set()
    for r in results:
        key = (r.op, r.implementation, r.case)
        if key in seen:
            continue
        seen.add(key)
        eager = index.get((r.op, r.implementation, EAGER, r.case))
        compiled = index.get((r.op, r.implementation, compiled_mode, r.case))
        boundary = index.get((r.op, r.implementation, boundary_mode, r.case)) if boundary_mode else None
        if eager is None and compiled is None and boundary is None:
            continue
        rows.append({
            "case": r.case.label,
            "implementation": r.implementation,
            "eager": eager,
            "compiled": compiled,
            "speedup": compiled.speedup_vs_eager if compiled else None,
            "boundary": boundary,
            "boundary_speedup": boundary.speedup_vs_eager if boundary else None,
        })
    return rows


def shown_speedup(r: Result | None, eager: Result | None) -> tuple[float | None, bool]:
    """The speedup a table shows for ``r`` against its ``eager`` cell, and whether it is settled: both ok, the recorded
    ``speedup_vs_eager``; one unstable and both timed, eager's wall median over ``r``'s (shown marked, never a finding);
    else None."""
    if r is None or r.wall is None or r.mode == EAGER:
        return (r.speedup_vs_eager if r is not None and r.status == OK else None), True
    if r.status == OK and r.speedup_vs_eager is not None:
        return r.speedup_vs_eager, True
    if eager is None or eager.wall is None or r.status not in TIMED or eager.status not in TIMED \
            or UNSTABLE not in (r.status, eager.status) or r.wall.median_ms <= 0:
        return None, True
    return eager.wall.median_ms / r.wall.median_ms, False


def _us(value: float | None) -> str:
    """µs with one decimal below 1000, whole µs above."""
    if value is None:
        return "—"
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def _wall_cell(r: Result | None) -> str:
    """A cell's wall median in µs; ``unstable`` beside it when its timing never settled; a cut cell's budget
    (``cut > 20 s``: its compile passed it, so it was never timed); "not tried" after such a cut; else its status."""
    if r is None:
        return "—"
    cut = cut_after_s(r)
    if cut is not None:
        return f"cut > {cut:g} s"
    if r.status == SKIPPED and (r.reason or "").startswith("not tried"):
        return "not tried"
    if r.status not in TIMED or r.wall is None:
        return status_text(r)
    text = _us(r.wall.median_ms * 1e3)
    return text if r.status == OK else f"{text} ({UNSTABLE})"


def _spread_cell(r: Result) -> str:
    """p20–p80 of the wall in µs (— for results written before quantiles were kept)."""
    w = r.wall
    if r.status not in TIMED or w is None or w.p20_ms is None or w.p80_ms is None:
        return "—"
    return f"{_us(w.p20_ms * 1e3)}–{_us(w.p80_ms * 1e3)}"


def _speedup_cell(speedup: float | None, settled: bool = True) -> str:
    return _fmt(speedup, ".2f") + ("" if speedup is None else "×" if settled else f"× ({UNSTABLE})")


def _speedup_style(speedup: float | None) -> str | None:
    return None if speedup is None else ("red" if speedup < 0.95 else "green" if speedup > 1.05 else None)


def seed_table(results: list[Result], compiled_mode: str, title: str | None = None,
               boundary_mode: str | None = None) -> Table:
    """The seed's table as a rich ``Table``: per case and implementation, eager against ``compiled_mode``
    (wall, device, host, kernels, compile time); red where compiled is over 5% slower, green over 5% faster.

    Args:
        results: the run's results.
        compiled_mode: the compiled mode the table compares with eager.
        title: the table's title (default: the op, eager vs ``compiled_mode``).
        boundary_mode: a ``jagged-compile:`` mode whose wall and speedup vs eager get two columns beside
            the compiled mode's (the remedy beside the finding), or None.

    Returns:
        The table.
    """
    ops = list(dict.fromkeys(r.op for r in results)) or ["jagged_mean"]
    against = compiled_mode + (f" and {boundary_mode}" if boundary_mode else "")
    table = Table(title=title or f"{', '.join(ops)}: eager vs {against} (wall per call in µs, median of the timed calls)")
    columns = [("case", "left"), ("implementation", "left"), ("eager µs", "right"), ("compiled µs", "right"),
               ("speedup", "right")]
    if boundary_mode:
        columns += [("jagged-compile µs", "right"), ("jagged-compile speedup", "right")]
    always = len(columns)  # the walls and speedups; a measure no row has (device time on the CPU) gets no column
    columns += [("eager dev µs", "right"), ("compiled dev µs", "right"), ("compiled host µs", "right"),
                ("kernels e→c", "right"), ("compile s", "right")]
    rows = []
    for row in seed_rows(results, compiled_mode, boundary_mode):
        eager, compiled = row["eager"], row["compiled"]
        speedup, settled = shown_speedup(compiled, eager)
        cells = [row["case"], row["implementation"], _wall_cell(eager), _wall_cell(compiled),
                 _speedup_cell(speedup, settled)]
        if boundary_mode:
            cells += [_wall_cell(row["boundary"]), _speedup_cell(*shown_speedup(row["boundary"], eager))]
        cells += [
            _fmt(eager.device_time.median_us if eager and eager.device_time else None, ".1f"),
            _fmt(compiled.device_time.median_us if compiled and compiled.device_time else None, ".1f"),
            _fmt(compiled.host_us if compiled else None, ".1f"),
            f"{_fmt(eager.kernels_per_call if eager else None, '.0f')}→{_fmt(compiled.kernels_per_call if compiled else None, '.0f')}",
            _compile_cell(compiled),
        ]
        rows.append((cells, _speedup_style(speedup) if settled else None))
    keep = [i for i in range(len(columns))
            if i < always or any(cells[i] not in ("—", "—→—") for cells, _ in rows)]
    for i in keep:
        table.add_column(*columns[i][:1], justify=columns[i][1])
    for cells, style in rows:
        table.add_row(*(cells[i] for i in keep), style=style)
    return keep_names_whole(table)


def cell_summary(r: Result) -> str:
    """One finished cell in a few words: its wall median (ms) and first call, or its status and why."""
    if r.status in TIMED and r.wall is not None:
        text = f"{r.wall.median_ms:.3f} ms" + ("" if r.status == OK else f" ({UNSTABLE})")
        return text + (f", first call {r.compile_s:.1f} s" if r.compile_s is not None else "")
    return f"{status_text(r)}: {_why(r)}" if r.reason else status_text(r)


def _why(r: Result) -> str:
    """A cell's reason after its status: a timed-out cell's without the words its status already says."""
    if timed_out(r):
        return f"{r.reason.removeprefix('timed out ')}, compile included"
    return r.reason


def _compile_cell(r: Result | None) -> str:
    """The first call's seconds; for a cell cut at its budget, the bound it passed (``> 20``)."""
    if r is None:
        return "—"
    cut = cut_after_s(r)
    return f"> {cut:g}" if cut is not None else _fmt(r.compile_s, ".1f")


# tritonbench's --metrics names (and ours) -> the columns of ``cells_table`` they show. The case, implementation,
# mode and status columns are always shown: without them a row says nothing.
METRICS = {
    "latency": ("wall µs", "p20–p80 µs", "IQR/med"),
    "speedup": ("speedup",),
    "accuracy": ("rel err",),
    "device": ("device µs",),
    "host": ("host µs",),
    "kernels": ("kernels",),
    "gbps": ("GB/s", "% copy"),
    "compile_time": ("first call s",),
}
DEFAULT_METRICS = ("latency", "speedup", "device", "host", "kernels", "gbps", "compile_time")
_KEY_COLUMNS = ("case", "implementation", "mode")


def cells_table(results: list[Result], title: str = "every cell", metrics: Sequence[str] | None = None) -> Table:
    """Every cell as a row of a rich ``Table`` (wall median and p20–p80 in µs, IQR/median, speedup, device, host,
    kernels, bandwidth, first call, status); red where the cell failed, yellow where it is unstable. A measure
    no cell has (device time on the CPU, say) gets no column.

    Args:
        results: the cells.
        title: the table's title.
        metrics: names from ``METRICS`` whose columns are shown (None: ``DEFAULT_METRICS``).
    """
    columns = [*_KEY_COLUMNS, "wall µs", "p20–p80 µs", "IQR/med", "speedup", "rel err", "device µs",
               "host µs", "kernels", "GB/s", "% copy", "first call s", "status"]
    shown = {c for m in (DEFAULT_METRICS if metrics is None else metrics) for c in METRICS[m]}
    always = {*_KEY_COLUMNS, "status"}
    rows = []
    eager = {(r.op, r.implementation, r.case): r for r in results if r.mode == EAGER}
    for r in results:
        timed = r.status in TIMED and r.wall is not None
        iqr = r.stability.iqr_rel if timed and r.stability is not None else None
        speedup, settled = shown_speedup(r, eager.get((r.op, r.implementation, r.case)))
        rows.append((r, [
            r.case.label, r.implementation, r.mode,
            _us(r.wall.median_ms * 1e3) if timed else "—",
            _spread_cell(r),
            "—" if iqr is None else f"{iqr:.0%}",
            _fmt(speedup, ".2f") + ("" if settled or speedup is None else f" ({UNSTABLE})"),
            _fmt(r.rel_error, ".1e"),
            _fmt(r.device_time.median_us if r.device_time else None, ".1f"),
            _fmt(r.host_us, ".1f"),
            _fmt(r.kernels_per_call, ".1f"),
            _fmt(r.gbps, ".0f"),
            _fmt(r.pct_of_copy, ".0f"),
            f"> {cut_after_s(r):g}" if timed_out(r) and cut_after_s(r) is not None else _fmt(r.compile_s, ".2f"),
            status_text(r),
        ]))
    keep = [i for i, name in enumerate(columns)
            if name in always or (name in shown and (name == "wall µs" or any(row[i] != "—" for _, row in rows)))]
    table = Table(title=title)
    for i in keep:
        name = columns[i]
        table.add_column(name, justify="left" if name in (*_KEY_COLUMNS, "status") else "right")
    for r, row in rows:
        table.add_row(*(row[i] for i in keep),
                      style=None if r.status == OK else "yellow" if r.status == UNSTABLE else "red")
    return keep_names_whole(table)


# Mode names shortened, only in a table too wide for its terminal; each stays distinct (tested) and ``LEGEND``
# is printed under it.
_MODE_SHORT = (("jagged-compile:", "jc:"), ("compile:", "tc:"), ("-no-cudagraphs", "-no-cg"))
LEGEND = "tc: torch.compile, jc: jaggedperf.compile, no-cg: no-cudagraphs"


def short_mode(mode: str) -> str:
    for long, short in _MODE_SHORT:
        mode = mode.replace(long, short)
    return mode


@dataclass
class Fitted:
    """A table made to fit a width: the table, the columns left out (rightmost first went), and whether the
    mode names were shortened (``LEGEND`` says how)."""

    table: Table
    left_out: list[str]
    shortened: bool


def fit_width(table: Table, width: int) -> Fitted:
    """``table`` within ``width`` columns with every name whole and every number on one line: when it is
    too wide, its borders go (a simple rule under the header), then mode names are shortened, then the
    rightmost measure columns are left out one by one (never a name column or status)."""
    names = [str(c.header) for c in table.columns]
    cells = [[str(v) for v in c.cells] for c in table.columns]
    if _needed(names, cells, boxed=True) <= width:
        return Fitted(table, [], False)
    shortened = False
    if "mode" in names and _needed(names, cells, boxed=False) > width:
        i = names.index("mode")
        cells[i] = [short_mode(m) for m in cells[i]]
        shortened = True
    keep = list(range(len(names)))
    optional = [i for i in keep if names[i] not in (*_KEY_COLUMNS, "status")]
    while optional and _needed([names[i] for i in keep], [cells[i] for i in keep], boxed=False) > width:
        keep.remove(optional.pop())
    out = Table(title=table.title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i in keep:
        column = table.columns[i]
        out.add_column(column.header, justify=column.justify, min_width=_widest(names[i], cells[i]))
    for r, row in enumerate(table.rows):
        out.add_row(*(cells[i][r] for i in keep), style=row.style)
    return Fitted(keep_names_whole(out), [names[i] for i in range(len(names)) if i not in keep], shortened)


def _needed(names: list[str], cells: list[list[str]], *, boxed: bool) -> int:
    """Columns a table needs with cells on one line and headers wrapped at spaces: per column its widest
    cell or header word and padding 2, and the borders: boxed, one per column and one more; unboxed (no
    edges, no outer padding), one between columns."""
    widths = [_widest(name, col) for name, col in zip(names, cells)]
    return sum(widths) + len(widths) * 3 + (1 if boxed else -3)


def _widest(header: str, cells: list[str]) -> int:
    """The narrowest a column can be with its cells on one line and its header wrapped at spaces."""
    return max([len(w) for w in header.split()] + [len(c) for c in cells])


def keep_names_whole(table: Table) -> Table:
    """``table`` with its name columns (case, implementation, mode) never wrapped or cut, so that two names
    that share a prefix (``jaggedperf``, ``jaggedperf_njt``) stay told apart in a narrow terminal: the
    numeric columns are squeezed instead (their headers wrap)."""
    for column in table.columns:
        if column.header in _KEY_COLUMNS:
            column.no_wrap = True
            column.min_width = max((len(str(c)) for c in column.cells), default=0)
    return table


def baseline_table(results: list[Result], baseline: str) -> Table:
    """Per case and mode, each implementation's wall median against ``baseline``'s in the same mode and case
    (tritonbench's ``--baseline``): > 1 is faster than the baseline. A cell without a settled wall, or
    whose baseline has none, shows — ."""
    index = _by_key(results)
    table = Table(title=f"speedup vs {baseline} (same mode and case; wall medians)")
    rows = []
    for r in results:
        base = index.get((r.op, baseline, r.mode, r.case))
        settled = r.status == OK and r.wall is not None and base is not None and base.status == OK and base.wall
        ratio = base.wall.median_ms / r.wall.median_ms if settled else None
        rows.append((r.case.label, r.implementation, r.mode, _speedup_cell(ratio), _wall_cell(r), ratio))
    for i, name in enumerate(("case", "implementation", "mode", f"vs {baseline}", "wall µs")):
        table.add_column(name, justify="right" if i >= 3 else "left")
    for *cells, ratio in rows:
        table.add_row(*cells, style=_speedup_style(ratio))
    return keep_names_whole(table)


def problems(results: list[Result]) -> list[str]:
    """One line per cell that is not ok, with its reason (unstable ones say why their timing never settled)."""
    return [f"{status_text(r)}: {r.implementation} · {r.mode} · {r.case.label}: {_why(r)}" for r in results
            if r.status != OK]


def unstable_advice(results: list[Result]) -> str | None:
    """One sentence under a run's problems when some cells never settled: what their figures are, and how to get clean
    ones (the busy machine's share of it, where the load was measured to slow a cell's core)."""
    shaky = [r for r in results if r.status == UNSTABLE]
    if not shaky:
        return None
    loaded = sum(1 for r in shaky if r.stability is not None and r.stability.contended)
    why = (f"; {loaded} of them slowed by other programs (a host probe timed beside them ran slower)" if loaded else "")
    return (f"{len(shaky)} of {len(results)} cells unstable{why}: their figures and speedups are shown marked "
            "(unstable) and draw no finding. For clean numbers run again with other programs closed; --attempts N "
            "measures each cell more times, --cpu-load ignore stops judging the machine's load.")


def findings(results: list[Result], compiled_mode: str, boundary_mode: str | None = None) -> list[str]:
    """One sentence per cell where the compiled mode is slower than eager, worst first; with ``boundary_mode``,
    each says what the same implementation measured through ``jaggedperf.compile`` in it."""
    index = _by_key(results)

    def settled(r: Result | None) -> bool:
        return r is not None and r.status == OK and r.wall is not None

    slower = [r for r in results if r.mode == compiled_mode and settled(r) and r.speedup_vs_eager is not None
              and r.speedup_vs_eager < 1 and settled(index.get((r.op, r.implementation, EAGER, r.case)))]
    slower.sort(key=lambda r: r.speedup_vs_eager)
    lines = []
    for r in slower:
        eager = index[(r.op, r.implementation, EAGER, r.case)]
        line = (f"{r.implementation} at {r.case.label}: {compiled_mode} is {1 / r.speedup_vs_eager:.2f}× slower than "
                f"eager ({_us(r.wall.median_ms * 1e3)} vs {_us(eager.wall.median_ms * 1e3)} µs per call)")
        boundary = index.get((r.op, r.implementation, boundary_mode, r.case)) if boundary_mode else None
        if settled(boundary) and boundary.speedup_vs_eager is not None:
            line += (f"; {boundary_mode}: {_us(boundary.wall.median_ms * 1e3)} µs per call, "
                     f"{boundary.speedup_vs_eager:.2f}× eager")
        lines.append(line)
    return lines
