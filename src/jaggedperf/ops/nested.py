"""What every public op does with its inputs before its kernels: the checks, a jagged NestedTensor taken apart into
its values and offsets, and whether autograd's forward mode or a torch.func transform needs the operator.

The reductions (``reduce.api``) and the row-wise families (``rowwise``) call ``checked_inputs``: one set of checks,
classes and messages for every op. A NestedTensor's attributes are read around its ``__torch_function__`` where no
autograd or compile needs it (each dispatched read costs more than a small reduction's host time).
"""

from __future__ import annotations

import torch
from torch.autograd import forward_ad

from jaggedperf.checks import assert_offsets_async, check_layout, check_max_seqlen, check_offsets, validation_requested
from jaggedperf.njt import JAGGED_CLASS  # () without it: the public is_nested check alone
from jaggedperf.njt import cached_seqlen
from jaggedperf.njt_autograd import unwrap

__all__ = ["cached_max_seqlen", "checked_inputs", "from_nested", "functorch_active", "is_nested", "transformed"]

functorch_active = torch._C._are_functorch_transforms_active


def transformed() -> bool:
    """Whether a forward-mode AD level is open (``torch.autograd.forward_ad``, ``torch.func.jvp``) or a torch.func
    transform runs: the operators serve those (their autograd kernels carry the tangents)."""
    return forward_ad._current_level >= 0 or functorch_active()


def checked_inputs(values, offsets, name: str, max_seqlen, validate) -> tuple:
    """A public op's ``(values, offsets, max_seqlen)`` checked, a jagged NestedTensor taken apart (its cached
    max_seqlen used where none is given), both made contiguous: every op's checks, classes and messages.

    Raises:
        TypeError, ValueError: as ``jagged_mean`` documents (``name`` starts each message).
    """
    if is_nested(values):
        if offsets is not None:
            raise TypeError(f"{name}: pass a NestedTensor alone or (values, offsets), not both")
        if max_seqlen is None:
            max_seqlen = cached_max_seqlen(values)
        values, offsets = from_nested(values, name)
    elif offsets is None:
        raise TypeError(f"{name}: offsets is required unless values is a jagged NestedTensor")
    check_layout(values, offsets)
    check_max_seqlen(max_seqlen, name)
    # When asked: under torch.compile as asserts in the graph, whatever the device (never a silent skip);
    # eagerly on the host (one sync), except on the CPU, where the operator always checks them.
    if validation_requested(validate):
        if torch.compiler.is_compiling():
            assert_offsets_async(values, offsets)
        elif values.device.type != "cpu":
            check_offsets(values, offsets)
    if not values.is_contiguous():
        values = values.contiguous()
    if not offsets.is_contiguous():
        offsets = offsets.contiguous()
    return values, offsets, max_seqlen


def is_nested(x) -> bool:
    """Whether ``x`` is a NestedTensor, read without a jagged one's ``__torch_function__``."""
    if type(x) is torch.Tensor:
        return x.is_nested  # a strided NestedTensor is a plain Tensor (from_nested rejects it by name)
    return isinstance(x, JAGGED_CLASS) or (isinstance(x, torch.Tensor) and x.is_nested)


def cached_max_seqlen(nt: torch.Tensor):
    """The NJT's cached max_seqlen or None."""
    # The NJT's cached max_seqlen, or None when it has none: eagerly a host int (no sync); under torch.compile a
    # SymInt with a hint, so compiled code takes the whole-segments kernel as eager code does (without it: the two
    # chunked launches).
    return cached_seqlen(nt, "max")


def from_nested(nt: torch.Tensor, name: str) -> tuple:
    """A jagged NestedTensor's (values, offsets), or a ValueError naming ``name`` where it is not (B, j, M)."""
    # A NestedTensor's own attributes go through its __torch_function__ / __torch_dispatch__ (each costlier
    # than the reduction's host time); eagerly they are read with those off, and its dims from its values.
    # nt._values / nt._offsets are plain attributes; nt.values() / nt.offsets() are dispatched ops, needed under
    # torch.compile and torch.func; eagerly, where autograd must flow into nt, the values cross ``Unwrap``.
    compiling = torch.compiler.is_compiling()
    if compiling:
        requires_grad = nt.requires_grad
    else:
        with torch._C.DisableTorchFunctionSubclass():
            requires_grad = nt.requires_grad
    # the jagged class has layout=torch.jagged by construction (reading it costs a dispatch)
    layout = torch.jagged if isinstance(nt, JAGGED_CLASS) else nt.layout
    if layout != torch.jagged:
        raise ValueError(f"{name}: a NestedTensor argument must have layout=torch.jagged; got {layout}")
    values, offsets = getattr(nt, "_values", None), getattr(nt, "_offsets", None)
    held = not compiling and isinstance(values, torch.Tensor) and isinstance(offsets, torch.Tensor)
    dims = values.dim() + 1 if held else nt.dim()
    if dims != 3:
        raise ValueError(f"{name}: a NestedTensor argument must be (B, j, M); got {dims} dims")
    if getattr(nt, "_ragged_idx", 1) != 1:
        raise ValueError(f"{name}: the NestedTensor's ragged dimension must be 1; got {nt._ragged_idx}")
    if getattr(nt, "_lengths", None) is not None:
        raise ValueError(f"{name}: a NestedTensor with lengths (holes between sequences) is not supported")
    if held and not (requires_grad and torch.is_grad_enabled()):
        return values, offsets
    if held and type(nt) is JAGGED_CLASS and not transformed():
        # through ``Unwrap``: the gradient an NJT of nt's, as ``nt.values()``'s, built by attribute access (and
        # differentiable twice, which the NJT's own accessor is not)
        return unwrap(nt), offsets
    return nt.values(), nt.offsets()
