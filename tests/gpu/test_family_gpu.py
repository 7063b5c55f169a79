"""jagged_softmax / jagged_layer_norm on the GPU: forward and backward against float64 at large and
awkward shapes in every dtype, with max_seqlen known (one tile a sequence) and unknown or understated (the
looping passes), the operator equal to the fast path bitwise, determinism, torch.compile (fullgraph, dynamic,
no recompile), CUDA-graph capture, NJT in and out.

The float64 reference is the ops' pure-torch kernel run in float64 on the device (the CPU tests check it
against a loop over torch.softmax / torch.layer_norm).

Run on the GPU machine: ``PYTHONPATH=src python -m pytest -q -m gpu tests/gpu/test_family_gpu.py``.
"""


import pytest
import torch
from helpers.gpu import FAMILY_SHAPES, shape_params
from helpers.family import EPS, FAMILIES, RTOL, assert_close, make, run_backward

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import family as family_bench
from jaggedperf.ops.tiles import TileConfig
from jaggedperf.ops.layer_norm.op import layer_norm_backward_cpu, layer_norm_cpu
from jaggedperf.ops.softmax.op import softmax_backward_cpu, softmax_cpu

pytestmark = pytest.mark.gpu

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PUBLIC = {"softmax": jaggedperf.jagged_softmax, "layer_norm": jaggedperf.jagged_layer_norm}
SHAPES = FAMILY_SHAPES


def batch(case, dtype, offsets_dtype=torch.int64):
    b = make_batch(case, "cuda")
    return b.values.to(dtype), b.offsets.to(offsets_dtype), b.max_seqlen


def reference(family, values, offsets):
    # kept on the device, where assert_close then compares
    v = values.double()
    return softmax_cpu(v, offsets) if family == "softmax" else layer_norm_cpu(v, offsets, EPS)


def reference_backward(family, values, offsets, grad):
    v, g = values.double(), grad.double()
    out = softmax_cpu(v, offsets) if family == "softmax" else None
    return softmax_backward_cpu(out, g, offsets) if family == "softmax" else layer_norm_backward_cpu(v, g, offsets, EPS)


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: c.label)
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("family", FAMILIES)
def test_forward_matches_float64_with_and_without_max_seqlen(family, dtype, case):
    values, offsets, longest = batch(case, dtype)
    ref = reference(family, values, offsets)
    for hint in (longest, None, 1):
        out = PUBLIC[family](values, offsets, max_seqlen=hint)
        assert_close(out, ref, dtype, what=f"{family} max_seqlen={hint}")
    # the operator (dispatcher + launch) agrees bitwise with the public fast path; repeated calls too
    fast = PUBLIC[family](values, offsets, max_seqlen=longest)
    op = getattr(torch.ops.jaggedperf, f"jagged_{family}")
    via_op = op(values, offsets, longest) if family == "softmax" else op(values, offsets, EPS, longest)
    assert torch.equal(via_op.view(torch.uint8), fast.view(torch.uint8))
    assert torch.equal(PUBLIC[family](values, offsets, max_seqlen=longest).view(torch.uint8), fast.view(torch.uint8))


@pytest.mark.parametrize("case", shape_params(SHAPES[:5]), ids=lambda c: c.label)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_backward_matches_float64(family, dtype, case):
    values, offsets, longest = batch(case, dtype, torch.int32)
    grad = torch.randn(values.shape, device="cuda").to(dtype)
    ref = reference_backward(family, values, offsets, grad)
    for hint in (longest, None):
        v = values.clone().requires_grad_(True)
        PUBLIC[family](v, offsets, max_seqlen=hint).backward(grad)
        assert_close(v.grad, ref, dtype, what=f"{family} grad max_seqlen={hint}",
                     **({} if dtype == torch.float32 else {"atol": 2 * RTOL[dtype]}))


@pytest.mark.parametrize("family", FAMILIES)
def test_compile_fullgraph_dynamic_without_recompiling(family):
    """New B, total length and max_seqlen reuse the compiled code; a new width M compiles once more (the
    column tile is chosen from M, so M is specialized, as the sum/mean op's is) and is reused after."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    fn = PUBLIC[family]
    compiled = torch.compile(lambda v, o: fn(v, o) * 2, fullgraph=True, dynamic=True, backend=counter)
    frames = []
    same_width = (SHAPES[0], SHAPES[1], Case(7, 64, 50, 0.5, "heavy"))  # M = 64 throughout
    for case in (*same_width, SHAPES[3], Case(9, 3, 40, 0.5, "heavy")):  # then M = 3, twice
        values, offsets, _ = batch(case, torch.bfloat16)
        assert_close(compiled(values, offsets), 2 * reference(family, values, offsets), torch.bfloat16)
        frames.append(counter.frame_count)
    assert frames[1:3] == frames[:1] * 2, frames
    assert frames[3] == frames[4] and frames[3] - frames[0] <= 1, frames  # M = 3: at most one compile, reused


def replayed_on_new_values(family, values, offsets, longest):
    """The family's call captured in a CUDA graph on a copy of ``values``, replayed after the copy took new values:
    (that output, the copy)."""
    static = values.clone()
    fn = PUBLIC[family]
    fn(static, offsets, max_seqlen=longest)  # compile and verify the launch tier outside the capture
    fn(static, offsets, max_seqlen=longest)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(static, offsets, max_seqlen=longest)
    static.copy_(values * 3 - 1)
    graph.replay()
    torch.cuda.synchronize()
    return out, static


@pytest.mark.parametrize("family", FAMILIES)
def test_cuda_graph_capture_and_replay_on_new_values(family):
    values, offsets, longest = batch(SHAPES[1], torch.float32)
    out, static = replayed_on_new_values(family, values, offsets, longest)
    assert_close(out, reference(family, static, offsets), torch.float32)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_split_under_compile_and_in_a_cuda_graph(family):
    # few long sequences: both forwards split each one over parts (two launches and a workspace inside the operator;
    # the layer norm's backward three); compiled with autograd, then captured and replayed on new values
    from jaggedperf.ops import testing

    values, offsets, longest = batch(Case(4, 256, 4000, 0.0, "fixed"), torch.float32)  # 4 programs, 250 tiles each
    plan = (testing.plan_softmax(values, offsets, max_seqlen=longest) if family == "softmax" else
            testing.plan_layer_norm(values, offsets, EPS, max_seqlen=longest))
    assert plan.launches[0].key[0] in ("softmax_stats", "ln_moments"), plan.launches[0].key
    torch._dynamo.reset()
    fn = PUBLIC[family]
    compiled = torch.compile(lambda v, o, n: fn(v, o, max_seqlen=n) * 2, fullgraph=True, dynamic=True)
    leaf = values.clone().requires_grad_(True)
    out = compiled(leaf, offsets, longest)
    assert_close(out.detach(), 2 * reference(family, values, offsets), torch.float32)
    grad = torch.randn_like(values)
    out.backward(grad)
    assert_close(leaf.grad, reference_backward(family, values, offsets, 2 * grad), torch.float32)
    captured, static = replayed_on_new_values(family, values, offsets, longest)
    assert_close(captured, reference(family, static, offsets), torch.float32)


@pytest.mark.parametrize("family", FAMILIES)
def test_nested_tensor_in_and_out(family):
    values, offsets, longest = batch(SHAPES[0], torch.bfloat16)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, max_seqlen=longest)
    out = PUBLIC[family](nt)
    assert out.is_nested and out.shape == nt.shape
    assert_close(out.values(), reference(family, values, offsets), torch.bfloat16)


@pytest.mark.parametrize("path", ["production", "small-tiles", "split", "public"])
def test_layer_norm_backward_stable_with_a_large_mean_and_a_gradient_off_zero(path):
    # The CPU/interpreter test's case (tests/ops) on the compiled kernels: x with mean 1e4 and std 1 (fp32's mean
    # is off by ~1e-3, shifting every x̂ of a segment alike), g with mean 3 and a part correlated with x. The
    # one-program kernel merges each tile's co-moment (production tile: 2 tiles for the 1,000-row segment; the
    # 4-row tile: 250), the split subtracts mean(g)·Σ x̂ over 4 parts; the public call routes as it does
    from jaggedperf.ops import testing

    values, offsets = make([40, 3, 0, 200, 1000], 8, torch.float32)
    grad = (torch.randn(values.shape, generator=torch.Generator().manual_seed(1)) + 3.0 + 0.5 * values).cuda()
    values, offsets = values.cuda() + 1e4, offsets.cuda()
    if path == "public":
        leaf = values.clone().requires_grad_(True)
        jaggedperf.jagged_layer_norm(leaf, offsets, max_seqlen=1000).backward(grad)
        out = leaf.grad
    elif path == "split":
        planned = testing.plan_layer_norm_backward_parts(values, grad, offsets, EPS, parts=4)
        planned.out.fill_(float("nan"))
        testing.run_direct(planned.launches)
        out = planned.out
    else:
        out = run_backward("layer_norm", values, offsets, grad, cfg=TileConfig(4, 8, 1) if path == "small-tiles" else None)
    # the error left is x̂'s own: x in fp32 carries ~1e-3 of absolute rounding at 1e4
    assert_close(out, reference_backward("layer_norm", values, offsets, grad), torch.float32, rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("op,case", [(op, case) for op in family_bench.OPS for case in family_bench.BAR_CASES],
                         ids=lambda v: v if isinstance(v, str) else v.label)
def test_inductor_padded_peer_matches_float64(op, case):
    # The family bars' Inductor peer, checked here in the parallel pass: its compile (max-autotune, 20-50 s a shape)
    # then fills the run's Inductor cache (scripts/test.sh: one directory for both passes), and the timed bars load it.
    ok, rel, reason = family_bench.check_inductor_padded(op, case)
    assert ok, f"Inductor's padded {op}: relative error {rel:.2e} {reason}"
