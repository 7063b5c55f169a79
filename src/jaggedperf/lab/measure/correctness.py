"""A cell's correctness check: its output against the op's float64 reference, by relative error within a
tolerance per dtype."""

from __future__ import annotations

import math

import torch

# Relative error ‖out − ref‖/‖ref‖ allowed per dtype (accumulation order differs between implementations).
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2e-2}


def check_output(out: torch.Tensor, reference: torch.Tensor, dtype: str) -> tuple[bool, float | None, str | None]:
    """Whether ``out`` matches the float64 ``reference`` within ``dtype``'s tolerance.

    NaN in the reference (an empty sequence) must be NaN in the output.

    Args:
        out: what the implementation returned.
        reference: the op's float64 result, on the CPU or on the output's device: the output is compared where the
            reference is.
        dtype: the case's dtype name (a key of ``TOLERANCE``).

    Returns:
        ``(ok, relative error or None, reason or None)``.
    """
    if not isinstance(out, torch.Tensor):
        return False, None, f"returned {type(out).__name__}, not a tensor"
    if tuple(out.shape) != tuple(reference.shape):
        return False, None, f"shape {tuple(out.shape)} != expected {tuple(reference.shape)}"
    got = out.detach().to(reference.device, torch.float64)
    expected_nan = torch.isnan(reference)
    if not torch.equal(torch.isnan(got), expected_nan):
        wrong = int((torch.isnan(got) != expected_nan).sum())
        return False, None, f"{wrong} entries differ in NaN-ness from the reference (empty sequences give NaN)"
    finite = ~expected_nan
    diff = torch.linalg.vector_norm((got - reference)[finite])
    norm = torch.linalg.vector_norm(reference[finite])
    rel = float(diff / norm) if norm > 0 else float(diff)
    if not math.isfinite(rel) or rel > TOLERANCE[dtype]:
        return False, rel, f"relative error {rel:.3g} > {TOLERANCE[dtype]:g} for {dtype}"
    return True, rel, None
