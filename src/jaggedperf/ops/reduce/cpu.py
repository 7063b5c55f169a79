"""The pure-torch kernels (the CPU, and any device without Triton kernels), as operators opaque to
torch.compile: ``jaggedperf::_reduce_torch`` and ``jaggedperf::_expand_torch``.

Each checks the offsets' values first, always: on the CPU that costs no device sync (a pass over B + 1
ints, next to a pass over every value), and without it an offset past the rows, or a negative length,
makes ``repeat_interleave(output_size=)`` write out of bounds (a crash, not an error).

Why opaque operators: traced, the same code (repeat_interleave + index_add_) becomes a scatter loop
in Inductor, many times slower than the eager kernels; and a traced body could not read the offsets to
check them. The ``triton_op`` bodies (``op``) call these on every device but CUDA; Inductor (and
AOTInductor, through its proxy executor, in a process that has imported jaggedperf) calls them as
extern kernels, so compiled CPU code runs the eager kernel, checks included. Eager CPU calls of the
``triton_op``s skip the extra dispatch (``op`` registers ``reduce_checked`` / ``expand_checked`` as
their CPU kernels directly).
"""

from __future__ import annotations

import torch

from jaggedperf.checks import check_offsets_span


def reduce_checked(values: torch.Tensor, offsets: torch.Tensor, mean: bool, empty_zero: bool) -> torch.Tensor:
    """The sum/mean after checking the offsets' values (the layout is the caller's to check).

    Args:
        values: (N, M) on a device where reading offsets costs no sync worth avoiding (the CPU).
        offsets: (B + 1,) int32/int64 on values' device.
        mean, empty_zero: as for the operators.

    Returns:
        (B, M) in values' dtype, accumulated in fp32 (float64 stays float64).

    Raises:
        ValueError: invalid offsets (``checks.check_offsets``' messages).
    """
    check_offsets_span(offsets, values.shape[0], "values.shape[0]")
    n_rows, n_cols = values.shape
    seg, lengths = _segment_ids(offsets, n_rows)
    acc = _acc_dtype(values.dtype)
    sums = torch.zeros((lengths.shape[0], n_cols), dtype=acc, device=values.device)
    sums.index_add_(0, seg, values.to(acc))
    if mean:
        sums = sums / lengths.unsqueeze(1).to(acc)
        if empty_zero:
            sums = torch.where(lengths.unsqueeze(1) == 0, 0.0, sums)
    return sums.to(values.dtype)


def expand_checked(grad: torch.Tensor, offsets: torch.Tensor, n_rows: int, mean: bool) -> torch.Tensor:
    """The backward (each row gets its segment's grad, / its length for mean) after checking the offsets.

    Args:
        grad: (B, M).
        offsets: (B + 1,) int32/int64 on grad's device.
        n_rows: the rows to fill; offsets[-1] must equal it.
        mean: divide by the lengths.

    Returns:
        (n_rows, M) in grad's dtype.

    Raises:
        ValueError: invalid offsets.
    """
    check_offsets_span(offsets, n_rows, "n_rows")
    seg, lengths = _segment_ids(offsets, n_rows)
    acc = _acc_dtype(grad.dtype)
    g = grad.to(acc)
    if mean:
        g = g / lengths.clamp_min(1).unsqueeze(1).to(acc)  # empty segments own no rows
    return g.index_select(0, seg).to(grad.dtype)


def _segment_ids(offsets: torch.Tensor, n_rows) -> tuple[torch.Tensor, torch.Tensor]:
    # offsets checked: lengths >= 0 and sum to n_rows, so output_size is exact (repeat_interleave trusts it)
    lengths = (offsets[1:] - offsets[:-1]).to(torch.int64)
    ids = torch.arange(lengths.shape[0], device=offsets.device)
    return torch.repeat_interleave(ids, lengths, output_size=n_rows), lengths


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    # fp32 for the supported dtypes; float64 stays float64 (the operators accept it on the CPU, for gradcheck).
    return torch.promote_types(dtype, torch.float32)


@torch.library.custom_op("jaggedperf::_reduce_torch", mutates_args=())
def reduce_torch(values: torch.Tensor, offsets: torch.Tensor, mean: bool, empty_zero: bool) -> torch.Tensor:
    """``reduce_checked`` as an operator opaque to torch.compile (see the module's docstring)."""
    return reduce_checked(values, offsets, mean, empty_zero)


@reduce_torch.register_fake
def _reduce_torch_fake(values, offsets, mean, empty_zero):
    return values.new_empty((offsets.shape[0] - 1, values.shape[1]))


@torch.library.custom_op("jaggedperf::_expand_torch", mutates_args=())
def expand_torch(grad: torch.Tensor, offsets: torch.Tensor, n_rows: int, mean: bool) -> torch.Tensor:
    """``expand_checked`` as an operator opaque to torch.compile."""
    return expand_checked(grad, offsets, n_rows, mean)


@expand_torch.register_fake
def _expand_torch_fake(grad, offsets, n_rows, mean):
    return grad.new_empty((n_rows, grad.shape[1]))
