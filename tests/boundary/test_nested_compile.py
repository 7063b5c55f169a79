"""A jaggedperf.compile'd function or module called from code that Dynamo traces (an outer torch.compile or
jaggedperf.compile) is inlined into the outer graph, as Dynamo inlines a nested torch.compile'd one: same values,
gradients, graphs and errors as torch.compile over torch.compile."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import jaggedperf
from jaggedperf.boundary import BoundaryFallbackWarning
from tests.boundary.njts import assert_close, make_njt

COMPILERS = {"torch.compile": torch.compile, "jaggedperf.compile": jaggedperf.compile}


def _gelu_twice(nt):
    return torch.nn.functional.gelu(nt) * 2


def _callee(kind: str):
    torch.manual_seed(0)
    return torch.nn.Linear(3, 3) if kind == "module" else _gelu_twice


def _run(outer_compile, inner_compile, kind: str, nt: torch.Tensor, fullgraph: bool, trains: bool) -> tuple:
    """(output, gradients of the NJT and the callee's parameters, outer graphs, graphs the callee compiled itself)."""
    torch._dynamo.reset()
    callee = _callee(kind)
    inner_counter, outer_counter = CompileCounterWithBackend("aot_eager"), CompileCounterWithBackend("aot_eager")
    inner = inner_compile(callee, backend=inner_counter)
    outer = outer_compile(lambda x: inner(x).relu() + 1, backend=outer_counter, fullgraph=fullgraph)
    x = nt.detach().requires_grad_(trains)
    out = outer(x)
    return out, _gradients(out, x, callee), outer_counter.frame_count, inner_counter.frame_count


def _gradients(out: torch.Tensor, x: torch.Tensor, callee) -> list:
    params = list(callee.parameters()) if isinstance(callee, torch.nn.Module) else []
    if not out.requires_grad:
        return []
    out.values().pow(2).sum().backward()
    return ([x.grad.values()] if x.requires_grad else []) + [p.grad for p in params]


@pytest.mark.parametrize("trains", [True, False], ids=["njt-requires-grad", "njt-without-grad"])
@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph-breaks-allowed", "fullgraph"])
@pytest.mark.parametrize("kind", ["module", "function"])
@pytest.mark.parametrize("outer", list(COMPILERS))
def test_a_traced_caller_inlines_the_callee_as_a_nested_torch_compile(outer, kind, fullgraph, trains):
    # Dynamo traced the wrapper's own call (the crossing's dynamic marks, its autograd nodes): a forbidden callable,
    # an attribute read it cannot follow, where a nested torch.compile'd callee is inlined into the outer graph
    nt, _ = make_njt(4, 5)
    callee = _callee(kind)
    x = nt.detach().requires_grad_(trains)
    expected = callee(x).relu() + 1
    expected_grads = _gradients(expected, x, callee)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        out, grads, graphs, inner_graphs = _run(COMPILERS[outer], jaggedperf.compile, kind, nt, fullgraph, trains)
    assert out.requires_grad is expected.requires_grad and (out.grad_fn is None) is (expected.grad_fn is None)
    assert_close(out, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        assert_close(got, want)
    # the outer compile's graphs, and none of the callee's own: as over a torch.compile'd callee
    _, _, their_graphs, their_inner_graphs = _run(COMPILERS[outer], torch.compile, kind, nt, fullgraph, trains)
    assert (graphs, inner_graphs) == (their_graphs, their_inner_graphs) == (1, 0)


def test_the_callee_called_on_its_own_after_being_inlined_still_crosses_as_components():
    inner = jaggedperf.compile(_gelu_twice, backend="aot_eager")
    outer = torch.compile(lambda x: inner(x) + 1, backend="aot_eager", fullgraph=True)
    nt, _ = make_njt(4, 5)
    assert_close(outer(nt), _gelu_twice(nt) + 1)
    assert not inner.regions  # the outer graph holds the callee: nothing of it compiled on its own
    assert_close(inner(nt), _gelu_twice(nt))
    assert inner.regions and inner.last_fallback is None


def _breaks(nt):
    torch._dynamo.graph_break()
    return nt * 2


@pytest.mark.parametrize("inner_fullgraph", [False, True])
@pytest.mark.parametrize("outer", list(COMPILERS))
def test_a_graph_break_in_the_callee_is_answered_as_in_a_nested_torch_compile(outer, inner_fullgraph):
    # Dynamo traces a nested torch.compile(fn, fullgraph=True) raising on a graph break in fn, also where the outer
    # compile allows graph breaks; a callee compiled without fullgraph breaks the outer graph and runs
    nt, _ = make_njt(4, 5)
    outcomes = []
    for inner_compile in (torch.compile, jaggedperf.compile):
        torch._dynamo.reset()
        inner = inner_compile(_breaks, backend="aot_eager", fullgraph=inner_fullgraph)
        outer_fn = COMPILERS[outer](lambda x: inner(x) + 1, backend="aot_eager")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BoundaryFallbackWarning)  # an outer region falls back on the break
            try:
                out = outer_fn(nt)
            except Exception as err:  # noqa: BLE001
                outcomes.append((type(err), str(err).splitlines()[0]))
            else:
                assert_close(out, nt * 2 + 1)
                outcomes.append("values of eager mode")
    assert outcomes[1] == outcomes[0]
    assert (outcomes[0] == "values of eager mode") is not inner_fullgraph


def test_hooks_on_the_module_wrapper_run_under_an_outer_compile_as_in_eager_mode():
    # on purpose unlike a nested OptimizedModule, which Dynamo replaces by its original module (its own hooks then
    # never run there): the wrapper is traced as the module it is, so its hooks run as in eager mode
    nt, _ = make_njt(4, 5)
    linear = torch.nn.Linear(3, 3)
    inner = jaggedperf.compile(linear, backend="aot_eager")
    calls = []
    inner.register_forward_hook(lambda module, args, out: calls.append("wrapper"))
    linear.register_forward_hook(lambda module, args, out: calls.append("module"))
    expected = inner(nt) + 1
    eager_order, calls[:] = list(calls), []
    outer = torch.compile(lambda x: inner(x) + 1, backend="aot_eager", fullgraph=True)
    assert_close(outer(nt), expected)
    assert calls == eager_order == ["module", "wrapper"]
