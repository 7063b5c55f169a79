"""Cells under a time budget, case after case: a cell cut by the budget at one case is not tried at the next.

A cell's budget (``--timeout``) covers its compile: a compiled mode whose first call compiles for minutes (the seed's
``unbind_mean`` unrolls one mean per sequence, B = 512 of them at both seed shapes) is cut once, and its cells at the
later cases are recorded as not tried, with the first cut's time and case, instead of costing the budget again. The
cut cell keeps its measured bound (``compile_s``: the budget it passed), so a table can say "compile > N s" where it
would otherwise show nothing.
"""

from __future__ import annotations

import re
from typing import Callable

from jaggedperf.lab.result import ERROR, SKIPPED, Result, RunRecord

TIMED_OUT = "timed out after"  # how the sweep's engine words a cell it killed at the budget


def timed_out(result: Result) -> bool:
    """Whether ``result`` is a cell killed at its time budget (an error whose reason says so)."""
    return result.status == ERROR and (result.reason or "").startswith(TIMED_OUT)


def status_text(result: Result) -> str:
    """A cell's status as tables and figures show it: "timed out" for an error that is a cut at the time budget
    (``docs/columns.md``)."""
    return "timed out" if timed_out(result) else result.status


def cut_after_s(result: Result) -> float | None:
    """The budget a cell was cut at (seconds), or None when it was not cut."""
    if not timed_out(result):
        return None
    m = re.match(rf"{TIMED_OUT} ([0-9.eE+]+) s", result.reason)
    return float(m.group(1)) if m else None


def not_tried_reason(cut: Result) -> str:
    """Why a cell is not tried after ``cut`` (the same implementation and mode at an earlier case) passed the budget."""
    return (f"not tried: at {cut.case.label} it {cut.reason} (compile included); the same compile here "
            "(--timeout none waits for it)")


def run_case_by_case(cells: list, options, isolated: Callable, *, here: Callable | None = None,
                     isolate: Callable[[object], bool] = lambda cell: True, on_start=None,
                     on_result=None) -> RunRecord:
    """Run ``cells`` one case at a time: those ``isolate`` picks through ``isolated`` (worker processes, each cell
    under the budget), the others through ``here`` (this process); an (implementation, mode) cut at one case is
    recorded as skipped at the later ones.

    Args:
        cells: ``runner.plan``'s cells (grouped by case).
        options: how each cell is measured.
        isolated: ``sweep.run_isolated`` with its timeout: ``isolated(cells, options, on_start=, on_result=)`` →
            RunRecord. Called once per case and set of modes (it plans implementations × modes: a case's cells after
            a cut are run as such products).
        here: ``runner.run`` (same signature), for the cells not isolated; None: every cell is isolated.
        isolate: whether a cell runs under the budget (repro on the CPU: compiled cells only, whose compile is what
            passes it; an eager cell there costs no worker start).
        on_start: the cell about to run.
        on_result: (result, the whole record so far) after every result, skipped ones included.

    Returns:
        One record: the first part's environment, every result in plan order, speedups vs eager across the parts.
    """
    from jaggedperf.lab.runner import attach_speedups

    order = {cell.key: i for i, cell in enumerate(cells)}
    done: list[Result] = []
    whole = RunRecord({}, [], None)
    cut: dict[tuple, Result] = {}

    def so_far(part: list[Result], environment: dict, copy_gbps) -> RunRecord:
        whole.environment = whole.environment or environment
        whole.copy_gbps = whole.copy_gbps if whole.copy_gbps is not None else copy_gbps
        whole.results = sorted(done + part, key=lambda r: order[r.key])
        attach_speedups(whole.results)
        return whole

    def run_part(run: Callable, part_cells: list) -> None:
        part = run(part_cells, options, on_start=on_start,
                   on_result=None if on_result is None else
                   lambda r, rec: on_result(r, so_far(list(rec.results), rec.environment, rec.copy_gbps)))
        cut.update({(r.implementation, r.mode): r for r in part.results if timed_out(r)})
        done.extend(part.results)
        so_far([], part.environment, part.copy_gbps)

    for case in dict.fromkeys(c.case for c in cells):
        mine = [c for c in cells if c.case == case]
        if here is not None and any(not isolate(c) for c in mine):
            run_part(here, [c for c in mine if not isolate(c)])
        todo = []
        for cell in (c for c in mine if here is None or isolate(c)):
            first = cut.get((cell.implementation, cell.mode))
            if first is None:
                todo.append(cell)
                continue
            skipped = Result(cell.op, cell.implementation, cell.mode, cell.case, options.device.type, status=SKIPPED,
                             reason=not_tried_reason(first))
            done.append(skipped)
            if on_result:
                on_result(skipped, so_far([], whole.environment, None))
        for group in products(todo):
            run_part(isolated, group)
    return so_far([], whole.environment, whole.copy_gbps)


def products(cells: list) -> list[list]:
    """``cells`` of one case as groups that are each implementations × modes (an implementation's modes decide its
    group), in order."""
    modes_of: dict[str, tuple] = {}
    for cell in cells:
        modes_of[cell.implementation] = modes_of.get(cell.implementation, ()) + (cell.mode,)
    groups: dict[tuple, list] = {}
    for cell in cells:
        groups.setdefault(modes_of[cell.implementation], []).append(cell)
    return list(groups.values())
