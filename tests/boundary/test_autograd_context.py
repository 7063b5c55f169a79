"""jaggedperf.compile inside the caller's autograd context: NJT arguments that are views of one tensor, grad mode
changed inside ``fn``, activation checkpointing around it. Each gives eager mode's values and gradients (or, where the
components cannot, the one fallback to torch.compile(fn) with its warning), never a silent difference.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import jaggedperf
from jaggedperf.boundary import BoundaryFallbackWarning
from tests.boundary.njts import assert_close

OFFSETS = torch.tensor([0, 3, 8, 9, 13])



# fn returns a view of its second NJT argument (or the argument itself): its gradient must reach that argument's
# columns of the shared tensor, not the first argument's
VIEWS_OF_THE_SECOND = {
    "values": lambda a, b: b.values(),
    "unsqueeze": lambda a, b: b.unsqueeze(-1),
    "itself": lambda a, b: b,
    "with_another_output": lambda a, b: (a * 1, b.values()),
}


def _loss(out) -> torch.Tensor:
    outs = out if isinstance(out, tuple) else (out,)
    weights = torch.arange(1.0, 3.0)  # unequal weights: a gradient in the wrong columns cannot match by chance
    return sum(((o.values() if o.is_nested else o).reshape(-1, 2) * weights).sum() for o in outs)


@pytest.mark.parametrize("name", list(VIEWS_OF_THE_SECOND))
def test_a_view_of_one_of_several_njts_sharing_a_tensor_trains_that_one(name):
    # q, k, v chunked from one projection outside fn are NJTs over one storage: an output aliasing one of them that
    # came back detached was re-attached to the first crossing tensor of that storage (the wrong argument's columns
    # got the gradient, the right ones none: silently wrong)
    fn = VIEWS_OF_THE_SECOND[name]
    grads = []
    for run in (fn, torch.compile(fn, backend="aot_eager"), jaggedperf.compile(fn, backend="aot_eager")):
        shared = torch.randn(13, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()
        a = torch.nested.nested_tensor_from_jagged(shared[:, :2], OFFSETS)
        b = torch.nested.nested_tensor_from_jagged(shared[:, 2:], OFFSETS)
        with warnings.catch_warnings():
            warnings.simplefilter("error", BoundaryFallbackWarning)
            _loss(run(a, b)).backward()
        grads.append(shared.grad)
    for got in grads[1:]:
        torch.testing.assert_close(got, grads[0])


def test_chunked_projection_trains_every_chunk():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 12)

    def attention_like(q, k, v):
        return q * k, v.values()

    grads = []
    for run in (attention_like, jaggedperf.compile(attention_like, backend="aot_eager")):
        lin.zero_grad()
        x = torch.nested.nested_tensor_from_jagged(torch.randn(13, 4, generator=torch.Generator().manual_seed(1)),
                                                   OFFSETS)
        q, k, v = lin(x).chunk(3, dim=-1)
        scores, values = run(q, k, v)
        (scores.values().sum() + values.sum()).backward()
        grads.append(lin.bias.grad.clone())
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf_njt", "njt_of_values_that_train"])
def test_grad_enabled_inside_fn_called_without_grad_keeps_its_graph(leaf):
    # the boundary's nodes run in the caller's grad mode, outside fn: under no_grad they recorded nothing, and the
    # outputs came back without their graph (requires_grad False, no gradient anywhere), silently
    weight = torch.randn(4, requires_grad=True)

    def fn(nt):
        with torch.enable_grad():
            return nt * weight

    grads = []
    for run in (fn, jaggedperf.compile(fn, backend="aot_eager")):
        weight.grad = None
        values = torch.randn(13, 4, generator=torch.Generator().manual_seed(2))
        if leaf:
            nt = torch.nested.nested_tensor_from_jagged(values, OFFSETS).requires_grad_()
            trained = nt
        else:
            values.requires_grad_()
            nt, trained = torch.nested.nested_tensor_from_jagged(values, OFFSETS), values
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with torch.no_grad():
                out = run(nt)
        assert out.requires_grad and out.grad_fn is not None
        out.values().sum().backward()
        grads.append((weight.grad.clone(), trained.grad.values() if leaf else trained.grad.clone()))
        if run is not fn:  # the components cannot record it: the one fallback, naming why
            assert [str(w.message) for w in record if w.category is BoundaryFallbackWarning][0].count("enables grad")
    for got, expected in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, expected)


def test_an_argument_returned_under_no_grad_stays_on_the_components():
    x = torch.randn(3, requires_grad=True)
    f = jaggedperf.compile(lambda nt, x: (nt * 2, x), backend="aot_eager")
    nt = torch.nested.nested_tensor_from_jagged(torch.randn(13, 3), OFFSETS)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        with torch.no_grad():
            doubled, same = f(nt, x)
    assert same is x and not doubled.requires_grad and f.last_fallback is None


def test_non_reentrant_checkpoint_around_the_compiled_function():
    # checkpointing stops its recomputation by raising from a saved-tensor hook: that exception must reach it as from
    # eager mode (the fallback ran fn again inside the recomputation, and backward() failed an assertion)
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)

    def fn(nt):
        return torch.nn.functional.gelu(lin(nt))

    compiled = jaggedperf.compile(fn, backend="aot_eager")
    grads = []
    for run in (fn, compiled, compiled):  # the second time on a compiled region
        lin.zero_grad()
        values = torch.randn(13, 4, generator=torch.Generator().manual_seed(1)).requires_grad_()
        nt = torch.nested.nested_tensor_from_jagged(values, OFFSETS)
        with warnings.catch_warnings():
            warnings.simplefilter("error", BoundaryFallbackWarning)
            out = checkpoint(run, nt, use_reentrant=False)
            out.values().sum().backward()
        grads.append((values.grad.clone(), lin.weight.grad.clone()))
        assert_close(out, fn(nt))
    for got in grads[1:]:
        for g, expected in zip(got, grads[0]):
            torch.testing.assert_close(g, expected)
