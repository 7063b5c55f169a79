"""compile: torch.compile for functions of jagged NestedTensors, with the NJT taken apart at the boundary.

A compiled function that takes a jagged NestedTensor (NJT) pays, on every call, Dynamo's guards on
the NJT (~30 of them, some in Python) and the compiled runtime's subclass flattening, ~250-300 µs
per call on an H200 host under torch 2.11 (``benchmarks/NOTES.md``). The same computation compiled
on the NJT's components costs what any dense compiled call costs. ``compile`` makes that the
default for any function:

- outside, each NJT argument (anywhere in the args/kwargs pytree) becomes a ``_Parts``:
  ``values``, ``offsets`` and its cached ``(max_seqlen, 0)`` tensor (the NJT's own metadata-cache
  tensor, so nothing is allocated or synced), plain tensors. Positional arguments alone (the common
  call) cross flat, one tensor per argument, so the compiled region's guards are those of the same
  function compiled on plain tensors; kwargs and containers take the pytree path;
- inside the compiled region each ``_Parts`` is rebuilt into an NJT with
  ``torch.nested.nested_tensor_from_jagged`` (traceable: it is a view op) and ``fn`` runs on it;
- an NJT that ``fn`` returns leaves the compiled region as a ``_Parts`` and is rebuilt outside.

Invariants:
- ``values`` crosses as ``nt._values`` (an attribute read) unless grad is enabled and the NJT
  requires grad; then as ``nt.values()``, the differentiable view, so gradients reach the user's
  leaves as with ``torch.compile(fn)``. An NJT output that requires grad is rebuilt with the
  differentiable view op ``torch._nested_view_from_jagged``; otherwise with the NestedTensor
  constructor (no dispatch).
- Unless ``dynamic=False``, the ragged dims cross marked dynamic (values dim 0, offsets dim 0, the
  seqlen tensors' dim 0), on every call so every compile sees the same markings: B, the total length
  and max_seqlen changing between calls do not recompile. As for any size in Dynamo (and for
  ``torch.compile`` on the NJT itself), a max_seqlen of 0 or 1 is specialised. min_seqlen does not
  cross: batches with empty or one-row sequences are common, and a min_seqlen moving between 0, 1
  and ≥ 2 would compile up to three graphs where the same function on plain tensors compiles one
  (a function that reads it inside gets it computed from the offsets, as for an NJT without it).
- Every compiled function gets its own code object for the compiled region, so Dynamo's per-code
  cache (and its recompile limit) is per function, as with ``torch.compile(fn)``.
- A function that reads the lengths as Python numbers (``nt.unbind()``, ``offsets.tolist()``: the seed's
  ``unbind_mean``) cannot be traced on components whose sizes are symbolic: Dynamo raises on the data-
  dependent value. Such a function is compiled again, and from then on called, with Dynamo capturing
  scalar outputs and dynamic output shapes (``_DATA_DEPENDENT``), so the lengths become unbacked symbols:
  one graph per batch size B, whatever the lengths. Only those functions pay for the config patch (a
  context manager per call); the others are called bare.
- What cannot cross this way falls back to ``torch.compile(fn)`` for that call, with one
  ``warnings.warn`` per reason per compiled function: an NJT with ``lengths`` (holes), an NJT whose
  ragged dim is not 1, or a Dynamo/backend failure when compiling on the components (after the data-
  dependent retry, where it applies).
"""

from __future__ import annotations

import functools
import types
import warnings
from typing import Any, Callable, NamedTuple

import torch
import torch.utils._pytree as pytree

from jaggedperf.njt import JAGGED_CLASS as NestedTensor, wrap  # one home for the jagged class

__all__ = ["BoundaryFunction", "BoundaryModule", "BoundaryFallbackWarning", "compile"]

# _flatten's result not taken yet (None is one of its results: an argument that needs the pytree walk).
_UNFLATTENED = object()
# The leaf types of an argument list that need no pytree walk (the fast path).
_LEAF_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device)
# What every call looks up, bound once (a module attribute lookup per name per call otherwise).
_Tensor = torch.Tensor
_is_grad_enabled = torch.is_grad_enabled
_NoSubclassTorchFunction = torch._C.DisableTorchFunctionSubclass
# Dynamo's settings under which values read from tensors (lengths, ``tolist``) become unbacked symbols
# instead of a failure: the retry for functions that compile only that way on the components.
_DATA_DEPENDENT = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}


class BoundaryFallbackWarning(UserWarning):
    """A call went to ``torch.compile(fn)`` instead of compiling on the NJT's components."""


class _Parts(NamedTuple):
    """One NJT as plain tensors. ``min_seqlen``/``max_seqlen`` are the NJT's cached ``(n, 0)``
    tensors (their dim 0 is the value: the form Dynamo treats as a dynamic size) or None; an input's
    min_seqlen is always None (see the module's docstring)."""

    values: torch.Tensor
    offsets: torch.Tensor
    min_seqlen: torch.Tensor | None
    max_seqlen: torch.Tensor | None


# --- outside the compiled region ----------------------------------------------------------------


def _fallback_reason(nt: NestedTensor) -> str | None:
    """Why ``nt`` cannot cross as components, or None when it can."""
    if nt._lengths is not None:
        return "an NJT argument has lengths (holes): its values are not covered by its offsets alone"
    if nt._ragged_idx != 1:
        return f"an NJT argument's ragged dim is {nt._ragged_idx}, not 1 (e.g. a transposed NJT)"
    return None


class _Splitter:
    """Turns NJT arguments into ``_Parts`` for one call; records why it could not, if it could not."""

    __slots__ = ("grad", "mark", "reason")

    def __init__(self, mark: bool) -> None:
        self.grad = _is_grad_enabled()
        self.mark = mark
        self.reason: str | None = None

    def __call__(self, x: Any) -> Any:
        if not isinstance(x, NestedTensor):
            return x
        reason = _fallback_reason(x)
        if reason is not None:
            self.reason = reason
            return x
        parts = _Parts(_crossing_values(x, self.grad), x._offsets, None, x._metadata_cache.get("max_seqlen"))
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


def _split_args(args: tuple, kwargs: dict, mark: bool) -> tuple[tuple, dict, str | None]:
    """Replace each NJT in ``args``/``kwargs`` with its ``_Parts``.

    Returns:
        (args, kwargs, reason): the arguments to pass to the compiled region, and why the call must
        fall back to ``torch.compile(fn)`` (None when it need not).
    """
    split = _Splitter(mark)
    out_args = []
    for a in args:
        if isinstance(a, torch.Tensor) or type(a) in _LEAF_TYPES:
            out_args.append(split(a))
        else:  # a container: the general (slower) path
            out_args.append(pytree.tree_map(split, a))
    out_kwargs = {}
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor) or type(v) in _LEAF_TYPES:
            out_kwargs[k] = split(v)
        else:
            out_kwargs[k] = pytree.tree_map(split, v)
    return tuple(out_args), out_kwargs, split.reason


def _is_parts(x: Any) -> bool:
    return type(x) is _Parts


def _join_output(x: Any) -> Any:
    """Rebuild each ``_Parts`` in the compiled region's output into an NJT (outside, eagerly)."""
    if type(x) is _Parts:
        return _rebuild_outside(x)
    if isinstance(x, torch.Tensor) or type(x) in _LEAF_TYPES:
        return x
    return pytree.tree_map(lambda y: _rebuild_outside(y) if type(y) is _Parts else y, x, is_leaf=_is_parts)


def _rebuild_outside(p: _Parts) -> torch.Tensor:
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


def _differentiable_view(p: _Parts) -> torch.Tensor:
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
    if not isinstance(x, _Parts):
        return x
    return torch.nested.nested_tensor_from_jagged(
        x.values, x.offsets,
        min_seqlen=None if x.min_seqlen is None else x.min_seqlen.shape[0],
        max_seqlen=None if x.max_seqlen is None else x.max_seqlen.shape[0],
    )


def _join_inside(x: Any) -> Any:
    if isinstance(x, _Parts):
        return _rebuild_inside(x)
    if isinstance(x, torch.Tensor) or x is None or isinstance(x, (int, float, bool, str)):
        return x
    return pytree.tree_map(_rebuild_inside, x, is_leaf=_is_parts)


def _split_output_inside(out: Any) -> Any:
    """Each plain jagged NJT in ``out`` becomes ``_Parts``; one with holes or another ragged dim stays
    an NJT (the compiled runtime returns it as a subclass, as torch.compile would)."""

    def split(t: Any) -> Any:
        if isinstance(t, NestedTensor) and t._lengths is None and t._ragged_idx == 1:
            return _Parts(t.values(), t.offsets(), t._min_seqlen_tensor, t._max_seqlen_tensor)
        return t

    if isinstance(out, torch.Tensor):
        return split(out)
    return pytree.tree_map(split, out)


def _make_flat_region(fn: Callable, name: str, layout: tuple[str, ...]) -> Callable:
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


def _flatten(args: tuple, mark: bool) -> tuple[tuple[str, ...], list, str | None] | None:
    """(layout, flat arguments, fallback reason) for positional arguments that are NJTs, tensors or
    leaves; None when one is a container (the pytree path takes it)."""
    layout, flat, reason = [], [], None
    grad = None
    for a in args:
        if isinstance(a, NestedTensor):
            why = _fallback_reason(a)
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
        elif isinstance(a, _Tensor) or type(a) in _LEAF_TYPES:
            layout.append("a")
            flat.append(a)
        else:
            return None
    return tuple(layout), flat, reason


def _make_region(fn: Callable, name: str) -> Callable:
    """The function torch.compile traces: rebuild NJTs, call ``fn``, take NJT outputs apart.

    It is given a fresh code object named after ``fn``: Dynamo keeps its compiled-code cache (and
    counts recompiles against its limit) per code object, and closures of one ``def`` share theirs.
    """

    def region(args, kwargs):
        args = tuple(_join_inside(a) for a in args)
        kwargs = {k: _join_inside(v) for k, v in kwargs.items()}
        return _split_output_inside(fn(*args, **kwargs))

    return _renamed(region, name)


# --- the public face ------------------------------------------------------------------------------


class BoundaryFunction:
    """``fn`` compiled on its NJT arguments' components; call it as you would call ``fn``.

    Attributes:
        fn: the user's function (or module).
        compile_kwargs: what is passed to ``torch.compile`` (for the region and for the fallback).
        region: ``torch.compile`` of the region that rebuilds NJTs and calls ``fn`` (the pytree path).
        flat_regions: one compiled region per layout of positional arguments (the flat path).
        broken: why compiling on the components failed, once it has; every call then falls back.
        dynamo_config: the Dynamo settings the regions are compiled and called under: empty, or
            ``_DATA_DEPENDENT`` once the function needed them.
    """

    def __init__(self, fn: Callable, compile_kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.compile_kwargs = dict(compile_kwargs)
        self._mark = self.compile_kwargs.get("dynamic", None) is not False
        name = getattr(fn, "__name__", type(fn).__name__)
        self._name = "jaggedperf_boundary_" + "".join(c if c.isalnum() else "_" for c in name)
        self.broken: str | None = None
        self.dynamo_config: dict[str, Any] = {}
        self._new_regions()
        self._fallback: Callable | None = None
        self._warned: set[str] = set()
        if not isinstance(fn, torch.nn.Module):
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or self.broken is not None or self.dynamo_config:
            return self._call(args, kwargs)
        # The common call (positional NJTs, tensors, leaves), inline: one flattening pass and the compiled region
        # called bare. Its host time is the boundary's whole cost over a plain compiled call, which is what users
        # compare it with.
        flat = _flatten(args, self._mark)
        if flat is None or flat[2] is not None:  # a pytree argument, or a reason to fall back: not flattened again
            return self._call(args, kwargs, flat)
        layout, flat_args, _ = flat
        region = self.flat_regions.get(layout) or self._flat_region(layout)
        try:
            out = region(*flat_args)
        except torch._dynamo.exc.TorchDynamoException as err:
            return self._after_error(err, args, kwargs)
        return out if isinstance(out, _Tensor) else _join_output(out)

    def _call(self, args: tuple, kwargs: dict, flat: Any = _UNFLATTENED) -> Any:
        """Any call: the flat or the pytree path, the fallback, the data-dependent settings (``flat``: the
        arguments' ``_flatten`` when the caller has it)."""
        if self.broken is not None:
            return self._fall_back(self.broken, args, kwargs)
        call = self._region_call(args, kwargs, flat)
        if isinstance(call, str):
            return self._fall_back(call, args, kwargs)
        try:
            out = call() if not self.dynamo_config else self._call_patched(call)
        except torch._dynamo.exc.TorchDynamoException as err:
            return self._after_error(err, args, kwargs)
        return _join_output(out)

    def _after_error(self, err: Exception, args: tuple, kwargs: dict) -> Any:
        """A compile on the components failed: retry once under the data-dependent settings where they apply,
        else fall back to ``torch.compile(fn)``."""
        if self.dynamo_config or not _data_dependent(err):
            return self._fall_back_after(err, args, kwargs)
        # New regions (new code objects: Dynamo's state from the failed compile stays with the old
        # ones, and a retry on them fails on symbols that state left pending), under the settings.
        self.dynamo_config = dict(_DATA_DEPENDENT)
        with torch._dynamo.config.patch(**self.dynamo_config):
            self._new_regions("_dd")
        try:
            out = self._call_patched(self._region_call(args, kwargs))
        except torch._dynamo.exc.TorchDynamoException as again:
            return self._fall_back_after(again, args, kwargs)
        return _join_output(out)

    def _new_regions(self, suffix: str = "") -> None:
        self._name += suffix
        self.region = torch.compile(_make_region(self.fn, self._name), **self.compile_kwargs)
        self.flat_regions: dict[tuple[str, ...], Callable] = {}

    def _region_call(self, args: tuple, kwargs: dict, flat: Any = _UNFLATTENED) -> Callable[[], Any] | str:
        """The compiled region's call on these arguments' components, or why they cannot cross (a reason);
        ``flat``: the arguments' ``_flatten``, when already taken."""
        if flat is _UNFLATTENED:
            flat = None if kwargs else _flatten(args, self._mark)
        if flat is not None:
            layout, flat_args, reason = flat
            if reason is not None:
                return reason
            region = self.flat_regions.get(layout) or self._flat_region(layout)
            return lambda: region(*flat_args)
        split_args, split_kwargs, reason = _split_args(args, kwargs, self._mark)
        if reason is not None:
            return reason
        return lambda: self.region(split_args, split_kwargs)

    def _flat_region(self, layout: tuple[str, ...]) -> Callable:
        region = self.flat_regions[layout] = torch.compile(
            _make_flat_region(self.fn, f"{self._name}_{''.join(layout)}", layout), **self.compile_kwargs)
        return region

    def _call_patched(self, call: Callable[[], Any]) -> Any:
        # only functions that needed the data-dependent settings come here (a context manager per call)
        with torch._dynamo.config.patch(**self.dynamo_config):
            return call()

    def fallback(self) -> Callable:
        """``torch.compile(fn, **compile_kwargs)``, made on first use.

        Returns:
            the compiled function that calls which cannot cross as components go to.
        """
        if self._fallback is None:
            self._fallback = torch.compile(self.fn, **self.compile_kwargs)
        return self._fallback

    def _fall_back(self, reason: str, args: tuple, kwargs: dict) -> Any:
        self._warn(reason)
        return self.fallback()(*args, **kwargs)

    def _fall_back_after(self, err: Exception, args: tuple, kwargs: dict) -> Any:
        # A failure that torch.compile(fn) shares is the user's error (e.g. a shape mismatch met while
        # tracing): it is raised as torch.compile raises it, and the boundary stays in use.
        out = self.fallback()(*args, **kwargs)
        self.broken = f"compiling on the NJT's components failed ({_describe(err)})"
        self._warn(self.broken)
        return out

    def _warn(self, reason: str) -> None:
        if reason in self._warned:
            return
        self._warned.add(reason)
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        warnings.warn(f"jaggedperf.compile({name}): falling back to torch.compile: {reason}",
                      BoundaryFallbackWarning, stacklevel=4)


def _data_dependent(err: Exception) -> bool:
    """Whether Dynamo failed on a value read from a tensor (what ``_DATA_DEPENDENT`` lets it trace)."""
    names = {"DataDependentOutputException", "GuardOnDataDependentSymNode", "DynamicOutputShapeException"}
    seen, e = 0, err
    while e is not None and seen < 8:  # the chain Dynamo wraps the tracer's error in
        if type(e).__name__ in names:
            return True
        e, seen = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__, seen + 1
    return "data-dependent" in str(err) or "DataDependentOutputException" in str(err)


def _describe(err: Exception) -> str:
    """``Type: first line``, naming the backend's own exception where Dynamo wrapped one."""
    inner = getattr(err, "inner_exception", None) or err.__cause__
    text = f"{type(err).__name__}"
    for e in (inner, err) if inner is not None else (err,):
        lines = [line for line in str(e).splitlines() if line.strip()]
        if lines:
            name = f"{type(e).__name__}: " if e is inner else ""
            return f"{text}: {name}{lines[0].strip()[:200]}"
    return text


class BoundaryModule(torch.nn.Module):
    """An ``nn.Module`` whose calls go through a :class:`BoundaryFunction` of the wrapped module.

    Like ``torch.compile``'s OptimizedModule, it holds the original as ``_orig_mod`` (so its
    state_dict keys gain that prefix) and reads unknown attributes from it.
    """

    def __init__(self, mod: torch.nn.Module, compile_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._orig_mod = mod
        self.boundary = BoundaryFunction(mod, compile_kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.boundary(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_orig_mod"), name)


def compile(fn: Callable | None = None, **torch_compile_kwargs: Any) -> Any:
    """``torch.compile`` for functions and modules that take jagged NestedTensors.

    Each jagged NJT argument (anywhere in the args/kwargs pytrees) crosses into the compiled region
    as its values, offsets and cached min/max seqlen, and is rebuilt inside; NJT results are taken
    apart inside and rebuilt outside. This removes the per-call cost of Dynamo's NJT guards and of
    the compiled runtime's subclass handling; results and gradients are those of ``torch.compile(fn)``.

    Args:
        fn: a function or ``nn.Module``; when None, returns a decorator (``@jaggedperf.compile(mode=...)``).
        **torch_compile_kwargs: passed to ``torch.compile`` unchanged (``mode``, ``dynamic``,
            ``fullgraph``, ``backend``, ``options``, ...). Unless ``dynamic=False``, the NJTs' ragged
            dims (total length, B, min/max seqlen) are marked dynamic, so they do not recompile.

    Returns:
        a :class:`BoundaryFunction` (a :class:`BoundaryModule` for a module), called like ``fn``.
        Calls that cannot cross as components (an NJT with lengths, an NJT ragged in a dim other
        than 1, a compile failure on the components) go to ``torch.compile(fn)`` with one
        :class:`BoundaryFallbackWarning` per reason.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if fn is None:
        return functools.partial(compile, **torch_compile_kwargs)
    if isinstance(fn, torch.nn.Module):
        return BoundaryModule(fn, torch_compile_kwargs)
    if not callable(fn):
        raise TypeError(f"jaggedperf.compile: expected a function or nn.Module, got {type(fn).__name__}")
    return BoundaryFunction(fn, torch_compile_kwargs)
