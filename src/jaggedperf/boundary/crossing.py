"""How an NJT crosses the compiled boundary: taken apart outside, rebuilt inside, and back for outputs.

The mechanics behind ``jaggedperf.compile`` (the package's docstring states the invariants): outside the compiled
region each NJT argument becomes a ``Parts`` (``split_args``, the pytree path) or a run of flat tensors described by
a layout (``flatten``, the common positional call); the regions that torch.compile traces (``make_region``,
``make_flat_region``) rebuild the NJTs, call the user's function and take NJT outputs apart; ``join_output``
rebuilds those outside. Every function here but the regions' bodies runs on every boundary call: each keeps to
attribute reads and type checks where it can (the names bound once below are for that).
"""

from __future__ import annotations

import types
from typing import Any, Callable, NamedTuple

import torch
import torch.utils._pytree as pytree

from jaggedperf.njt import JAGGED_CLASS as NestedTensor, wrap  # one home for the jagged class

__all__ = ["LEAF_TYPES", "Parts", "fallback_reason", "flatten", "join_output", "make_flat_region", "make_region",
           "split_args"]

# The leaf types of an argument list that need no pytree walk (the fast path).
LEAF_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device)
# What every call looks up, bound once (a module attribute lookup per name per call otherwise).
_Tensor = torch.Tensor
_is_grad_enabled = torch.is_grad_enabled
_NoSubclassTorchFunction = torch._C.DisableTorchFunctionSubclass


class Parts(NamedTuple):
    """One NJT as plain tensors. ``min_seqlen``/``max_seqlen`` are the NJT's cached ``(n, 0)``
    tensors (their dim 0 is the value: the form Dynamo treats as a dynamic size) or None; an input's
    min_seqlen is always None (see the module's docstring)."""

    values: torch.Tensor
    offsets: torch.Tensor
    min_seqlen: torch.Tensor | None
    max_seqlen: torch.Tensor | None


# --- outside the compiled region ----------------------------------------------------------------


def fallback_reason(nt: NestedTensor) -> str | None:
    """Why ``nt`` cannot cross as components, or None when it can."""
    if nt._lengths is not None:
        return "an NJT argument has lengths (holes): its values are not covered by its offsets alone"
    if nt._ragged_idx != 1:
        return f"an NJT argument's ragged dim is {nt._ragged_idx}, not 1 (e.g. a transposed NJT)"
    return None


class _Splitter:
    """Turns NJT arguments into ``Parts`` for one call; records why it could not, if it could not."""

    __slots__ = ("grad", "mark", "reason")

    def __init__(self, mark: bool) -> None:
        self.grad = _is_grad_enabled()
        self.mark = mark
        self.reason: str | None = None

    def __call__(self, x: Any) -> Any:
        if not isinstance(x, NestedTensor):
            return x
        reason = fallback_reason(x)
        if reason is not None:
            self.reason = reason
            return x
        parts = Parts(_crossing_values(x, self.grad), x._offsets, None, x._metadata_cache.get("max_seqlen"))
        if self.mark:
            _mark_dim0_dynamic(parts)
        return parts


def _crossing_values(nt: NestedTensor, grad: bool) -> torch.Tensor:
    """The values tensor that crosses for ``nt`` (``grad``: whether grad mode is on): the differentiable accessor
    only where autograd must flow, as ``nt.values()`` dispatches and ``nt._values`` does not. requires_grad is read
    with the NJT's __torch_function__ off (~20x cheaper; the same value)."""
    if grad:
        with _NoSubclassTorchFunction():
            if nt.requires_grad:
                return nt.values()
    return nt._values


def _mark_dim0_dynamic(tensors: tuple) -> None:
    """``torch._dynamo.maybe_mark_dynamic(t, 0)`` for each tensor (None skipped), skipped for one that already
    carries that mark (an attribute read instead of a decorated call; the attribute name is Dynamo's since torch
    2.1, and if it ever changes the check misses and the public call runs). One call for an NJT's parts: it runs
    on every boundary call."""
    for t in tensors:
        if t is not None and 0 not in getattr(t, "_dynamo_weak_dynamic_indices", ()):
            torch._dynamo.maybe_mark_dynamic(t, 0)


def split_args(args: tuple, kwargs: dict, mark: bool) -> tuple[tuple, dict, str | None]:
    """Replace each NJT in ``args``/``kwargs`` with its ``Parts``.

    Returns:
        (args, kwargs, reason): the arguments to pass to the compiled region, and why the call must
        fall back to ``torch.compile(fn)`` (None when it need not).
    """
    split = _Splitter(mark)
    out_args = []
    for a in args:
        if isinstance(a, torch.Tensor) or type(a) in LEAF_TYPES:
            out_args.append(split(a))
        else:  # a container: the general (slower) path
            out_args.append(pytree.tree_map(split, a))
    out_kwargs = {}
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor) or type(v) in LEAF_TYPES:
            out_kwargs[k] = split(v)
        else:
            out_kwargs[k] = pytree.tree_map(split, v)
    return tuple(out_args), out_kwargs, split.reason


def _is_parts(x: Any) -> bool:
    return type(x) is Parts


def join_output(x: Any) -> Any:
    """Rebuild each ``Parts`` in the compiled region's output into an NJT (outside, eagerly)."""
    if type(x) is Parts:
        return _rebuild_outside(x)
    if isinstance(x, torch.Tensor) or type(x) in LEAF_TYPES:
        return x
    return pytree.tree_map(lambda y: _rebuild_outside(y) if type(y) is Parts else y, x, is_leaf=_is_parts)


def _rebuild_outside(p: Parts) -> torch.Tensor:
    cache = {}
    if p.min_seqlen is not None:
        cache["min_seqlen"] = p.min_seqlen
    if p.max_seqlen is not None:
        cache["max_seqlen"] = p.max_seqlen
    if p.values.requires_grad and torch.is_grad_enabled():
        return _differentiable_view(p)
    # The constructor without dispatch (a fraction of the view op's host time); values keep no autograd history to
    # connect, so the NJT needs none.
    return wrap(p.values, p.offsets, cache)


def _differentiable_view(p: Parts) -> torch.Tensor:
    """An NJT view of ``p.values`` whose backward returns the values' gradient (an autograd edge)."""
    view = getattr(torch, "_nested_view_from_jagged", None)
    if view is None:  # not expected on torch >= 2.4; the public constructor is the same op with int seqlens
        return torch.nested.nested_tensor_from_jagged(
            p.values, p.offsets,
            min_seqlen=None if p.min_seqlen is None else p.min_seqlen.shape[0],
            max_seqlen=None if p.max_seqlen is None else p.max_seqlen.shape[0],
        )
    from torch.nested._internal.nested_tensor import _nt_view_dummy

    return view(p.values, p.offsets, _nt_view_dummy(), None, 1, p.min_seqlen, p.max_seqlen)


# --- inside the compiled region (traced by Dynamo) ---------------------------------------------


def _rebuild_inside(x: Any) -> Any:
    if not isinstance(x, Parts):
        return x
    return torch.nested.nested_tensor_from_jagged(
        x.values, x.offsets,
        min_seqlen=None if x.min_seqlen is None else x.min_seqlen.shape[0],
        max_seqlen=None if x.max_seqlen is None else x.max_seqlen.shape[0],
    )


def _join_inside(x: Any) -> Any:
    if isinstance(x, Parts):
        return _rebuild_inside(x)
    if isinstance(x, torch.Tensor) or x is None or isinstance(x, (int, float, bool, str)):
        return x
    return pytree.tree_map(_rebuild_inside, x, is_leaf=_is_parts)


def _split_output_inside(out: Any) -> Any:
    """Each plain jagged NJT in ``out`` becomes ``Parts``; one with holes or another ragged dim stays
    an NJT (the compiled runtime returns it as a subclass, as torch.compile would)."""

    def split(t: Any) -> Any:
        if isinstance(t, NestedTensor) and t._lengths is None and t._ragged_idx == 1:
            return Parts(t.values(), t.offsets(), t._min_seqlen_tensor, t._max_seqlen_tensor)
        return t

    if isinstance(out, torch.Tensor):
        return split(out)
    return pytree.tree_map(split, out)


def make_flat_region(fn: Callable, name: str, layout: tuple[str, ...]) -> Callable:
    """The function torch.compile traces for positional arguments of one ``layout``: per argument,
    ``"n"`` an NJT crossing as (values, offsets, max_seqlen tensor), ``"v"`` one crossing as (values,
    offsets), ``"a"`` anything else, as it is. The layout is a constant of the region (one region per
    layout), so Dynamo guards only the flat arguments, as for ``fn`` on plain tensors."""

    def region(*flat):
        args = []
        i = 0
        for kind in layout:
            if kind == "a":
                args.append(flat[i])
                i += 1
            elif kind == "v":
                args.append(torch.nested.nested_tensor_from_jagged(flat[i], flat[i + 1]))
                i += 2
            else:
                args.append(torch.nested.nested_tensor_from_jagged(flat[i], flat[i + 1],
                                                                   max_seqlen=flat[i + 2].shape[0]))
                i += 3
        return _split_output_inside(fn(*args))

    return _renamed(region, name)


def _renamed(region: Callable, name: str) -> Callable:
    # a fresh code object per compiled function: Dynamo keeps its cache (and recompile limit) per code object
    code = region.__code__.replace(co_name=name)
    out = types.FunctionType(code, region.__globals__, name, region.__defaults__, region.__closure__)
    out.__qualname__ = name
    return out


def flatten(args: tuple, mark: bool) -> tuple[tuple[str, ...], list, str | None] | None:
    """(layout, flat arguments, fallback reason) for positional arguments that are NJTs, tensors or
    leaves; None when one is a container (the pytree path takes it)."""
    layout, flat, reason = [], [], None
    grad = None
    for a in args:
        if isinstance(a, NestedTensor):
            why = fallback_reason(a)
            if why is not None:
                reason = why
                layout.append("a")
                flat.append(a)
                continue
            if grad is None:
                grad = _is_grad_enabled()
            values, offsets, max_seqlen = _crossing_values(a, grad), a._offsets, a._metadata_cache.get("max_seqlen")
            if max_seqlen is None:
                layout.append("v")
                parts = (values, offsets)
            else:
                layout.append("n")
                parts = (values, offsets, max_seqlen)
            flat += parts
            if mark:
                _mark_dim0_dynamic(parts)
        elif isinstance(a, _Tensor) or type(a) in LEAF_TYPES:
            layout.append("a")
            flat.append(a)
        else:
            return None
    return tuple(layout), flat, reason


def make_region(fn: Callable, name: str) -> Callable:
    """The function torch.compile traces: rebuild NJTs, call ``fn``, take NJT outputs apart.

    It is given a fresh code object named after ``fn``: Dynamo keeps its compiled-code cache (and
    counts recompiles against its limit) per code object, and closures of one ``def`` share theirs.
    """

    def region(args, kwargs):
        args = tuple(_join_inside(a) for a in args)
        kwargs = {k: _join_inside(v) for k, v in kwargs.items()}
        return _split_output_inside(fn(*args, **kwargs))

    return _renamed(region, name)
