"""jagged_softmax and jagged_layer_norm against float64 references (a plain loop over sequences calling
torch.softmax / torch.layer_norm, unlike the kernels): the CPU operators, and under TRITON_INTERPRET=1 the
Triton kernels themselves (one tile per segment, and tiny forced tiles so the looping passes run), outputs
poisoned with NaN so an unwritten element fails; opcheck, gradcheck, torch.compile, NJT in and out, bad inputs."""

from __future__ import annotations

import pytest
import torch
from helpers.family import (BF16, CASES, EPS, FAMILIES, FP32, IDS, assert_close, backward_tolerance,
                            make, reference, reference_backward, run_backward, run_forward)
from helpers.interpret import INTERPRET as INTERPRETING
from helpers.interpret import needs_interpreter
from helpers.reference import lengths_to_offsets

from jaggedperf.ops import testing
from jaggedperf.ops.layer_norm.plan import plan_layer_norm, plan_layer_norm_backward, split_parts
from jaggedperf.ops.softmax.plan import plan_softmax, plan_softmax_backward

# --- the kernels and the CPU operators against the references --------------------------------

import jaggedperf  # noqa: E402
from jaggedperf.ops.tiles import LEAN, TileConfig, tile_config  # noqa: E402

OPS = torch.ops.jaggedperf
PUBLIC = {"softmax": jaggedperf.jagged_softmax, "layer_norm": jaggedperf.jagged_layer_norm}
# auto tile (every case fits one), tiles shorter and narrower than the segments (the looping passes), and a tile
# from a max_seqlen that understates the lengths (1 row: every segment loops)
TILES = {"auto": {}, "l4-m4": {"cfg": TileConfig(4, 4, 1)}, "l8-m32": {"cfg": TileConfig(8, 32, 2)},
         "understated": {"max_seqlen": 1}}


@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,note", CASES, ids=IDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_cpu_operator_matches_reference(family, lengths, M, dtype, offsets_dtype, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    assert_close(PUBLIC[family](values, offsets), reference(family, values, offsets), dtype)


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,note", CASES, ids=IDS)
@pytest.mark.parametrize("tile", list(TILES))
@pytest.mark.parametrize("family", FAMILIES)
def test_triton_forward_matches_reference(family, tile, lengths, M, dtype, offsets_dtype, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    out = run_forward(family, values, offsets, **TILES[tile])
    assert_close(out, reference(family, values, offsets), dtype, what=f"{family} {tile}")


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,note", CASES[1::2], ids=IDS[1::2])
@pytest.mark.parametrize("tile", ["auto", "l4-m4", "understated"])
@pytest.mark.parametrize("family", FAMILIES)
def test_triton_backward_matches_reference(family, tile, lengths, M, dtype, offsets_dtype, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    grad = torch.randn(values.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    out = run_backward(family, values, offsets, grad, **TILES[tile])
    assert_close(out, reference_backward(family, values, offsets, grad), dtype, what=f"{family} backward {tile}",
                 **backward_tolerance(dtype))


@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,note", CASES[1::2], ids=IDS[1::2])
@pytest.mark.parametrize("family", FAMILIES)
def test_cpu_backward_matches_reference(family, lengths, M, dtype, offsets_dtype, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    grad = torch.randn(values.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    v = values.clone().requires_grad_(True)
    PUBLIC[family](v, offsets).backward(grad)
    assert_close(v.grad, reference_backward(family, values, offsets, grad), dtype, what=f"{family} grad",
                 **backward_tolerance(dtype))


@pytest.mark.parametrize("where", ["cpu", pytest.param("interp", marks=needs_interpreter),
                                   pytest.param("interp-tile", marks=needs_interpreter),
                                   pytest.param("interp-split", marks=needs_interpreter)])
def test_layer_norm_backward_stable_with_a_large_mean_and_a_gradient_off_zero(where):
    # x with mean 1e4 and std 1 (fp32's mean is off by ~1e-3, shifting every x̂ of the segment alike), g with mean 3
    # and a part correlated with x: Σ g·x̂ summed as it is carries mean(g) × that shift into every gradient. The
    # kernels take Σ (g − mean(g))·x̂ instead: the CPU kernel centres g, the one-program kernel merges each tile's
    # co-moment, a segment within one tile takes Σ d·g − mean(g)·Σ d, the split subtracts mean(g)·Σ x̂; the shift then
    # adds nothing
    values, offsets = make([40, 3, 0, 200, 1000], 8, FP32)
    grad = torch.randn(values.shape, generator=torch.Generator().manual_seed(1)) + 3.0 + 0.5 * values
    values = values + 1e4
    if where == "cpu":
        v = values.clone().requires_grad_(True)
        jaggedperf.jagged_layer_norm(v, offsets).backward(grad)
        out = v.grad
    elif where == "interp":
        out = run_backward("layer_norm", values, offsets, grad, cfg=TileConfig(4, 8, 1))  # up to 250 tiles a segment
    elif where == "interp-tile":
        out = run_backward("layer_norm", values, offsets, grad, cfg=TileConfig(256, 8, 4))  # all but one in one tile
    else:
        planned = testing.plan_layer_norm_backward_parts(values, grad, offsets, EPS, parts=4, cfg=TileConfig(4, 8, 1))
        planned.out.fill_(float("nan"))
        testing.run_direct(planned.launches)
        out = planned.out
    # the error left is x̂'s own: x in fp32 carries ~1e-3 of absolute rounding at 1e4
    assert_close(out, reference_backward("layer_norm", values, offsets, grad), FP32, rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("where", ["cpu", pytest.param("interp", marks=needs_interpreter)])
@pytest.mark.parametrize("family", FAMILIES)
def test_numerically_stable_where_the_naive_formulas_fail(family, where):
    # softmax of values near 1e4 (exp overflows without the max subtracted); layer norm of values with mean 1e4
    # and std 1 (E[x²] − E[x]² in fp32 loses the variance entirely: ulp(1e8) = 8)
    values, offsets = make([40, 3, 0, 200], 8, FP32)
    values = values + 1e4
    out = PUBLIC[family](values, offsets) if where == "cpu" else \
        run_forward(family, values, offsets, cfg=TileConfig(16, 4, 1))
    assert_close(out, reference(family, values, offsets), FP32, rtol=1e-2, atol=2e-3)


@needs_interpreter
@pytest.mark.parametrize("family", FAMILIES)
def test_triton_kernels_are_deterministic(family):
    values, offsets = make([5, 0, 170, 3, 9], 33, FP32, seed=5)
    grad = torch.randn(values.shape)
    for cfg in (None, TileConfig(8, 16, 1)):
        first = run_forward(family, values, offsets, cfg=cfg), run_backward(family, values, offsets, grad, cfg=cfg)
        again = run_forward(family, values, offsets, cfg=cfg), run_backward(family, values, offsets, grad, cfg=cfg)
        for a, b in zip(first, again):
            assert torch.equal(a.view(torch.int32), b.view(torch.int32))


@needs_interpreter
@pytest.mark.parametrize("family", FAMILIES)
def test_kernels_stay_in_bounds_on_invalid_offsets(family):
    # offsets far outside values (negative, past N, decreasing): clamped into [0, N), unspecified values, no fault
    values = torch.randn(6, 3)
    offsets = torch.tensor([0, -10**12, 10**12, 3, 2**40], dtype=torch.int64)
    for cfg in (None, TileConfig(2, 2, 1)):
        assert run_forward(family, values, offsets, cfg=cfg).shape == (6, 3)
        assert run_backward(family, values, offsets, torch.randn(6, 3), cfg=cfg).shape == (6, 3)


def test_softmax_of_a_column_of_minus_infinity_is_nan_like_torch():
    values, offsets = make([3, 4], 2, FP32)
    values[3:, 0] = float("-inf")  # sequence 1, column 0: all -inf
    values[0, 1] = float("-inf")  # sequence 0, column 1: one -inf among finite values
    expected = torch.cat([torch.softmax(values[:3], 0), torch.softmax(values[3:], 0)]).double()
    for out in (jaggedperf.jagged_softmax(values, offsets), run_forward("softmax", values, offsets)
                if INTERPRETING else None, run_forward("softmax", values, offsets, cfg=TileConfig(2, 2, 1))
                if INTERPRETING else None):
        if out is not None:
            assert_close(out, expected, FP32)





def test_tile_covers_max_seqlen_and_keeps_to_the_budget():
    assert tile_config(64, 100) == TileConfig(128, 64, 8)
    assert tile_config(64, None).block_l * 64 == tile_config(3, 10**6).block_l * 4 == 8192
    assert tile_config(1000, 5) == TileConfig(8, 256, 4)
    assert tile_config(3, 0).block_l == 1
    # the lean budget (softmax, the layer norm's backward): half the elements, 4 warps at its full size
    assert tile_config(64, 100, LEAN) == TileConfig(64, 64, 4)
    assert tile_config(64, None, LEAN).block_l * 64 == tile_config(3, 10**6, LEAN).block_l * 4 == 4096
    assert tile_config(4096, 4000, LEAN) == TileConfig(16, 256, 4)
    assert tile_config(64, 20, LEAN) == tile_config(64, 20) == TileConfig(32, 64, 4)  # below 4096: the same rule


def test_each_kernel_plans_with_its_budget_and_few_segments_take_the_wide_tile_or_the_split():
    # on the CPU the SM count is config.DEFAULT_SM_COUNT (4): 8 segments fill it, 2 do not
    values = torch.randn(800, 64, dtype=torch.float64)
    many, few = torch.arange(0, 801, 100), torch.tensor([0, 300, 800])
    launch = lambda planned: planned.launches[0]  # noqa: E731
    assert launch(plan_layer_norm(values, many, 1e-5, max_seqlen=100)).num_warps == 8  # WIDE: 128 × 64
    assert launch(plan_layer_norm(values, many, 1e-5)).key[1:] == (64, 64)  # no max_seqlen, M < 256: LEAN, 64 × 64
    # the backward: the wide tile only where it alone holds the longest sequence (65-128 rows at M = 64)
    for longest, rows in ((64, 64), (100, 128), (128, 128), (129, 64), (None, 64)):
        assert launch(plan_layer_norm_backward(values, values, many, 1e-5, max_seqlen=longest)).key[1] == rows, longest
    wide_rows = torch.randn(800, 300, dtype=torch.float64)
    assert launch(plan_layer_norm(wide_rows, many, 1e-5)).key[1:] == (32, 256)  # M >= 256: WIDE, 32 × 256
    for planned in (plan_softmax(values, many, max_seqlen=100), plan_softmax_backward(values, values, many, max_seqlen=100),
                    plan_layer_norm_backward(values, values, many, 1e-5, max_seqlen=500)):
        assert launch(planned).num_warps == 4 and launch(planned).key[1:3] == (64, 64)  # LEAN: 64 × 64
    planned = plan_softmax_backward(values, values, few, max_seqlen=500)
    assert launch(planned).num_warps == 8 and launch(planned).key[1:] == (128, 64)  # 2 programs: WIDE
    # softmax's forward there is split (test_softmax_parts.py); its one-program kernel's looping first pass: per
    # element for fewer programs than SMs, per column where they fill them
    assert launch(plan_softmax(values, few)).key[0] == "softmax_stats"
    short = torch.randn(100, 64, dtype=torch.float64)
    assert launch(plan_softmax(short, torch.tensor([0, 40, 100]))).key[-1] is True  # too short to split
    assert launch(plan_softmax(values, many)).key[-1] is False
    assert launch(plan_softmax(values, few, per_element=False)).key[-1] is False  # forced
    # 2-byte values: per element wherever a segment may outgrow the tile, even where the programs fill the GPU
    for dtype in (torch.bfloat16, torch.float16):
        narrow = values.to(dtype)
        assert launch(plan_softmax(narrow, many, max_seqlen=500)).key[-1] is True, dtype
        assert launch(plan_softmax(narrow, many)).key[-1] is True, dtype  # no max_seqlen: may loop
        assert launch(plan_softmax(narrow, many, max_seqlen=64)).key[-1] is False, dtype  # one tile (64 × 64)
        assert launch(plan_softmax(narrow, many, max_seqlen=500, per_element=False)).key[-1] is False  # forced
    parts = split_parts(values, few, 500)
    assert parts == 4  # 400 rows a sequence on average, 12 tiles of 32 rows: at most 6 parts, a power of two
    assert [step.key[0] for step in plan_layer_norm(values, few, 1e-5, max_seqlen=500).launches] == \
        ["ln_moments", "ln_parts"]
    assert [step.key[0] for step in plan_layer_norm_backward(values, values, few, 1e-5, max_seqlen=500).launches] == \
        ["ln_moments", "ln_backward_sums", "ln_backward_parts"]
    assert all(step.grid[1] == parts for step in plan_layer_norm(values, few, 1e-5, max_seqlen=500).launches)
    assert split_parts(values, torch.tensor([0, 100, 300, 500, 800])) == 0  # 4 segments fill the 4 "SMs"
    assert split_parts(values, torch.tensor([0, 800])) == 8  # ~4 programs an SM would be 16; 25 tiles allow 8
    short = torch.randn(40, 64, dtype=torch.float64)
    assert split_parts(short, torch.tensor([0, 10, 40])) == 0  # sequences shorter than two tiles: one program each
    assert split_parts(values[:192], torch.tensor([0, 96, 192])) == 0  # 3 tiles of 32 rows: one part, no split
    assert plan_layer_norm(short, torch.tensor([0, 10, 40]), 1e-5).launches[0].key[0] == "layer_norm"
    assert plan_layer_norm(values, few, 1e-5, cfg=TileConfig(8, 64, 4)).launches[0].key[0] == "layer_norm"  # forced


# --- the operators as PyTorch sees them -------------------------------------------------------


@pytest.mark.parametrize("dtype", [FP32, BF16], ids=["fp32", "bf16"])
def test_opcheck_every_operator(dtype):
    values, offsets = make([3, 0, 4, 1], 5, dtype)
    values.requires_grad_(True)
    grad = torch.randn(values.shape).to(dtype)
    out = OPS.jagged_softmax(values, offsets).detach()
    for op, args in [
        (OPS.jagged_softmax, (values, offsets)),
        (OPS.jagged_softmax, (values, offsets, 4)),
        (OPS.jagged_softmax_backward, (out, grad, offsets)),
        (OPS.jagged_layer_norm, (values, offsets, EPS)),
        (OPS.jagged_layer_norm, (values, offsets, 1e-3, 4)),
        (OPS.jagged_layer_norm_backward, (values.detach(), grad, offsets, EPS, 4)),
    ]:
        torch.library.opcheck(op, args)
    torch.library.opcheck(OPS.jagged_softmax, (torch.randn(0, 3), torch.zeros(1, dtype=torch.int32)))


@pytest.mark.parametrize("family", FAMILIES)
def test_gradcheck_of_the_cpu_path(family):
    values, offsets = make([3, 0, 4, 1, 6], 3, torch.float64)
    values.requires_grad_(True)
    fn = (lambda v: OPS.jagged_softmax(v, offsets)) if family == "softmax" else \
        (lambda v: OPS.jagged_layer_norm(v, offsets, EPS))  # noqa: E731
    assert torch.autograd.gradcheck(fn, (values,))


@pytest.mark.parametrize("family", FAMILIES)
def test_compile_fullgraph_dynamic_matches_reference_without_recompiling(family):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()  # the other family's run compiled this lambda's code object: start from none
    counter = CompileCounterWithBackend("inductor")
    fn = PUBLIC[family]
    compiled = torch.compile(lambda v, o: fn(v, o) * 2, fullgraph=True, dynamic=True, backend=counter)
    frames = []
    for lengths in ([5, 0, 7, 2, 9], [1, 3, 11, 4, 2, 2, 8, 1], [30, 2]):
        values, offsets = make(lengths, 7, FP32)
        assert_close(compiled(values, offsets), 2 * reference(family, values, offsets), FP32)
        frames.append(counter.frame_count)
    # compiled once (layer norm's first compile restarts its analysis once: a float scalar tensorified), then
    # new B and N reuse it
    assert frames[0] >= 1 and frames[1:] == frames[:1] * 2


@pytest.mark.parametrize("family", FAMILIES)
def test_compile_backward_through_the_operator(family):
    values, offsets = make([5, 1, 7], 4, FP32)
    values.requires_grad_(True)
    fn = PUBLIC[family]
    torch.compile(lambda v, o: (fn(v, o) * torch.arange(4.0)).square().sum(), fullgraph=True,
                  backend="aot_eager")(values, offsets).backward()
    eager = values.detach().clone().requires_grad_(True)
    (fn(eager, offsets) * torch.arange(4.0)).square().sum().backward()
    torch.testing.assert_close(values.grad, eager.grad)


@pytest.mark.parametrize("family", FAMILIES)
def test_nested_tensor_in_nested_tensor_out_with_its_gradient(family):
    values, offsets = make([3, 1, 5], 4, FP32)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, max_seqlen=5)
    out = PUBLIC[family](nt)
    assert out.is_nested and out.shape == nt.shape and out._maybe_max_seqlen == 5
    assert_close(out.values(), reference(family, values, offsets), FP32)
    nt = torch.nested.nested_tensor_from_jagged(values.clone(), offsets).requires_grad_(True)
    grad = torch.randn(values.shape)
    (PUBLIC[family](nt).values() * grad).sum().backward()
    assert_close(nt.grad.values(), reference_backward(family, values, offsets, grad), FP32)


@pytest.mark.parametrize("grad_mode", ["no_grad", "grad, input without grad"])
@pytest.mark.parametrize("family", FAMILIES)
def test_nested_output_shares_the_inputs_ragged_structure(family, grad_mode):
    # eagerly without a gradient to record the output is built by the NestedTensor constructor (no dispatch): it must
    # still be the input's ragged structure (its nested int: `out + nt` works) with its cached seqlens
    values, offsets = make([3, 1, 5, 0], 4, FP32)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, min_seqlen=0, max_seqlen=5)
    with torch.no_grad() if grad_mode == "no_grad" else torch.enable_grad():
        out = PUBLIC[family](nt)
    assert out.shape == nt.shape and (out + nt).shape == nt.shape
    assert out._maybe_max_seqlen == 5 and out._maybe_min_seqlen == 0 and not out.requires_grad
    assert_close(out.values(), reference(family, values, offsets), FP32)


# --- bad inputs: jagged_mean's checks, classes and messages ------------------------------------

V = torch.randn(6, 3)
O = lengths_to_offsets([2, 4])
BAD = [
    ("values-not-tensor", ([[1.0]], O), {}, TypeError, "values and offsets must be torch.Tensor"),
    ("values-1d", (torch.randn(6), O), {}, ValueError, "values must be 2-D"),
    ("offsets-2d", (V, O[None]), {}, ValueError, "offsets must be 1-D"),
    ("offsets-float", (V, O.float()), {}, TypeError, "offsets must be int32 or int64"),
    ("offsets-empty", (V, O[:0]), {}, ValueError, "offsets must hold B\\+1 >= 1"),
    ("values-fp64", (V.double(), O), {}, TypeError, "values dtype torch.float64"),
    ("offsets-missing", (V,), {}, TypeError, "offsets is required"),
    ("max-seqlen", (V, O), {"max_seqlen": -1}, ValueError, "max_seqlen must be None or an int"),
    ("meta-device", (V, O.to("meta")), {}, ValueError, "offsets must be on the same device"),
    ("first-not-zero", (V, torch.tensor([1, 3, 6])), {"validate": True}, ValueError, "offsets\\[0\\] must be 0"),
    ("last-short", (V, torch.tensor([0, 2, 5])), {"validate": True}, ValueError, "offsets\\[-1\\] must equal"),
]


@pytest.mark.parametrize("name,args,kwargs,exc,match", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("family", FAMILIES)
def test_bad_inputs_raise_like_jagged_mean(family, name, args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        PUBLIC[family](*args, **kwargs)
    with pytest.raises(exc, match=match):
        jaggedperf.jagged_mean(*args, **kwargs)


@pytest.mark.parametrize("eps", [-1.0, float("nan"), "1e-5", True])
def test_layer_norm_rejects_a_bad_eps(eps):
    with pytest.raises(ValueError, match="eps must be a finite float >= 0"):
        jaggedperf.jagged_layer_norm(V, O, eps=eps)


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_of_zero_and_all_empty_sequences_give_empty_results(family):
    for lengths in ([], [0, 0]):
        values, offsets = make(lengths, 5, BF16, torch.int32)
        out = PUBLIC[family](values, offsets, validate=True)
        assert out.shape == (0, 5) and out.dtype == BF16


@needs_interpreter
@pytest.mark.parametrize("per_element", [True, False], ids=["per_element", "per_column"])
@pytest.mark.parametrize("trend", ["rising", "falling"])
def test_softmax_looping_pass_rescales_as_the_max_moves_between_tiles(trend, per_element):
    # a 37-row sequence in 4-row tiles whose values climb (or fall) by 50 a row: each tile element's running max
    # changes at every tile (rising) or never after the first (falling), and its sum is rescaled by up to e^-200;
    # a column of -inf in the first tiles then finite values, and a finite first row then -inf, in the same segment
    values, offsets = make([37, 5], 3, FP32, seed=3)
    ramp = torch.arange(37, dtype=torch.float32) * 50.0
    values[:37, 0] += ramp if trend == "rising" else -ramp
    values[:20, 1] = float("-inf")
    values[1:37, 2] = float("-inf")
    expected = torch.cat([torch.softmax(values[:37].double(), 0), torch.softmax(values[37:].double(), 0)])
    assert_close(run_forward("softmax", values, offsets, cfg=TileConfig(4, 4, 1), per_element=per_element), expected,
                 FP32)


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,note", CASES, ids=IDS)
@pytest.mark.parametrize("per_element", [True, False], ids=["per_element", "per_column"])
def test_softmax_both_first_passes_match_reference(per_element, lengths, M, dtype, offsets_dtype, note):
    # the looping first pass's two variants, whatever the rule would pick for this batch (4-row tiles: most loop)
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    out = run_forward("softmax", values, offsets, cfg=TileConfig(4, 4, 1), per_element=per_element)
    assert_close(out, reference("softmax", values, offsets), dtype)
