"""benchmarks/kernel_grid_bench.py's fresh-process probe on the CPU: its plumbing (numbers meaningless here)."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the bench imports ops_bench beside it
    try:
        spec = importlib.util.spec_from_file_location("kernel_grid_bench", ROOT / "benchmarks" / "kernel_grid_bench.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_a_fresh_child_records_its_first_calls_and_the_python_tier_after_the_build():
    bench = _module()
    rec = bench.fresh_probe(str(ROOT / "benchmarks" / "kernel_grid_bench.py"), 240, cpu=True)
    assert "error" not in rec, rec.get("error")
    assert rec["first_forward_ms"] > 0 and rec["first_forward_backward_ms"] > 0
    assert sum(s["calls"] for s in rec["fb_wall_us_by_native_status"].values()) > 0
    after = rec["fb_wall_us_python_tier_after_build"]
    assert after["calls"] > 0 and after["median_us"] > 0 and after["tier"]
    assert rec["native"]["status"] and rec["process_s"] > 0
