"""jagged_sum / jagged_mean against the float64 reference: the CPU operator path and, under
TRITON_INTERPRET=1, the Triton kernels themselves (default chunking and tiny forced chunks, so the
split/combine path runs), with outputs and workspace poisoned so an unwritten element fails."""

import pytest
import torch
from helpers.interpret import needs_interpreter
from helpers.reduce_cases import CASES, IDS, expected, make
from helpers.reference import assert_matches, lengths_to_offsets, reference_expand

import jaggedperf
from jaggedperf.ops import config
from jaggedperf.ops.config import SegmentsConfig
from jaggedperf.ops import nested, testing
from jaggedperf.ops.reduce import kernels, merge, plan

FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16

@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES, ids=IDS)
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_cpu_operator_matches_reference(op, lengths, M, dtype, offsets_dtype, empty, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    mean, empty_zero = op == "mean", empty == "zero"
    out = jaggedperf.jagged_mean(values, offsets, empty=empty) if mean else jaggedperf.jagged_sum(values, offsets)
    ref, scale = expected(values, offsets, mean, empty_zero)
    assert_matches(out, ref, dtype, scale=scale)


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES, ids=IDS)
@pytest.mark.parametrize("chunk", [None, 1, 4], ids=["chunk-auto", "chunk1", "chunk4"])
def test_triton_kernels_match_reference(chunk, lengths, M, dtype, offsets_dtype, empty, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    for mean in (False, True):
        empty_zero = empty == "zero"
        # poison with NaN where a NaN answer is impossible, else with a wrong finite value
        poison = 12345.0 if (mean and not empty_zero) else float("nan")
        out = testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, rows_per_chunk=chunk,
                                   poison=poison)
        ref, scale = expected(values, offsets, mean, empty_zero)
        assert_matches(out, ref, dtype, scale=scale, what=f"{'mean' if mean else 'sum'} chunk={chunk}")


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES, ids=IDS)
@pytest.mark.parametrize("block_p,combine_warps", [(2, 0), (128, 4)], ids=["p2", "p128-w4"])
def test_combine_of_many_pieces_matches_reference(block_p, combine_warps, lengths, M, dtype, offsets_dtype, empty,
                                                  note):
    # one-row chunks: every segment longer than a row is combined from its pieces, fewer than a tile of them
    # (p128) or many tiles (p2); the combine's own warps
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    with testing.override(block_p=block_p, combine_warps=combine_warps):
        for mean in (False, True):
            empty_zero = empty == "zero"
            poison = 12345.0 if (mean and not empty_zero) else float("nan")
            out = testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, rows_per_chunk=1,
                                       poison=poison)
            ref, scale = expected(values, offsets, mean, empty_zero)
            assert_matches(out, ref, dtype, scale=scale, what=f"{'mean' if mean else 'sum'} p{block_p}")


SEGMENT_CONFIGS = [SegmentsConfig(1, 4, 4, 1), SegmentsConfig(4, 8, 32, 2), SegmentsConfig(2, 64, 128, 4),
                   SegmentsConfig(2, 4, 4, 1, programs=3), SegmentsConfig(4, 8, 32, 2, programs=1)]
SEGMENT_IDS = ["g1-l4-m4", "g4-l8-m32", "g2-l64-m128", "loop3-g2-l4-m4", "loop1-g4-l8-m32"]


@needs_interpreter
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES, ids=IDS)
@pytest.mark.parametrize("cfg", SEGMENT_CONFIGS, ids=SEGMENT_IDS)
def test_whole_segments_kernel_matches_reference(cfg, lengths, M, dtype, offsets_dtype, empty, note):
    # groups that straddle B, tiles shorter than a segment (the loop), column blocks narrower than M; the
    # looping kernel with fewer programs than groups (each program takes every 3rd group, or all of them)
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    for mean in (False, True):
        empty_zero = empty == "zero"
        poison = 12345.0 if (mean and not empty_zero) else float("nan")
        out = testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, segments=cfg, poison=poison)
        ref, scale = expected(values, offsets, mean, empty_zero)
        assert_matches(out, ref, dtype, scale=scale, what=f"{'mean' if mean else 'sum'} {cfg}")


@needs_interpreter
def test_whole_segments_kernel_stays_in_bounds_on_invalid_offsets():
    # offsets that point far outside values (negative, past N, decreasing): unspecified values, no fault
    values = torch.randn(6, 3)
    offsets = torch.tensor([0, -10**12, 10**12, 3, 2**40], dtype=torch.int64)
    for cfg in SEGMENT_CONFIGS[1], SEGMENT_CONFIGS[3]:
        out = testing.launch_reduce(values, offsets, mean=True, segments=cfg)
        assert out.shape == (4, 3)
        grad_values = testing.launch_expand(out.nan_to_num(), offsets, 6, mean=True, segments=cfg)
        assert grad_values.shape == (6, 3)


@needs_interpreter
def test_known_max_seqlen_picks_the_whole_segments_kernel_and_stays_correct():
    lengths = [3, 0, 7, 1, 0, 5, 2]
    values, offsets = make(lengths, 5, FP32, torch.int64, seed=11)
    launches = plan.plan_reduce(values, offsets, mean=True, empty_zero=False, max_seqlen=max(lengths)).launches
    assert [launch.kernel for launch in launches] == [kernels._segments_kernel]
    launches = plan.plan_reduce(values, offsets, mean=True, empty_zero=False).launches
    assert [launch.kernel for launch in launches] == [merge._merge_reduce_kernel, merge._merge_combine_kernel]
    # too few segments to fill the (4 interpreter) SMs, or too long, and not skewed: the balanced chunks
    few, few_offsets = make([30, 2], 5, FP32, torch.int64, seed=12)
    launches = plan.plan_reduce(few, few_offsets, mean=True, empty_zero=False, max_seqlen=30).launches
    assert [launch.kernel for launch in launches] == [kernels._reduce_kernel, kernels._combine_kernel]
    out = testing.launch_reduce(few, few_offsets, mean=True, max_seqlen=30, poison=float("nan"))
    ref, scale = expected(few, few_offsets, True, False)
    assert_matches(out, ref, FP32, scale=scale, what="the balanced chunks with max_seqlen")
    # a max_seqlen that understates the truth costs time, never correctness
    for hint in (max(lengths), 1):
        out = testing.launch_reduce(values, offsets, mean=True, max_seqlen=hint, poison=float("nan"))
        ref, scale = expected(values, offsets, True, False)
        assert_matches(out, ref, FP32, scale=scale, what=f"max_seqlen={hint}")


def test_max_seqlen_far_past_the_mean_length_or_at_most_one_takes_the_merge_path():
    # the whole-segments kernels size their tiles by max_seqlen: where it is >= 8 × N / B (with B >= 16384 forward)
    # or <= 1, the merge path runs (any choice is correct; this one is measured, docs/performance.md)
    def kernel(n_rows, n_segments, max_seqlen, backward=False):
        values = torch.empty(n_rows, 16, device="meta")
        offsets = torch.empty(n_segments + 1, dtype=torch.int64, device="meta")
        if backward:
            grad = torch.empty(n_segments, 16, device="meta")
            return plan.plan_expand(grad, offsets, n_rows, mean=False, max_seqlen=max_seqlen).launches[0].kernel
        return plan.plan_reduce(values, offsets, mean=False, empty_zero=False, max_seqlen=max_seqlen).launches[0].kernel

    assert kernel(10**6, 10**6, 1) is merge._merge_reduce_kernel  # all ones
    assert kernel(800_000, 10**6, 32) is merge._merge_reduce_kernel  # 95% empty
    whole = (kernels._segments_kernel, kernels._segments_loop_kernel)
    assert kernel(800_000, 100_000, 12) in whole  # narrow, even lengths
    assert kernel(50_000, 4096, 400) in whole  # heavy tail, few segments: forward keeps it ...
    assert kernel(50_000, 4096, 400, backward=True) is merge._merge_expand_kernel  # ... the backward does not
    assert kernel(256 * 10_000, 256, 20_000) is kernels._reduce_kernel  # long even rows: the balanced chunks
    assert kernel(40_000, 512, 100, backward=True) is kernels._segments_expand_kernel


@needs_interpreter
def test_many_small_groups_take_the_looping_kernel_and_stay_correct():
    # 16 columns, sequences of <= 64 rows: 8 segments a group; 1100 segments = 138 groups >= 4 per program for
    # the 32 programs of the 4 interpreter SMs (a max_seqlen that overstates the lengths is only a bound)
    gen = torch.Generator().manual_seed(21)
    lengths = torch.randint(0, 4, (1100,), generator=gen).tolist()
    values, offsets = make(lengths, 16, FP32, torch.int32, seed=21)
    launches = plan.plan_reduce(values, offsets, mean=True, empty_zero=True, max_seqlen=64).launches
    assert [launch.kernel for launch in launches] == [kernels._segments_loop_kernel]
    assert launches[0].grid == (32, 1, 1)
    out = testing.launch_reduce(values, offsets, mean=True, empty_zero=True, max_seqlen=64, poison=float("nan"))
    ref, scale = expected(values, offsets, True, True)
    assert_matches(out, ref, FP32, scale=scale)
    # a third of the segments: one program a group again
    launches = plan.plan_reduce(values[: int(offsets[367])], offsets[:368], mean=True, empty_zero=True,
                                max_seqlen=64).launches
    assert [launch.kernel for launch in launches] == [kernels._segments_kernel]


@needs_interpreter
@pytest.mark.parametrize("chunk,segments", [(None, None), (3, None), (None, SEGMENT_CONFIGS[0]),
                                            (None, SEGMENT_CONFIGS[1])], ids=["chunk-auto", "chunk3", *SEGMENT_IDS[:2]])
@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES[::2], ids=IDS[::2])
def test_triton_backward_kernel_matches_reference(chunk, segments, lengths, M, dtype, offsets_dtype, empty, note):
    _, offsets = make(lengths, M, dtype, offsets_dtype)
    n_rows = int(offsets[-1])
    grad = torch.randn(len(lengths), M).to(dtype)
    for mean in (False, True):
        out = testing.launch_expand(grad, offsets, n_rows, mean=mean, rows_per_chunk=chunk, segments=segments,
                                   poison=float("nan"))
        ref = reference_expand(grad, offsets, n_rows, mean=mean)
        assert_matches(out, ref, dtype, what=f"expand mean={mean}")


@pytest.mark.parametrize("lengths,M,dtype,offsets_dtype,empty,note", CASES[::2], ids=IDS[::2])
def test_cpu_backward_matches_reference(lengths, M, dtype, offsets_dtype, empty, note):
    values, offsets = make(lengths, M, dtype, offsets_dtype)
    grad = torch.randn(len(lengths), M).to(dtype)
    for mean in (False, True):
        v = values.clone().requires_grad_(True)
        out = jaggedperf.jagged_mean(v, offsets, empty="zero") if mean else jaggedperf.jagged_sum(v, offsets)
        out.backward(grad)
        ref = reference_expand(grad, offsets, values.shape[0], mean=mean)
        assert_matches(v.grad, ref, dtype, what=f"grad mean={mean}")


@needs_interpreter
def test_many_chunks_inside_one_segment_and_many_segments_per_chunk():
    # one segment spanning > BLOCK_P (32) chunks forces several combine tiles; short ones share chunks
    lengths = [2, 1, 0, 3, 70, 1, 1, 0, 2]
    values, offsets = make(lengths, 2, FP32, torch.int64, seed=3)
    for chunk in (1, 2):
        out = testing.launch_reduce(values, offsets, mean=True, empty_zero=True, rows_per_chunk=chunk, poison=float("nan"))
        ref, scale = expected(values, offsets, True, True)
        assert_matches(out, ref, FP32, scale=scale)


@needs_interpreter
@pytest.mark.parametrize("chunk,segments", [(None, None), (2, None), (None, SEGMENT_CONFIGS[1])])
def test_triton_kernels_are_deterministic(chunk, segments):
    values, offsets = make([5, 0, 17, 3, 9], 33, FP32, torch.int64, seed=5)
    first = testing.launch_reduce(values, offsets, mean=True, rows_per_chunk=chunk, segments=segments)
    for _ in range(2):
        again = testing.launch_reduce(values, offsets, mean=True, rows_per_chunk=chunk, segments=segments)
        assert torch.equal(first.view(torch.int32), again.view(torch.int32))


def test_cpu_operator_is_deterministic():
    values, offsets = make([50, 0, 170, 3, 900], 33, BF16, torch.int64, seed=5)
    first = jaggedperf.jagged_sum(values, offsets)
    for _ in range(3):
        assert torch.equal(first.view(torch.int16), jaggedperf.jagged_sum(values, offsets).view(torch.int16))


@pytest.mark.parametrize("where", ["cpu", pytest.param("interp", marks=needs_interpreter)])
def test_nan_and_inf_propagate_like_torch_mean(where):
    values, offsets = make([3, 4, 2, 0], 4, FP32, torch.int64)
    values[1, 0] = float("nan")  # segment 0
    values[4, 2] = float("inf")  # segment 1
    if where == "cpu":
        out = jaggedperf.jagged_mean(values, offsets)
    else:
        out = testing.launch_reduce(values, offsets, mean=True, rows_per_chunk=2)
    torch_mean = torch.stack([values[int(a):int(b)].mean(0) for a, b in zip(offsets[:-1], offsets[1:])])
    assert torch.equal(torch.isnan(out), torch.isnan(torch_mean))
    assert torch.equal(torch.isinf(out), torch.isinf(torch_mean))
    assert out[1, 2] == float("inf")


def test_non_contiguous_values_are_made_contiguous():
    values, offsets = make([3, 0, 5], 6, FP32, torch.int64)
    wide = torch.randn(values.shape[0], 12)
    wide[:, ::2] = values
    view = wide[:, ::2]
    assert not view.is_contiguous()
    ref, scale = expected(values, offsets, True, False)
    assert_matches(jaggedperf.jagged_mean(view, offsets), ref, FP32, scale=scale)


def test_nested_tensor_input_reads_values_and_offsets_directly(monkeypatch):
    values, offsets = make([3, 1, 5], 6, FP32, torch.int64)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets)
    # the cheap attributes are used: the accessors are never called
    monkeypatch.setattr(type(nt), "values", lambda self: pytest.fail("nt.values() called"))
    monkeypatch.setattr(type(nt), "offsets", lambda self: pytest.fail("nt.offsets() called"))
    ref, scale = expected(values, offsets, True, False)
    assert_matches(jaggedperf.jagged_mean(nt), ref, FP32, scale=scale)
    ref, scale = expected(values, offsets, False, False)
    assert_matches(jaggedperf.jagged_sum(nt), ref, FP32, scale=scale)


def test_nested_tensor_input_never_enters_its_torch_function(monkeypatch):
    # each NJT __torch_function__ call costs ~10 µs of host time (is_nested, layout, dim(), ...): none on the direct path
    values, offsets = make([3, 1, 5], 6, FP32, torch.int64)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, max_seqlen=5)

    def refuse(cls, func, types, args=(), kwargs=None):
        pytest.fail(f"NestedTensor.__torch_function__ entered for {func}")

    monkeypatch.setattr(type(nt), "__torch_function__", classmethod(refuse))
    ref, scale = expected(values, offsets, True, False)
    assert_matches(jaggedperf.jagged_mean(nt), ref, FP32, scale=scale)


def test_nested_tensor_max_seqlen_reaches_the_operator_eagerly_and_compiled():
    # eagerly as a host int; under torch.compile as a SymInt (NJT keeps it as a placeholder tensor's length),
    # so compiled code can take the whole-segments kernel; no graph break, no recompile for a new max_seqlen
    values, offsets = make([3, 1, 5], 6, FP32, torch.int64)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, max_seqlen=5)
    assert nested.cached_max_seqlen(nt) == 5
    assert nested.cached_max_seqlen(torch.nested.nested_tensor_from_jagged(values, offsets)) is None
    seen = []

    def backend(gm, example_inputs):
        op = torch.ops.jaggedperf.jagged_mean
        seen.extend(node.args for node in gm.graph.nodes if node.target in (op, op.default))
        return gm

    compiled = torch.compile(lambda t: jaggedperf.jagged_mean(t), backend=backend, fullgraph=True, dynamic=True)
    ref, scale = expected(values, offsets, True, False)
    assert_matches(compiled(nt), ref, FP32, scale=scale)
    assert len(seen) == 1 and isinstance(seen[0][3], torch.fx.Node)  # max_seqlen: a graph input, not None
    longer, longer_offsets = make([2, 9, 0, 4], 6, FP32, torch.int64, seed=1)
    other = torch.nested.nested_tensor_from_jagged(longer, longer_offsets, max_seqlen=9)
    ref, scale = expected(longer, longer_offsets, True, False)
    assert_matches(compiled(other), ref, FP32, scale=scale)
    assert len(seen) == 1  # the same graph served it


def test_nested_tensor_falls_back_to_accessors_when_attributes_are_absent():
    values, offsets = make([3, 1, 5], 6, FP32, torch.int64)

    class Stripped:  # looks like a jagged NJT without the private attributes
        is_nested, layout = True, torch.jagged
        requires_grad = False

        def dim(self):
            return 3

        def values(self):
            return values

        def offsets(self):
            return offsets

    values_out, offsets_out = nested.from_nested(Stripped(), "jagged_mean")
    assert values_out is values and offsets_out is offsets


def test_nested_tensor_requiring_grad_gets_its_gradient():
    values, offsets = make([3, 1, 5], 4, FP32, torch.int64)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets).requires_grad_(True)
    jaggedperf.jagged_mean(nt).sum().backward()
    assert nt.grad is not None
    ref = reference_expand(torch.ones(3, 4), offsets, values.shape[0], mean=True)
    assert_matches(nt.grad.values(), ref, FP32)


def test_lab_implementation_is_registered():
    from jaggedperf.impls import get_implementation
    from jaggedperf.inputs import Case, make_batch

    impl = get_implementation("jagged_mean", "jaggedperf")
    batch = make_batch(Case(6, 5, 20, 0.3, "heavy"))
    out = impl.fn(*impl.prepare(batch))
    ref, scale = expected(batch.values, batch.offsets, True, False)
    assert impl.takes == "dense"
    assert_matches(out, ref, FP32, scale=scale)


def test_ops_do_not_import_the_lab():
    import ast
    import pathlib

    for path in pathlib.Path(config.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.startswith(("jaggedperf.lab", "jaggedperf.impls")) for n in names), path


@needs_interpreter
def test_galloping_search_finds_the_first_segment_at_or_after_x_from_any_hint():
    import triton
    import triton.language as tl

    @triton.jit
    def probe(offsets_ptr, xs_ptr, hints_ptr, out_ptr, n_segments):
        i = tl.program_id(0)
        x = tl.load(xs_ptr + i)
        hint = tl.load(hints_ptr + i)
        tl.store(out_ptr + i, kernels._lower_bound(offsets_ptr, n_segments, x, hint))

    gen = torch.Generator().manual_seed(0)
    for lengths in ([], [0], [4], [0, 0, 3, 0, 2, 0, 0], [1] * 9, [0, 40, 1, 1, 0, 7, 0, 0, 2, 0, 0]):
        offsets = lengths_to_offsets(lengths)
        n = int(offsets[-1])
        B = len(lengths)
        xs = torch.randint(-1, n + 2, (40,), generator=gen)
        hints = torch.randint(-3, B + 4, (40,), generator=gen)
        out = torch.empty(40, dtype=torch.int64)
        probe[(40,)](offsets, xs, hints, out, B)
        expected = torch.searchsorted(offsets[:B].contiguous(), xs, side="left") if B else torch.zeros(40, dtype=torch.int64)
        assert torch.equal(out, expected), (lengths, xs, hints, out, expected)


@needs_interpreter
def test_backward_spreads_a_long_segment_over_programs_and_stays_correct():
    # 64 columns, sequences of up to 300 rows: one segment a program in 128-row tiles; the backward spreads each
    # segment's rows over programs of EXPAND_SPLIT_ROWS rows (grid axis 2), the last one writing whatever lies past
    lengths = [300, 5, 130, 0, 257, 64, 33]
    _, offsets = make(lengths, 64, FP32, torch.int32, seed=31)
    n_rows = int(offsets[-1])
    grad = torch.randn(len(lengths), 64)
    launches = plan.plan_expand(grad, offsets, n_rows, mean=True, max_seqlen=300).launches
    assert [launch.kernel for launch in launches] == [kernels._segments_expand_kernel]
    assert launches[0].grid == (7, 1, -(-300 // config.EXPAND_SPLIT_ROWS))
    assert launches[0].args[-2] == config.EXPAND_SPLIT_ROWS  # BLOCK_L
    # a segment that fits one tile stays whole (one program, the forward's tile)
    launches = plan.plan_expand(grad, offsets, n_rows, mean=True, max_seqlen=100).launches
    assert launches[0].grid[2] == 1 and launches[0].args[-2] == 128
    for hint in (300, 200, 40):  # a max_seqlen that understates the lengths costs time, never correctness
        out = testing.launch_expand(grad, offsets, n_rows, mean=True, max_seqlen=hint, poison=float("nan"))
        assert_matches(out, reference_expand(grad, offsets, n_rows, mean=True), FP32, what=f"max_seqlen={hint}")
