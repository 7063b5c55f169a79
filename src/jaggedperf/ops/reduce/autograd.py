"""The operators' autograd, reverse and forward mode.

Every operator here is linear in its first argument (``values``, or ``grad`` for ``jagged_expand``),
so its forward-mode rule is the operator itself applied to the tangent, and its backward is the
adjoint operator: ``jagged_expand`` for sum/mean, sum (or mean with empty segments 0) for expand.
The kernel registered for the CPU and CUDA autograd keys (``jaggedperf.ops.autograd_kernel``: why) goes
through ``_Linear`` when an input requires grad or a forward-mode level is active, and straight below
autograd otherwise; the generated one, with the same backward, stays for other devices.
"""

from __future__ import annotations

import torch

from jaggedperf.ops.autograd_kernel import below_autograd, function_apply, run
from jaggedperf.ops.reduce.op import _jagged_expand_op, _jagged_mean_op, _jagged_sum_op

OPS = torch.ops.jaggedperf


class _Linear(torch.autograd.Function):
    """One operator call, with its backward and jvp. Inputs: (name, keyset, modes, *the operator's args)
    (``autograd_kernel``)."""

    @staticmethod
    def forward(name, keyset, modes, *args):
        return below_autograd(name, keyset, args, modes)

    @staticmethod
    def setup_context(ctx, inputs, output):
        name, _, _, first, offsets, *rest = inputs
        ctx.name, ctx.rest, ctx.n_rows = name, rest, first.shape[0]
        ctx.save_for_backward(offsets)
        ctx.save_for_forward(offsets)

    @staticmethod
    def backward(ctx, grad):
        (offsets,) = ctx.saved_tensors
        back = _adjoint(ctx.name, grad.contiguous(), offsets, ctx.n_rows, ctx.rest)
        return (None, None, None, back) + (None,) * (1 + len(ctx.rest))

    @staticmethod
    def jvp(ctx, _name, _keyset, _modes, tangent, *_):
        if tangent is None:
            return None
        (offsets,) = ctx.saved_tensors
        return getattr(OPS, ctx.name)(tangent, offsets, *ctx.rest)


_APPLY = function_apply(_Linear)


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
        return run(_APPLY, name, name, keyset, args)

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
