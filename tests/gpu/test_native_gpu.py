"""The native launch path on the GPU: it builds and loads; a call with a registered plan is served by it,
matches float64 and is bitwise equal to the Python path: the whole-segments kernels (every dtype, int32
offsets, M = 1 (the JIT makes M a constant), odd M, the looping kernel, empty sequences) and the chunked
reduce + combine (long rows, heavy tails; one plan for every B and N); the backward (expand) of an eager
autograd call, every plan; the current stream; CUDA-graph capture; create_graph, forced tiers, validation
and other devices stay on the Python path.

Run on the GPU machine: ``PYTHONPATH=src python -m pytest -q -m gpu tests/gpu``.
"""


import pytest
import torch
from helpers.gpu import check

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.ops import launch, testing
from jaggedperf.ops.launch import native as native_launch
from jaggedperf.ops.launch.layout import FEW_SEGMENTS, GridKind
from jaggedperf.ops.reduce import plan

pytestmark = pytest.mark.gpu

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CASES = [Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75), Case(65536, 16, 64, 0.2), Case(300, 1, 40, 0.5),
         Case(777, 33, 60, 0.9, "heavy")]


@pytest.fixture(scope="module", autouse=True)
def native():
    state = native_launch.ensure()
    assert state["status"] == "ready", state
    return native_launch.active


def _bitwise(a, b):
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _python_path(values, offsets, max_seqlen, mean=True):
    # plans and launches in Python, and registers the plan (a no-op once registered)
    return testing.python_path(values, offsets, mean=mean, max_seqlen=max_seqlen)


def _served():
    return native_launch.state()["served"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_served_natively_and_equal_to_the_python_path(case, dtype):
    batch = make_batch(case, "cuda")
    values = batch.values.to(dtype)
    offsets = batch.offsets.to(torch.int32 if dtype == torch.float16 else torch.int64)
    longest = int(offsets.diff().max())
    for mean in (False, True):
        name = "mean" if mean else "sum"
        fn = getattr(jaggedperf, f"jagged_{name}")
        expected = _python_path(values, offsets, longest, mean)  # plans, launches, registers the native plan
        check(expected, values, offsets, mean=mean, what=f"Python path {name}")
        before = _served()
        got = fn(values, offsets, max_seqlen=longest)
        assert _served() == before + 1, native_launch.state()
        check(got, values, offsets, mean=mean, what=f"native {name}")
        assert _bitwise(got, expected)
        assert (got.shape, got.stride(), got.dtype, got.device) == (expected.shape, expected.stride(), dtype,
                                                                    values.device)
        assert not got.requires_grad and got.is_contiguous()
        assert _bitwise(got.clone(), got) and _bitwise(torch.cat([got, got])[len(got):], got)  # an ordinary tensor
    assert native_launch.state()["status"] == "ready", native_launch.state()


CHUNKED = [Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75), Case(1024, 256, 1000, 0.5), Case(256, 64, 20000, 0.5),
           Case(4096, 128, 32768, 0.0, "heavy"), Case(7, 3, 50, 0.5, "heavy")]


@pytest.mark.parametrize("case", CHUNKED, ids=lambda c: c.label)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_chunked_kernels_without_max_seqlen_served_and_equal(case, dtype):
    batch = make_batch(case, "cuda")
    values = batch.values.to(dtype)
    offsets = batch.offsets.to(torch.int32 if dtype == torch.bfloat16 else torch.int64)
    launches = plan.plan_reduce(values, offsets, mean=True, empty_zero=False).launches
    assert [launch.native.grid for launch in launches] == [GridKind.CHUNKS] * 2  # reduce, then combine
    for mean in (False, True):
        fn = getattr(jaggedperf, "jagged_mean" if mean else "jagged_sum")
        expected = _python_path(values, offsets, None, mean)
        before = _served()
        got = fn(values, offsets)
        assert _served() == before + 1, native_launch.state()
        check(got, values, offsets, mean=mean, what="native chunks")
        assert _bitwise(got, expected)


def test_one_chunked_plan_serves_new_lengths_and_batch_sizes_from_their_first_call():
    # without max_seqlen the key has neither B nor N, only which side of FEW_SEGMENTS B is on (the wide combine's
    # kernels): one plan per side, each registered by the first call on its side
    first = make_batch(Case(600, 96, 120, 0.2), "cuda")
    jaggedperf.jagged_mean(first.values, first.offsets)  # registers the many-segments plan (the Python path)
    few = make_batch(Case(3, 96, 7000, 0.0, "heavy"), "cuda")
    jaggedperf.jagged_mean(few.values, few.offsets)  # registers the few-segments plan
    for case in (Case(900, 96, 40, 0.5), Case(FEW_SEGMENTS, 96, 2000, 0.0, "heavy"), Case(20000, 96, 10, 0.9),
                 Case(1, 96, 50_000, 0.0, "fixed")):
        batch = make_batch(case, "cuda")
        before = _served()
        out = jaggedperf.jagged_mean(batch.values, batch.offsets)
        assert _served() == before + 1, case  # no Python path first
        check(out, batch.values, batch.offsets, mean=True)
        assert _bitwise(out, _python_path(batch.values, batch.offsets, None))


def test_new_batch_sizes_and_lengths_register_their_own_plans():
    for case in (Case(512, 64, 90, 0.3), Case(513, 64, 90, 0.3), Case(4000, 64, 30, 0.5)):
        batch = make_batch(case, "cuda")
        longest = int(batch.offsets.diff().max())
        launches = plan.plan_reduce(batch.values, batch.offsets, mean=True, empty_zero=False,
                                    max_seqlen=longest).launches
        assert [launch.native is not None for launch in launches] == [True]  # the whole-segments kernel
        first = jaggedperf.jagged_mean(batch.values, batch.offsets, max_seqlen=longest)
        before = _served()
        again = jaggedperf.jagged_mean(batch.values, batch.offsets, max_seqlen=longest)
        assert _served() == before + 1 and _bitwise(first, again)
        check(again, batch.values, batch.offsets, mean=True)


def test_nested_tensor_with_a_cached_max_seqlen_is_served():
    batch = make_batch(CASES[1], "cuda")
    nt = torch.nested.nested_tensor_from_jagged(batch.values, batch.offsets, max_seqlen=batch.max_seqlen)
    first = jaggedperf.jagged_mean(nt)  # plans and registers the plain call's plan
    before = _served()
    again = jaggedperf.jagged_mean(nt)
    assert _served() == before + 1 and _bitwise(first, again)
    check(again, batch.values, batch.offsets, mean=True)


def test_runs_on_the_current_stream():
    batch = make_batch(CASES[1], "cuda")
    longest = batch.max_seqlen
    jaggedperf.jagged_mean(batch.values, batch.offsets, max_seqlen=longest)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # a busy side stream: a launch on the wrong stream would read too early
        values = batch.values * 2
        before = _served()
        out = jaggedperf.jagged_mean(values, batch.offsets, max_seqlen=longest)
        assert _served() == before + 1
    torch.cuda.current_stream().wait_stream(side)
    check(out, values, batch.offsets, mean=True)


def test_captured_in_a_cuda_graph_and_replayed_on_new_values():
    batch = make_batch(CASES[0], "cuda")
    values, offsets, longest = batch.values.clone(), batch.offsets, batch.max_seqlen
    for _ in range(2):
        jaggedperf.jagged_mean(values, offsets, max_seqlen=longest)
    graph = torch.cuda.CUDAGraph()
    before = _served()
    with torch.cuda.graph(graph):
        out = jaggedperf.jagged_mean(values, offsets, max_seqlen=longest)
    assert _served() == before + 1
    values.copy_(torch.randn_like(values))
    graph.replay()
    torch.cuda.synchronize()
    check(out, values, offsets, mean=True)


def test_autograd_forward_takes_it_inside_the_eager_function():
    # an eager call requiring grad runs api.EagerReduce, whose forward (grad off) the native path serves
    batch = make_batch(CASES[0], "cuda")
    longest = batch.max_seqlen
    jaggedperf.jagged_mean(batch.values, batch.offsets, max_seqlen=longest)
    values = batch.values.clone().requires_grad_(True)
    before = _served()
    out = jaggedperf.jagged_mean(values, batch.offsets, max_seqlen=longest)
    out.sum().backward()
    assert _served() == before + 1 and type(out.grad_fn).__name__ == "EagerReduceBackward"
    lengths = batch.offsets.diff().clamp_min(1).double()
    expected = (1 / lengths).repeat_interleave(batch.offsets.diff()).unsqueeze(1).expand_as(values)
    torch.testing.assert_close(values.grad.double(), expected, rtol=1e-6, atol=1e-7)
    with torch.no_grad():
        before = _served()
        jaggedperf.jagged_mean(values, batch.offsets, max_seqlen=longest)
        assert _served() == before + 1  # no grad to record: served


def _served_backward():
    return native_launch.state()["served_backward"]


def _expected_grad(grad, offsets, n_rows, mean):
    lengths = offsets.diff()
    scale = lengths.clamp_min(1).double().unsqueeze(1) if mean else 1.0
    return (grad.double() / scale).repeat_interleave(lengths, dim=0, output_size=n_rows)


BACKWARD = [Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75), Case(65536, 16, 64, 0.2), Case(300, 1, 40, 0.5),
            Case(4, 64, 3000, 0.0, "fixed"), Case(1, 32, 20000, 0.0, "fixed"), Case(777, 33, 60, 0.9, "heavy")]


@pytest.mark.parametrize("hinted", [True, False], ids=["max_seqlen", "no_max_seqlen"])
@pytest.mark.parametrize("case", BACKWARD, ids=lambda c: c.label)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_backward_served_natively_and_equal_to_the_python_path(case, dtype, hinted):
    # api.EagerReduce's backward asks the native path first; the first call of a key runs the Python
    # path's launch and registers it (checked bitwise), the next is served: every backward plan (whole segments,
    # spread over tiles (GRID_Z) when a segment is alone in its program and long, the chunks), every dtype, int32
    # offsets, M = 1, a broadcast gradient (out.sum()'s)
    batch = make_batch(case, "cuda")
    values = batch.values.to(dtype)
    offsets = batch.offsets.to(torch.int32 if dtype == torch.float16 else torch.int64)
    longest = int(offsets.diff().max()) if hinted else None
    grad = torch.randn(case.B, case.M, device="cuda", dtype=dtype)
    for mean in (False, True):
        fn = jaggedperf.jagged_mean if mean else jaggedperf.jagged_sum
        grads = []
        for _ in range(2):
            leaf = values.clone().requires_grad_(True)
            before = _served_backward()
            fn(leaf, offsets, max_seqlen=longest).backward(grad)
            grads.append((leaf.grad, _served_backward() - before))
        (first, first_served), (second, second_served) = grads
        assert second_served == 1, (first_served, native_launch.state())
        assert _bitwise(first, second) and first.dtype == dtype and first.is_contiguous()
        expected = _expected_grad(grad, offsets, values.shape[0], mean)
        torch.testing.assert_close(second.double(), expected, rtol=0 if dtype == torch.float32 else 1e-2, atol=1e-6)
        leaf = values.clone().requires_grad_(True)
        before = _served_backward()
        fn(leaf, offsets, max_seqlen=longest).sum().backward()  # a stride-0 gradient
        assert _served_backward() == before + 1
        ones = torch.ones(case.B, case.M, device="cuda", dtype=torch.float64)
        torch.testing.assert_close(leaf.grad.double(), _expected_grad(ones, offsets, values.shape[0], mean),
                                   rtol=0 if dtype == torch.float32 else 1e-2, atol=1e-6)
    assert native_launch.state()["status"] == "ready", native_launch.state()


def test_one_backward_plan_without_max_seqlen_serves_new_lengths_and_batch_sizes():
    first = make_batch(Case(600, 96, 120, 0.2), "cuda")
    leaf = first.values.clone().requires_grad_(True)
    jaggedperf.jagged_mean(leaf, first.offsets).backward(torch.randn(600, 96, device="cuda"))  # registers it
    for case in (Case(900, 96, 40, 0.5), Case(3, 96, 7000, 0.0, "heavy"), Case(1, 96, 50_000, 0.0, "fixed")):
        batch = make_batch(case, "cuda")
        leaf = batch.values.clone().requires_grad_(True)
        grad = torch.randn(case.B, 96, device="cuda")
        before = _served_backward()
        jaggedperf.jagged_mean(leaf, batch.offsets).backward(grad)
        assert _served_backward() == before + 1, case
        torch.testing.assert_close(leaf.grad.double(), _expected_grad(grad, batch.offsets, batch.values.shape[0], True),
                                   rtol=0, atol=1e-6)


def test_create_graph_keeps_the_differentiable_operator():
    batch = make_batch(CASES[0], "cuda")
    leaf = batch.values.clone().requires_grad_(True)
    for _ in range(2):
        out = jaggedperf.jagged_sum(leaf, batch.offsets, max_seqlen=batch.max_seqlen)
        before = _served_backward()
        (g,) = torch.autograd.grad(out, leaf, torch.randn_like(out).requires_grad_(True), create_graph=True)
        assert _served_backward() == before and g.requires_grad  # differentiable in the gradient it was given


def test_forced_tier_and_validation_bypass_it():
    batch = make_batch(CASES[0], "cuda")
    longest = batch.max_seqlen
    jaggedperf.jagged_sum(batch.values, batch.offsets, max_seqlen=longest)
    before = _served()
    launch.force_tier("jit")
    try:
        jaggedperf.jagged_sum(batch.values, batch.offsets, max_seqlen=longest)
    finally:
        launch.force_tier(None)
    jaggedperf.jagged_sum(batch.values, batch.offsets, max_seqlen=longest, validate=True)
    assert _served() == before


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_tensor_on_another_device_takes_the_python_path():
    batch = make_batch(CASES[0], "cuda:1")
    longest = batch.max_seqlen
    for _ in range(3):
        out = jaggedperf.jagged_mean(batch.values, batch.offsets, max_seqlen=longest)
    check(out, batch.values, batch.offsets, mean=True)
