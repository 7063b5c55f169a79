"""The operators as PyTorch sees them: opcheck, gradcheck, torch.compile (fullgraph, dynamic)."""

import pytest
import torch
from helpers.reference import assert_matches, lengths_to_offsets, reference_reduce
from torch._dynamo.testing import CompileCounter, CompileCounterWithBackend

import jaggedperf

OPS = torch.ops.jaggedperf


def _batch(lengths, M, dtype=torch.float32, requires_grad=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    offsets = lengths_to_offsets(lengths)
    values = torch.randn(int(offsets[-1]), M, generator=gen).to(dtype).requires_grad_(requires_grad)
    return values, offsets


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_opcheck_every_operator(dtype):
    values, offsets = _batch([3, 0, 4, 1], 5, dtype, requires_grad=True)
    grad = torch.randn(4, 5).to(dtype).requires_grad_(True)
    # (opcheck compares with assert_close, which treats NaN as unequal: empties use empty_zero here)
    for op, args in [
        (OPS.jagged_sum, (values, offsets)),
        (OPS.jagged_mean, (values, offsets, True)),
        (OPS.jagged_expand, (grad, offsets, values.shape[0], False)),
        (OPS.jagged_expand, (grad, offsets, values.shape[0], True)),
        (OPS.jagged_sum, (values, offsets, 4)),
        (OPS.jagged_mean, (values, offsets, True, 4)),
        (OPS.jagged_expand, (grad, offsets, values.shape[0], True, 4)),
    ]:
        torch.library.opcheck(op, args)
    no_empty = lengths_to_offsets([3, 2, 4])
    torch.library.opcheck(OPS.jagged_mean, (torch.randn(9, 5, dtype=dtype, requires_grad=True), no_empty, False))


def test_opcheck_int32_offsets_and_empty_batch():
    torch.library.opcheck(OPS.jagged_sum, (torch.randn(6, 3, requires_grad=True), lengths_to_offsets([2, 4], torch.int32)))
    torch.library.opcheck(OPS.jagged_sum, (torch.randn(0, 3), torch.zeros(1, dtype=torch.int64)))


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_gradcheck_and_gradgradcheck_of_the_cpu_path(op):
    values, offsets = _batch([3, 0, 4, 1, 6], 3, torch.float64, requires_grad=True)
    if op == "sum":
        fn = lambda v: OPS.jagged_sum(v, offsets)  # noqa: E731
    else:
        fn = lambda v: OPS.jagged_mean(v, offsets, True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (values,))
    assert torch.autograd.gradgradcheck(fn, (values,))


def test_compile_fullgraph_matches_eager():
    values, offsets = _batch([5, 0, 7, 2, 9], 6)

    def f(v, o):
        return jaggedperf.jagged_mean(v, o, empty="zero") * 2 + jaggedperf.jagged_sum(v, o)

    compiled = torch.compile(f, fullgraph=True)
    out = compiled(values, offsets)
    ref = 2 * reference_reduce(values, offsets, mean=True, empty_zero=True) + reference_reduce(values, offsets, mean=False)
    assert_matches(out, ref, torch.float32, scale=ref.abs() + 1)


def test_compile_dynamic_does_not_recompile_when_b_and_total_length_change():
    counter = CompileCounterWithBackend("aot_eager")
    M = 7  # never equal to any B+1 or N below (duck sizing would tie them)

    @torch.compile(fullgraph=True, dynamic=True, backend=counter)
    def f(v, o):
        return jaggedperf.jagged_mean(v, o)

    for lengths in ([3, 4, 2, 9], [1, 0, 5, 8, 2, 2, 3, 11, 4], [20, 30], [2] * 40):
        values, offsets = _batch(lengths, M)
        out = f(values, offsets)
        ref = reference_reduce(values, offsets, mean=True)
        assert_matches(out, ref, torch.float32, scale=ref.abs() + 1)
    assert counter.frame_count == 1


def test_compile_backward_through_the_operator():
    values, offsets = _batch([5, 1, 7], 4, requires_grad=True)
    f = torch.compile(lambda v, o: jaggedperf.jagged_mean(v, o).square().sum(), fullgraph=True, backend="aot_eager")
    f(values, offsets).backward()
    eager = values.detach().clone().requires_grad_(True)
    jaggedperf.jagged_mean(eager, offsets).square().sum().backward()
    torch.testing.assert_close(values.grad, eager.grad)


def test_compile_counter_sees_one_graph_with_the_op():
    counter = CompileCounter()
    values, offsets = _batch([3, 4], 5)
    torch.compile(lambda v, o: jaggedperf.jagged_sum(v, o) + 1, fullgraph=True, backend=counter)(values, offsets)
    assert counter.frame_count == 1 and counter.op_count >= 2
