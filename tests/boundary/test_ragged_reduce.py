"""A sum or mean over an NJT's ragged dim inside jaggedperf.compile (``lowering.lower_graph``): values and gradients
against float64 sums computed sequence by sequence (torch's own NJT backward raises there, eagerly and compiled), the
spellings and shapes lowered, the cases left to torch, and the graphs holding jaggedperf's operators, no padding."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._dynamo.testing import AotEagerAndRecordGraphs, CompileCounterWithBackend

import jaggedperf
from tests.boundary.njts import leaf_of_lengths, make_njt
from tests.helpers.reference import reference_expand, reference_reduce

LENGTHS = (2, 5, 0, 4, 1, 7, 3)  # an empty segment: a mean's NaN, a sum's zero, no rows to take a gradient


def njt(tail: tuple[int, ...] = (3,), dtype=torch.float32, *, max_seqlen: bool = False,
        lengths=LENGTHS) -> torch.Tensor:
    return leaf_of_lengths(lengths, tail, dtype, max_seqlen=max_seqlen)


def reference(x: torch.Tensor, mean: bool, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's float64 sum (or mean) over its rows, and the gradient of (out · weight).sum() for x's values
    (the ops' references on the values as (N, columns))."""
    values, offsets = x.detach().values(), x.offsets()
    out = reference_reduce(values.reshape(values.shape[0], -1), offsets, mean=mean)
    grad = reference_expand(weight.reshape(out.shape), offsets, values.shape[0], mean=mean)
    return out.view(-1, *values.shape[1:]), grad.view(values.shape)


SPELLINGS = {
    "sum-method": (lambda t: t.sum(dim=1), False),
    "mean-method": (lambda t: t.mean(dim=1), True),
    "sum-positional-keepdim": (lambda t: t.sum(1, True).squeeze(1), False),
    "mean-keepdim": (lambda t: t.mean(dim=1, keepdim=True).squeeze(1), True),
    "torch.mean": (lambda t: torch.mean(t, dim=1), True),
    "torch.sum-tuple": (lambda t: torch.sum(t, (1,)), False),
    "mean-negative-dim": (lambda t: t.mean(dim=-2), True),
}


def loss(out: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (torch.nan_to_num(out) * weight).sum()  # an empty segment's NaN mean carries no gradient


def assert_reference(call, x: torch.Tensor, mean: bool, weight: torch.Tensor, tol: float = 1e-5) -> torch.Tensor:
    """``call(x)`` and its gradient of x's values (loss ``loss``) against ``reference``; the output."""
    out = call(x)
    loss(out, weight).backward()
    expected_out, expected_grad = reference(x, mean, weight)
    torch.testing.assert_close(out.double(), expected_out, rtol=tol, atol=tol, equal_nan=True)
    torch.testing.assert_close(x.grad.values().double(), expected_grad, rtol=tol, atol=tol)
    return out


TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("max_seqlen", [False, True], ids=["no-max", "max"])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_the_reduction_and_its_gradient_are_the_reference(backend, spelling, max_seqlen):
    fn, mean = SPELLINGS[spelling]
    x = njt(max_seqlen=max_seqlen)
    weight = torch.randn(len(LENGTHS), 3, generator=torch.Generator().manual_seed(1))
    compiled = jaggedperf.compile(fn, backend=backend)
    assert_reference(compiled, x, mean, weight)
    assert compiled.last_fallback is None


@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=str)
@pytest.mark.parametrize("tail", [(), (2, 3)], ids=["Bj", "BjHD"])
def test_every_values_shape_and_dtype(tail, dtype):
    x = njt(tail, dtype)
    weight = torch.randn(len(LENGTHS), *tail, generator=torch.Generator().manual_seed(1)).to(dtype)
    out = assert_reference(jaggedperf.compile(lambda t: t.mean(dim=1), backend="aot_eager"), x, True, weight,
                           TOLERANCE[dtype])
    assert out.shape == (len(LENGTHS), *tail) and out.dtype == dtype


@pytest.mark.xfail(strict=True, reason="torch cannot differentiate an NJT's sum or mean over the ragged dim (its "
                   "NJT sum backward is not implemented; the mean's expands to symbolic sizes): this XPASSes once a "
                   "torch does, and lowering.py's account must change")
@pytest.mark.parametrize("spelling", ["sum-method", "mean-method"])
@pytest.mark.parametrize("way", ["eager", "torch.compile"])
def test_torch_own_gradient_over_the_ragged_dim(way, spelling):
    fn, mean = SPELLINGS[spelling]
    x = njt()
    weight = torch.randn(len(LENGTHS), 3, generator=torch.Generator().manual_seed(1))
    call = fn if way == "eager" else torch.compile(fn, backend="aot_eager")
    loss(call(x), weight).backward()
    torch.testing.assert_close(x.grad.values().double(), reference(x, mean, weight)[1])


def targets(graphs: list) -> set[str]:
    return {str(getattr(n.target, "overloadpacket", n.target)) for g in graphs for n in g.graph.nodes
            if n.op == "call_function"}


def test_the_graphs_call_the_operators_and_pad_nothing():
    backend = AotEagerAndRecordGraphs()
    x = njt()
    out = jaggedperf.compile(lambda t: t.mean(dim=1) * 2, backend=backend)(x)
    out.sum().backward()
    forward, backward = targets(backend.fw_graphs), targets(backend.bw_graphs)
    # our operators (traced into their bodies: on the CPU their opaque kernels, on CUDA their Triton launches)
    assert {"jaggedperf._reduce_torch", "triton_kernel_wrapper_functional"} & forward, forward
    assert {"jaggedperf._expand_torch", "triton_kernel_wrapper_functional"} & backward, backward
    assert not {"aten._jagged_to_padded_dense_forward", "aten._padded_dense_to_jagged_forward"} & (forward | backward)


@pytest.mark.parametrize("fn", [lambda t: t.sum(dim=2), lambda t: t.mean(dim=-1),
                                lambda t: t.sum(dim=1, dtype=torch.float64)], ids=["columns", "columns-negative", "dtype"])
def test_other_reductions_are_torch_own(fn):
    # over the columns (an NJT out) or with a dtype: torch's implementation, the graph unchanged
    x = njt()
    backend = AotEagerAndRecordGraphs()
    compiled = jaggedperf.compile(fn, backend=backend)
    with torch.no_grad():
        out, expected = compiled(x), fn(x)
    actual = out.values() if out.is_nested else out
    torch.testing.assert_close(actual, expected.values() if expected.is_nested else expected)
    lowered = {t for t in targets(backend.fw_graphs) if t.startswith("jaggedperf.")}
    assert not lowered and compiled.last_fallback is None, (lowered, compiled.last_fallback)


def test_an_integer_njt_is_torch_own():
    values = torch.arange(12).view(6, 2)
    nt = torch.nested.nested_tensor_from_jagged(values, torch.tensor([0, 2, 6]))
    out = jaggedperf.compile(lambda t: t.sum(dim=1), backend="aot_eager")(nt)
    assert out.dtype == torch.int64
    torch.testing.assert_close(out, torch.stack([values[:2].sum(0), values[2:].sum(0)]))


def test_outside_a_region_torch_compile_is_torch_own():
    # plain torch.compile on the NJT never meets the lowering: its backward still raises as torch's does
    x = njt()
    with pytest.raises(Exception):
        torch.compile(lambda t: t.sum(dim=1), backend="aot_eager")(x).sum().backward()


@pytest.mark.parametrize("cache", ["", "max", "minmax"], ids=["none", "max", "minmax"])
def test_one_graph_over_batches_of_other_sizes(cache):
    # B, total length and the cached seqlens change: the lowered graph is compiled once, and trains every time
    counter = CompileCounterWithBackend("inductor")
    compiled = jaggedperf.compile(lambda t: t.mean(dim=1) * 2, backend=counter)
    for i in range(4):
        nt, values = make_njt(4 + 3 * i, 5 + 2 * i, seed=i, min_len=1, cache=cache, requires_grad=True)
        out = compiled(nt)
        out.sum().backward()
        lengths = nt.offsets().diff()
        expected = torch.stack([v.mean(0) for v in values.split(lengths.tolist())]) * 2
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(nt.grad.values(), (2 / lengths.float()).repeat_interleave(lengths)[:, None].expand(
            values.shape))
    assert counter.frame_count == 1 and compiled.last_fallback is None


# One compiled function a spelling, shared by every drawn example: the property is that of the graph they share
# (B, lengths and trailing width change; one graph serves them, as the test above holds).
_PROPERTY_CALLS: dict[str, object] = {}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=7), width=st.sampled_from([1, 3, 5]),
       spelling=st.sampled_from(list(SPELLINGS)), max_seqlen=st.booleans())
def test_any_lengths_give_the_reference(lengths, width, spelling, max_seqlen):
    # empty and one-row sequences, odd widths, a batch of one: values and gradients of the per-sequence float64 sums
    if sum(lengths) == 0 or (max_seqlen and max(lengths) == 0):
        lengths = [*lengths[:-1], 1]
    fn, mean = SPELLINGS[spelling]
    call = _PROPERTY_CALLS.setdefault(spelling, jaggedperf.compile(fn, backend="aot_eager"))
    x = njt((width,), max_seqlen=max_seqlen, lengths=tuple(lengths))
    weight = torch.randn(len(lengths), width, generator=torch.Generator().manual_seed(len(lengths)))
    assert_reference(call, x, mean, weight)
    assert call.last_fallback is None
