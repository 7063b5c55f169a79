"""What crosses the compiled region's edge for outputs: the records the region returns in place of tensors.

The region (``region.py``) is traced by Dynamo; what it returns is rebuilt by the compiled code's output
bytecode, so these are NamedTuples of tensors and Python constants (both kinds Dynamo returns as they are).
Outside, ``joining.py`` turns each record back into what ``fn`` returned in eager mode.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Again", "Dense", "Parts", "Same"]


class Parts(NamedTuple):
    """An NJT output of ``fn``, taken apart inside the region.

    Attributes:
        values: its values, (total_len, ...).
        offsets: its offsets, (B + 1,); the input's own offsets tensor when ``fn`` kept the input's structure
            (the compiled code returns an unchanged input as the same object), so the rebuilt NJT shares the
            input's ragged dim, as in eager mode.
        min_seqlen, max_seqlen: its cached seqlens, as the NJT keeps them (``(n, 0)`` tensors), or None where it
            caches none.
        requires_grad: whether the NJT required grad while the region was traced: what eager mode gives.
            AOTAutograd can return an output that aliases an input without it (``joining.repair``).
        source: None, or the index (among the flattened arguments) of the NJT argument whose offsets tensor the NJT
            has, and whose very cached seqlens (or none where it caches none) it keeps, that argument being the first
            over those offsets: then ``offsets``, ``min_seqlen`` and ``max_seqlen`` are None, and the compiled code
            returns none of them (each tensor returned costs AOTAutograd's runtime on every call). Joining takes that
            argument's offsets and cached seqlens, as it would from the returned ones (they are its own, or have their
            sizes).
    """

    values: torch.Tensor
    offsets: torch.Tensor | None
    min_seqlen: torch.Tensor | None
    max_seqlen: torch.Tensor | None
    requires_grad: bool
    source: int | None = None


class Dense(NamedTuple):
    """A plain tensor output of ``fn`` with its ``requires_grad`` as traced (see ``Parts.requires_grad``)."""

    tensor: torch.Tensor
    requires_grad: bool


class Same(NamedTuple):
    """An output that *is* the NJT argument at ``index`` of the flattened arguments (``fn`` returned its input):
    the caller gets that very object back, as in eager mode, and nothing is rebuilt."""

    index: int


class Again(NamedTuple):
    """An NJT output met earlier in the same output (``return y, y``): the object rebuilt for the tensor at ``place``
    (the output's tensors counted in pytree order), so both places hold one object, as in eager mode."""

    place: int
