"""Whether a case's inputs fit the byte limit, worked out from the case's numbers before anything is
allocated: a case over it is skipped (``SKIPPED``), not failed, and its cells are never made."""

from __future__ import annotations

import torch

from jaggedperf.inputs import Case, length_bounds
from jaggedperf.lab.result import ERROR, SKIPPED


class InputTooLarge(Exception):
    """The case's values alone would pass the byte limit: its cells are skipped, not failed."""


def input_too_large(case: Case, byte_limit: int) -> InputTooLarge | None:
    """Why ``case``'s values (or offsets) tensor is over ``byte_limit``, or None.

    Arithmetic first, from the case's numbers: the offsets take (B+1)·8 bytes, and the values at least
    B·low·M·itemsize and at most B·high·M·itemsize (``inputs.length_bounds``). Only when the limit falls
    between the two bounds are the B lengths drawn (on the CPU) for the exact size: drawing them for a huge B
    would itself be the allocation the limit is there to prevent.

    Args:
        case: the case.
        byte_limit: the largest tensor allowed, in bytes.

    Returns:
        An ``InputTooLarge`` saying which tensor would take how much, or None.
    """
    limit = f"byte limit {byte_limit / 1e9:.2f} GB"
    low, high = length_bounds(case)
    row_bytes = case.M * torch.empty((), dtype=case.torch_dtype).element_size()
    if case.B * low * row_bytes > byte_limit:
        return InputTooLarge(f"values would take at least {case.B * low * row_bytes / 1e9:.2f} GB > {limit}")
    offsets_bytes = (case.B + 1) * 8  # checked before any drawing: the draw makes B-element tensors
    if offsets_bytes > byte_limit:
        return InputTooLarge(f"offsets would take {offsets_bytes / 1e9:.2f} GB > {limit}")
    if case.B * high * row_bytes <= byte_limit:
        return None
    values_bytes = case.values_nbytes()
    if values_bytes > byte_limit:
        return InputTooLarge(f"values would take {values_bytes / 1e9:.2f} GB > {limit}")
    return None


def input_status(problem: Exception) -> str:
    """The status of a cell whose batch could not be made (``prepare_case`` gave ``problem``): ``SKIPPED``
    when the case is over the byte limit (``InputTooLarge``), else ``ERROR``."""
    return SKIPPED if isinstance(problem, InputTooLarge) else ERROR
