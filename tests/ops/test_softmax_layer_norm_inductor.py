"""Inductor's view of what the softmax and layer norm kernels write: exactly the tensors each launch says it
writes (the sibling of test_inductor_analysis.py, whose analysis helpers it reuses).

Run as a script (a subprocess without TRITON_INTERPRET, against a CUDA target with no GPU), it compiles every
kernel of both families to TTIR, forward and backward, one-tile and looping tiles, int32 and int64 offsets,
and prints what Inductor's analysis finds written. That compile is also the check that the kernels are valid
Triton for a GPU (the interpreter accepts more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.isolated import pythonpath

PATHS = ("softmax", "softmax_backward", "layer_norm", "layer_norm_backward")
SPLIT_PATHS = ("softmax_parts", "layer_norm_parts", "layer_norm_backward_parts")  # several launches each (routed below the SM count)
TILES = {"one-tile": (64, 8), "loop": (4, 4)}  # (BLOCK_L, BLOCK_M): rows of <= 64 fit; 4 × 4 loops over M = 8


def _plans(values, offsets, grad, cfg):
    from jaggedperf.ops import testing
    from jaggedperf.ops.layer_norm.plan import plan_layer_norm, plan_layer_norm_backward
    from jaggedperf.ops.softmax.plan import plan_softmax, plan_softmax_backward

    return {
        "softmax": plan_softmax(values, offsets, cfg=cfg),
        "softmax_backward": plan_softmax_backward(values, grad, offsets, cfg=cfg),
        "layer_norm": plan_layer_norm(values, offsets, 1e-5, cfg=cfg),
        "layer_norm_backward": plan_layer_norm_backward(values, grad, offsets, 1e-5, cfg=cfg),
        "softmax_parts": testing.plan_softmax_parts(values, offsets, parts=4, cfg=cfg),
        "layer_norm_parts": testing.plan_layer_norm_parts(values, offsets, 1e-5, parts=4, cfg=cfg),
        "layer_norm_backward_parts": testing.plan_layer_norm_backward_parts(values, grad, offsets, 1e-5, parts=4,
                                                                            cfg=cfg),
    }


def main() -> None:
    import torch
    from helpers.inductor_analysis import analyse

    from jaggedperf.ops.tiles import TileConfig

    def plans(values, offsets):
        grad = torch.randn_like(values)
        return {f"{path}/{tile_name}": planned
                for tile_name, (block_l, block_m) in TILES.items()
                for path, planned in _plans(values, offsets, grad, TileConfig(block_l, block_m, 4)).items()}

    print(json.dumps(analyse(plans)))


@pytest.fixture(scope="module")
def analysis() -> dict:
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = pythonpath(env)
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("offsets_dtype", ["int64", "int32"])
@pytest.mark.parametrize("tile", list(TILES))
@pytest.mark.parametrize("path", PATHS)
def test_inductor_sees_only_the_declared_outputs_written(analysis, path, tile, offsets_dtype):
    (found,) = analysis[f"{path}/{tile}/{offsets_dtype}"].values()  # one launch
    assert found["declared"], "the launch declares no output"
    assert found["analysed"] == found["declared"]


@pytest.mark.parametrize("offsets_dtype", ["int64", "int32"])
@pytest.mark.parametrize("tile", list(TILES))
@pytest.mark.parametrize("path", SPLIT_PATHS)
def test_the_split_launches_are_seen_writing_only_their_declared_outputs(analysis, path, tile, offsets_dtype):
    launches = analysis[f"{path}/{tile}/{offsets_dtype}"]
    assert len(launches) == (3 if path == "layer_norm_backward_parts" else 2)
    for kernel, found in launches.items():
        assert found["declared"], f"{kernel} declares no output"
        assert found["analysed"] == found["declared"], kernel


if __name__ == "__main__":
    main()
