"""Planning a sweep: the cells of a grid less those already in the results file and less the cases
whose values alone pass the byte limit (recorded as skipped, never dispatched); the rest grouped into
units, one per case, eager cells first. A unit goes to one worker, which makes the case's batch once,
and a compiled cell's eager twin is known before it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import grid
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab import runner
from jaggedperf.lab.result import Result
from jaggedperf.lab.results import store


@dataclass
class SweepPlan:
    out: Path
    cells: list[runner.Cell]  # every cell of the grid, in plan order, each once
    done: int  # of these, how many are already in the results file
    too_large: list[Result]  # skipped before dispatch: the case's values alone pass the byte limit
    units: list[list[runner.Cell]]  # the cells to run, one list per case, eager cells first
    warnings: list[str] = field(default_factory=list)  # met reading the results file

    @property
    def to_run(self) -> int:
        return sum(len(unit) for unit in self.units)


def plan_sweep(out: str | os.PathLike, op: str, cases: Iterable[Case], implementations: Iterable[str],
               modes: Iterable[str], *, byte_limit: int, device: str) -> SweepPlan:
    """What a sweep into ``out`` has left to do.

    Args:
        out: the results file (JSON lines); it need not exist.
        op, cases, implementations, modes: the grid, as for ``runner.plan``.
        byte_limit: a case whose values alone pass it is skipped before dispatch.
        device: the workers' device type, for the skipped results.

    Returns:
        The plan: every cell, how many are done, the skipped results, the units to run.

    Raises:
        KeyError, ValueError: an unknown op, implementation or mode.
        store.ResultsFileError: ``out`` cannot be read as a results file.
    """
    cells = list(dict.fromkeys(runner.plan(op, cases, implementations, modes)))
    done, warnings = store.finished_keys(out)
    pending = [c for c in cells if c.key not in done]
    _, too_large = grid.split_by_size(dict.fromkeys(c.case for c in pending), byte_limit)
    problems = dict(too_large)
    by_case: dict[Case, list[runner.Cell]] = {}
    for cell in pending:
        if cell.case not in problems:
            by_case.setdefault(cell.case, []).append(cell)
    units = [sorted(unit, key=lambda c: c.mode != modes_mod.EAGER) for unit in by_case.values()]
    skipped = [runner.input_result(c, torch.device(device), problems[c.case]) for c in pending if c.case in problems]
    return SweepPlan(Path(out), cells, len(cells) - len(pending), skipped, units, warnings)
