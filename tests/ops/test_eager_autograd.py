"""The eager reverse-mode path (``api.EagerReduce``): one autograd.Function around the eager forward, whose
backward launches the expand kernel through the fast tiers (interpreted here, TRITON_INTERPRET=1) or, with
create_graph, calls the differentiable operator. Against the float64 reference."""

import pytest
import torch
from helpers.interpret import needs_interpreter
from helpers.reference import assert_matches, lengths_to_offsets, reference_expand, reference_reduce

import jaggedperf
from jaggedperf.ops.reduce import api

CASES = [([4, 0, 5], 3, torch.float32, None), ([4, 0, 5], 3, torch.float32, 5), ([0, 0, 23, 0, 1], 16, torch.bfloat16, None),
         ([2, 3, 1, 0, 7, 1], 129, torch.float32, 8), ([], 4, torch.float32, None)]
IDS = ["B3-M3-fp32", "B3-M3-fp32-hint", "B5-M16-bf16-one-holds-most", "B6-M129-fp32-hint", "B0-M4"]


@needs_interpreter
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("lengths,M,dtype,max_seqlen", CASES, ids=IDS)
def test_backward_through_the_expand_kernel_matches_reference(lengths, M, dtype, max_seqlen, mean):
    offsets = lengths_to_offsets(lengths)
    n_rows = int(offsets[-1])
    values = torch.randn(n_rows, M).to(dtype).requires_grad_()
    out = api.EagerReduce.apply(values, offsets, max_seqlen, mean, False)
    assert type(out.grad_fn).__name__ == "EagerReduceBackward"
    ref = reference_reduce(values, offsets, mean=mean)
    assert_matches(out.detach(), ref, dtype, scale=reference_reduce(values, offsets, mean=mean, absolute=True))
    grad = torch.randn(len(lengths), M).to(dtype)
    out.backward(grad)
    assert_matches(values.grad, reference_expand(grad, offsets, n_rows, mean=mean), dtype, what="grad")
    again = values.grad.clone()
    values.grad = None
    api.EagerReduce.apply(values, offsets, max_seqlen, mean, False).backward(grad)
    assert torch.equal(values.grad.view(torch.uint8), again.view(torch.uint8))  # bitwise repeat


def test_create_graph_goes_through_the_differentiable_operator():
    offsets = lengths_to_offsets([3, 0, 2])
    values = torch.randn(5, 4, dtype=torch.float64).requires_grad_()
    grad = torch.randn(3, 4, dtype=torch.float64).requires_grad_()
    out = api.EagerReduce.apply(values, offsets, None, True, False)
    (g_values,) = torch.autograd.grad(out, values, grad, create_graph=True)
    assert g_values.grad_fn is not None  # differentiable in turn: the operator's autograd
    assert_matches(g_values.detach(), reference_expand(grad, offsets, 5, mean=True), torch.float64)
    (gg,) = torch.autograd.grad(g_values.sum(), grad)
    lengths = offsets.diff().double()
    torch.testing.assert_close(gg, (lengths > 0).double()[:, None].expand(3, 4).clone())


def test_public_functions_take_it_for_eager_plain_tensors_requiring_grad(monkeypatch):
    # production takes it on CUDA (plain_eager); here the CPU stands in, its forward through the operator
    monkeypatch.setattr(api, "plain_eager", lambda values, offsets: True)
    monkeypatch.setattr(api, "_fast_ok", lambda values, offsets: False)
    offsets = lengths_to_offsets([2, 0, 3])
    values = torch.randn(5, 3, requires_grad=True)
    out = jaggedperf.jagged_mean(values, offsets, empty="zero")
    assert type(out.grad_fn).__name__ == "EagerReduceBackward"
    with torch.no_grad():
        assert jaggedperf.jagged_sum(values, offsets).grad_fn is None
    with torch.autograd.forward_ad.dual_level():  # forward mode keeps the operators
        assert type(jaggedperf.jagged_sum(values, offsets).grad_fn).__name__ != "EagerReduceBackward"


def test_cpu_default_still_uses_the_operators():
    offsets = lengths_to_offsets([2, 3])
    values = torch.randn(5, 3, requires_grad=True)
    out = jaggedperf.jagged_sum(values, offsets)
    assert type(out.grad_fn).__name__ != "EagerReduceBackward"
    out.sum().backward()
    torch.testing.assert_close(values.grad, torch.ones(5, 3))


@needs_interpreter
@pytest.mark.parametrize("max_seqlen", [None, 5, 2], ids=["chunks", "segments", "understated"])
def test_backward_through_the_fast_tiers_when_the_native_path_has_no_plan(monkeypatch, max_seqlen):
    # CUDA's eager backward before the native path holds its plan (api._fast_expand): planned, launched through the
    # fast tiers (interpreted here, on the CPU standing in for CUDA), a broadcast gradient (out.sum()'s, stride 0)
    # made contiguous first
    from jaggedperf.ops.launch import native

    monkeypatch.setattr(api, "plain_eager", lambda values, offsets: True)
    monkeypatch.setattr(native, "active", None)
    monkeypatch.setattr(native, "offering", lambda: False)
    grads = []
    fast_expand = api._fast_expand
    monkeypatch.setattr(api, "_fast_expand", lambda grad, *args: grads.append(grad.stride()) or fast_expand(grad, *args))
    offsets = lengths_to_offsets([4, 0, 5])
    values = torch.randn(9, 3, requires_grad=True)
    api.EagerReduce.apply(values, offsets, max_seqlen, True, False).sum().backward()
    assert grads == [(0, 0)]  # taken, with autograd's broadcast gradient
    assert_matches(values.grad, reference_expand(torch.ones(3, 3), offsets, 9, mean=True), torch.float32, what="grad")
