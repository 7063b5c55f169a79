"""A per-cell time budget across cases (``lab.budget``): a compiled cell cut at one case is not tried at the next, the
cut is shown with the budget it passed, and the cells not isolated run in this process."""

from types import SimpleNamespace

import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import budget
from jaggedperf.lab.result import ERROR, OK, SKIPPED, Result, RunRecord, WallStats
from jaggedperf.lab.results import tables
from jaggedperf.lab.runner import Cell

CASES = (Case(8, 4, 10, 0.5), Case(8, 4, 20, 0.5))
MODES = ("eager", "compile:default")


def cells(impls=("fast", "slow")):
    return [Cell("jagged_mean", impl, mode, case) for case in CASES for impl in impls for mode in MODES]


def fake_run(log: list, where: str, cut=("slow", "compile:default")):
    def run(part, options, on_start=None, on_result=None):
        log.append((where, [(c.implementation, c.mode, c.case.seqlen) for c in part]))
        record = RunRecord({"where": where}, [], None)
        for c in part:
            if (c.implementation, c.mode) == cut:
                r = Result(c.op, c.implementation, c.mode, c.case, "cpu", status=ERROR, reason="timed out after 20 s")
            else:
                r = Result(c.op, c.implementation, c.mode, c.case, "cpu", status=OK,
                           wall=WallStats(1.0, 0.0, 1.0 if c.mode == "eager" else 2.0, 1.0, 1.0, 20))
            record.results.append(r)
            if on_result:
                on_result(r, record)
        return record

    return run


def test_a_cell_cut_at_one_case_is_not_tried_at_the_next():
    log, seen = [], []
    record = budget.run_case_by_case(cells(), SimpleNamespace(device=torch.device("cpu")),
                                     fake_run(log, "isolated"), here=fake_run(log, "here"),
                                     isolate=lambda c: c.mode != "eager",
                                     on_result=lambda r, rec: seen.append((r.key, len(rec.results))))
    # eager cells in this process; compiled ones isolated, as implementations × modes products; case by case
    assert log == [("here", [("fast", "eager", 10), ("slow", "eager", 10)]),
                   ("isolated", [("fast", "compile:default", 10), ("slow", "compile:default", 10)]),
                   ("here", [("fast", "eager", 20), ("slow", "eager", 20)]),
                   ("isolated", [("fast", "compile:default", 20)])]
    assert [r.key for r in record.results] == [c.key for c in cells()]  # plan order
    skipped = record.results[-1]
    assert skipped.status == SKIPPED and skipped.reason.startswith(
        "not tried: at B8-M4-L10-s0.5 it timed out after 20 s (compile included)")
    assert len(seen) == 8 and seen[-1][1] == 8 and record.environment == {"where": "here"}
    fast_compiled = record.results[5]
    assert fast_compiled.speedup_vs_eager == 0.5  # speedups across the parts (eager here, compiled isolated)
    # the tables say what happened: the budget passed, the cell not tried
    cut = record.results[3]
    assert budget.cut_after_s(cut) == 20.0 and tables.status_text(cut) == "timed out"
    assert tables._wall_cell(cut) == "cut > 20 s" and tables._wall_cell(skipped) == "not tried"
    assert tables._compile_cell(cut) == "> 20"


def test_everything_isolated_without_a_here():
    log = []
    budget.run_case_by_case(cells(("fast",)), SimpleNamespace(device=torch.device("cpu")), fake_run(log, "isolated"))
    assert [where for where, _ in log] == ["isolated", "isolated"] and len(log[0][1]) == 2


def test_products_group_an_implementation_by_its_modes():
    part = [c for c in cells(("a", "b", "c")) if c.case == CASES[0] and (c.implementation, c.mode) != ("b", "eager")]
    groups = budget.products(part)
    assert [[(c.implementation, c.mode) for c in g] for g in groups] == [
        [("a", "eager"), ("a", "compile:default"), ("c", "eager"), ("c", "compile:default")],
        [("b", "compile:default")]]
