"""The compiled region's outputs back into what ``fn`` returns in eager mode, outside the compiled code.

Invariants:
- ``Same(index)`` is the caller's own argument object (``fn`` returned its input); ``Again(place)`` the object
  already made for the output's tensor at ``place``;
- a ``Parts`` becomes an NJT over its offsets tensor, caching the seqlens the traced NJT cached; by ``Join`` (an
  autograd node) where its values require grad, else by the constructor alone; one with a ``source`` over that
  argument's offsets tensor with its cached seqlens, as one returning them would have become;
- a tensor whose ``requires_grad`` differs from the traced one is repaired (``repair``): AOTAutograd returns an
  output that aliases an input through an NJT's view ops (``unsqueeze``, ``select``, ``narrow``, ``values()``, ...)
  detached from the input's autograd graph, where eager mode returns a view that requires grad;
- this runs on every call: a single-tensor result takes no pytree walk.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from jaggedperf.boundary.crossing import LEAF_TYPES, Crossing
from jaggedperf.njt_autograd import join
from jaggedperf.boundary.parts import Again, Dense, Parts, Same
from jaggedperf.njt import wrap

__all__ = ["CrossingError", "join_output", "repair"]

_RECORDS = (Dense, Parts, Same, Again)
_Tensor = torch.Tensor


class CrossingError(RuntimeError):
    """An output could not be given eager mode's autograd state: the call goes to ``torch.compile(fn)``."""


def join_output(out: Any, crossing: Crossing) -> Any:
    """``out`` (what the compiled region returned for this ``crossing``) as ``fn`` returns it."""
    kind = type(out)
    if kind is Parts:
        return _njt(out, crossing)
    if kind is Dense:
        return _dense(out, crossing)
    if kind is Same:
        return crossing.leaves[out.index]
    if isinstance(out, _Tensor) or kind in LEAF_TYPES:
        return out
    joined: list = []  # what each of the output's tensors became, in pytree order (``Again`` points into it)

    def join(x: Any) -> Any:
        if type(x) is Again:
            result = joined[x.place]
        elif type(x) in _RECORDS:
            result = join_output(x, crossing)
        elif isinstance(x, _Tensor):
            result = x
        else:
            return x
        joined.append(result)
        return result

    return pytree.tree_map(join, out, is_leaf=lambda x: type(x) in _RECORDS)


def _dense(d: Dense, crossing: Crossing) -> torch.Tensor:
    t = d.tensor
    if t.requires_grad is not d.requires_grad:
        return repair(t, d.requires_grad, crossing)
    return t


def _njt(p: Parts, crossing: Crossing) -> torch.Tensor:
    values, offsets, low, high, requires_grad, source = p
    grads = values.requires_grad
    if grads is not requires_grad:
        values = repair(values, requires_grad, crossing)
        grads = values.requires_grad
    cache = {}
    if source is not None:
        # the argument's structure (``Parts.source``): its offsets, and of its cached seqlens those its rebuilt NJT
        # cached, which are those it cached as it crossed (its layout code), in the constructor's order
        nt = crossing.leaves[source]
        offsets = nt._offsets
        own = nt._metadata_cache
        code = crossing.layout[source]
        if code[1] == "m":
            cache["min_seqlen"] = own["min_seqlen"]
        if code[2] == "x":
            cache["max_seqlen"] = own["max_seqlen"]
    elif low is not None or high is not None:
        own = _input_cache(offsets, crossing)
        if low is not None:  # min_seqlen first, then max_seqlen: the constructor's order of the cache's keys
            mine = own.get("min_seqlen")
            cache["min_seqlen"] = mine if mine is not None and mine.shape[0] == low.shape[0] else low
        if high is not None:
            mine = own.get("max_seqlen")
            cache["max_seqlen"] = mine if mine is not None and mine.shape[0] == high.shape[0] else high
    if grads:
        return join(values, offsets, cache)
    return wrap(values, offsets, cache)


def _input_cache(offsets: torch.Tensor, crossing: Crossing) -> dict:
    """The seqlen cache of the argument NJT whose offsets tensor ``offsets`` is (an output over its ragged
    structure), else an empty one. Such an output caches that NJT's own seqlen tensors where their sizes agree, as
    eager mode's and torch.compile's outputs do: never the crossing's shared ones (``crossing.seqlen_tensor``), which
    the next call would mark again under the output's feet and which would make two outputs hold one tensor."""
    for leaf, code in zip(crossing.leaves, crossing.layout):
        if code[0] == "j" and leaf._offsets is offsets:
            return leaf._metadata_cache
    return {}


def repair(t: torch.Tensor, requires_grad: bool, crossing: Crossing) -> torch.Tensor:
    """``t`` with the ``requires_grad`` eager mode gives it.

    An output that must require grad and does not is an alias of an input that AOTAutograd returned detached: it
    becomes the same view (``as_strided`` over the same storage) of the crossing tensor it aliases, so its gradient
    reaches that input. One that must not require grad is detached.

    Raises:
        CrossingError: ``t`` must require grad and aliases no crossing tensor that does.
    """
    if not requires_grad:
        return t.detach()
    storage = t.untyped_storage().data_ptr()
    for base in crossing.flat:
        # the input whose elements hold every element of ``t``: NJT arguments that are views of one tensor (q, k and
        # v chunked from one projection) share a storage, and a view of another one would take the gradient away
        if (isinstance(base, _Tensor) and base.requires_grad and base.dtype == t.dtype
                and base.untyped_storage().data_ptr() == storage and _holds(base, t)):
            return base.as_strided(t.size(), t.stride(), t.storage_offset())
    raise CrossingError("an output that requires grad in eager mode came back without it, aliasing no input")


def _holds(base: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether every corner of ``t`` (each dim's first and last index: a strided view's extremes in every dim) is
    an element of ``base`` (both over one storage): the elements of a strided view lie between its corners."""
    if t.numel() == 0:
        return True
    dims = [(size - 1) * stride for size, stride in zip(t.shape, t.stride()) if size > 1]
    corners = [t.storage_offset()]
    for step in dims:
        corners += [c + step for c in corners]
    layout = sorted(((stride, size) for size, stride in zip(base.shape, base.stride()) if size > 1), reverse=True)
    return all(_element_of(layout, base.storage_offset(), offset) for offset in corners)


def _element_of(layout: list[tuple[int, int]], start: int, offset: int) -> bool:
    """Whether storage ``offset`` is an element of the view starting at ``start`` with ``layout``'s (stride, size)
    pairs, largest stride first (a view whose elements do not overlap: each offset has one index)."""
    rest = offset - start
    if rest < 0:
        return False
    for stride, size in layout:
        index = rest // stride if stride else 0
        if index >= size:
            return False
        rest -= index * stride
    return rest == 0
