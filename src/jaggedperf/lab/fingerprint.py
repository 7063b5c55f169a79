"""Fingerprints of a batch's tensors, taken on their device: a cheap way to tell that an implementation
changed its inputs in place (the runner compares them before and after each cell).

A fingerprint is Σ bits_i·(i·STEP + 1) over a tensor's elements read as integers of their own width, in
int64 arithmetic that wraps (mod 2^64). STEP is even, so every weight is odd and so invertible mod 2^64: a
change of any one element always changes the fingerprint; a permutation or a scaling of many changes it too
(a plain sum would miss a reordering). It reads the tensor once, in chunks, so its temporaries stay small
whatever the tensor's size.
"""

from __future__ import annotations

import torch

from jaggedperf.impls.registry import Batch, get_op

STEP = 0x5851F42D4C957F2E
CHUNK = 1 << 22  # elements per step: a few 32 MB int64 temporaries at most
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def fingerprint(t: torch.Tensor) -> torch.Tensor:
    """A 0-d int64 tensor, on ``t``'s device, that changes when any element of ``t`` changes bit for bit.

    Args:
        t: any tensor (floats are read by their bits: -0.0 and 0.0, or two NaNs, differ).

    Returns:
        The fingerprint (not synchronised: read it with the others in one transfer).
    """
    flat = t.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    bits = flat.view(_BITS[flat.element_size()])
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    if bits.numel() == 0:
        return total
    # Weight of element start + j: (start + j)·STEP + 1 = base_j + start·STEP, so a chunk adds
    # Σ x_j·base_j + (start·STEP)·Σ x_j: the weights are made once, not per chunk.
    base = torch.arange(min(bits.numel(), CHUNK), dtype=torch.int64, device=t.device) * STEP + 1
    for start in range(0, bits.numel(), CHUNK):
        x = bits[start:start + CHUNK].to(torch.int64)
        total += (x * base[:x.numel()]).sum() + _wrap(start * STEP) * x.sum()
    return total


def _wrap(n: int) -> int:
    """``n`` as the int64 it is mod 2^64 (what the device's arithmetic would make of it)."""
    return (n + 2**63) % 2**64 - 2**63


def input_tensors(op: str, batch: Batch) -> dict[str, torch.Tensor]:
    """Every tensor an implementation of ``op`` is handed from ``batch``, by name: values, offsets, the batch's
    other tensor fields (e.g. a model's weights) and any other tensor the op's params give.

    Args:
        op: a registered op.
        batch: its batch.

    Returns:
        ``{name: tensor}``; each tensor once.
    """
    named = {"values": batch.values, "offsets": batch.offsets}
    named.update((k, v) for k, v in getattr(batch, "__dict__", {}).items() if isinstance(v, torch.Tensor))
    seen = {id(t) for t in named.values()}
    for i, t in enumerate(get_op(op).params(batch)):
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            named[f"param {i}"] = t
    return named


def input_fingerprints(op: str, batch: Batch) -> dict[str, int]:
    """``fingerprint`` of each of ``input_tensors(op, batch)``, read back in one transfer.

    Args:
        op: a registered op.
        batch: its batch.

    Returns:
        ``{name: fingerprint}``.
    """
    named = input_tensors(op, batch)
    values = torch.stack([fingerprint(t) for t in named.values()]).tolist()
    return dict(zip(named, values))
