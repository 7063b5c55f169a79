"""What both launch tiers use to prove themselves: poisoned outputs, bitwise comparison, and the one
state in which nothing may be checked (a CUDA graph being captured: no syncs, no extra launches)."""

from __future__ import annotations

import torch

POISON_BYTE = 0xFB  # fp32 0xFBFBFBFB / half 0xFBFB: finite, and no kernel here produces it


def poison(tensors) -> None:
    """Fill each tensor with POISON_BYTE (before a launch whose output is checked).

    Args:
        tensors: the tensors a launch is about to write.
    """
    for t in tensors:
        t.view(torch.uint8).fill_(POISON_BYTE)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same bytes (NaNs included).

    Args:
        a, b: tensors of the same dtype and shape.

    Returns:
        True when every byte matches.
    """
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (no checks, no syncs then).

    Returns:
        False off CUDA.
    """
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
