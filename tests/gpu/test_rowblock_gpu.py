"""The row-block kernels (``ops/reduce/rowblock.py``) on the GPU at their production tiles and at the four classes
issue #16 routes to them (smaller sizes): against float64, bitwise repeats, the public functions routed there (not
served by the native path), CUDA-graph capture, and ``torch.compile(fullgraph=True, dynamic=True)``.

Run on the GPU machine: ``PYTHONPATH=src python -m pytest -q -m gpu tests/gpu/test_rowblock_gpu.py``.
"""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_checks import check  # noqa: E402

import jaggedperf  # noqa: E402
from jaggedperf.inputs import Case, make_batch  # noqa: E402
from jaggedperf.ops import testing  # noqa: E402
from jaggedperf.ops.reduce import plan  # noqa: E402
from jaggedperf.ops.reduce.rowblock import wants_rowblock  # noqa: E402

pytestmark = pytest.mark.gpu

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# (case, max_seqlen given): each routed to the row blocks by wants_rowblock
ROUTED = [
    (Case(10_000, 4, 16, 0.5), False),  # narrow, no max_seqlen
    (Case(100_000, 8, 12, 0.0), True),  # narrow with max_seqlen, N >= 2^18
    (Case(512, 64, 100, 0.1), False),  # the seed without max_seqlen
    (Case(20_000, 64, 64, 0.9, "empty"), True),  # empty-heavy
    (Case(4096, 64, 400, 0.0, "heavy"), True),  # heavy-tailed < 100 MB
]


def _call(fn, batch, hinted):
    return fn(batch.values, batch.offsets, max_seqlen=batch.max_seqlen if hinted else None)


@pytest.mark.parametrize("case,hinted", ROUTED, ids=lambda x: x.label if isinstance(x, Case) else str(x))
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_routed_calls_give_reference_and_repeat_bitwise(case, hinted, dtype):
    batch = make_batch(case, "cuda")
    values = batch.values.to(dtype)
    offsets = batch.offsets.to(torch.int32 if dtype == torch.float16 else torch.int64)
    seqlen = batch.max_seqlen if hinted else None
    assert wants_rowblock(values.shape[1], values.shape[0], offsets.shape[0] - 1, seqlen), case.label
    assert plan.plan_reduce(values, offsets, mean=True, empty_zero=False, max_seqlen=seqlen).launches[0].key[0] \
        == "rowblock"
    for mean, fn in ((False, jaggedperf.jagged_sum), (True, jaggedperf.jagged_mean)):
        outs = [fn(values, offsets, max_seqlen=seqlen) for _ in range(3)]
        check(outs[0], values, offsets, mean=mean)
        assert all(torch.equal(o.view(torch.uint8), outs[0].view(torch.uint8)) for o in outs[1:])
        poisoned = testing.launch_reduce(values, offsets, mean=mean, rowblock=True, poison=float("nan"))
        assert torch.equal(poisoned.view(torch.uint8), outs[0].view(torch.uint8))


@pytest.mark.parametrize("rows", [1 << 16, 2_000_000])
def test_giant_segment(rows):
    values = torch.randn(rows, 64, device="cuda")
    offsets = torch.tensor([0, rows], device="cuda")
    for hinted in (False, True):
        out = jaggedperf.jagged_sum(values, offsets, max_seqlen=rows if hinted else None)
        check(out, values, offsets, mean=False)
        again = jaggedperf.jagged_sum(values, offsets, max_seqlen=rows if hinted else None)
        assert torch.equal(out, again)


def test_empty_and_zero_rows():
    for lengths in ([0] * 1000, [0] * 500 + [3] + [0] * 499):
        offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device="cuda")
        values = torch.randn(int(offsets[-1]), 8, device="cuda")
        for empty in ("nan", "zero"):
            check(jaggedperf.jagged_mean(values, offsets, empty=empty), values, offsets, mean=True,
                  empty_zero=empty == "zero")


def test_captured_in_a_cuda_graph():
    batch = make_batch(ROUTED[0][0], "cuda")
    values = batch.values.clone()
    for _ in range(2):
        jaggedperf.jagged_mean(values, batch.offsets)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = jaggedperf.jagged_mean(values, batch.offsets)
    values.copy_(torch.randn_like(values))
    graph.replay()
    torch.cuda.synchronize()
    check(out, values, batch.offsets, mean=True)


def test_compiled_fullgraph_dynamic():
    fn = torch.compile(lambda v, o: jaggedperf.jagged_mean(v, o), fullgraph=True, dynamic=True)
    for case in (ROUTED[0][0], ROUTED[2][0], Case(3000, 4, 20, 0.5)):
        batch = make_batch(case, "cuda")
        check(fn(batch.values, batch.offsets), batch.values, batch.offsets, mean=True)
