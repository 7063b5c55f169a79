"""plot | compare | report: the subcommands that read results files.

A results file that cannot be read, or an output that cannot be written, ends the command with one line
on stderr (``jaggedperf: error: ...``) and exit code 2; warnings met while reading go to stderr too.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from jaggedperf.cli._args import add_json_argument
from jaggedperf.cli._defaults import COMPARE_K as K
from jaggedperf.cli._defaults import COMPARE_MIN_REL as MIN_REL

EXIT_REGRESSION = 1
EXIT_ERROR = 2


class ResultsFileError(Exception):
    """Stands for ``jaggedperf.lab.results.store.ResultsFileError`` until ``_imports`` binds it (no handler catches
    before then)."""


def _imports() -> None:
    """Import what the handlers read, compare and draw with (torch among it) into this module's globals, once:
    building the parsers (``--help``) must not import it (``jaggedperf.cli``); every handler calls this first."""
    global write_text_atomic, BROKEN, FIXED, IMPROVEMENT, NOT_COMPARED, REGRESSION, UNSTABLE_VERDICT, VERDICTS, Change
    global compare, plots_dir, write_report, ResultsFileError, load, _STYLE
    from jaggedperf.lab.api import load
    from jaggedperf.lab.results.atomic import write_text_atomic
    from jaggedperf.lab.results.compare import (BROKEN, FIXED, IMPROVEMENT, NOT_COMPARED, REGRESSION, UNSTABLE_VERDICT,
                                                VERDICTS, Change, compare)
    from jaggedperf.lab.results.report import plots_dir, write_report
    from jaggedperf.lab.results.store import ResultsFileError

    _STYLE = {REGRESSION: "bold red", BROKEN: "bold red", IMPROVEMENT: "green", FIXED: "green", NOT_COMPARED: "dim"}


def register(sub) -> None:
    p = sub.add_parser("plot", help="draw speedup heatmaps, roofline and latency plots from a results file",
                       description="Draw speedup heatmaps, a roofline and a latency plot (PNG and SVG).")
    p.add_argument("results", metavar="RESULTS", help="results file (JSON document or JSON lines)")
    add_plots_dir_argument(p)
    p.add_argument("-o", "--out", dest="plots_dir", type=Path, help=argparse.SUPPRESS)  # its spelling before 0.2
    p.set_defaults(handler=_clean_errors(_plot))

    p = sub.add_parser("compare", help="compare two results files cell by cell (B against baseline A)",
                       description="Ratios B/A of wall and device medians per cell with a bootstrap confidence "
                                   "interval from the raw samples; a change counts when the interval excludes 1 and "
                                   "the ratio passes 1 ± min-rel (files without samples: beyond "
                                   "max(k·(σA+σB), min-rel·A)). Unstable cells are shown, never counted.")
    p.add_argument("a", metavar="A", help="baseline results file")
    p.add_argument("b", metavar="B", help="results file to judge")
    p.add_argument("--fail-on-regression", action="store_true", help="exit with code 1 when a cell regressed, 2 when no cell could be compared")
    add_json_argument(p, "the comparison, cell by cell")
    p.add_argument("--k", type=float, default=K,
                   help=f"files without samples: standard deviations a change must exceed (default {K:g})")
    p.add_argument("--min-rel", type=float, default=MIN_REL,
                   help=f"smallest relative change that counts (default {MIN_REL:g})")
    p.add_argument("--changed", action="store_true", help="list only cells that regressed, improved, broke or were fixed")
    p.set_defaults(handler=_clean_errors(_compare))

    p = sub.add_parser("report", help="write a Markdown report of a results file, with its plots",
                       description="Write a Markdown report linking the figures of `jaggedperf plot RESULTS`: they "
                                   "are drawn into the same folder, and those already there and newer than RESULTS "
                                   "are linked as they are.")
    p.add_argument("results", metavar="RESULTS", help="results file (JSON document or JSON lines)")
    p.add_argument("-o", "--output", metavar="REPORT.md", type=Path, required=True, help="the report to write")
    add_plots_dir_argument(p)
    p.add_argument("--no-plots", action="store_true", help="tables only, no figures")
    p.set_defaults(handler=_clean_errors(_report))


# --- handlers -------------------------------------------------------------------------------------


def add_plots_dir_argument(p) -> None:
    p.add_argument("--plots-dir", metavar="DIR", type=Path,
                   help="the figures' folder (default: RESULTS' name + '-plots', beside RESULTS)")


def _plot(args) -> int:
    record = _load(args.results)
    plot = _plot_module()
    out = args.plots_dir if args.plots_dir is not None else plots_dir(Path(args.results))
    files = plot.plot_all(record, out)
    console = Console()
    if not files:
        console.print(f"no figures: {escape(args.results)} has no results to plot", highlight=False)
        return 0
    for f in files:
        console.print(f"{escape(str(f.png))}  [dim](+ .svg)[/dim]  {escape(f.title)}", highlight=False, soft_wrap=True)
    console.print(f"wrote {len(files)} figures (PNG and SVG) to {escape(str(out))}", highlight=False)
    return 0


def _compare(args) -> int:
    a, b = _load(args.a), _load(args.b)
    result = compare(a, b, k=args.k, min_rel=args.min_rel)
    if args.json is not None:
        write_text_atomic(Path(args.json), json.dumps(result.to_dict(), indent=1) + "\n")
    console = Console(width=_width())
    for key, (va, vb) in result.environment_changes.items():
        console.print(f"[yellow]{key}[/yellow]: {escape(str(va))} → {escape(str(vb))}", highlight=False)
    ci = f"{result.confidence:.0%} CI"
    table = Table(title=escape(f"B / A   (A = {args.a}, B = {args.b})"), title_justify="left")
    for name, justify in (("case", "left"), ("implementation", "left"), ("mode", "left"), ("wall A µs", "right"),
                          ("wall B µs", "right"), ("wall B/A", "right"), (ci, "right"), ("device A µs", "right"),
                          ("device B µs", "right"), ("device B/A", "right"), (ci, "right"), ("verdict", "left")):
        table.add_column(name, justify=justify)
    shown = [c for c in result.cells if not args.changed or c.verdict in (REGRESSION, BROKEN, IMPROVEMENT, FIXED)]
    for c in shown:
        style = _STYLE.get(c.verdict, "")
        verdict = c.verdict if c.status_a == c.status_b else f"{c.verdict} ({c.status_a} → {c.status_b})"
        if c.note:
            verdict += f"; wall not counted: {c.note}"
        table.add_row(c.case.label + (f" · {c.gpu}" if c.gpu else ""), c.implementation, c.mode, *_change_cells(c.wall, 1e3),
                      *_change_cells(c.device, 1.0), Text(verdict, style=style))
    if shown:
        console.print(table)
    for label, only in (("only in A", result.only_a), ("only in B", result.only_b)):
        if only:
            console.print(f"[yellow]{label}[/yellow] ({len(only)}): "
                          + escape(", ".join(f"{r.implementation} {r.mode} {r.case.label}" for r in only[:20]))
                          + (", ..." if len(only) > 20 else ""), highlight=False)
    counts = result.counts()
    summary = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])
    console.print(f"{len(result.cells)} cells compared: {summary or 'none'} "
                  f"({ci} of the median ratio from the raw samples, min-rel={result.min_rel:g}; "
                  f"k={result.k:g} for cells without samples)", highlight=False)
    if result.has_regression:
        console.print(f"[bold red]{len(result.regressions)} regression(s)[/bold red]")
        return EXIT_REGRESSION if args.fail_on_regression else 0
    # judged: a verdict drawn from both sides' timings (an unstable cell's figures are shown, never judged)
    judged = sum(c.verdict not in (NOT_COMPARED, UNSTABLE_VERDICT) for c in result.cells)
    if args.fail_on_regression and not judged:  # a gate that saw nothing must not pass
        unstable = counts[UNSTABLE_VERDICT]
        why = (f"{len(result.cells)} cells are in both, {unstable} of them unstable on a side and none judged"
               if unstable else f"{len(result.cells)} cells are in both, none measured in both" if result.cells
               else "no cell is in both")
        raise _CommandError(f"--fail-on-regression: nothing could be compared ({why}: {args.a}, {args.b})")
    return 0


def _report(args) -> int:
    record = _load(args.results)
    try:
        results = Path(args.results)
        folder = args.plots_dir if args.plots_dir is not None else plots_dir(results)
        written = write_report(record, args.output, plots=not args.no_plots, figures_dir=folder,
                               reuse_newer_than=results.stat().st_mtime)
    except ImportError as err:
        raise _without_matplotlib(err) from None
    more = f" and {written.figures} figures in {written.figures_dir}" if written.figures else ""
    Console().print(escape(f"wrote {written.path}{more}"), highlight=False)
    return 0


# --- helpers --------------------------------------------------------------------------------------


class _CommandError(Exception):
    pass


def _clean_errors(handler):
    """Turn the errors a user can cause (bad results file, unwritable output, no matplotlib) into one line."""

    @functools.wraps(handler)
    def run(args) -> int:
        _imports()
        try:
            return handler(args)
        except (ResultsFileError, _CommandError) as err:
            message = str(err)
        except OSError as err:
            where = f"{err.filename}: {err.strerror}" if err.filename and err.strerror else str(err)
            message = f"cannot write the output ({where})"
        print(f"jaggedperf: error: {' '.join(message.split())}", file=sys.stderr)
        return EXIT_ERROR

    return run


def _load(path: str):
    """The record in any results file, as ``jaggedperf.load`` reads it (a doctor's JSON too), its warnings on stderr."""
    loaded = load(path)
    for w in loaded.warnings:
        print(f"jaggedperf: warning: {w}", file=sys.stderr)
    return loaded.record


def _plot_module():
    try:
        from jaggedperf.lab.results import plot  # matplotlib is optional: imported only by the commands that draw
    except ImportError as err:
        raise _without_matplotlib(err) from None
    return plot


def _without_matplotlib(err: ImportError) -> Exception:
    """The one-line error for a missing matplotlib; any other import error as it was."""
    if (err.name or "").split(".")[0] == "matplotlib":
        return _CommandError("plots need matplotlib: pip install 'jaggedperf[plot]' "
                             "('jaggedperf report --no-plots' writes the tables without them)")
    return err


def _change_cells(change: Change | None, to_us: float) -> list:
    """A, B (µs; ``to_us`` µs per recorded unit), B/A and its interval (— without samples)."""
    if change is None:
        return ["—", "—", "—", "—"]
    style = _STYLE.get(change.verdict, "")
    interval = "—" if change.low is None else f"{change.low:.3f}–{change.high:.3f}"
    return [_us(change.a * to_us), _us(change.b * to_us), Text(f"{change.ratio:.3f}", style=style), interval]


def _us(value: float) -> str:
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def _width() -> int | None:
    # Not a terminal (a log, a pipe): wide enough that rows stay on one line.
    return None if sys.stdout.isatty() else 180
