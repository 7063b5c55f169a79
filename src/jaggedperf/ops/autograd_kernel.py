"""The operators' autograd kernels: one ``torch.autograd.Function`` call where autograd must record, else the
operator below autograd. Shared by the reductions (``reduce.autograd``) and the row-wise family
(``rowwise.Adjoint``), each with its own Function.

Why a kernel of our own and not ``register_autograd`` alone: the kernel it generates runs the operator below
autograd when no input requires grad, which is the case for forward-mode AD's dual tensors (``torch.func.jvp``,
``torch.autograd.forward_ad``): the tangent was dropped and read as zeros.

Invariants:
- The Function is applied by its C++ ``apply`` (``function_apply``), past ``Function.apply``'s torch.func redirect:
  the kernel runs inside the dispatcher's autograd key, where torch.func's transforms have already unwrapped their
  tensors to this level's (dual tensors for jvp, tensors requiring grad for grad and vjp), as for any aten op's
  autograd kernel; torch.func's own single-level switch is what lets it run there.
- A Function's forward is run by autograd in no-grad and no-forward-grad mode, and its redispatch below autograd
  reaches the outer torch.func levels, whose autograd kernels must record the operator there (a Hessian, a
  ``jacfwd(grad)``). Under transforms the forward therefore runs its redispatch in the modes the call came with
  (``Modes``): without that, the outer levels recorded nothing, and second-order gradients came back as zeros,
  silently. A Function whose jvp rule computes with ops (not only the operator on the tangent) runs it in those
  modes too: autograd runs a jvp rule in no-forward-grad mode, and forward-over-forward (``jacfwd(jacfwd)``) lost
  the outer tangent of the rule's own ops.
- Under any torch.func transform the Function serves, whatever ``requires_grad`` says at this level: torch.compile's
  tracing of the transforms (``torch.compile(torch.func.hessian(f))``) opens its forward-mode levels without the
  eager counter the other test reads, and the operator below autograd there dropped the tangents (Hessians came
  back wrong, silently, or the trace failed).
- The Function's inputs are ``(head, keyset, modes, *the operator's args)``: ``head`` what its forward needs to name
  the operator, ``modes`` a ``Modes`` under transforms, else None.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, NamedTuple

import torch
from torch._functorch.utils import enable_single_level_autograd_function
from torch.autograd import forward_ad

__all__ = ["Modes", "below_autograd", "function_apply", "in_modes", "outer_forward_level", "run"]


class Modes(NamedTuple):
    """The grad and forward-grad modes an operator call came with, for the outer torch.func levels."""

    grad: bool
    forward_grad: bool


def function_apply(function: type[torch.autograd.Function]) -> Callable:
    """``function``'s C++ apply (``Function.apply``'s ``super().apply``), bound once."""
    return super(torch.autograd.Function, function).apply


@contextmanager
def in_modes(modes: Modes):
    """Grad and forward-grad mode set to ``modes`` inside (the outer torch.func levels' view of the call)."""
    with torch.set_grad_enabled(modes.grad), forward_ad._set_fwd_grad_enabled(modes.forward_grad):
        yield


def outer_forward_level() -> bool:
    """Whether a torch.func forward-mode transform (jvp, jacfwd) runs outside the current level."""
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    current = torch._C._functorch.current_level()
    return any(i.key() == torch._C._functorch.TransformType.Jvp and i.level() < current
               for i in retrieve_all_functorch_interpreters())


def below_autograd(name: str, keyset, args: tuple, modes: Modes | None = None) -> Any:
    """``torch.ops.jaggedperf.<name>`` on ``args`` below autograd; ``modes``: run in those modes (the module's
    docstring)."""
    operator = getattr(torch.ops.jaggedperf, name).default
    below = keyset & torch._C._after_autograd_keyset
    with torch._C._AutoDispatchBelowAutograd():
        if modes is None:
            return operator.redispatch(below, *args)
        with in_modes(modes):
            return operator.redispatch(below, *args)


def run(apply: Callable, head: Any, name: str, keyset, args: tuple) -> Any:
    """One operator call through its autograd key: ``apply(head, keyset, modes, *args)`` (the Function) under a
    torch.func transform, where its first argument requires grad in grad mode, or where a forward-mode level is open;
    else ``name`` below autograd."""
    if torch._C._are_functorch_transforms_active():
        modes = Modes(torch.is_grad_enabled(), torch._C._is_fwd_grad_enabled())
        with enable_single_level_autograd_function():
            return apply(head, keyset, modes, *args)
    if (args[0].requires_grad and torch.is_grad_enabled()) or forward_ad._current_level >= 0:
        return apply(head, keyset, None, *args)
    return below_autograd(name, keyset, args)
