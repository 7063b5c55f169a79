"""The Python API: bench (names and plain callables), measure (any callable), load (any results file), Results."""

import json

import pytest
import torch

import jaggedperf
from jaggedperf import Case
from jaggedperf.lab.api import COLUMNS, SAMPLE_COLUMNS, Results
from jaggedperf.impls.registry import get_op
from jaggedperf.lab.measure import timing
from jaggedperf.lab.result import OK, UNSTABLE
from helpers.fake_clock import FakeClock, drifting, steady

SMALL = Case(16, 4, 30, 0.3)


def mine(values, offsets):
    """A plain callable, never registered: the mean of each sequence's rows."""
    return torch.segment_reduce(values, "mean", offsets=offsets, axis=0)


@pytest.fixture
def scripted(monkeypatch):
    """Every timed call takes 100 µs ± 1%: the API's plumbing, not the machine's mood."""
    monkeypatch.setattr(timing, "clock", FakeClock(steady(0.1)))


def test_bench_takes_names_and_callables_and_registers_nothing(scripted):
    before = set(get_op("jagged_mean").implementations)
    res = jaggedperf.bench(["sum_padded", mine], SMALL, modes=["eager"], warmup=1, iters=20, device="cpu")
    assert isinstance(res, Results) and len(res) == 2
    assert [r.implementation for r in res] == ["sum_padded", "mine"] and {r.status for r in res} == {OK}
    assert set(get_op("jagged_mean").implementations) == before  # the callable was there for the call only
    assert res.environment["command"].endswith("→ jaggedperf.bench()")
    rows = res.rows()
    assert list(rows[0]) == list(COLUMNS)
    assert rows[1]["wall_us"] == pytest.approx(100, rel=0.02) and rows[1]["wall_p20_us"] <= rows[1]["wall_p80_us"]
    assert rows[1]["threads"] == 1 and rows[1]["attempts"] == 1 and rows[1]["rel_error"] < 1e-5
    samples = res.sample_rows()
    assert len(samples) == 2 * 20 and list(samples[0]) == list(SAMPLE_COLUMNS)
    assert {s["kind"] for s in samples} == {"wall"} and samples[0]["us"] == pytest.approx(100, rel=0.02)


def test_bench_refuses_a_callable_that_would_replace_a_registered_one():
    def sum_padded(values, offsets):
        return values

    with pytest.raises(ValueError, match="another_name"):
        jaggedperf.bench([sum_padded], SMALL)
    with pytest.raises(KeyError, match="segment_reduce"):
        jaggedperf.bench(["nope"], SMALL)


def test_bench_with_a_mapping_and_a_wrong_callable(scripted):
    res = jaggedperf.bench({"off": lambda v, o: mine(v, o) * 1.1}, [SMALL], warmup=1, iters=12, device="cpu")
    (r,) = res
    assert r.implementation == "off" and r.status == "wrong" and res.rows()[0]["wall_us"] is None


def test_measure_times_any_callable_and_marks_drift(monkeypatch):
    x = torch.randn(1000)
    monkeypatch.setattr(timing, "clock", FakeClock(steady(0.05, n=30)))
    res = jaggedperf.measure(torch.sum, x, iters=30, warmup=2, device="cpu")
    (r,) = res
    assert (r.op, r.implementation, r.mode, r.status) == ("callable", "sum", "eager", OK)
    assert res.rows()[0]["wall_us"] == pytest.approx(50, rel=0.02)
    monkeypatch.setattr(timing, "clock", FakeClock(drifting(0.05, step_at=20, factor=1.5, n=30) * 3))
    (shaky,) = jaggedperf.measure(torch.sum, x, name="drifty", iters=30, warmup=0, device="cpu")
    assert shaky.status == UNSTABLE and "drifted" in shaky.reason
    assert jaggedperf.measure(torch.sum, x, modes="compile:reduce-overhead", device="cpu")[0].status == "skipped"


def test_load_reads_what_save_wrote_in_either_form_and_a_doctor_file(tmp_path, scripted):
    res = jaggedperf.bench(["segment_reduce"], SMALL, warmup=1, iters=15, device="cpu")
    for name in ("r.json", "r.jsonl"):
        back = jaggedperf.load(res.save(tmp_path / name))
        assert back.rows() == res.rows() and back.sample_rows() == res.sample_rows()
    assert res.compare(back).counts()["same"] == 1
    from jaggedperf.lab.doctor import verdicts
    from helpers.evidence import make_evidence

    ev = make_evidence(eager=(112, 20), compiled=(290, 6), plain=(40, 6), boundary=(60, 6))
    doc = verdicts.DoctorRecord({"torch": "x"}, None, [ev], [verdicts.diagnose(ev)])
    (tmp_path / "doctor.json").write_text(json.dumps(doc.to_dict()))  # as `jaggedperf doctor --json` writes it
    doctor = jaggedperf.load(tmp_path / "doctor.json")
    assert [(r.mode, r.extra.get("input_form")) for r in doctor] == [
        ("eager", None), (ev.mode, None), (ev.mode, "plain"), (ev.boundary.mode, None)]
    assert doctor.environment == {"torch": "x"} and doctor.rows()[1]["wall_us"] == pytest.approx(290)


def test_to_pandas_is_an_optional_extra(scripted):
    res = jaggedperf.bench(["segment_reduce"], SMALL, warmup=1, iters=15, device="cpu")
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"jaggedperf\[pandas\]"):
            res.to_pandas()
        return
    df = res.to_pandas()
    assert list(df.columns) == list(COLUMNS) and df.loc[0, "wall_us"] == pytest.approx(res.rows()[0]["wall_us"])
    long = res.samples_to_pandas()
    assert len(long) == 15 and set(long["kind"]) == {"wall"}


def test_the_readme_example_runs(scripted):
    res = jaggedperf.bench(["sum_padded", "segment_reduce"], [Case(64, 32, 200, 0.5)], modes=["eager"],
                           warmup=1, iters=12, device="cpu")
    assert [row["status"] for row in res.rows()] == [OK, OK]
    assert json.loads(json.dumps(res.rows()))  # plain values, ready for any table library
