"""A region is compiled whole without paying ``fullgraph``'s bookkeeping on every call, and a call Dynamo runs
without a graph (a compiler stance) runs ``fn`` as ``torch.compile`` then does, never the region's own code."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo.eval_frame as eval_frame
from torch.testing import assert_close

import jaggedperf
from jaggedperf.boundary import BoundaryFallbackWarning


def _njt(B: int, seed: int, requires_grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 6, (B,), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    nt = torch.nested.nested_tensor_from_jagged(torch.randn(int(offsets[-1]), 4, generator=g), offsets)
    return nt.detach().requires_grad_(requires_grad)


def _scaled_sum(nt: torch.Tensor) -> torch.Tensor:
    return (nt * 2.0 + 1.0).sum(dim=1)


def _scaled(nt: torch.Tensor) -> torch.Tensor:
    return nt * 2.0 + 1.0


@pytest.mark.parametrize("fullgraph", [False, True])
def test_calls_pay_fullgraph_bookkeeping_only_where_the_caller_asked_for_it(monkeypatch, fullgraph):
    if not hasattr(eval_frame, "set_fullgraph_compiled_frame_count"):
        pytest.skip("this torch keeps no per-call fullgraph bookkeeping (torch 2.11)")
    counted = []
    real = eval_frame.set_fullgraph_compiled_frame_count
    monkeypatch.setattr(eval_frame, "set_fullgraph_compiled_frame_count", lambda n: counted.append(n) or real(n))
    ours = jaggedperf.compile(_scaled_sum, backend="aot_eager", fullgraph=fullgraph)
    for B in (3, 4, 5, 6):
        nt = _njt(B, seed=B)
        assert_close(ours(nt), _scaled_sum(nt))
    assert not ours.fallbacks
    assert bool(counted) is fullgraph  # torch.compile(fn, fullgraph=True) pays it on every call too


def test_a_graph_break_inside_still_falls_back_once_with_a_warning():
    def breaks(nt: torch.Tensor) -> torch.Tensor:
        y = nt * 2.0
        torch._dynamo.graph_break()
        return y + 1.0

    ours = jaggedperf.compile(breaks, backend="aot_eager")
    nt = _njt(4, seed=0)
    with pytest.warns(BoundaryFallbackWarning):
        out = ours(nt)
    assert_close(out.values(), breaks(nt).values())
    assert ours.fallbacks
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        assert_close(ours(_njt(5, seed=1)).values(), breaks(_njt(5, seed=1)).values())


@pytest.mark.parametrize("trains", [False, True])
def test_under_the_force_eager_stance_fn_runs_as_it_is_and_the_boundary_stays(trains):
    ours = jaggedperf.compile(_scaled, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        ours(_njt(3, seed=0, requires_grad=trains))  # compiled first, as usual
        with torch.compiler.set_stance("force_eager"):
            nt = _njt(4, seed=1, requires_grad=trains)
            out = ours(nt)
        ref_nt = _njt(4, seed=1, requires_grad=trains)
        ref = _scaled(ref_nt)
        assert_close(out.values(), ref.values())
        assert out.requires_grad is trains
        if trains:
            out.values().sum().backward()
            ref.values().sum().backward()
            assert_close(nt.grad.values(), ref_nt.grad.values())
        assert not ours.fallbacks and ours.last_fallback is None
        nt = _njt(5, seed=2)
        assert_close(ours(nt).values(), _scaled(nt).values())  # compiled again once the stance is back
    assert not ours.fallbacks
