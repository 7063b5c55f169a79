"""The doctor's compile budget across cases (``gather.gather_all``): an implementation whose compiled call passed the
budget at one case is not compiled again at the later ones; those cells are recorded as not tried, with the compile
time, the case and the budget, and read back the same from the doctor's JSON (``doctor --from``)."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
import torch

from jaggedperf.cli import main
from jaggedperf.cli.doctor import compile_budget
from jaggedperf.inputs import Case
from jaggedperf.lab import runner
from jaggedperf.lab.doctor import evidence, gather, saved, verdicts
from jaggedperf.lab.modes import EAGER
from jaggedperf.lab.result import OK, SKIPPED
from helpers.evidence import MODE, make_evidence

CPU = torch.device("cpu")
A, B, C = Case(8, 4, 20, 0.5), Case(8, 4, 30, 0.5), Case(8, 4, 40, 0.5)
OPTS = runner.Options(device=CPU, warmup=1, iters=2)


def _fake_gather(monkeypatch, compile_s: dict[str, float]) -> list[tuple[str, str]]:
    """``gather.gather`` replaced by hand-built evidence whose compiled call took ``compile_s[implementation]`` to
    compile; returns the (implementation, case label) of every cell gathered, in order."""
    calls: list[tuple[str, str]] = []

    def fake(op, implementation, mode, case, batch, reference, options, copy_gbps, **_kwargs):
        calls.append((implementation, case.label))
        ev = make_evidence(eager=(300, None), compiled=(900, None), plain=(350, None), compile_s=compile_s[implementation])
        return dataclasses.replace(ev, implementation=implementation, mode=mode, case=case)

    monkeypatch.setattr(gather, "gather", fake)
    return calls


def test_an_implementation_over_the_compile_budget_is_not_compiled_again_at_later_cases(monkeypatch):
    calls = _fake_gather(monkeypatch, {"sum_padded": 82.4, "segment_reduce": 2.0})
    started, finished = [], []
    run = gather.gather_all("jagged_mean", [A, B, C], ["sum_padded", "segment_reduce"], MODE, OPTS,
                            compile_budget_s=30.0, on_start=lambda name, case: started.append((name, case.label)),
                            on_evidence=finished.append)
    assert calls == [("sum_padded", A.label), ("segment_reduce", A.label), ("segment_reduce", B.label),
                     ("segment_reduce", C.label)]
    cells = [(ev.implementation, ev.case.label) for ev in run.evidence]
    assert cells == started == [(ev.implementation, ev.case.label) for ev in finished]
    assert cells == [(n, c.label) for c in (A, B, C) for n in ("sum_padded", "segment_reduce")]
    gathered = {(ev.implementation, ev.case.label): ev for ev in run.evidence}
    assert gathered["sum_padded", A.label].not_tried is None
    assert all(ev.not_tried is None for ev in run.evidence if ev.implementation == "segment_reduce")
    for case in (B, C):
        ev = gathered["sum_padded", case.label]
        # measured at the first case, not at the one before: nothing was measured there
        assert ev.not_tried == evidence.NotTried(82.4, A.label, 30.0)
        reason = (f"not tried: at {A.label} its compiled call took 82.4 s to compile (> compile budget 30 s), so it is "
                  "not compiled again at a later case (--compile-budget 83 or more compiles it; none: no limit)")
        assert ev.compiled.status == SKIPPED and ev.compiled.reason == reason
        # the eager cell compiles nothing: measured at every case, checked against float64 like any cell
        assert ev.eager.status == OK and ev.eager.mode == EAGER and ev.eager.case == case
        assert ev.eager.wall is not None and ev.eager.rel_error is not None
        assert ev.compiled.mode == MODE and ev.compiled.compile_s is None and ev.compiled.wall is None
        assert not ev.input_form.available and not ev.boundary.available and not ev.cudagraphs.available
        assert ev.notes == []
        d = verdicts.diagnose(ev)
        # no verdict is made up: the diagnosis is the reason, nothing attributed
        assert not d.available and d.reason == d.verdict == reason and not d.contributions and not d.findings


def test_a_case_whose_every_cell_is_not_tried_still_times_its_eager_cells(monkeypatch):
    calls = _fake_gather(monkeypatch, {"sum_padded": 82.0})
    run = gather.gather_all("jagged_mean", [A, B], ["sum_padded"], MODE, OPTS, compile_budget_s=30.0)
    later = run.evidence[1]
    assert calls == [("sum_padded", A.label)] and later.not_tried is not None
    assert later.eager.status == OK and later.compiled.status == SKIPPED


def test_a_not_tried_cell_whose_input_cannot_be_made_skips_its_eager_cell_too(monkeypatch):
    _fake_gather(monkeypatch, {"sum_padded": 82.0})
    real = runner.prepare_case
    monkeypatch.setattr(runner, "prepare_case", lambda op, case, options: (ValueError("too large"), None)
                        if case == B else real(op, case, options))
    run = gather.gather_all("jagged_mean", [A, B], ["sum_padded"], MODE, OPTS, compile_budget_s=30.0)
    later = run.evidence[1]
    assert later.not_tried is not None and later.eager.status == later.compiled.status == SKIPPED


@pytest.mark.parametrize("budget", [100.0, None], ids=["larger than the compile", "no limit"])
def test_a_budget_the_compile_stays_within_gathers_every_case(monkeypatch, budget):
    calls = _fake_gather(monkeypatch, {"sum_padded": 82.0, "segment_reduce": 2.0})
    run = gather.gather_all("jagged_mean", [A, B], ["sum_padded", "segment_reduce"], MODE, OPTS,
                            compile_budget_s=budget)
    assert calls == [(n, c.label) for c in (A, B) for n in ("sum_padded", "segment_reduce")]
    assert all(ev.not_tried is None for ev in run.evidence)


def test_a_compile_exactly_at_the_budget_is_within_it(monkeypatch):
    calls = _fake_gather(monkeypatch, {"sum_padded": 30.0})
    gather.gather_all("jagged_mean", [A, B], ["sum_padded"], MODE, OPTS, compile_budget_s=30.0)
    assert calls == [("sum_padded", A.label), ("sum_padded", B.label)]


def test_a_not_tried_cell_round_trips_through_the_doctors_json(tmp_path):
    ev = gather.not_tried_evidence("jagged_mean", "unbind_mean", MODE, B, "cuda",
                                   evidence.NotTried(245.0, A.label, 30.0))
    run = evidence.EvidenceRun({"torch": "x"}, 3000.0, [make_evidence(eager=(112, 20), compiled=(290, 6)), ev])
    path = tmp_path / "doctor.json"
    path.write_text(json.dumps(verdicts.diagnose_run(run).to_dict()))
    back = saved.load_evidence(path)
    assert back == run and back.evidence[1].not_tried == evidence.NotTried(245.0, A.label, 30.0)
    d = verdicts.diagnose(back.evidence[1])
    assert d == verdicts.diagnose(ev) and d.verdict.startswith(f"not tried: at {A.label} its compiled call took 245 s")
    assert "(--compile-budget 245 or more compiles it; none: no limit)" in d.verdict
    # evidence written before the field existed loads as tried
    doc = json.loads(path.read_text())
    doc["cells"][0]["evidence"].pop("not_tried")
    path.write_text(json.dumps(doc))
    assert saved.load_evidence(path).evidence[0].not_tried is None


TWO_CASES = ["--B", "8", "--M", "4", "--seqlen", "20,30", "--sparsity", "0.5", "--impls", "sum_padded", "--warmup",
             "1", "--iters", "5", "--device", "cpu"]


def test_cli_doctor_records_the_cell_after_a_compile_over_the_budget_as_not_tried(tmp_path, capsys, monkeypatch):
    path = tmp_path / "doctor.json"
    assert main(["doctor", *TWO_CASES, "--compile-budget", "0", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    first, second = json.loads(path.read_text())["cells"]
    assert first["evidence"]["case_label"] == A.label and first["evidence"]["not_tried"] is None
    assert first["evidence"]["compiled"]["compile_s"] > 0 and first["diagnosis"]["available"]
    ev, d = second["evidence"], second["diagnosis"]
    assert ev["case_label"] == B.label and ev["compiled"]["status"] == SKIPPED
    assert ev["not_tried"] == {"compile_s": first["evidence"]["compiled"]["compile_s"], "measured_at": A.label,
                               "budget_s": 0.0}
    assert not d["available"] and d["verdict"].startswith(f"not tried: at {A.label} its compiled call took ")
    assert "(> compile budget 0 s)" in d["verdict"] and "--compile-budget" in d["verdict"]
    assert f"verdict: not tried: at {A.label}" in out
    # doctor --from: the same cell, not tried, diagnosed again without measuring
    monkeypatch.setattr(gather, "gather_all", lambda *a, **k: pytest.fail("--from measured"))
    again = tmp_path / "again.json"
    assert main(["doctor", "--from", str(path), "--json", str(again)]) == 0
    assert f"verdict: not tried: at {A.label}" in capsys.readouterr().out
    cells = json.loads(again.read_text())["cells"]
    assert [c["diagnosis"] for c in cells] == [first["diagnosis"], d] and cells[1]["evidence"]["not_tried"]


@pytest.mark.parametrize("flag", ["none", "inf", "-1", "100"])
def test_cli_doctor_with_a_budget_the_compile_stays_within_gathers_both_cases(tmp_path, monkeypatch, flag):
    calls = _fake_gather(monkeypatch, {"sum_padded": 82.0})
    path = tmp_path / "doctor.json"
    assert main(["doctor", *TWO_CASES, "--compile-budget", flag, "--json", str(path)]) == 0
    assert calls == [("sum_padded", A.label), ("sum_padded", B.label)]
    assert [c["evidence"]["not_tried"] for c in json.loads(path.read_text())["cells"]] == [None, None]


def test_the_compile_budget_flag_takes_seconds_or_none():
    assert [compile_budget(t) for t in ("30", "0", "2.5", "none", "None", "inf", "-1")] == [30.0, 0.0, 2.5, None,
                                                                                           None, None, None]
    for bad in ("nan", "soon", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="expected seconds or none"):
            compile_budget(bad)
