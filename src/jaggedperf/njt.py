"""Jagged NestedTensors (NJTs) built without their dispatch where autograd has nothing to record.

An NJT's construction goes through its ``__torch_function__`` / ``__torch_dispatch__``: ``nested_tensor_from_jagged``
is a dispatched view op, and the constructor itself (torch 2.11) marks its dims dynamic through ``dim()`` calls that
its ``__torch_function__`` routes. On a small eager call that host work costs more than the kernel (~105 µs for
the constructor under torch 2.11, ~25 under 2.13, on the CPU). ``wrap`` is the cheapest form: the constructor with the NJT's
``__torch_function__`` off. It records no autograd edge: callers use it eagerly, where no gradient flows into the
values, and the public op otherwise.
"""

from __future__ import annotations

import torch

try:  # the jagged NestedTensor's class (a private module: without it, callers take the public ops)
    from torch.nested._internal.nested_tensor import NestedTensor as JAGGED_CLASS
except ImportError:  # pragma: no cover
    JAGGED_CLASS = ()

__all__ = ["JAGGED_CLASS", "cached_seqlen", "wrap"]


def wrap(values: torch.Tensor, offsets: torch.Tensor, metadata_cache: dict | None = None) -> torch.Tensor:
    """An NJT over ``values`` and ``offsets`` by its constructor, its ``__torch_function__`` off while it runs.

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
    with torch._C.DisableTorchFunctionSubclass():
        return JAGGED_CLASS(values, offsets, _metadata_cache=metadata_cache or {})


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
