"""A trace that computes nothing: ``torch.compile`` then skips the function's code for good, and so do we.

Dynamo marks the code of a frame it traced no operation for (``fn`` returned its arguments) so that every later call
runs eagerly, the inputs of graphs compiled before too, unless ``fullgraph``. A later call that would fail to compile
then runs eagerly under ``torch.compile``: ``jaggedperf.compile`` must take the same path, or it raises where
``torch.compile`` does not, or raises another exception.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo.testing

import jaggedperf
from jaggedperf.boundary import BoundaryFallbackWarning


def _njt(lengths: list[int], requires_grad: bool = False, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist())
    nt = torch.nested.nested_tensor_from_jagged(torch.randn(sum(lengths), 4, generator=g), offsets)
    return nt.detach().requires_grad_(requires_grad)


def _unbind_when_long(nt: torch.Tensor) -> torch.Tensor:
    if nt.size(0) <= 3:
        return nt
    return torch.nested.as_nested_tensor([t * 2 for t in nt.unbind()], layout=torch.jagged)


def _add_text_when_long(nt: torch.Tensor) -> torch.Tensor:
    if nt.size(0) <= 3:
        return nt
    return nt + "x"


def _outcome(call, nt: torch.Tensor) -> tuple[str, torch.Tensor | None]:
    try:
        out = call(nt)
    except Exception as err:  # noqa: BLE001 (the exception's type is the outcome compared)
        return type(err).__name__, None
    return "ok", out


@pytest.mark.parametrize("fn", [_unbind_when_long, _add_text_when_long], ids=["unbind", "type_error"])
def test_a_call_after_an_empty_trace_takes_torch_compiles_path(fn) -> None:
    """The first call returns its input; the second takes a branch Dynamo cannot trace (a data-dependent unbind
    with grad) or one that raises: torch.compile runs it eagerly, so must we (same outcome, same exception type)."""
    requires_grad = fn is _unbind_when_long
    outcomes = {}
    for name, make in (("eager", lambda f: f), ("torch.compile", lambda f: torch.compile(f, backend="aot_eager")),
                       ("jaggedperf", lambda f: jaggedperf.compile(f, backend="aot_eager"))):
        torch._dynamo.reset()
        compiled = make(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("error", BoundaryFallbackWarning)
            first = _outcome(compiled, _njt([3, 5, 1], requires_grad))
            second = _outcome(compiled, _njt([2, 2, 2, 2], requires_grad, seed=1))
        outcomes[name] = (first, second)
    for name in ("torch.compile", "jaggedperf"):
        assert [o[0] for o in outcomes[name]] == [o[0] for o in outcomes["eager"]], name
    (_, eager_out), (_, jp_out) = outcomes["eager"][1], outcomes["jaggedperf"][1]
    if eager_out is not None:
        torch.testing.assert_close(jp_out.values(), eager_out.values())
        assert jp_out.requires_grad == eager_out.requires_grad


def test_an_empty_trace_after_a_compiled_one_skips_every_later_call() -> None:
    """Dynamo's mark applies to inputs compiled before too: after the empty trace no graph is compiled, as under
    torch.compile, and values are eager mode's. (torch.compile itself, through torch 2.13 at least, returns the
    third call's input unscaled here: its values are not the reference.)"""
    def scaled_when_long(nt: torch.Tensor) -> torch.Tensor:
        if nt.size(0) <= 3:
            return nt
        return nt * 2

    counts = {}
    for name, make in (("torch.compile", torch.compile), ("jaggedperf", jaggedperf.compile)):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        compiled = make(scaled_when_long, backend=counter)
        for lengths in ([2, 2, 2, 2], [3, 5, 1], [1, 2, 3, 4, 5]):
            out = compiled(_njt(lengths))
            if name == "jaggedperf":
                torch.testing.assert_close(out.values(), scaled_when_long(_njt(lengths)).values())
        counts[name] = counter.frame_count
        if name == "jaggedperf":
            assert compiled.skips_fn
    assert counts["jaggedperf"] <= counts["torch.compile"]


def test_a_module_whose_first_call_computes_nothing_runs_eagerly_after() -> None:
    """For a module torch.compile skips its ``forward``'s code: a later call that fails to compile runs eagerly. (The
    body is forward's own: a function it called would be a frame of its own, which Dynamo still compiles.)"""
    class AddsTextWhenLong(torch.nn.Module):
        def forward(self, nt: torch.Tensor) -> torch.Tensor:
            if nt.size(0) <= 3:
                return nt
            return nt + "x"

    outcomes = {}
    for name, make in (("eager", lambda m: m), ("torch.compile", lambda m: torch.compile(m, backend="aot_eager")),
                       ("jaggedperf", lambda m: jaggedperf.compile(m, backend="aot_eager"))):
        torch._dynamo.reset()
        compiled = make(AddsTextWhenLong())
        outcomes[name] = [_outcome(compiled, _njt(lengths))[0] for lengths in ([3, 5, 1], [2, 2, 2, 2])]
    assert outcomes["jaggedperf"] == outcomes["torch.compile"] == outcomes["eager"] == ["ok", "TypeError"]


def test_fullgraph_keeps_compiling_after_an_empty_trace() -> None:
    """With fullgraph torch.compile keeps the empty graph and compiles the next input's: so do the regions."""
    def scaled_when_long(nt: torch.Tensor) -> torch.Tensor:
        if nt.size(0) <= 3:
            return nt
        return nt * 2

    counts = {}
    for name, make in (("torch.compile", torch.compile), ("jaggedperf", jaggedperf.compile)):
        torch._dynamo.reset()
        counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
        compiled = make(scaled_when_long, backend=counter, fullgraph=True)
        compiled(_njt([3, 5, 1]))
        out = compiled(_njt([2, 2, 2, 2]))
        torch.testing.assert_close(out.values(), _njt([2, 2, 2, 2]).values() * 2)
        counts[name] = counter.frame_count
    assert counts["torch.compile"] >= 1  # the long input's graph was compiled, not run eagerly
    assert counts["jaggedperf"] >= 1
    assert not jaggedperf.compile(scaled_when_long, fullgraph=True).skips_fn
