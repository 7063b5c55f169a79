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
        path: the results file or the report (a compressed one's stem is that of the file it holds).

    Returns:
        ``path``'s folder / ``<stem>-plots``.
    """
    stem = Path(path.stem).stem if path.suffix == ".gz" else path.stem
    return path.parent / f"{stem}-plots"


def write_report(record: RunRecord, out: Path, *, plots: bool = True, figures_dir: Path | None = None,
                 reuse_newer_than: float | None = None) -> WrittenReport:
    """Write ``record``'s Markdown report to ``out`` (atomically), with its figures in ``figures_dir``.

    Args:
        record: the results.
        out: the report to write.
        plots: draw the figures and link them (needs matplotlib); False: tables only.
        figures_dir: the figures' folder: the one ``jaggedperf plot`` draws the same results into, so that a
            report after a plot reuses its figures instead of drawing them all again in a second folder
            (None: ``plots_dir(out)``).
        reuse_newer_than: figures already in ``figures_dir`` and newer than this mtime are linked as they
            are (``plot.plot_all``); None: every figure is drawn.

    Returns:
        The report's path, and the figures' folder and count.

    Raises:
        ImportError: ``plots`` and matplotlib is missing (nothing is written).
        OSError: the report or a figure cannot be written.
    """
    folder = figures_dir if figures_dir is not None else plots_dir(out)
    links: dict[str, str] = {}
    if plots:
        from jaggedperf.lab.results import plot  # matplotlib is optional: imported only when figures are asked for

        for f in plot.plot_all(record, folder, reuse_newer_than=reuse_newer_than):
            links[f.title] = Path(os.path.relpath(f.png, out.parent)).as_posix()
    write_text_atomic(out, render_report(record, links))
    return WrittenReport(out, folder if links else None, len(links))
