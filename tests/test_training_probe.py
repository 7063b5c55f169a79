"""benchmarks/training_probe.py's plumbing on the CPU: every part timed at both seed shapes, the files written."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("training_probe", ROOT / "benchmarks" / "training_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_part_timed_and_written(tmp_path):
    probe = _module()
    assert probe.main(["--device", "cpu", "--rounds", "2", "--iters", "3", "--profile-steps", "2",
                       "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "training_probe.json").read_text())
    assert [c["case"] for c in result["cases"]] == ["B512-M64-L100-s0.1", "B512-M64-L500-s0.75"]
    for case in result["cases"]:
        assert set(case["parts"]) >= {"step", "forward", "engine_floor", "backward_op", "segment_reduce_step"}
        for part in case["parts"].values():
            assert len(part["samples_us"]) == 6 and part["p20_us"] <= part["median_us"] <= part["p80_us"]
        label = case["case"]
        assert (tmp_path / f"cprofile-{label}.txt").read_text().strip()
        assert (tmp_path / f"profiler-{label}.txt").read_text().strip()
    md = (tmp_path / "training_probe.md").read_text()
    assert "| engine_floor |" in md and "--iters 3" in md


def test_the_engine_floor_returns_a_gradient_of_the_values_shape():
    import torch

    probe = _module()
    leaf = torch.randn(7, 3, requires_grad=True)
    probe._EngineFloor.apply(leaf, 2).backward(torch.ones(2, 3))
    assert leaf.grad.shape == (7, 3)
