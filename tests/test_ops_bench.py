"""benchmarks/ops_bench.py's tables (``--from JSON``, no run): one row per measured shape, ratios from the numbers."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "results" / "h200" / "ops.json"  # the published ops table's run


def render(run_path: Path, tmp_path: Path) -> str:
    out = tmp_path / "ops.md"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ops_bench.py"), "--from", str(run_path),
                           "--markdown", str(out), "--title", "t"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text()


def test_renders_the_committed_h200_run(tmp_path):
    run = json.loads(RUN.read_text())
    text = render(RUN, tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| B")]
    forward = run["forward"]
    assert all(any(line.startswith(f"| {r['case']} | {r['dtype']} |") for line in rows) for r in forward)
    first = forward[0]
    ratio = first["device"]["median_us"] / first["floor_us"]
    assert f"| {first['floor_us']:.1f} | {first['device']['median_us']:.1f} (" in text and f"| {ratio:.2f} |" in text
    for b in run["backward"]:  # both backward paths against their floor
        floor, hinted = b["floor_us"], b["kernels_hinted"]["median_us"]
        assert (f"| {b['case']} | {floor:.1f} | {b['device']['median_us']:.1f} |" in text
                and f"| {hinted:.1f} | {hinted / floor:.2f} |" in text)


def test_missing_sections_render_as_dashes(tmp_path):
    run = {"meta": {"command": "x", "torch": "t", "triton": "t", "gpu": "g"}, "copy": {"gbps": 1000.0},
           "forward": [{"case": "B1-M1-L1-s0", "dtype": "fp32", "floor_us": 2.0, "device": "RuntimeError: no"}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    text = render(tmp_path / "run.json", tmp_path)
    assert "| B1-M1-L1-s0 | fp32 | 2.0 | — | — | — | — | — | — | — | — |" in text
    assert "Backward" not in text  # no backward rows: no backward table
