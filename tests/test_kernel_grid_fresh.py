"""benchmarks/kernel_grid_bench.py's fresh-process probe on the CPU, run as the bench runs it (``--fresh-child``, empty
caches): its plumbing (numbers meaningless here)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_fresh_child_records_its_first_calls_and_the_python_tier_after_the_build(tmp_path):
    env = dict(os.environ, JAGGEDPERF_CACHE=str(tmp_path / "jp"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYTHONPATH=str(ROOT / "src"))
    out = tmp_path / "fresh.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_grid_bench.py"), "--fresh-child",
                           str(out), "--cpu-smoke"], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["first_forward_ms"] > 0 and rec["first_forward_backward_ms"] > 0
    assert sum(s["calls"] for s in rec["fb_wall_us_by_native_status"].values()) > 0
    after = rec["fb_wall_us_python_tier_after_build"]
    assert after["calls"] > 0 and after["median_us"] > 0 and after["tier"]
    assert rec["native"]["status"]
