"""Jagged NestedTensors (NJTs) built without their dispatch where autograd has nothing to record.

An NJT's construction goes through its ``__torch_function__`` / ``__torch_dispatch__``: ``nested_tensor_from_jagged`` is
a dispatched view op, and the constructor's ``__init__`` (torch 2.11) marks the new NJT's dims dynamic through ``dim()``
calls that its ``__torch_dispatch__`` serves: 8 Python dispatches, ~95 of the constructor's ~125 µs on the H200
machine's host (torch 2.13: ~35 µs, no dispatch). ``wrap`` builds the same NJT without them: the wrapper ``__new__``
makes (``_shell``: its one call, the nested int of the offsets tensor and its stride multiple kept between calls instead
of looked up and multiplied again; on plain tensors, else ``__new__`` itself), then the fields and the dynamic marks its
``__init__`` leaves, learned from the constructor itself on scratch tensors once a process for each values'
dimensionality (``_learn``: torch 2.11 marks the inner tensors that share the NJT's dimensionality, so a 2-D NJT's
(n, 0) cached seqlens get marks a 3-D one's do not) and used only where a build both ways compared equal in every
attribute (the NJT's, its values', its cached seqlens'), sizes, strides and dispatch keys; else the constructor serves.
``wrap`` records no autograd edge: callers use it eagerly, where no gradient flows into the values, and in the
autograd nodes of ``jaggedperf.njt_autograd``.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any, NamedTuple

import torch

try:  # the jagged NestedTensor's class and its nested-int lookup (a private module: without it, callers take the
    # public ops, and ``wrap`` raises before it would need the lookup)
    from torch.nested._internal.nested_tensor import NestedTensor as JAGGED_CLASS
    from torch.nested._internal.nested_tensor import get_tensor_symint as _get_tensor_symint
except ImportError:  # pragma: no cover
    JAGGED_CLASS = ()

__all__ = ["JAGGED_CLASS", "cached_seqlen", "wrap"]


def wrap(values: torch.Tensor, offsets: torch.Tensor, metadata_cache: dict | None = None) -> torch.Tensor:
    """The NJT over ``values`` and ``offsets`` that its constructor builds (the module's docstring says how).

    Its ragged structure is ``offsets``' (torch keeps one nested int per offsets tensor): over another NJT's own
    offsets tensor the result has that NJT's shape, and the two combine elementwise.

    Args:
        values: (N, ...) contiguous.
        offsets: (B + 1,) on values' device.
        metadata_cache: the seqlens' cache (``min_seqlen`` / ``max_seqlen`` as NJTs keep them: (n, 0) tensors), or None.

    Returns:
        the NJT (B, j, ...); it records no autograd edge to ``values``.

    Raises:
        RuntimeError: this torch has no jagged NestedTensor class.
    """
    if JAGGED_CLASS == ():
        raise RuntimeError("this torch has no jagged NestedTensor class (torch.nested._internal.nested_tensor)")
    marks = _MARKS.get(values.dim())
    if marks is None:
        marks = _marks(values.dim())
    if marks is False:
        return _constructed(values, offsets, metadata_cache)
    return _built(values, offsets, metadata_cache, marks)


# --- the constructor's end state, without its dispatches -----------------------------------------------------------

_FIELDS = ("_values", "_offsets", "_lengths", "_metadata_cache")  # what __init__ sets from its arguments


class _Marks(NamedTuple):
    """What the constructor's ``__init__`` sets beyond its fields: (name, value, unites) triples, ``unites`` where it
    adds a set's members to the set the tensor holds, else it assigns the value; and how it marks a cached seqlen."""

    own: tuple  # on the new NJT
    values: tuple  # on its values
    seqlens: tuple  # on a cached seqlen beyond ``mark_dynamic(seqlen, 0)`` (2.11, a 2-D NJT: its ragged dim, weakly)
    seqlen_keeps_marked: bool  # a cached seqlen whose dim 0 is marked dynamic already is left as it is (torch 2.15)
    # What ``mark_dynamic(seqlen, 0)`` leaves on a fresh seqlen, (name, value) pairs, where calling it again leaves
    # them as they are (a fixed point): a seqlen already holding exactly these values skips the call (~2.3 µs on a
    # CPU; an output NJT's seqlens, marked when its input was built, are marked again on every build); None: never
    remarked_as: tuple | None = None


_Tensor = torch.Tensor
_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass
# What the constructor's __new__ gives the wrapper: its dispatch keys, and its nested int, one per offsets tensor
# (torch's registry), with the nested int's multiples by the values' first stride (its outer stride). ``_RAGGED``:
# by id(offsets), (a weak reference to offsets, its nested int, {stride: multiple}); bounded.
_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.NestedTensor).add(torch._C.DispatchKey.AutogradNestedTensor)
_RAGGED: dict[int, tuple] = {}
_RAGGED_MAX = 4096
_MARKS: dict[int, _Marks | bool] = {}  # by values.dim(); absent: not learned yet; False: the constructor serves
_mark_dynamic = None  # torch._dynamo.mark_dynamic, bound when learning (importing Dynamo costs a second)


def _constructed(values: torch.Tensor, offsets: torch.Tensor, cache: dict | None) -> torch.Tensor:
    with torch._C.DisableTorchFunctionSubclass():
        return JAGGED_CLASS(values, offsets, _metadata_cache=cache or {})


def _built(values: torch.Tensor, offsets: torch.Tensor, cache: dict | None, marks: _Marks) -> torch.Tensor:
    cache = cache or {}
    if type(values) is _Tensor and type(offsets) is _Tensor and values.device == offsets.device and offsets.dim() == 1:
        nt = _shell(values, offsets)
    else:  # a fake or functional tensor (the NJT's own lookup of its nested int), or arguments __new__ refuses
        with torch._C.DisableTorchFunctionSubclass():
            nt = JAGGED_CLASS.__new__(JAGGED_CLASS, values, offsets, _metadata_cache=cache)
    held = nt.__dict__
    held["_values"], held["_offsets"], held["_lengths"], held["_metadata_cache"] = values, offsets, None, cache
    _apply(held, marks.own)
    _apply(values.__dict__, marks.values)
    for key in ("max_seqlen", "min_seqlen"):  # the constructor's own call, in its order
        seqlen = cache.get(key)
        if seqlen is None:
            continue
        held = seqlen.__dict__
        if not (marks.seqlen_keeps_marked and 0 in held.get("_dynamo_dynamic_indices", ())) and not (
                marks.remarked_as is not None and _holds(held, marks.remarked_as)):
            _mark_dynamic(seqlen, 0)
        _apply(held, marks.seqlens)
    return nt


def _shell(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The wrapper the constructor's ``__new__`` makes over plain ``values`` (N, ...) and ``offsets`` (B + 1,) on one
    device: the same call with the same arguments, its nested int and that int's multiple by the values' first
    stride taken from ``_RAGGED`` instead of made again (torch's registry lookup and a symbolic multiplication:
    ~5 of ``__new__``'s ~15 µs on a CPU). ``_same_builds`` compares the result with the constructor's before use."""
    held = _RAGGED.get(id(offsets))
    if held is None or held[0]() is not offsets:  # a new offsets tensor, or another one at a freed one's address
        if len(_RAGGED) >= _RAGGED_MAX:
            _RAGGED.clear()
        held = _RAGGED[id(offsets)] = (weakref.ref(offsets), _get_tensor_symint(offsets, coeff=1), {})
    ragged, multiples = held[1], held[2]
    stride = values.stride()
    outer = multiples.get(stride[0])
    if outer is None:
        outer = multiples[stride[0]] = ragged * stride[0]
    size = (offsets.shape[0] - 1, ragged, *values.shape[1:])
    strides = (outer, *stride)
    nt = _make_wrapper_subclass(JAGGED_CLASS, size, strides, 0, torch.contiguous_format, values.dtype, torch.jagged,
                                values.device, False, False, "sizes", False, True, _KEYS,
                                storage_size=values.untyped_storage().size())
    nt._ragged_idx = 1
    nt._size = size
    nt._strides = strides
    return nt


_ABSENT = object()


def _holds(held: dict, pairs: tuple) -> bool:
    """Whether ``held`` (a tensor's ``__dict__``) has each (name, value) of ``pairs``, equal."""
    for name, value in pairs:
        if held.get(name, _ABSENT) != value:
            return False
    return True


def _apply(held: dict, marks: tuple) -> None:
    for name, value, unites in marks:
        if unites and isinstance(held.get(name), set):
            held[name] |= value
        else:
            held[name] = set(value) if isinstance(value, set) else copy.deepcopy(value)


def _scratch(ndim: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    values = torch.zeros(5, *(3,) * (ndim - 1))
    return values, torch.tensor([0, 2, 5]), {"min_seqlen": torch.empty(2, 0), "max_seqlen": torch.empty(3, 0)}


def _set_by(before: dict, after: dict, skip: tuple = ()) -> dict[str, Any]:
    """What ``after`` holds that ``before`` did not (or held otherwise), sizes and strides compared as text."""
    return {k: v for k, v in after.items()
            if k not in skip and not _is_cache(v) and (k not in before or _comparable(before[k]) != _comparable(v))}


def _is_cache(value: Any) -> bool:
    """A C++ cache the tensor keeps of its own sizes or strides (torch 2.11's ``_sym_sizes_capsule``, made on the
    first read of them): one per tensor, never copied, made again where absent."""
    return type(value).__name__ == "PyCapsule"


def _learn(ndim: int) -> _Marks | bool:
    """The constructor's marks over values of ``ndim`` dims (``_Marks``), or False where a build with them differs
    from the constructor's. Learned outside any dispatch mode (a first call while torch.compile traces sees real
    scratch tensors)."""
    global _mark_dynamic
    from torch.utils._python_dispatch import _disable_current_modes

    try:
        with _disable_current_modes():
            _mark_dynamic = torch._dynamo.mark_dynamic
            return _learned(ndim)
    except Exception:  # noqa: BLE001 (any surprise in torch's private class: the constructor serves)
        return False


def _learned(ndim: int) -> _Marks | bool:
    values, offsets, cache = _scratch(ndim)
    with torch._C.DisableTorchFunctionSubclass():
        bare = JAGGED_CLASS.__new__(JAGGED_CLASS, values, offsets, _metadata_cache=cache)
    before = dict(values.__dict__)
    nt = _constructed(values, offsets, cache)
    own = _set_by(bare.__dict__, nt.__dict__, _FIELDS)
    on_values = _set_by(before, values.__dict__)
    plain = torch.empty(3, 0)  # a seqlen as the constructor's own mark_dynamic(seqlen, 0) alone leaves it
    _mark_dynamic(plain, 0)
    on_seqlen = _set_by(plain.__dict__, cache["max_seqlen"].__dict__)
    marked = tuple((k, copy.deepcopy(v)) for k, v in plain.__dict__.items() if not _is_cache(v))
    _mark_dynamic(plain, 0)  # again: a fixed point (the same attributes, equal) lets an equal seqlen skip the call
    remarked_as = marked if {k: v for k, v in plain.__dict__.items() if not _is_cache(v)} == dict(marked) else None
    # Probed on fresh scratch: does a set the values held before survive (united) or go (assigned)? Does a
    # cached seqlen marked with a range of its own keep it (left as it is) or lose it (marked again)?
    probe_values, probe_offsets, probe_cache = _scratch(ndim)
    sentinel = object()
    for name, value in on_values.items():
        if isinstance(value, set):
            probe_values.__dict__[name] = {sentinel}
    _mark_dynamic(probe_cache["max_seqlen"], 0, min=2, max=9)
    ranged = copy.deepcopy(probe_cache["max_seqlen"].__dict__)
    _constructed(probe_values, probe_offsets, probe_cache)
    unites = {k for k, v in on_values.items() if isinstance(v, set) and sentinel in probe_values.__dict__[k]}
    marks = _Marks(tuple((k, v, isinstance(v, set)) for k, v in own.items()),
                   tuple((k, v, k in unites) for k, v in on_values.items()),
                   tuple((k, v, isinstance(v, set)) for k, v in on_seqlen.items()),
                   probe_cache["max_seqlen"].__dict__ == ranged, remarked_as)
    return marks if _same_builds(marks, ndim) else False


def _same_builds(marks: _Marks, ndim: int) -> bool:
    """Whether ``_built`` and the constructor leave equal NJTs, values and cached seqlens on fresh scratch tensors of
    ``ndim`` dims (every attribute, sizes, strides, dtype, device, requires_grad, dispatch keys), with and without
    seqlens, and with seqlens an earlier build marked."""
    for seqlens in (True, False, "marked"):
        (va, offsets, ca), (vb, _, cb) = _scratch(ndim), _scratch(ndim)
        if not seqlens:
            ca, cb = {}, {}
        elif seqlens == "marked":  # seqlens an earlier build marked (an output NJT keeping its input's): built again
            for cache in (ca, cb):
                for t in cache.values():
                    _mark_dynamic(t, 0)
        a, b = _constructed(va, offsets, ca), _built(vb, offsets, cb, marks)
        swap = {id(vb): va, **{id(cb[k]): ca[k] for k in cb}}

        def state(t: torch.Tensor) -> dict:
            return {k: _comparable(swap.get(id(v), v)) for k, v in t.__dict__.items()
                    if k != "_metadata_cache" and not _is_cache(v)}

        if not (type(a) is type(b) and _comparable(a.shape) == _comparable(b.shape)
                and _comparable(a.stride()) == _comparable(b.stride()) and a.dtype == b.dtype
                and a.device == b.device and a.requires_grad == b.requires_grad
                and torch._C._dispatch_keys(a) == torch._C._dispatch_keys(b)
                and state(a) == state(b) and a._metadata_cache.keys() == b._metadata_cache.keys()
                and all(state(ca[k]) == state(cb[k]) for k in ca) and state(va) == state(vb)):
            return False
    return True


def _comparable(value: Any) -> Any:
    """``value`` with its SymInts as text: a nested int's multiple (a stride ``4*j0``) made twice need not compare
    equal as SymInts (torch 2.11), where its text names the nested int and the factor."""
    if isinstance(value, torch.SymInt):
        return str(value)
    if isinstance(value, tuple):
        return tuple(_comparable(v) for v in value)
    return value


def _marks(ndim: int) -> _Marks | bool:
    _MARKS[ndim] = _learn(ndim)
    return _MARKS[ndim]


def cached_seqlen(nt: torch.Tensor, which: str):
    """The NJT's cached ``"min"`` or ``"max"`` seqlen: a host int eagerly (no sync), a SymInt while traced, or None
    where it caches none (or ``nt`` is no NJT: private API, and None is always safe).

    Read as the size of the NJT's cached ``(n, 0)`` tensor, never through its ``_maybe_*_seqlen`` properties: Dynamo
    evaluates a property of an NJT made inside the compiled code on its example value and cannot wrap the SymInt
    it returns (a graph break), where the cached tensor is one of the NJT's traced inner tensors.
    """
    cached = getattr(nt, f"_{which}_seqlen_tensor", None)
    if not isinstance(cached, torch.Tensor):
        return None
    value = cached.shape[0]
    return value if type(value) is int or isinstance(value, torch.SymInt) else None
