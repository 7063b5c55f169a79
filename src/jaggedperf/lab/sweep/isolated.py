"""``runner.run`` through the sweep's engine: the cells of a run on one worker per slot, each under a
timeout, gathered in a temporary JSON-lines file and handed back as a ``RunRecord`` in plan order."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from jaggedperf.lab import runner
from jaggedperf.lab.measure.env import environment
from jaggedperf.lab.result import Result, RunRecord
from jaggedperf.lab.results import store
from jaggedperf.lab.sweep.plan import plan_sweep
from jaggedperf.lab.sweep.scheduler import Settings, run_sweep
from jaggedperf.lab.sweep.slots import WorkerSlot


def run_isolated(cells: list[runner.Cell], options: runner.Options, *, slots: list[WorkerSlot], settings: Settings,
                 on_start: Callable[[runner.Cell], None] | None = None,
                 on_result: Callable[[Result, RunRecord], None] | None = None,
                 on_note: Callable[[str], None] | None = None) -> RunRecord:
    """Run ``cells`` as ``runner.run`` does, but on worker processes, each cell under ``settings.timeout_s``.

    A cell past the timeout is recorded as an error ("timed out after N s") and the run goes on.

    Args:
        cells: from ``runner.plan``.
        options: how each cell is measured.
        slots: where the workers run.
        settings: the timeout, plugins and the rest of the sweep's settings.
        on_start: the cell a worker starts.
        on_result: (result, the record so far), after every result, as ``runner.run`` calls it.
        on_note: a worker timed out, died or failed to start.

    Returns:
        The record: results in plan order; the environment of the sweep's header (with each worker's).

    Raises:
        SweepError: no worker could start.
    """
    if not cells:
        return RunRecord(environment(), [], None)
    order = {cell.key: i for i, cell in enumerate(cells)}
    record = RunRecord({}, [], None)

    def add(result):
        record.results.append(result)
        record.results.sort(key=lambda r: order[r.key])
        if on_result:
            on_result(result, record)

    def finished(_worker, result):
        if not record.environment:  # the first: the file now holds the header and the cells skipped before dispatch
            head = store.load_results(plan.out)
            record.environment, record.copy_gbps = head.environment, head.copy_gbps
            for skipped in plan.too_large:
                add(skipped)
        add(result)

    def started(_worker, cell):
        if cell is not None and on_start:
            on_start(cell)

    with tempfile.TemporaryDirectory(prefix="jaggedperf-") as tmp:
        plan = plan_sweep(Path(tmp) / "results.jsonl", cells[0].op,
                          list(dict.fromkeys(c.case for c in cells)),
                          list(dict.fromkeys(c.implementation for c in cells)),
                          list(dict.fromkeys(c.mode for c in cells)),
                          byte_limit=options.byte_limit, device=slots[0].device)
        outcome = run_sweep(plan, slots, options, settings, on_start=started, on_result=finished, on_note=on_note)
    return RunRecord(outcome.environment or environment(), sorted(outcome.results, key=lambda r: order[r.key]),
                     outcome.copy_gbps)
