"""The public functions ``jagged_sum`` / ``jagged_mean``: input checks, NestedTensor unwrapping, and the
eager CUDA fast path (the native launch path first, then the Python path's fast tiers) in front of the
operators (``op``).

Eager CUDA calls with no input requiring grad skip the dispatcher and the JIT binder; everything else
(autograd, torch.compile, dispatch modes, the CPU) calls the operators.
"""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from jaggedperf.checks import INT64_MAX, validation_requested
from jaggedperf.ops.launch import eager_key, launch_all, native, plain_eager
from jaggedperf.ops.nested import checked_inputs, functorch_active, transformed
from jaggedperf.ops.reduce import autograd, op  # noqa: F401  (register torch.ops.jaggedperf.* and their autograd)
from jaggedperf.ops.reduce.op import expand_triton
from jaggedperf.ops.reduce.plan import plan_expand, plan_reduce


EMPTY_MODES = ("nan", "zero")


def jagged_sum(values, offsets=None, *, max_seqlen=None, validate=None) -> torch.Tensor:
    """Sum over each sequence's rows: ``out[b] = values[offsets[b]:offsets[b+1]].sum(0)``, (B, M).

    Sums accumulate in fp32; an empty sequence sums to 0; NaN/Inf propagate. Without ``max_seqlen`` the
    kernels balance the work whatever the lengths, in two launches; with it, CUDA calls whose sequences
    are short (``config.segments_config``) take one launch of the whole-segments kernel, eager or compiled
    (under torch.compile a max_seqlen past the compiled config's tiles recompiles once, to the two-launch
    kernels). An understated max_seqlen costs time, never correctness. On the CPU the offsets are always
    checked (no sync there); on CUDA unchecked invalid offsets give unspecified values (the kernels never
    access out of bounds). Differentiable in reverse and forward mode (``torch.func.jvp``,
    ``torch.autograd.forward_ad``). A NestedTensor's ``_values``/``_offsets`` are read directly (its accessors are
    dispatched ops, each costlier than the reduction's host time), except when it requires grad or under
    ``torch.compile``.

    Args:
        values: (total_len, M) float32/bfloat16/float16 (made contiguous if it is not: one copy); or a
            jagged NestedTensor (B, j, M) alone.
        offsets: (B + 1,) int32/int64 on values' device; None with a NestedTensor.
        max_seqlen: an upper bound on the lengths, or None (a NestedTensor's cached one is used when it has it).
        validate: check the offsets' values (eagerly on CUDA one device sync; under ``torch.compile``
            ``torch._assert_async`` asserts in the graph: on CUDA a device-side assert when they fail); None: the
            ``JAGGEDPERF_VALIDATE`` switch decides (1/true/yes/on; off when unset). On the CPU always
            checked. Shape, dtype and device checks always run.

    Returns:
        (B, M) in values' dtype.

    Raises:
        TypeError: offsets missing for a plain tensor or given with a NestedTensor; a dtype not supported.
        ValueError: a bad shape, device, NestedTensor layout or max_seqlen; invalid offsets (on the CPU
            always; on CUDA when validated, eagerly); JAGGEDPERF_VALIDATE set to something not a switch.
        RuntimeError: invalid offsets when validated under torch.compile (the CPU; CUDA asserts on the device).
        ModuleNotFoundError: triton is not installed (``jaggedperf.ops.has_triton()``).
    """
    out = _native_call(values, offsets, max_seqlen, False, False, validate)
    if out is not None:
        return out
    return _python_reduce(values, offsets, "jagged_sum", mean=False, empty_zero=False, max_seqlen=max_seqlen,
                          validate=validate)


def jagged_mean(values, offsets=None, *, max_seqlen=None, empty="nan", validate=None) -> torch.Tensor:
    """Mean over each sequence's rows, (B, M); as ``jagged_sum`` divided by the lengths.

    Args:
        values, offsets, max_seqlen, validate: as for ``jagged_sum``.
        empty: ``"nan"`` gives NaN for an empty sequence (like ``torch.mean`` of nothing); ``"zero"`` gives 0.

    Returns:
        (B, M) in values' dtype.

    Raises:
        as ``jagged_sum``; ValueError also for another ``empty``.
    """
    if empty not in EMPTY_MODES:
        raise ValueError(f"jagged_mean: empty must be 'nan' or 'zero'; got {empty!r}")
    out = _native_call(values, offsets, max_seqlen, True, empty == "zero", validate)
    if out is not None:
        return out
    return _python_reduce(values, offsets, "jagged_mean", mean=True, empty_zero=empty == "zero",
                          max_seqlen=max_seqlen, validate=validate)


def _native_call(values, offsets, max_seqlen, mean, empty_zero, validate):
    # A call the native module has a plan for, in one C++ call (None: the Python path). is_compiling first:
    # Dynamo folds it and never reads the module's state (no guard on it, no graph break). Forward-mode AD
    # and torch.func's transforms need the operator (its autograd kernel carries their tangents).
    if torch.compiler.is_compiling() or native.active is None or validate is not None \
            or type(values) is not torch.Tensor or type(offsets) is not torch.Tensor or validation_requested(None) \
            or forward_ad._current_level >= 0 or functorch_active():
        return None
    # None -> -1 (no hint); anything but an int in [0, 2**63) -> -2, which no plan has (the Python path raises)
    hint = -1 if max_seqlen is None else max_seqlen if type(max_seqlen) is int and 0 <= max_seqlen <= INT64_MAX else -2
    return native.active.reduce(values, offsets, hint, mean, empty_zero)


def _python_reduce(values, offsets, name: str, *, mean: bool, empty_zero: bool, max_seqlen, validate):
    # every call the native path does not serve: the checks, then the fast tiers (offering the plan to the
    # native path, a no-op once it is registered) or the operator
    given = values
    values, offsets, max_seqlen = checked_inputs(values, offsets, name, max_seqlen, validate)
    if values.requires_grad and torch.is_grad_enabled() and plain_eager(values, offsets) and not transformed():
        return EagerReduce.apply(values, offsets, max_seqlen, mean, empty_zero)
    if values is not given:  # a NestedTensor's values and offsets (or a contiguous copy): a plan may serve them
        out = _native_call(values, offsets, max_seqlen, mean, empty_zero, validate)
        if out is not None:
            return out
    if _fast_ok(values, offsets):
        return _fast_reduce(values, offsets, mean, empty_zero, max_seqlen)
    if mean:
        return torch.ops.jaggedperf.jagged_mean(values, offsets, empty_zero, max_seqlen)
    return torch.ops.jaggedperf.jagged_sum(values, offsets, max_seqlen)


def _fast_ok(values, offsets) -> bool:
    # the public functions skip the operator: eager plain CUDA tensors, and no autograd to record
    return plain_eager(values, offsets) and not (values.requires_grad and torch.is_grad_enabled()) \
        and not transformed()


class EagerReduce(torch.autograd.Function):
    """Eager reverse mode on plain CUDA tensors, without the operators' dispatch: one Function whose forward is
    the eager call with grad off (the native path, else the fast tiers) and whose backward launches the expand
    kernel the same way (the native path's ``expand``, else the fast tiers, which offer it the plan: no
    dispatcher, no redispatch, no operator checks; the forward's inputs were checked). With ``create_graph``
    the backward calls the ``jagged_expand`` operator, differentiable in turn. Forward mode and torch.func's
    transforms keep the operators (``autograd``).

    apply(values, offsets, max_seqlen, mean, empty_zero) -> (B, M), values and offsets already checked.
    """

    @staticmethod
    def forward(ctx, values, offsets, max_seqlen, mean: bool, empty_zero: bool):
        ctx.save_for_backward(offsets)
        ctx.n_rows, ctx.mean, ctx.max_seqlen = values.shape[0], mean, max_seqlen
        out = _native_call(values, offsets, max_seqlen, mean, empty_zero, None)  # grad is off in here
        if out is not None:
            return out
        if _fast_ok(values, offsets):
            return _fast_reduce(values, offsets, mean, empty_zero, max_seqlen)
        if mean:  # other devices (tests apply it on the CPU): the operator
            return torch.ops.jaggedperf.jagged_mean(values, offsets, empty_zero, max_seqlen)
        return torch.ops.jaggedperf.jagged_sum(values, offsets, max_seqlen)

    @staticmethod
    def backward(ctx, grad):
        (offsets,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: a differentiable backward
            back = torch.ops.jaggedperf.jagged_expand(grad.contiguous(), offsets, ctx.n_rows, ctx.mean, ctx.max_seqlen)
        else:
            back = _native_expand(grad, offsets, ctx.n_rows, ctx.max_seqlen, ctx.mean)
            if back is None:
                back = _fast_expand(grad, offsets, ctx.n_rows, ctx.mean, ctx.max_seqlen) if plain_eager(grad, offsets) \
                    else expand_triton(grad, offsets, ctx.n_rows, mean=ctx.mean, max_seqlen=ctx.max_seqlen)
        return back, None, None, None, None


def _native_expand(grad, offsets, n_rows: int, max_seqlen, mean: bool):
    # the backward in one C++ call when the native path holds its plan (None: the Python path); max_seqlen was
    # checked by the forward (None or an int in [0, 2**63))
    module = native.active
    if module is None:
        return None
    return module.expand(grad, offsets, n_rows, -1 if max_seqlen is None else max_seqlen, mean)


def _fast_expand(grad, offsets, n_rows: int, mean: bool, max_seqlen):
    # the backward's launch through the fast tiers, its plan offered to the native path (as _fast_reduce)
    grad = grad.contiguous()  # autograd's gradient may be a broadcast (out.sum()'s is stride 0)
    planned = plan_expand(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen)
    key = eager_key(grad, offsets, n_rows)
    launch_all(planned.launches, grad.device, key)
    if planned.config is not None and native.offering():
        native.offer_plan(planned, key, grad, offsets, max_seqlen, mean, False, n_rows)
    return planned.out


def _fast_reduce(values, offsets, mean: bool, empty_zero: bool, max_seqlen):
    # the fast tiers' launches of the planned kernels, the plan offered to the native path
    plan = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
    key = eager_key(values, offsets)
    launch_all(plan.launches, values.device, key)
    if plan.config is not None and native.offering():
        native.offer_plan(plan, key, values, offsets, max_seqlen, mean, empty_zero)
    return plan.out
