"""The operators' autograd, reverse and forward mode.

Every operator here is linear in its first argument (``values``, or ``grad`` for ``jagged_expand``),
so its forward-mode rule is the operator itself applied to the tangent, and its backward is the
adjoint operator: ``jagged_expand`` for sum/mean, sum (or mean with empty segments 0) for expand.

Why not ``register_autograd`` alone: the autograd kernel it generates runs the op without autograd
when no input requires grad, which is the case for forward-mode AD's dual tensors (``torch.func.jvp``,
``torch.autograd.forward_ad``): their tangent was dropped and the result's tangent read as zeros. The
kernel here goes through ``_Linear`` (an ``autograd.Function`` with ``backward`` and ``jvp``) when an
input requires grad or a forward-mode level is active, and straight below autograd otherwise. It is
registered for the CPU and CUDA autograd keys, which take precedence over the generated one (kept,
with the same backward, for other devices).
"""

from __future__ import annotations

import torch
from torch._functorch.utils import enable_single_level_autograd_function
from torch.autograd import forward_ad

from jaggedperf.ops.reduce.op import _jagged_expand_op, _jagged_mean_op, _jagged_sum_op

OPS = torch.ops.jaggedperf


class _Linear(torch.autograd.Function):
    """One operator call, with its backward and jvp. Inputs: (name, keyset, *the operator's args)."""

    @staticmethod
    def forward(name, keyset, *args):
        return _below_autograd(name, keyset, args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        name, _, first, offsets, *rest = inputs
        ctx.name, ctx.rest, ctx.n_rows = name, rest, first.shape[0]
        ctx.save_for_backward(offsets)
        ctx.save_for_forward(offsets)

    @staticmethod
    def backward(ctx, grad):
        (offsets,) = ctx.saved_tensors
        back = _adjoint(ctx.name, grad.contiguous(), offsets, ctx.n_rows, ctx.rest)
        return (None, None, back) + (None,) * (1 + len(ctx.rest))

    @staticmethod
    def jvp(ctx, _name, _keyset, tangent, *_):
        if tangent is None:
            return None
        (offsets,) = ctx.saved_tensors
        return getattr(OPS, ctx.name)(tangent, offsets, *ctx.rest)


# _Linear's apply at this level, past Function.apply's functorch redirect: the kernel runs inside the
# dispatcher's autograd key, where torch.func's transforms have already unwrapped their tensors to dual
# tensors (jvp) or tensors requiring grad (grad, vjp) at this level, as for any aten op's autograd kernel
# (which is why torch.func's own single-level switch is what lets it run there).
_APPLY = super(torch.autograd.Function, _Linear).apply


def _below_autograd(name: str, keyset, args):
    with torch._C._AutoDispatchBelowAutograd():
        return getattr(OPS, name).default.redispatch(keyset & torch._C._after_autograd_keyset, *args)


def _adjoint(name: str, grad, offsets, n_rows, rest):
    # rest: the operator's arguments after (first, offsets), trailing defaults possibly dropped
    if name == "jagged_sum":
        return OPS.jagged_expand(grad, offsets, n_rows, False, *rest)
    if name == "jagged_mean":
        return OPS.jagged_expand(grad, offsets, n_rows, True, *rest[1:])
    _, mean, *seqlen = rest  # jagged_expand: (n_rows, mean[, max_seqlen])
    if mean:
        return OPS.jagged_mean(grad, offsets, True, *seqlen)
    return OPS.jagged_sum(grad, offsets, *seqlen)


def _kernel(name: str):
    def autograd_kernel(keyset, *args):
        first = args[0]
        if (first.requires_grad and torch.is_grad_enabled()) or forward_ad._current_level >= 0:
            if torch._C._are_functorch_transforms_active():
                with enable_single_level_autograd_function():
                    return _APPLY(name, keyset, *args)
            return _APPLY(name, keyset, *args)
        return _below_autograd(name, keyset, args)

    autograd_kernel.__name__ = f"{name}_autograd"
    return autograd_kernel


def _save_generated(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])
    ctx.n_rows, ctx.rest = inputs[0].shape[0], tuple(inputs[2:])


def _generated_backward(name: str):
    def backward(ctx, grad):
        (offsets,) = ctx.saved_tensors
        return (_adjoint(name, grad.contiguous(), offsets, ctx.n_rows, ctx.rest),) + (None,) * (1 + len(ctx.rest))

    return backward


_LIB = torch.library.Library("jaggedperf", "FRAGMENT")  # kept alive: the registrations live as long as it does
for _name, _op in (("jagged_sum", _jagged_sum_op), ("jagged_mean", _jagged_mean_op),
                   ("jagged_expand", _jagged_expand_op)):
    _op.register_autograd(_generated_backward(_name), setup_context=_save_generated)
    for _key in ("AutogradCPU", "AutogradCUDA"):
        _LIB.impl(_name, _kernel(_name), _key, with_keyset=True)
