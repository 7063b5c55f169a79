"""Planning a sweep: the cells of a grid less those already in the results file (but for the failed
ones, with ``retry_failed``) and less the cases whose values alone pass the byte limit (recorded as
skipped, never dispatched); the rest grouped into units, one per case, eager cells first. A unit goes to
one worker, which makes the case's batch once, and a compiled cell's eager twin is known before it.

A resumed sweep must measure as the file's cells were measured: the header of each sweep records its
settings (``runner.Options.settings``), and a plan whose settings differ from the last recorded ones is
refused, the differences listed, unless accepted."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import grid
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab import runner
from jaggedperf.lab.result import ERROR, Result
from jaggedperf.lab.results import store


class SettingsChanged(ValueError):
    """A resumed sweep would measure its cells differently from the sweep that last wrote the file."""


@dataclass
class SweepPlan:
    out: Path
    cells: list[runner.Cell]  # every cell of the grid, in plan order, each once
    done: int  # of these, how many are already in the results file (and not to be retried)
    too_large: list[Result]  # skipped before dispatch: the case's values alone pass the byte limit
    units: list[list[runner.Cell]]  # the cells to run, one list per case, eager cells first
    warnings: list[str] = field(default_factory=list)  # met reading the results file
    retried: dict[tuple, dict] = field(default_factory=dict)  # key -> the failed result's status and reason
    settings_changes: list[str] = field(default_factory=list)  # accepted differences from the file's settings

    @property
    def to_run(self) -> int:
        return sum(len(unit) for unit in self.units)


def plan_sweep(out: str | os.PathLike, op: str, cases: Iterable[Case], implementations: Iterable[str],
               modes: Iterable[str], *, byte_limit: int, device: str, settings: dict | None = None,
               accept_settings: bool = False, retry_failed: bool = False) -> SweepPlan:
    """What a sweep into ``out`` has left to do.

    Args:
        out: the results file (JSON lines); it need not exist.
        op, cases, implementations, modes: the grid, as for ``runner.plan``.
        byte_limit: a case whose values alone pass it is skipped before dispatch.
        device: the workers' device type, for the skipped results.
        settings: how the new cells will be measured (``runner.Options.settings``); when the file's last
            recorded settings differ and there is something to run, the plan is refused. None: not checked.
        accept_settings: plan anyway when they differ (the differences are in ``settings_changes``).
        retry_failed: run again the cells whose latest result in the file is an error (raised, timed out,
            worker died); their new results are appended and, being later, are the ones read back.

    Returns:
        The plan: every cell, how many are done, the skipped results, the units to run.

    Raises:
        KeyError, ValueError: an unknown op, implementation or mode.
        SettingsChanged: ``settings`` differ from the file's (each difference listed), not accepted.
        store.ResultsFileError: ``out`` cannot be read as a results file.
    """
    cells = list(dict.fromkeys(runner.plan(op, cases, implementations, modes)))
    record, warnings = store.read_results(out) if Path(out).exists() else (None, [])
    latest = {r.key: r for r in record.results} if record is not None else {}
    retried = {k: {"status": r.status, "reason": r.reason}
               for k, r in latest.items() if retry_failed and r.status == ERROR}
    pending = [c for c in cells if c.key not in latest or c.key in retried]
    _, too_large = grid.split_by_size(dict.fromkeys(c.case for c in pending), byte_limit)
    problems = dict(too_large)
    by_case: dict[Case, list[runner.Cell]] = {}
    for cell in pending:
        if cell.case not in problems:
            by_case.setdefault(cell.case, []).append(cell)
    units = [sorted(unit, key=lambda c: c.mode != modes_mod.EAGER) for unit in by_case.values()]
    skipped = [runner.input_result(c, torch.device(device), problems[c.case]) for c in pending if c.case in problems]
    plan = SweepPlan(Path(out), cells, len(cells) - len(pending), skipped, units, warnings,
                     {c.key: retried[c.key] for c in pending if c.key in retried})
    if settings is not None and record is not None and record.results and (units or skipped):
        recorded = recorded_settings(record.environment)
        if not recorded:
            plan.warnings.append(f"{out}: records no measurement settings (written before they were recorded); "
                                 "the new cells' settings could not be checked against its cells'")
        else:
            plan.settings_changes = settings_differences(recorded[-1], settings)
            if plan.settings_changes and not accept_settings:
                raise SettingsChanged(f"{out} was measured with other settings than these: "
                                      f"{'; '.join(plan.settings_changes)} (--accept-settings to add to it anyway, "
                                      "or give another --json)")
    return plan


def recorded_settings(environment: dict) -> list[dict]:
    """The measurement settings a results file's headers record, oldest first (the first header's, then
    the later ones ``store`` keeps in ``environment["more"]``).

    Args:
        environment: a ``RunRecord``'s environment.

    Returns:
        Each recorded ``settings`` dict, in order; [] for a file written before settings were recorded.
    """
    headers = [environment, *[m for m in environment.get("more", []) if isinstance(m, dict)]]
    return [h["settings"] for h in headers if isinstance(h.get("settings"), dict)]


def settings_differences(recorded: dict, now: dict) -> list[str]:
    """Each setting that differs, as ``"iters: 200 in the file, 100 now"``.

    Args:
        recorded: the file's settings.
        now: the new cells'.

    Returns:
        The differences, in ``now``'s order then any the file has alone; [] when they agree.
    """
    names = list(dict.fromkeys([*now, *recorded]))
    return [f"{name}: {_shown(recorded, name)} in the file, {_shown(now, name)} now"
            for name in names if recorded.get(name, _MISSING) != now.get(name, _MISSING)]


_MISSING = object()


def _shown(settings: dict, name: str) -> str:
    return json.dumps(settings[name]) if name in settings else "not recorded"
