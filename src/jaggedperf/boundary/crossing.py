"""How a call's arguments cross into the compiled region: each NJT as plain tensors, described by a layout.

``flatten`` turns one call's arguments into a ``Crossing``: the region's key (the arguments' pytree structure,
or None for the common positional call, and one code per leaf) and the flat list of what the region receives.
The codes, one per leaf of ``(args, kwargs)``:

- ``"a"``: anything that is not a jagged NJT (a tensor, a number, a string, ...), handed over as it is;
- ``"j--"``, ``"jm-"``, ``"j-x"``, ``"jmx"``: an NJT crossing as its values, its offsets, then (``m``) its cached
  min_seqlen ``n`` as a ``(n + MIN_SEQLEN_SHIFT, 0)`` tensor and (``x``) its cached max_seqlen ``n`` as a ``(n, 0)``
  tensor (``seqlen_tensor``);
- ``"=k"``: the same NJT object as leaf ``k``: it crosses once, and the region hands ``fn`` one rebuilt NJT in both
  places, so ``q is k`` inside ``fn`` is what it is in eager mode.

Invariants:
- a seqlen crosses as the dim 0 of a tensor with no elements, marked dynamic. Dynamo specialises a size of 0 or 1
  (the seqlen is then a constant, and reading it inside ``fn`` breaks the graph) and takes every other size to be
  >= 2. The max_seqlen ``n`` crosses as the size ``n``, as ``torch.compile`` on the NJT sees it, and that very
  tensor is the rebuilt NJT's cached max_seqlen, so code that pads to it (``to_padded_tensor``, a softmax over the
  ragged dim) has strides ``M * n`` that Inductor knows are positive and reuses the padded buffer in place; as
  ``n + 2`` the stride was ``M * max(1, n)``, one more padded buffer written a call (a ragged softmax 1.5x
  torch.compile's time on a CPU). A max_seqlen of 0, 1 and more take a graph each, as for ``torch.compile``. The
  min_seqlen, which sizes no tensor, crosses as ``n + 2``: never specialised, so one graph serves every min_seqlen
  but 0 (the NJT built inside guards on a seqlen being 0: a zero-sized tensor made there), where ``torch.compile``
  on the NJT takes up to three (0, 1, more). A function that reads the rebuilt NJT's ``_min_seqlen`` property needs
  the cached tensor to be a graph input (Dynamo cannot return a size of a tensor made in the graph from a
  property): after that failure its min_seqlen crosses as the size ``n`` itself, as torch.compile sees it;
- values cross as the NJT's own ``_values`` tensor, except where autograd must flow (grad mode on and the NJT
  requires grad): then as ``Unwrap``'s output, an alias of them with an autograd edge to the NJT;
- unless told otherwise (``dynamic=False``), the ragged sizes cross marked dynamic on every call, so every compile
  sees the same markings and B, the total length and the seqlens do not recompile; under ``dynamic=False`` the
  seqlens still cross marked, as torch.compile on the NJT sees them (the NJT constructor marks its cached seqlens
  dynamic whatever ``dynamic`` says: one graph for every max_seqlen above 1, where static sizes took one per
  (min, max) pair and, in a training loop's batches, reached Dynamo's recompile limit), and the values keep the NJT
  constructor's unguarded mark on their ragged dim, in training too (``njt_autograd.Unwrap``);
- ``flatten`` runs on every call: the positional path is attribute reads and type checks; a pytree walk only where
  an argument is a container or a keyword.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.utils._pytree as pytree

from jaggedperf.njt_autograd import unwrap
from jaggedperf.njt import JAGGED_CLASS as NestedTensor

__all__ = ["ANY", "Crossing", "LEAF_TYPES", "MIN_SEQLEN_SHIFT", "fallback_reason", "flatten", "njt_code",
           "seqlen_tensor"]

ANY = "a"
# The leaf types of a positional argument list that need no pytree walk (the fast path).
LEAF_TYPES = (int, float, bool, str, type(None), torch.dtype, torch.device)
# A min_seqlen n crosses as a (n + MIN_SEQLEN_SHIFT, 0) tensor: never a size Dynamo specialises (0 or 1).
MIN_SEQLEN_SHIFT = 2
_CODES = {(False, False): "j--", (True, False): "jm-", (False, True): "j-x", (True, True): "jmx"}
# The seqlen tensors, one per (place in the flat list, size): shared by every call (they hold no data), so an
# unchanged seqlen allocates nothing and keeps its dynamic mark, and two places never hold one tensor (Dynamo guards
# on inputs that are the same object: a min_seqlen equal to a max_seqlen, or two NJTs' equal seqlens, would compile a
# graph of their own). Each with the number of attributes it held when made: its marks (``seqlen_tensor``). Bounded:
# cleared when a workload has seen this many.
_SEQLEN_TENSORS: dict[tuple[int, int], tuple[torch.Tensor, int]] = {}
_SEQLEN_TENSORS_MAX = 4096
# Where maybe_mark_dynamic records its weak marks (Dynamo's since torch 2.1): a tensor that carries the mark on dim 0
# skips the decorated call, an attribute read instead; if the name ever changes the check misses and the public call
# runs
_WEAK_MARK = "_dynamo_weak_dynamic_indices"
# What AOTAutograd's runtime sets on a compiled function's output, an input returned among them (a seqlen tensor that
# an output NJT caches): unguarded (``mark_dynamo_propagated_dynamic_indices``), never present on a fresh seqlen tensor
_PROPAGATED = "_dynamo_propagated_dynamic_indices"
# Bound once: what every call looks up.
_Tensor = torch.Tensor
_is_grad_enabled = torch.is_grad_enabled
_NoSubclassTorchFunction = torch._C.DisableTorchFunctionSubclass


class Crossing(NamedTuple):
    """One call's arguments as the compiled region takes them.

    Attributes:
        spec: the pytree structure of ``(args, kwargs)``, or None for positional arguments that are all leaves.
        leaves: the leaves of ``(args, kwargs)`` (``args`` itself when ``spec`` is None).
        layout: one code per leaf (the module's docstring).
        flat: what the region is called with, in layout order.
        reason: why this call cannot cross (it goes to ``torch.compile(fn)``), or None.
    """

    spec: Any
    leaves: Any
    layout: tuple[str, ...]
    flat: list
    reason: str | None

    @property
    def key(self) -> tuple:
        """The region this call runs in: one compiled region per pytree structure and layout."""
        return (self.spec, self.layout)


def fallback_reason(nt: torch.Tensor) -> str | None:
    """Why ``nt`` cannot cross as components, or None when it can."""
    if nt._lengths is not None:
        return "an NJT argument has lengths (holes): its values are not covered by its offsets alone"
    if nt._ragged_idx != 1:
        return f"an NJT argument's ragged dim is {nt._ragged_idx}, not 1 (e.g. a transposed NJT)"
    return None


def njt_code(has_min: bool, has_max: bool) -> str:
    """The layout code of an NJT that caches these seqlens."""
    return _CODES[has_min, has_max]


def seqlen_tensor(size: int, place: int) -> torch.Tensor:
    """The ``(size, 0)`` tensor a seqlen crosses as at ``place`` in the flat list, ``size`` the seqlen or, for a
    min_seqlen, the seqlen + ``MIN_SEQLEN_SHIFT``; marked dynamic (``maybe_mark_dynamic``: a function that guards on
    the seqlen specialises it, as on any weakly marked size), shared between calls, allocated and marked once per
    place and size."""
    key = (place, size)
    held = _SEQLEN_TENSORS.get(key)
    if held is None:
        if len(_SEQLEN_TENSORS) >= _SEQLEN_TENSORS_MAX:
            _SEQLEN_TENSORS.clear()
        t = torch.empty(size, 0)
        torch._dynamo.maybe_mark_dynamic(t, 0)
        _SEQLEN_TENSORS[key] = (t, len(t.__dict__))
        return t
    t, count = held
    attrs = t.__dict__
    if len(attrs) != count:
        if len(attrs) == count + 1 and _PROPAGATED in attrs:
            # The compiled region returned it (an output NJT caching it, as the input's max_seqlen): AOTAutograd's
            # runtime marks such an output with this one attribute, on every call. Removed, it crosses as it was
            # made, as below, without the clearing and marking again that a call would otherwise pay.
            del attrs[_PROPAGATED]
        else:
            # An NJT built around it since (an output NJT keeps it as its cached seqlen) marked it with mark_dynamic:
            # ``_dynamo_dynamic_indices``, ``_dynamo_dynamic_range``, ``_has_dynamo_dim_marking``, ... . Dynamo guards
            # on such marks: with them the next call's guards would differ from the compile's (a graph more, or,
            # under ``dynamic=False``, a guard that fails on the frame it was made on: a fallback). It crosses as it
            # was made, with its own marks alone. Each of Dynamo's marking calls adds an attribute of its own, so the
            # count tells.
            attrs.clear()
            torch._dynamo.maybe_mark_dynamic(t, 0)
    return t


def _cross_njt(nt: torch.Tensor, grad: bool, mark: bool, flat: list, min_shift: int) -> str:
    """Append ``nt``'s parts to ``flat``; return its layout code. (Reads inlined: this runs on every call.)"""
    values = nt._values
    if grad:
        with _NoSubclassTorchFunction():  # requires_grad read without the NJT's __torch_function__ (~20x cheaper)
            needs_edge = nt.requires_grad
        if needs_edge:
            values = unwrap(nt)
    offsets = nt._offsets
    if mark:  # maybe_mark_dynamic(t, 0) where t does not carry that mark yet (``_WEAK_MARK``)
        if 0 not in getattr(values, _WEAK_MARK, ()):
            torch._dynamo.maybe_mark_dynamic(values, 0)
        if 0 not in getattr(offsets, _WEAK_MARK, ()):
            torch._dynamo.maybe_mark_dynamic(offsets, 0)
    flat.append(values)
    flat.append(offsets)
    cache = nt._metadata_cache
    if not cache:
        return "j--"
    low, high = cache.get("min_seqlen"), cache.get("max_seqlen")
    if low is not None:
        flat.append(seqlen_tensor(low.shape[0] + min_shift, len(flat)))
    if high is not None:
        flat.append(seqlen_tensor(high.shape[0], len(flat)))
    return _CODES[low is not None, high is not None]


def _cross_leaves(leaves, spec: Any, mark: bool, min_shift: int) -> Crossing:
    layout: list[str] = []
    flat: list = []
    reason = None
    grad = None
    seen: dict[int, int] | None = None
    i = 0
    for leaf in leaves:
        if not isinstance(leaf, NestedTensor):
            layout.append(ANY)
            flat.append(leaf)
        elif seen is not None and id(leaf) in seen:
            layout.append(f"={seen[id(leaf)]}")
        elif (why := fallback_reason(leaf)) is not None:
            reason = why
            layout.append(ANY)
            flat.append(leaf)
        else:
            if grad is None:
                grad = _is_grad_enabled()
                seen = {}
            seen[id(leaf)] = i
            layout.append(_cross_njt(leaf, grad, mark, flat, min_shift))
        i += 1
    return Crossing(spec, leaves, tuple(layout), flat, reason)


def flatten(args: tuple, kwargs: dict, mark: bool, min_shift: int = MIN_SEQLEN_SHIFT) -> Crossing:
    """One call's arguments as the compiled region takes them (see the module's docstring).

    Args:
        args, kwargs: the call's arguments.
        mark: whether the values' and offsets' first dims cross marked dynamic (the seqlens always do).
        min_shift: a cached min_seqlen ``n`` crosses as a ``(n + min_shift, 0)`` tensor: ``MIN_SEQLEN_SHIFT``, or 0
            where ``fn`` reads the min_seqlen in a way only a size of a graph input answers (``region``).

    Returns:
        the ``Crossing``; its ``reason`` says why the call must go to ``torch.compile(fn)`` instead, if it must.
    """
    if not kwargs:
        for a in args:
            if not (isinstance(a, _Tensor) or type(a) in LEAF_TYPES):
                break
        else:
            return _cross_leaves(args, None, mark, min_shift)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    return _cross_leaves(leaves, spec, mark, min_shift)
