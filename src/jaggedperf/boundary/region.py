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
  ``Parts``, and every other tensor as ``Dense``, each with its ``requires_grad`` as traced; an NJT with holes or
  another ragged dim leaves as the NJT itself (the compiled runtime returns it as a subclass, as torch.compile);
  an NJT met again in the output leaves as ``Again(place)``, its first place among the output's tensors;
- ``fn`` modifying an NJT argument in place where autograd records it (the rebuilt NJT requires grad after ``fn``:
  it did before, or the new values do) fails the trace (``InPlaceOnTrainingNJT``), before any data changed: such an
  NJT's values cross as a detached alias (``differentiable.Unwrap``) or as the NJT's own inner tensor, so the
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

__all__ = ["GradEnabledInside", "InPlaceOnTrainingNJT", "make_region", "rebuild", "rebuild_constant", "rebuild_static_width"]


class InPlaceOnTrainingNJT(RuntimeError):
    """``fn`` modified an NJT argument in place where autograd records it: the call goes to ``torch.compile(fn)``."""


class GradEnabledInside(RuntimeError):
    """``fn``, called with grad mode off, enabled it and returns tensors that require grad: the boundary's autograd
    nodes (``Unwrap``, ``Join``) run in the caller's mode, outside ``fn``, so they would record nothing (outputs
    without their graph, silently); the call goes to ``torch.compile(fn)``."""


def make_region(fn: Callable, name: str, spec: Any, layout: tuple[str, ...], constant_ragged: bool = False,
                min_shift: int = MIN_SEQLEN_SHIFT, static_width: bool = False) -> Callable:
    """The function torch.compile traces for calls of one pytree structure ``spec`` (None: positional leaves) and
    one ``layout`` (``crossing``'s codes); it is called with a ``Crossing``'s flat list, unpacked. ``constant_ragged``:
    the NJTs are rebuilt with constant ragged sizes (``rebuild_constant``). ``min_shift``: what a min_seqlen's
    tensor adds to it (``crossing.flatten``); with 0 that very tensor is the rebuilt NJT's cached min_seqlen.
    ``static_width``: with ``constant_ragged``, values whose row stride is symbolic are made static past their ragged
    dim first (``rebuild_static_width``)."""
    make = (rebuild_static_width if static_width else rebuild_constant) if constant_ragged else rebuild

    def region(*flat):
        leaves, inputs = _rebuild(layout, flat, make, min_shift)
        grad_off = not torch.is_grad_enabled()  # a constant of the trace: Dynamo guards the grad mode
        for _, nt in inputs:
            _note_version(nt)
        if spec is None:
            out = fn(*leaves)
        else:
            args, kwargs = pytree.tree_unflatten(leaves, spec)
            out = fn(*args, **kwargs)
        for _, nt in inputs:
            _check_version(nt)
        if grad_off:
            _check_grad_off(out, flat)
        return _take_apart(out, inputs)

    code = region.__code__.replace(co_name=name)
    out = types.FunctionType(code, region.__globals__, name, region.__defaults__, region.__closure__)
    out.__qualname__ = name
    return out


def _rebuild(layout: tuple[str, ...], flat: tuple, make: Callable, min_shift: int) -> tuple[list, list]:
    """(the leaves ``fn``'s arguments are made of, [(leaf index, rebuilt NJT)])."""
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
            inputs.append((len(leaves), nt))
            leaves.append(nt)
    return leaves, inputs


def _view(values: torch.Tensor, offsets: torch.Tensor, low: int | torch.Tensor | None,
          high: torch.Tensor | None) -> torch.Tensor:
    # nested_tensor_from_jagged's view op, its max_seqlen given as the (n, 0) tensor that crossed instead of an int,
    # its min_seqlen as an (n, 0) tensor made here or (a tensor) the one that crossed
    low_tensor = torch.zeros(low, 0) if isinstance(low, int | torch.SymInt) else low
    return torch._nested_view_from_jagged(values, offsets, _nt_view_dummy(), None, 1, low_tensor, high)


def _view_constant(values: torch.Tensor, offsets: torch.Tensor, low: int | torch.Tensor | None,
                   high: torch.Tensor | None) -> torch.Tensor:
    # The NJT's stride over its ragged dim is the ragged size times the values' row stride, and a constant nested
    # int multiplies only by a static int: where that stride is symbolic (``dynamic=True``, or a feature width that
    # changed between calls under automatic dynamic shapes) the NJT keeps its symbolic ragged size
    if _is_static(values.stride(0)):
        _constant_ragged_size(offsets)
    return _view(values, offsets, low, high)


def _view_static_width(values: torch.Tensor, offsets: torch.Tensor, low: int | torch.Tensor | None,
                       high: torch.Tensor | None) -> torch.Tensor:
    # Values with a symbolic row stride (``dynamic=True``, a feature width that changed) are viewed with their sizes
    # past the ragged dim and their row stride guarded as ints (one graph per feature width), so the view's row stride
    # is an int and the NJT can take a constant ragged size: for functions that compare a ragged size with an int
    # (layer_norm), whose guard Dynamo could not build on a symbolic one. A plain view: its backward is a view too.
    if not _is_static(values.stride(0)):
        _guard_int(values.stride(0))
        values = values.view(values.shape[0], *(_guard_int(d) for d in values.shape[1:]))
    return _view_constant(values, offsets, low, high)


def _is_static(n: int | torch.SymInt) -> bool:
    """Whether ``n`` is an int to a nested int's ``mul``: a plain int, or a SymInt whose node is a constant."""
    return not isinstance(n, torch.SymInt) or n.node.is_constant()


def _constant_ragged_size(offsets: torch.Tensor) -> None:
    """Give the fake ``offsets`` a constant nested int (the ragged size of every NJT built over them) in place of the
    symbolic one the fake tensor makes.

    An NJT's ragged size is a nested int: never equal to any int, equal only to the same offsets' nested int. Over
    offsets that are a graph input (not an NJT input), the symbolic one has no source Dynamo can guard, and an op that
    compares it with an int (layer_norm's ``ragged_size in normalized_shape``, ``nt - nt.mean(-1, keepdim=True)``)
    adds a guard that Dynamo cannot build: an IndexError on every compile before torch 2.15 (pytorch#185016 folds
    such comparisons since). A constant one compares as it does in eager mode, with no guard. Each is drawn from
    torch's own counter, so no other nested int of the process equals it. ``BoundaryFunction`` uses it before torch
    2.15 and after that IndexError; never with unbacked symbols (the data-dependent retry), which do not combine with
    a constant nested int, nor over values whose row stride is symbolic (``_view_constant``).
    """
    inner = _unwrap_functional(offsets)
    if not isinstance(inner, _FakeTensor):
        return
    memo = inner.nested_int_memo
    if memo is None or not isinstance(memo.node, _NestedIntNode):
        nested_tensor._tensor_id_counter += 1
        inner.nested_int_memo = torch.SymInt(_ConstantNestedInt(nested_tensor._tensor_id_counter, 1))


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
    from torch.fx.experimental.symbolic_shapes import guard_int as _guard_int
    import sympy as _sympy
except ImportError:  # pragma: no cover
    rebuild = rebuild_constant = rebuild_static_width = _from_sizes
else:
    # each one call in the graph (Dynamo does not trace the view op itself), run on fake tensors while tracing
    class _ConstantNestedInt(_NestedIntNode):
        """A constant nested int that also answers ``expr``: Dynamo's runtime-assert pass reads the sympy expression
        of every graph node whose example value is a SymInt (``nt.shape`` read in ``fn`` makes such nodes: a size of
        the NJT), and torch's nested-int node has none before torch 2.15 (AttributeError on every compile). A symbol
        of its own, named after the nested int and known to no shape environment: the pass keeps the node (a new
        untracked symbol) and never folds it into an expression of the graph's inputs."""

        @property
        def expr(self) -> _sympy.Symbol:
            return _sympy.Symbol(f"jaggedperf_j{self.t_id}_{self.coeff}", integer=True, positive=True)

        def mul(self, other: Any) -> _NestedIntNode:  # the NJT's strides: the ragged size times the row stride
            product = super().mul(other)
            return type(self)(product.t_id, product.coeff)

    rebuild = torch.compiler.allow_in_graph(_view)
    rebuild_constant = torch.compiler.allow_in_graph(_view_constant)
    rebuild_static_width = torch.compiler.allow_in_graph(_view_static_width)


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
    for index, nt in inputs:
        if t is nt:
            return Same(index)
    if t._lengths is not None or t._ragged_idx != 1:
        return t
    # the seqlens leave as the NJT's own (n, 0) tensors: Dynamo cannot return the ints read from them here
    return Parts(t.values(), t.offsets(), t._min_seqlen_tensor, t._max_seqlen_tensor, t.requires_grad)
