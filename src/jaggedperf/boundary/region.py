"""The function torch.compile traces: NJTs rebuilt from their parts, ``fn`` called on them, its outputs taken apart.

Everything here runs while Dynamo traces (once per compile), never on a call of the compiled code: the loops over
the layout unroll into the graph and the identity and ``requires_grad`` checks on ``fn``'s outputs become constants
of the compiled code.

Invariants:
- one region (a fresh code object, named after ``fn`` and its layout) per pytree structure and layout: Dynamo
  keeps its cache and recompile limit per code object, so each region guards only its flat arguments, as ``fn``
  compiled on plain tensors does;
- each NJT is rebuilt by one call in the graph (``rebuild``) whose cached max_seqlen is the very ``(n, 0)`` tensor
  that crossed (``crossing``'s docstring says why): an output NJT keeping it returns the input, allocating nothing;
- an argument crossing as ``"=k"`` is handed the NJT rebuilt for leaf ``k``: aliasing between NJT arguments is
  eager mode's;
- an output that is one of the rebuilt input NJTs leaves as ``Same(index)``; every other plain jagged NJT as
  ``Parts`` (with ``source``, and without its offsets and seqlens, where it has the offsets and the very cached seqlens
  of the first rebuilt NJT over those offsets), and every other tensor as ``Dense``, each with its ``requires_grad``
  as traced; an NJT with holes or
  another ragged dim leaves as the NJT itself (the compiled runtime returns it as a subclass, as torch.compile);
  an NJT met again in the output leaves as ``Again(place)``, its first place among the output's tensors;
- ``fn`` modifying an NJT argument in place where autograd records it (the rebuilt NJT requires grad after ``fn``:
  it did before, or the new values do) fails the trace (``InPlaceOnTrainingNJT``), before any data changed: such an
  NJT's values cross as a detached alias (``njt_autograd.Unwrap``) or as the NJT's own inner tensor, so the
  compiled runtime would write the change into them with the autograd history of the alias, never of the caller's
  NJT (its later uses would miss the change's gradient: silently wrong gradients). The call signature then goes to
  ``torch.compile(fn)``, which records it on the NJT as eager mode does. Modifications autograd does not record
  (nothing requires grad, e.g. inference) write through the alias into the caller's values, as in eager mode.
"""

from __future__ import annotations

import types
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from jaggedperf.boundary.crossing import ANY, MIN_SEQLEN_SHIFT
from jaggedperf.boundary.parts import Again, Dense, Parts, Same
from jaggedperf.njt import JAGGED_CLASS as NestedTensor

__all__ = ["GradEnabledInside", "InPlaceOnTrainingNJT", "RAGGED_SYMBOL", "RanEagerly", "make_region", "rebuild",
           "rebuild_own_ragged"]

# The name every ragged size of the regions' own starts with (``_RaggedSymbol``): a failure naming it is theirs.
RAGGED_SYMBOL = "jaggedperf_j"


# False in eager mode; Dynamo folds a call of this very function to True while it traces
_is_compiling = torch.compiler.is_compiling


class RanEagerly(RuntimeError):
    """Python ran a region's own code: Dynamo compiled no graph for the call (past its recompile limit, a compiler
    stance, a frame it skips) and ran the frame as it is. The compiled code never raises it: Dynamo folds the check
    to nothing while it traces. The region is compiled without ``fullgraph``'s per-call bookkeeping (``backend``),
    so this check stands where ``fullgraph`` raised on a call that compiled no frame."""


class InPlaceOnTrainingNJT(RuntimeError):
    """``fn`` modified an NJT argument in place where autograd records it: the call goes to ``torch.compile(fn)``."""


class GradEnabledInside(RuntimeError):
    """``fn``, called with grad mode off, enabled it and returns tensors that require grad: the boundary's autograd
    nodes (``Unwrap``, ``Join``) run in the caller's mode, outside ``fn``, so they would record nothing (outputs
    without their graph, silently); the call goes to ``torch.compile(fn)``."""


def make_region(fn: Callable, name: str, spec: Any, layout: tuple[str, ...], own_ragged: bool = False,
                min_shift: int = MIN_SEQLEN_SHIFT) -> Callable:
    """The function torch.compile traces for calls of one pytree structure ``spec`` (None: positional leaves) and
    one ``layout`` (``crossing``'s codes); it is called with a ``Crossing``'s flat list, unpacked. ``own_ragged``: the
    NJTs are rebuilt with ragged sizes of the region's own (``rebuild_own_ragged``). ``min_shift``: what a min_seqlen's
    tensor adds to it (``crossing.flatten``); with 0 that very tensor is the rebuilt NJT's cached min_seqlen."""
    make = rebuild_own_ragged if own_ragged else rebuild

    def region(*flat):
        if not _is_compiling():
            raise RanEagerly(f"Dynamo ran {name} without a compiled graph")
        leaves, inputs = _rebuild(layout, flat, make, min_shift)
        grad_off = not torch.is_grad_enabled()  # a constant of the trace: Dynamo guards the grad mode
        for _, nt, _ in inputs:
            _note_version(nt)
        if spec is None:
            out = fn(*leaves)
        else:
            args, kwargs = pytree.tree_unflatten(leaves, spec)
            out = fn(*args, **kwargs)
        for _, nt, _ in inputs:
            _check_version(nt)
        if grad_off:
            _check_grad_off(out, flat)
        return _take_apart(out, inputs)

    code = region.__code__.replace(co_name=name)
    out = types.FunctionType(code, region.__globals__, name, region.__defaults__, region.__closure__)
    out.__qualname__ = name
    return out


def _rebuild(layout: tuple[str, ...], flat: tuple, make: Callable, min_shift: int) -> tuple[list, list]:
    """(the leaves ``fn``'s arguments are made of, [(leaf index, rebuilt NJT, (its offsets, whether it caches a
    min_seqlen, its cached max_seqlen or None))]): what it crossed with, known without reading the rebuilt NJT (a read
    would make its rebuild a used node of the graph: ``backend``); ``fn`` may cache a seqlen the argument did not on
    the NJT it is handed (one computed in the graph, under the data-dependent settings)."""
    leaves: list = []
    inputs: list = []
    i = 0
    for code in layout:
        if code == ANY:
            leaves.append(flat[i])
            i += 1
        elif code[0] == "=":
            leaves.append(leaves[int(code[1:])])
        else:
            values, offsets = flat[i], flat[i + 1]
            i += 2
            low = high = None
            if code[1] == "m":
                low = flat[i] if min_shift == 0 else flat[i].shape[0] - min_shift
                i += 1
            if code[2] == "x":
                high = flat[i]
                i += 1
            nt = make(values, offsets, low, high)
            inputs.append((len(leaves), nt, (offsets, low is not None, high)))
            leaves.append(nt)
    return leaves, inputs


def _view(values: torch.Tensor, offsets: torch.Tensor, low: int | torch.Tensor | None,
          high: torch.Tensor | None) -> torch.Tensor:
    # nested_tensor_from_jagged's view op, its max_seqlen given as the (n, 0) tensor that crossed instead of an int,
    # its min_seqlen as an (n, 0) tensor made here or (a tensor) the one that crossed
    low_tensor = torch.zeros(low, 0) if isinstance(low, int | torch.SymInt) else low
    return torch._nested_view_from_jagged(values, offsets, _nt_view_dummy(), None, 1, low_tensor, high)


def _view_own_ragged(values: torch.Tensor, offsets: torch.Tensor, low: int | torch.Tensor | None,
                     high: torch.Tensor | None) -> torch.Tensor:
    _own_ragged_size(offsets)
    return _view(values, offsets, low, high)


def _own_ragged_size(offsets: torch.Tensor) -> None:
    """Give the fake ``offsets`` a ragged size of the region's own (the ragged size of every NJT built over them) in
    place of the symbolic one the fake tensor makes.

    An NJT's ragged size is a nested int: never equal to any int, equal only to the same offsets' nested int. Over
    offsets that are a graph input (not an NJT input), the fake tensor's symbolic one has no source Dynamo can guard,
    and an op that compares it with a size (layer_norm's ``ragged_size in normalized_shape``,
    ``nt - nt.mean(-1, keepdim=True)``) adds a guard that Dynamo cannot build: with an int, an IndexError on every
    compile before torch 2.15 (pytorch#185016 folds those since); with a symbolic size (a feature width made dynamic),
    a guard naming an ephemeral source that does not parse, on 2.15 too. This one is a symbol whose equality folds as
    the nested int's does (``_RaggedSymbol``), so those comparisons add no guard, and it multiplies by a symbolic row
    stride (a feature width that changed, ``dynamic=True``) as by an int: the NJT's stride over its ragged dim, the
    ragged size times the row stride, is an expression of both. Each is drawn from torch's own nested-int counter, so no
    other ragged size of the process equals it. ``BoundaryFunction`` uses it from the start on every torch; never with
    unbacked symbols (the data-dependent retry).
    """
    inner = _unwrap_functional(offsets)
    if not isinstance(inner, _FakeTensor) or inner.fake_mode.shape_env is None:
        return  # no shape environment to hold the symbol (Dynamo always traces with one): the fake tensor's own way
    memo = inner.nested_int_memo
    if memo is None or not (isinstance(memo.node, _SymNode) and isinstance(memo.node.expr, _RaggedSymbol)):
        nested_tensor._tensor_id_counter += 1
        t_id = nested_tensor._tensor_id_counter
        hint = torch.SymInt(_NestedIntNode(t_id, 1))  # what the size is outside a trace: a nested int
        symbol, env = _RaggedSymbol(t_id), inner.fake_mode.shape_env
        # at least 2, as a nested int compares with ints (``j >= 2`` holds, ``j >= 3`` is not known): decided without
        # a guard where the value range decides it
        env._update_var_to_range(symbol, _ValueRanges(2, _int_oo))
        inner.nested_int_memo = torch.SymInt(_SymNode(symbol, env, int, hint))


def _from_sizes(values: torch.Tensor, offsets: torch.Tensor, low: int | torch.Tensor | None,
                high: torch.Tensor | None) -> torch.Tensor:
    low = low.shape[0] if isinstance(low, torch.Tensor) else low
    return torch.nested.nested_tensor_from_jagged(values, offsets, min_seqlen=low,
                                                  max_seqlen=None if high is None else high.shape[0])


try:  # the NJT view op's dummy argument and nested ints: private since the NJT's first release; else the constructor
    from torch._subclasses.fake_tensor import FakeTensor as _FakeTensor
    from torch._subclasses.functional_tensor import mb_unwrap_functional_tensor as _unwrap_functional
    from torch.nested._internal import nested_tensor
    from torch.nested._internal.nested_int import NestedIntNode as _NestedIntNode
    from torch.nested._internal.nested_tensor import _nt_view_dummy
    from torch.fx.experimental.sym_node import SymNode as _SymNode
    from torch.utils._sympy.numbers import int_oo as _int_oo
    from torch.utils._sympy.value_ranges import ValueRanges as _ValueRanges
    import sympy as _sympy
except ImportError:  # pragma: no cover
    rebuild = rebuild_own_ragged = _from_sizes
else:
    # each one call in the graph (Dynamo does not trace the view op itself), run on fake tensors while tracing
    class _RaggedSymbol(_sympy.Symbol):
        """The sympy symbol of a ragged size the region gives an NJT (``_own_ragged_size``): equal to itself alone,
        as a nested int is equal only to the same offsets' nested int and never to an int, so sympy decides every
        equality with it when the comparison is made and Dynamo records no guard on it (it could not build one: the
        symbol is the size of no graph input, so it has no source). Dynamo's runtime-assert pass reads the expression
        of every size node of the graph (``nt.shape`` read in ``fn`` makes one): a symbol of no graph input, the node
        is kept and never folded into an expression of the graph's inputs."""

        def __new__(cls, t_id: int) -> _RaggedSymbol:
            return super().__new__(cls, f"{RAGGED_SYMBOL}{t_id}", integer=True, positive=True)

        def _eval_Eq(self, other: Any) -> Any:
            return _sympy.true if other == self else _sympy.false

    rebuild = torch.compiler.allow_in_graph(_view)
    rebuild_own_ragged = torch.compiler.allow_in_graph(_view_own_ragged)


# --- in-place changes of NJT arguments, seen while Dynamo traces (``comptime``: nothing enters the graph) ---------

_VERSION = "_jaggedperf_version_before_fn"  # kept on the fake values tensor for one trace


def _note_version(nt: torch.Tensor) -> None:
    # ``nt`` is read by name, as the frame's local, by the compile-time callback (``ctx.get_local("nt")``)
    if _comptime is not None:
        _comptime(_noted)


def _check_version(nt: torch.Tensor) -> None:
    if _comptime is not None:
        _comptime(_checked)


def _check_grad_off(out: Any, flat: tuple) -> None:
    # each requires_grad (and identity) is a constant of the trace, and so is the branch: a call pays nothing; an
    # argument returned as it is keeps its requires_grad without any node
    if any(isinstance(t, torch.Tensor) and t.requires_grad and not any(t is a for a in flat)
           for t in pytree.tree_leaves(out)):
        if _comptime is not None:
            _comptime(_enabled_grad)


def _enabled_grad(ctx: Any) -> None:
    raise GradEnabledInside("fn enables grad while called with it disabled (torch.enable_grad inside torch.no_grad): "
                            "torch.compile(fn) records its outputs' graph as eager mode does")


def _noted(ctx: Any) -> None:
    values = ctx.get_local("nt").as_fake()._values
    values.__dict__[_VERSION] = values._version


def _checked(ctx: Any) -> None:
    nt = ctx.get_local("nt").as_fake()
    values = nt._values
    if values._version != values.__dict__.pop(_VERSION, values._version) and nt.requires_grad:
        raise InPlaceOnTrainingNJT(
            "fn modifies an NJT argument in place where autograd records it (the NJT requires grad): "
            "torch.compile(fn) records the change on the caller's NJT, as eager mode does")


try:  # Dynamo's compile-time hook (since torch 2.0); without it no check, as before it was added
    from torch._dynamo.comptime import comptime as _comptime
except ImportError:  # pragma: no cover
    _comptime = None


def _take_apart(out: Any, inputs: list) -> Any:
    if isinstance(out, torch.Tensor):
        return _record(out, inputs, [])
    seen: list = []  # every tensor of the output so far, in pytree order (the order ``joining`` meets the records in)
    return pytree.tree_map_only(torch.Tensor, lambda t: _record(t, inputs, seen), out)


def _record(t: torch.Tensor, inputs: list, seen: list) -> Any:
    for place, earlier in enumerate(seen):
        if t is earlier and isinstance(t, NestedTensor):
            seen.append(t)
            return Again(place)  # the same NJT twice in the output: one object outside too, as in eager mode
    seen.append(t)
    if not isinstance(t, NestedTensor):
        return Dense(t, t.requires_grad)
    for index, nt, _ in inputs:
        if t is nt:
            return Same(index)
    if t._lengths is not None or t._ragged_idx != 1:
        return t
    for index, nt, (offsets, has_min, high) in inputs:  # identities of the trace: constants of the compiled code
        if t.offsets() is offsets:
            # the rebuilt NJT's min_seqlen tensor (made in the graph, from the crossing's shifted size) is the one it
            # was rebuilt with: a cached seqlen is never replaced
            low = nt._min_seqlen_tensor if has_min else None
            if t._min_seqlen_tensor is low and t._max_seqlen_tensor is high:
                # the structure the argument at ``index`` crossed with (the first argument over these offsets, the
                # one whose cached seqlens joining takes): its offsets and seqlens are not returned (``Parts.source``)
                return Parts(t.values(), None, None, None, t.requires_grad, index)
            break
    # the seqlens leave as the NJT's own (n, 0) tensors: Dynamo cannot return the ints read from them here
    return Parts(t.values(), t.offsets(), t._min_seqlen_tensor, t._max_seqlen_tensor, t.requires_grad)
