"""One grid measured in several places, side by side: under several torch versions (one results file per
version, from ``sweep --torch``), or on several GPUs and hosts (a Ray sweep over a mixed fleet, whose
results each record where they ran).

Where a result ran is its ``extra`` (``torch``, ``gpu``, ``host``, written by the sweep's scheduler), else
its file's environment (``torch``, ``gpu``, ``hostname``): files written before results recorded it still
group. Only the axes that vary name a group ("torch 2.11.0", "NVIDIA H200 · host-a"); a cell is the same
cell in every group when its ``Result.key`` is, so the groups' figures stand in one row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from jaggedperf.lab.result import UNSTABLE, Result, RunRecord
from jaggedperf.lab.results.atomic import write_text_atomic
from jaggedperf.lab.results.tables import status_text
from jaggedperf.lab.results.views import result_rank, speedups, timed_wall_ms

AXES = ("torch", "gpu", "host")  # in the order a group's name lists them
_ENVIRONMENT_KEYS = {"torch": "torch", "gpu": "gpu", "host": "hostname"}
NONE = "—"


def where(r: Result, environment: dict | None = None) -> dict[str, str]:
    """Where ``r`` ran: torch version, GPU name (``"CPU"`` without one), host.

    Args:
        r: a result.
        environment: its file's environment, for what the result itself does not record.

    Returns:
        ``{axis: value}`` for each of ``AXES`` known.
    """
    environment = environment or {}
    out = {}
    for axis in AXES:
        value = r.extra.get(axis) or environment.get(_ENVIRONMENT_KEYS[axis])
        if axis == "gpu" and value is None and (r.device == "cpu" or "torch" in environment):
            value = "CPU"
        if value is not None:
            out[axis] = str(value)
    return out


def varying(places: Iterable[dict[str, str]]) -> list[str]:
    """The axes along which ``places`` (from ``where``) differ, in ``AXES`` order."""
    places = list(places)
    return [a for a in AXES if len({p.get(a) for p in places}) > 1]


def group_name(place: dict[str, str], axes: list[str]) -> str:
    """``"torch 2.11.0 · NVIDIA H200"`` from the varying ``axes`` of ``place`` (``"all"`` with none)."""
    parts = [f"torch {place.get(a, '?')}" if a == "torch" else place.get(a, "?") for a in axes]
    return " · ".join(parts) or "all"


def split(record: RunRecord) -> dict[str, list[Result]]:
    """``record``'s results by where they ran, named by the axes that vary (one group, ``"all"``, when none).

    Args:
        record: one results file.

    Returns:
        Group name -> its results, groups in order of first appearance.
    """
    places = [where(r, record.environment) for r in record.results]
    axes = varying(places)
    groups: dict[str, list[Result]] = {}
    for r, place in zip(record.results, places):
        groups.setdefault(group_name(place, axes), []).append(r)
    return groups


def merge(records: list[RunRecord]) -> dict[str, list[Result]]:
    """Several results files as groups: one per place (torch version, GPU, host) that varies across them.

    Args:
        records: the files, each read whole (later lines of a key replace earlier ones, as ``store`` does).

    Returns:
        Group name -> its results.
    """
    tagged = [(r, where(r, rec.environment)) for rec in records for r in rec.results]
    axes = varying(place for _, place in tagged)
    groups: dict[str, dict[tuple, Result]] = {}
    for r, place in tagged:
        groups.setdefault(group_name(place, axes), {})[r.key] = r
    return {name: list(by_key.values()) for name, by_key in groups.items()}


@dataclass
class SideBySide:
    """The cells of several groups in rows: one row per cell key, one column group per group."""

    groups: list[str]
    rows: list[tuple[Result, dict[str, Result]]]  # (the first result of the key, group name -> its result)
    speedup: dict[str, dict[tuple, float]]  # group -> key -> eager / this, within the group

    def to_dict(self) -> dict:
        """JSON-ready: per row the cell and, per group, status, wall median and p20/p80 in µs, speedup."""
        rows = []
        for first, by_group in self.rows:
            cells = {}
            for g, r in by_group.items():
                w = r.wall
                cells[g] = {"status": r.status, "wall_us": None if w is None else w.median_ms * 1e3,
                            "p20_us": None if w is None or w.p20_ms is None else w.p20_ms * 1e3,
                            "p80_us": None if w is None or w.p80_ms is None else w.p80_ms * 1e3,
                            "n": None if w is None else w.n, "speedup_vs_eager": self.speedup[g].get(r.key)}
            rows.append({"op": first.op, "implementation": first.implementation, "mode": first.mode,
                         "case": first.case.label, "groups": cells})
        return {"groups": self.groups, "rows": rows}


def side_by_side(groups: dict[str, list[Result]]) -> SideBySide:
    """Line up ``groups``' cells by key, in report order.

    Args:
        groups: from ``split`` or ``merge``.

    Returns:
        The rows, and each group's speedups (eager / compiled) computed within the group.
    """
    by_key: dict[tuple, dict[str, Result]] = {}
    for name, results in groups.items():
        for r in results:
            by_key.setdefault(r.key, {})[name] = r
    rows = sorted(((next(iter(cells.values())), cells) for cells in by_key.values()), key=lambda row: result_rank(row[0]))
    return SideBySide(list(groups), rows, {name: speedups(results) for name, results in groups.items()})


def render_markdown(table: SideBySide) -> list[str]:
    """The side-by-side table as Markdown lines: per group the wall median (p20–p80) in µs and the speedup
    vs eager within the group (none where a side is unstable); after the first group, its wall time over
    the first group's (unstable cells included, marked so in their figure).

    Args:
        table: from ``side_by_side``.

    Returns:
        The lines (no heading), ending in a blank one.
    """
    first = table.groups[0]
    header = ["case", "implementation", "mode"]
    for i, g in enumerate(table.groups):
        header += [f"{g} µs (p20–p80)", f"{g} speedup"] + ([f"{g} / {first}"] if i else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r0, cells in table.rows:
        row = [r0.case.label, r0.implementation, r0.mode]
        base = timed_wall_ms(cells.get(first))
        for i, g in enumerate(table.groups):
            r = cells.get(g)
            row += [_wall(r), _ratio(table.speedup[g].get(r.key)) if r is not None else NONE]
            if i:
                mine = timed_wall_ms(r)
                row.append(_ratio(mine / base) if mine is not None and base else NONE)
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def write_versions_report(files: list[Path], out: Path) -> SideBySide:
    """The Markdown side by side of several results files (one per torch version, say), and its JSON
    beside it (``out`` with ``.json``), both written atomically.

    Args:
        files: the results files.
        out: the Markdown file to write.

    Returns:
        The table written.

    Raises:
        store.ResultsFileError, OSError: a file cannot be read, or the output written.
    """
    from jaggedperf.lab.results import store

    records = [store.load_results(f) for f in files]
    table = side_by_side(merge(records))
    lines = ["# Side by side", "", "Files: " + ", ".join(f"`{Path(f).name}`" for f in files) + ".", "",
             "Wall median per call in µs with p20–p80; speedup = eager / this mode within the same group; "
             f"the ratio columns are each group's wall time over the first group's ({table.groups[0]}).", ""]
    write_text_atomic(out, "\n".join(lines + render_markdown(table)))
    write_text_atomic(out.with_suffix(".json"), json.dumps(table.to_dict(), indent=1) + "\n")
    return table


def _wall(r: Result | None) -> str:
    if r is None:
        return NONE
    ms = timed_wall_ms(r)
    if ms is None:
        return status_text(r)
    w = r.wall
    spread = f" ({w.p20_ms * 1e3:.1f}–{w.p80_ms * 1e3:.1f})" if w.p20_ms is not None and w.p80_ms is not None else ""
    return f"{ms * 1e3:.1f}{spread}" + (" unstable" if r.status == UNSTABLE else "")


def _ratio(x: float | None) -> str:
    return NONE if x is None else f"{x:.2f}"
