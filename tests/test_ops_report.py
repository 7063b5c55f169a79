"""benchmarks/ops_report.py renders an ops_bench.py JSON: one table row per measured shape, ratios from the numbers."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "results" / "h200" / "ops.json"  # the published ops table's run (run 21)


def _module():
    spec = importlib.util.spec_from_file_location("ops_report", ROOT / "benchmarks" / "ops_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_renders_the_committed_h200_run():
    run = json.loads(RUN.read_text())
    text = _module().render(run, "t")
    rows = [line for line in text.splitlines() if line.startswith("| B")]
    forward = run["forward"]
    assert all(any(line.startswith(f"| {r['case']} | {r['dtype']} |") for line in rows) for r in forward)
    first = forward[0]
    ratio = first["device"]["median_us"] / first["floor_us"]
    assert f"| {first['floor_us']:.1f} | {first['device']['median_us']:.1f} (" in text and f"| {ratio:.2f} |" in text


def test_missing_sections_render_as_dashes(tmp_path):
    run = {"meta": {"command": "x", "torch": "t", "triton": "t", "gpu": "g"}, "copy": {"gbps": 1000.0},
           "forward": [{"case": "B1-M1-L1-s0", "dtype": "fp32", "floor_us": 2.0, "device": "RuntimeError: no"}]}
    text = _module().render(run, "t")
    assert "| B1-M1-L1-s0 | fp32 | 2.0 | — | — | — | — | — | — | — | — |" in text
    assert "Backward" not in text  # no backward rows: no backward table


def test_backward_table_has_both_paths_against_their_floor():
    run = json.loads(RUN.read_text())
    text = _module().render(run, "t")
    for b in run["backward"]:
        floor, hinted = b["floor_us"], b["kernels_hinted"]["median_us"]
        assert (f"| {b['case']} | {floor:.1f} | {b['device']['median_us']:.1f} |" in text
                and f"| {hinted:.1f} | {hinted / floor:.2f} |" in text)
