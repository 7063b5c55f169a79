"""benchmarks/merge_path_bench.py's judging and table (``--from JSON``, no run, no GPU): a bar a column, the strict
checks and the prediction judged, failed checks named (the run itself: ``--cpu-smoke``, too slow for CI)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = {"median_us": 10.0, "p20_us": 9.9, "p80_us": 10.1, "unstable": False}


def _row(**extra):
    row = {"class": "seed", "case": "B512-M64-L100-s0.1", "MB": 10.6, "floor_us": 2.5, "practical_floor_us": 12.7,
           "plain_path": "split", "hinted_path": "whole segments", "predicted_us": [10.5, 9.0, 12.5],
           "checks": {"sum": 1e-7, "mean": 1e-7, "expand_mean": 5e-8}, "checks_ok": True,
           "ours_plain": TIMING, "ours_hinted": dict(TIMING, median_us=9.8),
           "segment_reduce": dict(TIMING, median_us=20.4), "segment_reduce_correct": True,
           "inductor_padded": "skipped: too large", "ours_plain_deterministic": True,
           "ours_hinted_deterministic": True}
    row.update(extra)
    return row


def render(data: dict, tmp_path: Path) -> tuple[str, dict]:
    (tmp_path / "run.json").write_text(json.dumps(data))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "merge_path_bench.py"), "--out", str(out),
                           "--from", str(tmp_path / "run.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return (out / "split.md").read_text(), json.loads((out / "split.json").read_text())


def test_rows_are_judged_and_rendered_a_bar_a_column(tmp_path):
    slow = dict(TIMING, median_us=13.0)
    data = {"meta": {"gpu": "g", "torch": "t", "triton": "t"}, "copy_gbps": 4230.0, "empty_kernel_us": 4.8,
            "two_empty_kernels_us": 5.8, "split_pps": 2, "skipped": ["B1-M64-L2000000-s0-fixed"], "errors": {},
            "rows": [_row(), _row(case="B10000-M4-L16-s0.5", checks_ok=False, ours_plain=slow),
                     {"class": "ones", "case": "B1000000-M8-L1-s0-fixed", "error": "RuntimeError: x"}]}
    text, judged = render(data, tmp_path)
    good, bad = (row["bars"] for row in judged["rows"][:2])
    assert good["0_checks"] and good["1_peer"] and good["1_hinted"] and good["5_predicted"]
    assert good["2_floor"] is None and good["3_backward"] is None
    assert not bad["0_checks"] and not bad["1_hinted"] and not bad["5_predicted"] and bad["1_peer"]
    header = next(line for line in text.splitlines() if line.startswith("| class"))
    lines = [line for line in text.splitlines() if line.startswith(("| seed", "| ones"))]
    assert len(lines) == 3 and all(line.count("|") == header.count("|") for line in lines[:2])
    assert "10.5 (9–12.5)" in lines[0] and "10.0 (split)" in lines[0]
    assert "Strict checks failed: B10000-M4-L16-s0.5" in text and "B1-M64-L2000000-s0-fixed" in text


def test_the_route_is_judged_against_the_faster_forced_path(tmp_path):
    merge, split = dict(TIMING, median_us=20.0), dict(TIMING, median_us=10.0)
    data = {"meta": {"gpu": "g", "torch": "t", "triton": "t"}, "copy_gbps": 4230.0, "empty_kernel_us": 4.8,
            "two_empty_kernels_us": 5.8, "split_pps": 2, "skipped": [], "errors": {},
            "rows": [_row(merge_plain=merge, split_plain=split),  # ours 10.0: the split's time
                     _row(case="B50000-M32-L10-s0", merge_plain=merge, split_plain=split,
                          ours_plain=dict(TIMING, median_us=10.6)),  # 6% past the faster path
                     _row(case="B3000-M40-L500-s0", merge_plain=merge)]}  # no forced split: not judged
    text, judged = render(data, tmp_path)
    assert [row["bars"]["6_route"] for row in judged["rows"]] == [True, False, None]
    header = next(line for line in text.splitlines() if line.startswith("| class"))
    assert header.endswith("| 6 route |")
    assert all(line.count("|") == header.count("|") for line in text.splitlines() if line.startswith("| seed"))
