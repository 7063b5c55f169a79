"""Inductor's view of what each of our kernels writes: exactly the tensors the launch says it writes.

Inductor decides which arguments of a user Triton kernel (``wrap_triton``) are written by walking the
kernel's TTIR back from every store's pointer. If it takes an input (the offsets, the values) for
written, functionalization clones that input before the kernel (an extra copy in compiled code) and
``mode="reduce-overhead"`` skips CUDA graphs for the whole graph ("mutated inputs"). The analysis
needs only Triton's front end, so it runs here against a CUDA target with no GPU, in a subprocess
without ``TRITON_INTERPRET`` (the interpreter's kernels have no TTIR).
"""

from __future__ import annotations

import json

import pytest
from helpers.isolated import run_script

pytest.importorskip("triton")

PATHS = ("chunks", "rowblock", "segments", "segments-loop", "merge", "merge-tiny", "split", "split-tiny",
         "expand-chunks", "expand-segments", "expand-merge", "expand-split")


@pytest.fixture(scope="module")
def analysis() -> dict:
    done = run_script("inductor_analysis.py", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("offsets_dtype", ["int64", "int32"])
@pytest.mark.parametrize("path", PATHS)
def test_inductor_sees_only_the_declared_outputs_written(analysis, path, offsets_dtype):
    kernels = analysis[f"{path}/{offsets_dtype}"]
    assert kernels, "no launch analysed"
    for kernel, found in kernels.items():
        assert sorted(found["analysed"]) == sorted(found["declared"]), kernel
