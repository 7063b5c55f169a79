"""Results from several places side by side: torch versions (one file each), GPUs of a mixed fleet (one file);
the report's section, compare matching GPU by GPU."""

import json

from jaggedperf.inputs import Case
from jaggedperf.lab.result import OK, UNSTABLE, Result, RunRecord, WallStats
from jaggedperf.lab.results import store, variants
from jaggedperf.lab.results.compare import SAME, compare
from jaggedperf.lab.results.markdown import render_report

C1, C2 = Case(8, 3, 20, 0.5), Case(6, 2, 10, 0.3)


def cell(impl, mode, case, ms, status=OK, **where):
    return Result("jagged_mean", impl, mode, case, "cuda" if "gpu" in where else "cpu", status=status,
                  wall=WallStats.from_samples([ms * 0.95, ms, ms * 1.05]), extra=dict(where))


def test_a_mixed_fleet_splits_by_gpu_and_host_and_the_report_shows_it():
    record = RunRecord({"gpu": "NVIDIA H200", "torch": "2.13.0"}, [
        cell("sum_padded", "eager", C1, 0.010, gpu="NVIDIA H100", host="a"),
        cell("sum_padded", "compile:default", C1, 0.005, gpu="NVIDIA H100", host="a"),
        cell("sum_padded", "eager", C2, 0.020, gpu="NVIDIA H200", host="b"),
    ], None)
    groups = variants.split(record)
    assert {k: len(v) for k, v in groups.items()} == {"NVIDIA H100 · a": 2, "NVIDIA H200 · b": 1}
    table = variants.side_by_side(groups)
    assert table.speedup["NVIDIA H100 · a"] == {("jagged_mean", "sum_padded", "compile:default", C1): 2.0}
    text = render_report(record)
    assert "## By GPU, host and torch" in text and "| NVIDIA H100 · a µs (p20–p80) |" in text
    one_place = RunRecord({"gpu": "NVIDIA H200"}, record.results[:2], None)
    assert "## By GPU, host and torch" not in render_report(one_place)  # nothing to split: no section


def test_versions_side_by_side_from_their_files_with_ratios_to_the_first(tmp_path):
    files = []
    for version, eager_ms, compiled_ms, status in (("2.11.0", 0.010, 0.020, OK), ("2.15.0", 0.010, 0.008, UNSTABLE)):
        path = tmp_path / f"r.torch-{version}.jsonl"
        store.write_environment_header(path, {"torch": version, "hostname": "h"}, None)  # older files: no extra
        store.append_result(path, cell("njt_mean", "eager", C1, eager_ms))
        store.append_result(path, cell("njt_mean", "compile:default", C1, compiled_ms, status))
        files.append(path)
    out = tmp_path / "versions.md"
    table = variants.write_versions_report(files, out)
    assert table.groups == ["torch 2.11.0", "torch 2.15.0"]
    text = out.read_text()
    row = next(line for line in text.splitlines() if "compile:default" in line)
    assert "| 20.0 (" in row and "0.50 |" in row  # 2.11: compiled twice as slow as eager
    assert "8.0 (7.8–8.2) unstable | — |" in row and row.rstrip(" |").endswith("0.40")  # 2.15 over 2.11; no speedup
    summary = json.loads(out.with_suffix(".json").read_text())
    compiled = next(r for r in summary["rows"] if r["mode"] == "compile:default")
    assert compiled["groups"]["torch 2.11.0"]["speedup_vs_eager"] == 0.5
    assert compiled["groups"]["torch 2.15.0"]["status"] == UNSTABLE


def test_compare_matches_a_mixed_fleet_gpu_by_gpu_and_single_gpu_runs_by_key():
    h100 = dict(gpu="NVIDIA H100", host="a")
    h200 = dict(gpu="NVIDIA H200", host="b")
    a = RunRecord({}, [cell("sum_padded", "eager", C1, 0.01, **h100), cell("sum_padded", "eager", C2, 0.01, **h200)], None)
    b = RunRecord({}, [cell("sum_padded", "eager", C1, 0.01, **h200), cell("sum_padded", "eager", C2, 0.01, **h200)], None)
    c = compare(a, b)
    assert [(x.case, x.gpu, x.verdict) for x in c.cells] == [(C2, "NVIDIA H200", SAME)]
    assert [r.case for r in c.only_a] == [C1] and [r.case for r in c.only_b] == [C1]  # never across GPUs
    single_a = RunRecord({}, [cell("sum_padded", "eager", C1, 0.01, **h100)], None)
    single_b = RunRecord({}, [cell("sum_padded", "eager", C1, 0.01, **h200)], None)
    assert [(x.case, x.gpu) for x in compare(single_a, single_b).cells] == [(C1, None)]  # a GPU against another
