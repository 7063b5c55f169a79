"""The regions' backend: the user's, except for a graph that only rebuilds NJTs nobody uses.

The region rebuilds every NJT argument inside the graph, and Dynamo keeps an unused rebuild (it does not know the
constructor is pure). A function that returns its NJT arguments, or only reads their cached sizes, then compiles a
graph whose every operation is such a rebuild: ``torch.compile`` on the same function compiles none and costs a
guard check a call, while calling the compiled graph costs the compiled runtime's wrappers (tens of µs on a CPU
host). ``SkipEmpty`` hands such a graph back as its FX code (a Python function returning the inputs it returns)
and every other graph, untouched, to the backend ``torch.compile`` would have used, and tells the caller
(``on_empty``): ``torch.compile(fn)`` would have traced no operation there either, and Dynamo then marks ``fn``'s code
to run eagerly for good (unless ``fullgraph``), which ``BoundaryFunction`` follows (``skips_fn``). Under ``fullgraph``
a region whose graphs all compute nothing has nothing to gain from the boundary: ``BoundaryFunction`` then passes that
signature's calls to ``torch.compile(fn)``, which guards its NJTs for less than the region's calling convention costs
(four dynamic sizes a call).

The backend is rebuilt as ``torch.compile`` builds it (its inductor wrapper with ``mode``/``options``, or its
wrapper of any other backend): private classes of torch since 2.0. Where they are missing or take other arguments,
the regions are compiled by ``torch.compile`` itself, and such graphs are called as any other.

A region is compiled whole (``fullgraph=True``, whatever the caller asked for ``fn``): a graph break inside it would
hand the NJTs rebuilt inside to Python between two graphs, each graph then returning and taking NJTs as tensor
subclasses. That costs the subclass handling and NJT guards the boundary exists to remove, and it is not safe:
eager code between the graphs caches seqlens on such an NJT (a softmax over the ragged dim computes its max_seqlen),
so the gradient reaching the first graph's backward has another metadata cache than the one traced, and AOTAutograd
raises there, in the backward, where no fallback can act. A function that breaks the graph on the components fails
to compile instead, and ``BoundaryFunction`` sends its signature to ``torch.compile(fn)`` (the caller's own settings),
with its warning. Where Dynamo takes it (``_WHOLE_BY_GRAPH_BREAK_ERROR``) and the caller did not ask for ``fullgraph``
(whose errors, e.g. at the recompile limit, are then torch.compile's), "whole" is Dynamo's ``error_on_graph_break``
rather than ``fullgraph=True``: the same refusal of a graph break while tracing, without ``fullgraph``'s bookkeeping on
every call of the compiled code (a configuration read and four frame-count calls: on a 2-core CPU host, torch 2.13,
the boundary's cost over the same op compiled on (values, offsets) with dynamic sizes fell from ~19 to ~12.5 µs a
call). What ``fullgraph`` also did is kept by the region and its caller: a call that compiled no graph, which
``fullgraph`` refused, meets ``region.RanEagerly``; the recompile limit raises Dynamo's ``Unsupported`` instead of
``FailOnRecompileLimitHit`` (``BoundaryFunction`` answers both alike).
"""

from __future__ import annotations

import inspect
import operator
from typing import Any, Callable

import torch
import torch._functorch.config

from jaggedperf.boundary import lowering
from jaggedperf.boundary.region import rebuild, rebuild_own_ragged

__all__ = ["SkipEmpty", "compile_region"]


def _rebuild_targets() -> tuple:
    from torch.nested._internal import nested_tensor

    torch_rebuilds = ("nested_view_from_values_offsets_lengths", "nested_view_from_values_offsets")
    return (rebuild, rebuild_own_ragged) + tuple(getattr(nested_tensor, name) for name in torch_rebuilds
                                                 if hasattr(nested_tensor, name))


def _takes_graph_break_error() -> bool:
    optimize = getattr(torch._dynamo.eval_frame, "_optimize", None)
    try:
        return optimize is not None and "error_on_graph_break" in inspect.signature(optimize).parameters
    except (TypeError, ValueError):
        return False


# Whether ``torch._dynamo.optimize`` takes ``error_on_graph_break`` (the regions' "whole" without fullgraph's per-call
# cost; the module's docstring): else the regions are compiled with ``fullgraph=True``.
_WHOLE_BY_GRAPH_BREAK_ERROR = _takes_graph_break_error()

# AOTAutograd's switch that raises a failed eager compile of the backward instead of deferring it to backward()
_EAGER_BACKWARD = hasattr(torch._functorch.config, "force_non_lazy_backward_lowering")

# the size arithmetic a rebuild's seqlens and ragged size take (a shifted min_seqlen, a total length)
_SIZE_ARITHMETIC = (operator.sub, operator.add, torch.sym_sum)


class SkipEmpty:
    """A Dynamo backend: ``inner`` for every graph that computes something; an unused rebuild is not computing."""

    def __init__(self, inner: Callable, on_empty: Callable[[], None] | None = None) -> None:
        self.inner = inner
        self.on_empty = on_empty  # called for each graph handed back uncompiled
        self.compiler_name = getattr(inner, "compiler_name", "jaggedperf_boundary")
        self.skipped = 0  # graphs handed back without a compile
        self.compiled = 0  # graphs handed to the inner backend

    @property
    def computes_nothing(self) -> bool:
        """Every graph so far only rebuilt unused NJTs (and at least one was seen)."""
        return self.skipped > 0 and self.compiled == 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
        if _only_unused_rebuilds(gm):
            self.skipped += 1
            if self.on_empty is not None:
                self.on_empty()
            return gm.forward
        self.compiled += 1
        lowering.lower_graph(gm)  # a sum or mean over an NJT's ragged dim: jaggedperf's operators, differentiable
        if not _EAGER_BACKWARD:
            return self.inner(gm, example_inputs, **kwargs)
        # A backward that cannot be compiled fails this compile, where the call can still go to torch.compile(fn):
        # AOTAutograd otherwise suppresses the failure of its eager backward compile (dynamic shapes) and raises it
        # in backward(), where no fallback can act (torch 2.11, Inductor: a jagged-layout zeros in where's backward,
        # which torch.compile on the NJT compiles).
        with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
            return self.inner(gm, example_inputs, **kwargs)

    def __getattr__(self, name: str) -> Any:  # get_compiler_config, dynamic, ...: the inner backend's
        return getattr(self.__dict__["inner"], name)

    def reset(self) -> None:
        if hasattr(self.inner, "reset"):
            self.inner.reset()


def _only_unused_rebuilds(gm: torch.fx.GraphModule) -> bool:
    """Remove the rebuilds nobody uses (and the seqlen arithmetic that fed only them) from ``gm``; True when nothing
    else is computed: ``gm`` then only returns its inputs or constants. ``gm`` is left as it was otherwise."""
    targets = _rebuild_targets()
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    if not calls or any(n.op != "call_function" or not (n.target in targets or n.target in _SIZE_ARITHMETIC)
                        for n in calls):
        return False
    if any(n.target in targets and n.users for n in calls):
        return False
    unused = set()
    for node in reversed(calls):  # users before what they use: arithmetic that fed only unused nodes is unused
        if all(user in unused for user in node.users):
            unused.add(node)
    if len(unused) < len(calls):
        return False  # arithmetic the graph returns (a size fn computed): computing
    for node in reversed(calls):
        gm.graph.erase_node(node)
    gm.recompile()
    return True


def compile_region(region: Callable, compile_kwargs: dict[str, Any],
                   on_empty: Callable[[], None] | None = None) -> tuple[Callable, SkipEmpty | None]:
    """``torch.compile(region, **compile_kwargs, fullgraph=True)`` with the backend ``torch.compile`` would build
    wrapped in ``SkipEmpty`` (calling ``on_empty`` for each graph that computes nothing), and that wrapper; plain
    ``torch.compile`` and None where that backend cannot be rebuilt here. Compiled whole by ``error_on_graph_break``
    where Dynamo takes it (the module's docstring)."""
    kwargs = dict(compile_kwargs, fullgraph=True)  # (the module's docstring says why)
    backend = kwargs.pop("backend", "inductor")
    mode = kwargs.pop("mode", None)
    options = kwargs.pop("options", None)
    if (mode is not None and options is not None) or (isinstance(options, dict)
                                                      and ({"guard_filter_fn", "use_aoti"} & set(options))):
        return torch.compile(region, **kwargs, backend=backend, mode=mode, options=options), None  # its own checks
    if mode is None and options is None:
        mode = "default"
    try:
        if backend == "inductor":
            inner = torch._TorchCompileInductorWrapper(mode, options, kwargs.get("dynamic"))
        else:
            inner = torch._TorchCompileWrapper(backend, mode, options, kwargs.get("dynamic"))
    except (AttributeError, TypeError):
        return torch.compile(region, **kwargs, backend=backend, mode=mode, options=options), None
    backend = SkipEmpty(inner, on_empty)
    if _WHOLE_BY_GRAPH_BREAK_ERROR and not compile_kwargs.get("fullgraph") and set(kwargs) <= {"fullgraph", "dynamic",
                                                                                          "disable"}:
        # torch.compile(region, backend=backend, fullgraph=True, dynamic=...) less fullgraph's per-call bookkeeping:
        # the backend wrapped as torch.compile wraps a callable one (Dynamo given the bare SkipEmpty crashed the
        # process on the first call, in torch 2.13)
        wrapped = torch._TorchCompileWrapper(backend, "default", None, kwargs.get("dynamic"))
        whole = torch._dynamo.optimize(backend=wrapped, error_on_graph_break=True, dynamic=kwargs.get("dynamic"),
                                       disable=bool(kwargs.get("disable")))
        return whole(region), backend
    return torch.compile(region, backend=backend, **kwargs), backend
