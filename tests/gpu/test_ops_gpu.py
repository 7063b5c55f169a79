"""jagged_sum / jagged_mean on the GPU: large and heavy-tailed cases against float64, every dtype,
int32 offsets, determinism, the fast launch path (taken, and equal to the normal one), CUDA-graph
capture, torch.compile (fullgraph, dynamic, no recompile), backward, and values.numel() >= 2^31.

Run on the GPU machine: ``PYTHONPATH=src python -m pytest -q -m gpu tests/gpu``.
"""

import gc

import pytest
import torch
from helpers.gpu import assert_matches, check, expand_reference, gpu_reference

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.ops import launch
from jaggedperf.ops.launch import native
from jaggedperf.ops.reduce import kernels, plan

pytestmark = pytest.mark.gpu

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
SHAPES = [
    Case(512, 64, 100, 0.1),
    Case(1024, 256, 1000, 0.5),
    Case(256, 64, 20000, 0.5),
    Case(4096, 128, 32768, 0.0, "heavy"),
    Case(8, 4096, 4000, 0.0, "fixed"),
    Case(65536, 16, 64, 0.2),
    Case(7, 3, 50, 0.5, "heavy"),
    Case(3, 129, 5000, 0.0, "heavy"),
]


def batch(case, dtype, offsets_dtype=torch.int64):
    b = make_batch(case, "cuda")
    return b.values.to(dtype), b.offsets.to(offsets_dtype)


@pytest.mark.parametrize("case", SHAPES, ids=[c.label for c in SHAPES])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_large_cases_match_float64(case, dtype):
    values, offsets = batch(case, dtype)
    check(jaggedperf.jagged_sum(values, offsets), values, offsets, mean=False, what="sum")
    check(jaggedperf.jagged_mean(values, offsets), values, offsets, mean=True, what="mean")
    check(jaggedperf.jagged_mean(values, offsets, empty="zero"), values, offsets, mean=True, empty_zero=True,
          what="mean zero")
    # the operator (dispatcher + JIT launch) agrees bitwise with the fast path
    via_op = torch.ops.jaggedperf.jagged_mean(values, offsets, False)
    assert torch.equal(via_op.view(torch.uint8), jaggedperf.jagged_mean(values, offsets).view(torch.uint8))


WHOLE_SEGMENT_SHAPES = [SHAPES[0], Case(512, 64, 500, 0.75), SHAPES[5], Case(3000, 300, 40, 0.5, "heavy")]


@pytest.mark.parametrize("case", WHOLE_SEGMENT_SHAPES, ids=lambda c: c.label)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_known_max_seqlen_whole_segments_kernel(case, dtype):
    # max_seqlen given: the whole-segments kernel where segments_config picks it; exact, understated or not
    values, offsets = batch(case, dtype, torch.int32 if dtype == torch.bfloat16 else torch.int64)
    longest = int(offsets.diff().max())
    planned = plan.plan_reduce(values, offsets, mean=True, empty_zero=False, max_seqlen=longest)
    if case.distribution != "heavy":  # many small groups (65536 × 16): the looping form
        expected = kernels._segments_loop_kernel if case.B == 65536 else kernels._segments_kernel
        assert [launch.kernel for launch in planned.launches] == [expected]
    for hint in (longest, max(longest // 3, 1)):
        check(jaggedperf.jagged_sum(values, offsets, max_seqlen=hint), values, offsets, mean=False, what="sum")
        first = jaggedperf.jagged_mean(values, offsets, max_seqlen=hint)
        check(first, values, offsets, mean=True, what=f"mean max_seqlen={hint}")
        again = jaggedperf.jagged_mean(values, offsets, max_seqlen=hint)
        assert torch.equal(first.view(torch.uint8), again.view(torch.uint8))


@pytest.mark.parametrize("case", [SHAPES[0], SHAPES[3], SHAPES[6]], ids=lambda c: c.label)
def test_int32_offsets(case):
    values, offsets = batch(case, torch.bfloat16, torch.int32)
    check(jaggedperf.jagged_mean(values, offsets), values, offsets, mean=True)


def test_deterministic_bitwise():
    values, offsets = batch(SHAPES[3], torch.float32)
    first = jaggedperf.jagged_mean(values, offsets)
    for _ in range(5):
        assert torch.equal(first.view(torch.int32), jaggedperf.jagged_mean(values, offsets).view(torch.int32))
    grads = set()
    for _ in range(3):
        v = values.clone().requires_grad_(True)
        jaggedperf.jagged_mean(v, offsets).sum().backward()
        grads.add(hash(v.grad.view(torch.int32).cpu().numpy().tobytes()))
    assert len(grads) == 1


@pytest.fixture
def python_launch_path():
    # the Python path's launch tiers, with the native path standing aside (it would serve these calls)
    native.pause("test", True)
    yield
    native.pause("test", False)


def test_fast_path_is_taken_and_equals_the_normal_path(python_launch_path):
    values, offsets = batch(SHAPES[0], torch.float32)
    launch.force_tier("jit")  # the normal launch: triton's JIT
    try:
        normal = jaggedperf.jagged_mean(values, offsets)
    finally:
        launch.force_tier(None)
    for _ in range(5):
        fast = jaggedperf.jagged_mean(values, offsets)
        assert torch.equal(fast.view(torch.int32), normal.view(torch.int32))
    state = jaggedperf.ops.launch_path()
    print("launch path:", state)
    assert state["verified_tier"] in ("launch", "run", "getitem"), state
    before = dict(state["launches"])
    jaggedperf.jagged_mean(values, offsets)
    after = jaggedperf.ops.launch_path()["launches"]
    assert after[state["verified_tier"]] == before[state["verified_tier"]] + 2  # reduce + combine
    assert after["jit"] == before["jit"]
    # a new N (same M, dtype) reuses the compiled kernels: still no JIT launch
    values2, offsets2 = batch(Case(700, 64, 90, 0.3), torch.float32)
    jaggedperf.jagged_mean(values2, offsets2)
    check(jaggedperf.jagged_mean(values2, offsets2), values2, offsets2, mean=True)
    assert jaggedperf.ops.launch_path()["launches"]["jit"] == before["jit"]


def test_misaligned_values_get_their_own_compiled_kernel():
    values, offsets = batch(Case(64, 64, 50, 0.2), torch.float32)
    for _ in range(3):
        jaggedperf.jagged_sum(values, offsets)
    storage = torch.empty(values.numel() + 1, device="cuda")
    shifted = storage[1:].view_as(values)  # 4-byte aligned only
    shifted.copy_(values)
    for _ in range(3):
        out = jaggedperf.jagged_sum(shifted, offsets)
    check(out, values, offsets, mean=False)


def test_fast_path_inside_cuda_graph_capture():
    values, offsets = batch(SHAPES[0], torch.bfloat16)
    for _ in range(3):
        jaggedperf.jagged_mean(values, offsets)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = jaggedperf.jagged_mean(values, offsets)
    graph.replay()
    torch.cuda.synchronize()
    check(out, values, offsets, mean=True)


def test_jit_tier_forced_matches():
    values, offsets = batch(SHAPES[2], torch.float16)
    fast = jaggedperf.jagged_sum(values, offsets)
    launch.force_tier("jit")
    try:
        slow = jaggedperf.jagged_sum(values, offsets)
    finally:
        launch.force_tier(None)
    assert torch.equal(fast.view(torch.int16), slow.view(torch.int16))


def test_nested_tensor_input():
    values, offsets = batch(SHAPES[0], torch.float32)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets)
    check(jaggedperf.jagged_mean(nt), values, offsets, mean=True)


def test_compiled_nested_tensor_with_max_seqlen_runs_the_whole_segments_kernel():
    # the NJT's cached max_seqlen reaches the operator under torch.compile too (a SymInt): one kernel
    from torch._inductor.utils import run_and_get_code

    values, offsets = batch(SHAPES[0], torch.float32)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, max_seqlen=int(offsets.diff().max()))
    g = torch.compile(lambda t: jaggedperf.jagged_mean(t), fullgraph=True, mode="max-autotune-no-cudagraphs")
    out, code = run_and_get_code(g, nt)
    check(out, values, offsets, mean=True)
    code = "\n".join(code)
    # kernel definitions, not names: Inductor emits the helpers' sources, comments included
    assert "def _segments_kernel(" in code and "def _reduce_kernel(" not in code


def test_compile_fullgraph_dynamic_no_recompile():
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("inductor")

    @torch.compile(fullgraph=True, dynamic=True, backend=counter)
    def f(v, o):
        return jaggedperf.jagged_mean(v, o) + 1

    for case in (Case(512, 96, 100, 0.1), Case(333, 96, 500, 0.5), Case(2048, 96, 50, 0.2, "heavy")):
        values, offsets = batch(case, torch.float32)
        out = f(values, offsets)
        ref = gpu_reference(values, offsets, mean=True) + 1
        assert_matches(out, ref, torch.float32, scale=ref.abs() + 1)
    assert counter.frame_count == 1


def test_compile_with_max_seqlen_runs_the_whole_segments_kernel_and_recompiles_only_past_its_tiles():
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._inductor.utils import run_and_get_code

    counter = CompileCounterWithBackend("inductor")

    @torch.compile(fullgraph=True, dynamic=True, backend=counter)
    def f(v, o, longest):
        return jaggedperf.jagged_mean(v, o, max_seqlen=longest) * 2

    cases = (Case(512, 64, 100, 0.1), Case(300, 64, 100, 0.3), Case(4000, 64, 90, 0.0, "fixed"))
    for case in cases:  # B, N and max_seqlen change, every sequence within the first config's tiles
        b = make_batch(case, "cuda")
        out = f(b.values, b.offsets, b.max_seqlen)
        ref = gpu_reference(b.values, b.offsets, mean=True) * 2
        assert_matches(out, ref, torch.float32, scale=ref.abs() + 1)
    assert counter.frame_count == 1
    long = make_batch(Case(64, 64, 5000, 0.5), "cuda")  # past the tiles: a recompile, to the chunked kernels
    out = f(long.values, long.offsets, long.max_seqlen)
    ref = gpu_reference(long.values, long.offsets, mean=True) * 2
    assert_matches(out, ref, torch.float32, scale=ref.abs() + 1)
    torch._dynamo.reset()
    b = make_batch(cases[0], "cuda")
    g = torch.compile(lambda v, o: jaggedperf.jagged_mean(v, o, max_seqlen=b.max_seqlen), fullgraph=True,
                      mode="max-autotune-no-cudagraphs")
    out, code = run_and_get_code(g, b.values, b.offsets)
    check(out, b.values, b.offsets, mean=True)
    code = "\n".join(code)
    # kernel definitions, not names: Inductor emits the helpers' sources, comments included
    assert "def _segments_kernel(" in code and "def _reduce_kernel(" not in code


def test_operator_called_eagerly_takes_the_fast_launch_path():
    values, offsets = batch(SHAPES[0], torch.float32)
    for _ in range(3):
        out = torch.ops.jaggedperf.jagged_mean(values, offsets, False)
    before = dict(launch.launch_path()["launches"])
    out = torch.ops.jaggedperf.jagged_mean(values, offsets, False)
    after = launch.launch_path()["launches"]
    check(out, values, offsets, mean=True)
    assert after["jit"] == before["jit"] and sum(after.values()) == sum(before.values()) + 2  # reduce + combine


def test_compile_default_mode_matches_eager():
    values, offsets = batch(SHAPES[3], torch.bfloat16)
    f = torch.compile(lambda v, o: jaggedperf.jagged_sum(v, o), fullgraph=True)
    assert torch.equal(f(values, offsets).view(torch.int16), jaggedperf.jagged_sum(values, offsets).view(torch.int16))


@pytest.mark.parametrize("hinted", [False, True], ids=["chunks", "max_seqlen"])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
# the heavy 4096 x 128 x <= 32768 case holds GBs (values, gradient, a float64 reference): alone, after the rest (on an
# 80 GB card the parallel workers beside it left too little memory); the 7-sequence case is small
@pytest.mark.parametrize("case", [SHAPES[0], pytest.param(SHAPES[3], marks=pytest.mark.memory), SHAPES[5], SHAPES[6]],
                         ids=lambda c: c.label)
def test_backward(case, dtype, hinted):
    # with max_seqlen the backward takes the whole-segments expand where the forward takes whole segments
    values, offsets = batch(case, dtype)
    hint = int(offsets.diff().max()) if hinted else None
    grad_plan = plan.plan_expand(values[: offsets.numel() - 1], offsets, values.shape[0], mean=True,
                                 max_seqlen=hint).launches
    whole = hinted and case.distribution != "heavy"
    assert (grad_plan[0].kernel is kernels._segments_expand_kernel) == whole
    for mean in (False, True):
        v = values.clone().requires_grad_(True)
        if mean:
            out = jaggedperf.jagged_mean(v, offsets, empty="zero", max_seqlen=hint)
        else:
            out = jaggedperf.jagged_sum(v, offsets, max_seqlen=hint)
        grad = torch.randn_like(out)
        out.backward(grad)
        ref = expand_reference(grad, offsets, v.shape[0], mean=mean)
        assert_matches(v.grad, ref, dtype, what=f"grad mean={mean}")  # compared on the GPU


@pytest.mark.parametrize("hinted", [False, True], ids=["chunks", "max_seqlen"])
def test_compiled_backward(hinted):
    values, offsets = batch(SHAPES[0], torch.float32)
    hint = int(offsets.diff().max()) if hinted else None
    v = values.clone().requires_grad_(True)
    f = torch.compile(lambda v, o: jaggedperf.jagged_mean(v, o, max_seqlen=hint).square().sum(), fullgraph=True)
    f(v, offsets).backward()
    e = values.clone().requires_grad_(True)
    jaggedperf.jagged_mean(e, offsets).square().sum().backward()
    torch.testing.assert_close(v.grad, e.grad)


@pytest.mark.memory  # 4.3 GB of bf16 values, their float64 copy (17 GB) for the reference
def test_more_than_2_pow_31_elements():
    # what earlier tests of the process hold: compiled graphs' CUDA-graph pools (reduce-overhead: Dynamo's reset frees
    # its CUDA-graph trees), unreachable tensors, then the allocator's cached blocks
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < 30 * 2**30:  # the values, their float64 copy, the reference's segment ids and sums
        pytest.skip(f"{free / 2**30:.0f} GiB free on the GPU; the test needs 30")
    M = 64
    n_rows = 2**31 // M + 1000
    gen = torch.Generator().manual_seed(0)
    cuts = torch.randint(0, n_rows, (298,), generator=gen).sort().values
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), cuts, torch.tensor([n_rows, n_rows])])  # last one empty
    lengths = offsets.diff()
    offsets = offsets.cuda()
    values = torch.empty(n_rows, M, dtype=torch.bfloat16, device="cuda").normal_()
    assert values.numel() >= 2**31
    out = jaggedperf.jagged_mean(values, offsets)
    check(out, values, offsets, mean=True)
    # the rows past element 2^31 feed the last non-empty segment: check it on its own too
    last = values[int(offsets[-3]):].double().mean(0)
    torch.testing.assert_close(out[-2].double(), last, rtol=1e-2, atol=1e-3)
    grad = torch.ones(300, M, dtype=torch.bfloat16, device="cuda")
    gv = torch.ops.jaggedperf.jagged_expand(grad, offsets, n_rows, True)
    tail = gv[-5:].float()
    expected = 1.0 / float(lengths[-2])
    assert torch.allclose(tail, torch.full_like(tail, expected), rtol=1e-2)
    del values, gv
    torch.cuda.empty_cache()


# torch.export + AOTInductor on CUDA: see tests/helpers/aoti.py.


def test_aot_inductor_package_on_cuda_matches_eager():
    from helpers.aoti import aoti_round_trip

    result = aoti_round_trip("cuda")
    assert result["max_error"] <= 1e-5
