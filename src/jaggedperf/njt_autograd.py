"""An NJT's values out of it, and values back into an NJT, as autograd nodes: the differentiable crossings of
``jaggedperf.compile``'s boundary and of the public ops' NJT path where autograd records.

Where autograd must flow (grad mode on and the tensor requires grad), an NJT input crosses as the output of
``Unwrap`` and an NJT output is rebuilt by ``Join``. Both are one node each with a backward that builds or reads
the gradient by attribute access, where the NJT's own differentiable accessors (``nt.values()``,
``torch._nested_view_from_jagged``) go through its ``__torch_dispatch__`` on the way there and back (several times
the host cost: ``docs/performance.md``, the model, 7) and raise on being differentiated twice (their double
backward reads ``_nested_tensor_storage_offsets``, which a jagged NJT does not serve).

Invariants:
- ``Unwrap``'s output aliases the NJT's values (a ``detach``: same storage, no copy) and is not the NJT's own
  values tensor, so autograd's bookkeeping never touches the NJT's inner tensor; it carries the values' dynamic marks
  (``_CONSTRUCTOR_MARKS``), so training and inference cross alike.
- ``Unwrap``'s backward returns an NJT over the NJT's own offsets tensor and with its cached seqlens: the same
  nested int, so the gradient has the NJT's shape and metadata and accumulates into ``nt.grad`` as eager mode's.
- ``Join``'s backward takes the gradient NJT's values; a gradient with another layout (holes, another ragged dim)
  is made contiguous over the output's structure first.
- In a backward that builds a graph (``create_graph=True``), a gradient that requires grad crosses through the other
  node (``Join`` for ``Unwrap``'s, ``Unwrap`` for ``Join``'s), so higher-order gradients keep their edges as eager
  mode's do (a compiled backward then raises on being differentiated, as torch.compile's does), never losing them.
- ``unwrap`` and ``join`` are ``Unwrap.apply`` and ``Join.apply`` as ``torch.autograd.Function.apply`` runs them
  without functorch transforms (no ``setup_context``: the arguments as given, dead functorch wrappers unwrapped, then
  the C++ apply), minus its Python frames; under a functorch transform they are ``apply`` itself.
"""

from __future__ import annotations

import torch

from jaggedperf.njt import JAGGED_CLASS, wrap

__all__ = ["Join", "Unwrap", "join", "unwrap"]

# The NJT constructor's marks of its values' ragged dim as dynamic, read by Dynamo whatever ``dynamic`` says: unguarded
# ("propagated", torch 2.13+) or weak (``maybe_mark_dynamic``, torch 2.11). ``Unwrap``'s alias carries the same, so
# Dynamo sees the values crossing as it sees them crossing in inference (the NJT's own tensor) and on the NJT under
# torch.compile: under ``dynamic=False`` the total length does not recompile.
_CONSTRUCTOR_MARKS = ("_dynamo_propagated_dynamic_indices", "_dynamo_weak_dynamic_indices")
_NoSubclassTorchFunction = torch._C.DisableTorchFunctionSubclass


class Unwrap(torch.autograd.Function):
    """``nt -> values``, differentiable: the gradient of the values becomes an NJT gradient of ``nt``."""

    @staticmethod
    def forward(ctx, nt: torch.Tensor) -> torch.Tensor:  # noqa: D102 (autograd's protocol)
        ctx.offsets = nt._offsets
        ctx.cache = dict(nt._metadata_cache)
        inner = nt._values
        values = inner.detach()
        held = inner.__dict__
        if held:  # the marks, where the values hold any attribute at all
            for name in _CONSTRUCTOR_MARKS:
                marks = held.get(name)
                if marks is not None:
                    values.__dict__[name] = marks
        return values

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if grad.requires_grad:  # a backward with create_graph: the gradient NJT keeps grad's history
            return join(grad, ctx.offsets, ctx.cache)
        return wrap(grad, ctx.offsets, ctx.cache)


class Join(torch.autograd.Function):
    """``(values, offsets, seqlen cache) -> NJT``, differentiable in ``values``."""

    @staticmethod
    def forward(ctx, values: torch.Tensor, offsets: torch.Tensor, cache: dict) -> torch.Tensor:  # noqa: D102
        return wrap(values, offsets, cache)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:  # noqa: D102
        if isinstance(grad, JAGGED_CLASS):
            if grad._lengths is not None or grad._ragged_idx != 1:
                grad = grad.contiguous()
            with _NoSubclassTorchFunction():  # the NJT's requires_grad without its __torch_function__ (6 of 6.3 µs)
                keeps_history = grad.requires_grad
            if keeps_history:  # a backward with create_graph: the values keep grad's history
                return unwrap(grad), None, None
            if torch.is_grad_enabled():
                # a backward with create_graph, the gradient without history: the compiled backward takes its values
                # as a leaf that requires grad, as torch.compile's compiled backward on the NJT sees its tangent. Torch
                # 2.11's AOTAutograd keeps the history of what it returns (a second backward then raises, as
                # torch.compile's does) only where an input requires grad: without, the parameters' gradients came
                # back without history, and a gradient penalty added nothing, silently.
                return grad._values.detach().requires_grad_(), None, None
            return grad._values, None, None
        return grad, None, None  # not expected: autograd hands an NJT output an NJT gradient


try:  # what ``torch.autograd.Function.apply`` calls without transforms (private names; else ``apply`` itself serves)
    _transforms_active = torch._C._are_functorch_transforms_active
    _unwrap_if_dead = torch._C._functorch.unwrap_if_dead
    # ``Function.apply``'s ``super().apply``: the C++ apply, bound to each class once
    _unwrap_apply = super(torch.autograd.Function, Unwrap).apply
    _join_apply = super(torch.autograd.Function, Join).apply
except AttributeError:  # pragma: no cover
    unwrap, join = Unwrap.apply, Join.apply
else:
    def unwrap(nt: torch.Tensor) -> torch.Tensor:
        """``Unwrap.apply(nt)`` (the module's docstring)."""
        if _transforms_active():
            return Unwrap.apply(nt)
        return _unwrap_apply(_unwrap_if_dead(nt))

    def join(values: torch.Tensor, offsets: torch.Tensor, cache: dict) -> torch.Tensor:
        """``Join.apply(values, offsets, cache)`` (the module's docstring)."""
        if _transforms_active():
            return Join.apply(values, offsets, cache)
        return _join_apply(_unwrap_if_dead(values), _unwrap_if_dead(offsets), cache)
