"""``jaggedperf report``: a results file's Markdown report (``markdown``) with its figures (``plot``)
in a folder beside it, linked by paths relative to the report."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from jaggedperf.lab.result import RunRecord
from jaggedperf.lab.results.markdown import render_report
from jaggedperf.lab.results.atomic import write_text_atomic


@dataclass
class WrittenReport:
    """What ``write_report`` wrote."""

    path: Path
    figures_dir: Path | None  # None: no figure was drawn
    figures: int


def plots_dir(path: Path) -> Path:
    """Where the figures of ``path`` (a results file or a report) go: a folder beside it, ``<stem>-plots``.

    Args:
        path: the results file or the report.

    Returns:
        ``path``'s folder / ``<stem>-plots``.
    """
    return path.parent / f"{path.stem}-plots"


def write_report(record: RunRecord, out: Path, *, plots: bool = True) -> WrittenReport:
    """Write ``record``'s Markdown report to ``out`` (atomically), with its figures in ``plots_dir(out)``.

    Args:
        record: the results.
        out: the report to write.
        plots: draw the figures and link them (needs matplotlib); False: tables only.

    Returns:
        The report's path, and the figures' folder and count.

    Raises:
        ImportError: ``plots`` and matplotlib is missing (nothing is written).
        OSError: the report or a figure cannot be written.
    """
    links: dict[str, str] = {}
    if plots:
        from jaggedperf.lab.results import plot  # matplotlib is optional: imported only when figures are asked for

        for f in plot.plot_all(record, plots_dir(out)):
            links[f.title] = Path(os.path.relpath(f.png, out.parent)).as_posix()
    write_text_atomic(out, render_report(record, links))
    return WrittenReport(out, plots_dir(out) if links else None, len(links))
