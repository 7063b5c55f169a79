"""A doctor's --json read back as typed evidence (``lab.doctor.saved``, ``lab.results.typed``): evidence → JSON →
evidence is the same evidence, old files load with defaults, incompatible ones say where and why."""

from __future__ import annotations

import enum
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import torch

from jaggedperf.cli import main
from jaggedperf.inputs import Case
from jaggedperf.lab import runner
from jaggedperf.lab.doctor import evidence, gather, probes, saved, verdicts
from jaggedperf.lab.results.store import ResultsFileError
from jaggedperf.lab.results.typed import IncompatibleData, from_data
from helpers.evidence import TINY, make_evidence

ROOT = Path(__file__).resolve().parents[2]
SEED_DOCTOR = ROOT / "benchmarks/results/h200/doctor-seed.json.gz"  # written before host timers, boundary, stage timings


def _round_trip(run: evidence.EvidenceRun, tmp_path, *, gz: bool = False) -> evidence.EvidenceRun:
    text = json.dumps(verdicts.diagnose_run(run).to_dict())
    path = tmp_path / ("doctor.json.gz" if gz else "doctor.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return saved.load_evidence(path)


HAND_BUILT = {
    "njt, plain twin, guards, boundary, host timer": dict(
        eager=(112, 20), compiled=(290, 6), plain=(40, 6), njt_guard_us=30, plain_guard_us=4, boundary=(45, 6),
        host_calls=(90, 280, 35)),
    "host timer with the waits at the sync (CUDA)": dict(
        eager=(162, 60), compiled=(385, 11), plain=(140, 11), plain_guard_us=20, njt_guard_us=60,
        host_calls=(150, 369, 120), waits=(12, 16)),
    "wall only (CPU)": dict(eager=(300, None), compiled=(900, None), plain=(350, None), boundary=(320, None)),
    "dense, no twin": dict(eager=(50, 20), compiled=(40, 18), takes="dense"),
}


@pytest.mark.parametrize("kwargs", HAND_BUILT.values(), ids=HAND_BUILT.keys())
def test_hand_built_evidence_round_trips(kwargs, tmp_path):
    ev = make_evidence(**kwargs)
    ev.stage_s = {"eager": 0.5, "compile:default": 3.25}
    ev.host.guards.slowest = [probes.GuardTime("LAMBDA_GUARD", "epilogue", 1.5, "x")]
    ev.host.guards.kinds = {"TENSOR_MATCH": 3}
    run = evidence.EvidenceRun({"torch": "x", "gpu": None}, 4218.5, [ev])
    back = _round_trip(run, tmp_path, gz=kwargs.get("takes") == "dense")
    assert back == run
    assert isinstance(back.evidence[0].host.guards.slowest[0], probes.GuardTime)
    assert verdicts.diagnose(back.evidence[0]) == verdicts.diagnose(ev)


def test_evidence_gathered_on_the_cpu_round_trips(tmp_path):
    case = Case(8, 3, 12, 0.3)
    opts = runner.Options(device=torch.device("cpu"), warmup=1, iters=3)
    batch, ref = runner.prepare_case("jagged_mean", case, opts)
    ev = gather.gather("jagged_mean", "sum_padded", "compile:default", case, batch, ref, opts, None)
    assert ev.input_form.plain is not None and ev.boundary.result is not None and ev.compiled.host_call is not None
    run = evidence.EvidenceRun({"torch": torch.__version__}, None, [ev])
    back = _round_trip(run, tmp_path)
    assert back == run
    assert verdicts.diagnose(back.evidence[0]) == verdicts.diagnose(ev)


def test_the_published_seed_evidence_loads_with_defaults_and_gives_the_verdicts_it_recorded():
    recorded = json.loads(gzip.decompress(SEED_DOCTOR.read_bytes()))
    run = saved.load_evidence(SEED_DOCTOR)
    assert len(run.evidence) == len(recorded["cells"]) == 6 and run.copy_gbps == recorded["copy_gbps"]
    for ev, cell in zip(run.evidence, recorded["cells"]):
        assert "boundary" not in cell["evidence"] and not ev.boundary.available  # a default: measured since
        assert ev.host.eager_call_us is None and ev.compiled.host_call is None and ev.stage_s == {}
        assert ev.case == Case.from_dict(cell["evidence"]["case"]) and ev.eager.wall.n == 200
        assert verdicts.diagnose(ev).verdict == cell["diagnosis"]["verdict"]


def _cell(tmp_path, change) -> Path:
    doc = verdicts.diagnose_run(evidence.EvidenceRun({}, None, [make_evidence(**HAND_BUILT["wall only (CPU)"])]))
    data = json.loads(json.dumps(doc.to_dict()))
    change(data["cells"][0]["evidence"])
    path = tmp_path / "doctor.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change,message", [
    (lambda ev: ev["host"].pop("guards"), "cells[0].evidence.host: missing required field 'guards' of HostOverhead"),
    (lambda ev: ev["eager"]["wall"].update(n="200"), "cells[0].evidence.eager.wall.n: expected an integer, got a string"),
    (lambda ev: ev.update(case={"B": 8, "M": 0, "seqlen": 1, "sparsity": 0.5}),
     "cells[0].evidence.case: not a valid Case: case needs B >= 0, M >= 1"),
    (lambda ev: ev.update(notes="one"), "cells[0].evidence.notes: expected a list, got a string"),
])
def test_incompatible_evidence_says_where_and_why(tmp_path, change, message):
    path = _cell(tmp_path, change)
    with pytest.raises(ResultsFileError) as exc:
        saved.load_evidence(path)
    assert str(exc.value).startswith(f"{path}: ") and message in str(exc.value)


def test_unknown_keys_are_ignored_and_what_is_not_a_doctors_file_is_refused(tmp_path):
    path = _cell(tmp_path, lambda ev: ev.update(a_field_from_the_future=1))
    assert saved.load_evidence(path).evidence[0].implementation == "sum_padded"
    for text, message in (("{}", "no \"cells\""), ("[1]", "no \"cells\""), ("{nope", "not a doctor's JSON")):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ResultsFileError, match=message):
            saved.load_evidence(tmp_path / "bad.json")
    with pytest.raises(ResultsFileError, match="no such file"):
        saved.load_evidence(tmp_path / "missing.json")


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Inner:
    x: float
    tag: Literal["a", "b"] = "a"


@dataclass
class Outer:
    pair: tuple[int, str]
    many: tuple[Inner, ...]
    colour: Colour
    maybe: Inner | None = None
    by_name: dict[str, list[Inner]] = field(default_factory=dict)
    ids: frozenset[int] = frozenset()


def test_the_loader_follows_field_types_not_a_mapping_per_class():
    data = {"pair": [1, "one"], "many": [{"x": 1}, {"x": 2.5, "tag": "b"}], "colour": "blue",
            "maybe": {"x": 3.0}, "by_name": {"k": [{"x": 0.5}]}, "ids": [3, 4]}
    assert from_data(Outer, data) == Outer((1, "one"), (Inner(1), Inner(2.5, "b")), Colour.BLUE, Inner(3.0),
                                           {"k": [Inner(0.5)]}, frozenset({3, 4}))
    assert from_data(Outer, {"pair": [1, "a"], "many": [], "colour": "red"}).maybe is None
    for bad, message in (({**data, "colour": "green"}, "colour: 'green' is not a Colour"),
                         ({**data, "pair": [1]}, "pair: expected 2 items, got 1"),
                         ({**data, "many": [{"x": 1, "tag": "c"}]}, "many[0].tag: 'c' is not one of 'a', 'b'"),
                         ({**data, "maybe": {"x": True}}, "maybe.x: expected a number, got a boolean")):
        with pytest.raises(IncompatibleData, match=message.replace("[", r"\[").replace("]", r"\]")):
            from_data(Outer, bad)


def test_cli_doctor_from_diagnoses_saved_evidence_without_measuring(tmp_path, capsys, monkeypatch):
    measured = tmp_path / "measured.json"
    assert main(["doctor", *TINY, "--json", str(measured)]) == 0
    first = json.loads(measured.read_text())["cells"][0]["diagnosis"]
    capsys.readouterr()
    monkeypatch.setattr(gather, "gather_all", lambda *a, **k: pytest.fail("--from measured"))
    again = tmp_path / "again.json"
    assert main(["doctor", "--from", str(measured), "--json", str(again)]) == 0
    out, err = capsys.readouterr()
    assert "verdict: " in out and "B8-M4-L20-s0.5" in out and "nothing measured" in err
    assert json.loads(again.read_text())["cells"][0]["diagnosis"] == first
    assert main(["doctor", "--from", str(tmp_path / "missing.json")]) == 2
    assert "jaggedperf: error: " in capsys.readouterr().err
