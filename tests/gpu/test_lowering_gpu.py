"""The softmax over an NJT's ragged dim inside jaggedperf.compile on CUDA (``jaggedperf.boundary.lowering``): the
compiled forward and backward call jaggedperf's operators (no padding), and the values and the gradient match a
float64 reference computed sequence by sequence, with and without a cached max_seqlen, under Inductor."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs

from helpers.reference import ragged_softmax_and_grad as reference
from helpers.reference import reference_expand, reference_reduce

import jaggedperf
from jaggedperf.inputs import Case, make_batch

pytestmark = pytest.mark.gpu

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}


def batch(dtype, max_seqlen: bool) -> torch.Tensor:
    b = make_batch(Case(512, 64, 100, 0.1), "cuda")
    nt = torch.nested.nested_tensor_from_jagged(b.values.to(dtype), b.offsets,
                                                max_seqlen=b.max_seqlen if max_seqlen else None)
    return nt.detach().requires_grad_()


def output_grad(x: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(1)
    values = torch.randn(x._values.shape, generator=gen, device="cuda").to(x.dtype)
    return torch.nested.nested_tensor_from_jagged(values, x._offsets, max_seqlen=x._maybe_max_seqlen)


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=1) * 2


@pytest.mark.parametrize("max_seqlen", [False, True], ids=["no-max", "max"])
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
def test_compiled_ragged_softmax_is_the_reference(dtype, max_seqlen):
    x = batch(dtype, max_seqlen)
    compiled = jaggedperf.compile(f)
    out = compiled(x)
    out.backward(output_grad(x))
    expected_out, expected_grad = reference(x, output_grad(x))
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out._values.double(), expected_out, rtol=tol, atol=tol)
    torch.testing.assert_close(x.grad._values.double(), expected_grad, rtol=tol, atol=tol)
    assert compiled.last_fallback is None


def test_the_graphs_call_the_operators_and_pad_nothing():
    backend = AotEagerAndRecordGraphs()
    x = batch(torch.float32, max_seqlen=False)
    jaggedperf.compile(f, backend=backend)(x).backward(output_grad(x))
    ops = {str(getattr(n.target, "overloadpacket", n.target)) for g in backend.fw_graphs + backend.bw_graphs
           for n in g.graph.nodes if n.op == "call_function"}
    # the operators are traced into their bodies (triton_op): their Triton launches, no padding, no dense backward
    assert "triton_kernel_wrapper_functional" in ops, ops
    assert not {"aten._jagged_to_padded_dense_forward", "aten._softmax_backward_data", "aten.index_add"} & ops


@pytest.mark.parametrize("max_seqlen", [False, True], ids=["no-max", "max"])
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_compiled_ragged_reduction_is_the_reference(dtype, mean, max_seqlen):
    # nt.sum / nt.mean over the ragged dim, which torch cannot differentiate: jaggedperf's operators in the graph
    x = batch(dtype, max_seqlen)
    backend = AotEagerAndRecordGraphs()
    out = jaggedperf.compile(lambda t: t.mean(dim=1) if mean else t.sum(dim=1), backend=backend)(x)
    weight = torch.randn(out.shape, generator=torch.Generator(device="cuda").manual_seed(2), device="cuda")
    (out * weight.to(dtype)).sum().backward()
    expected = reference_reduce(x.detach().values(), x.offsets(), mean=mean)
    expected_grad = reference_expand(weight.to(dtype), x.offsets(), x.values().shape[0], mean=mean)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double().cpu(), expected, rtol=tol, atol=tol)
    torch.testing.assert_close(x.grad.values().double().cpu(), expected_grad, rtol=tol, atol=tol)
    ops = {str(getattr(n.target, "overloadpacket", n.target)) for g in backend.fw_graphs + backend.bw_graphs
           for n in g.graph.nodes if n.op == "call_function"}
    assert "triton_kernel_wrapper_functional" in ops and "aten._jagged_to_padded_dense_forward" not in ops, ops
