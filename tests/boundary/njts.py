"""NJTs for the boundary's tests: seeded, every length bound present, seqlens cached or not."""

from __future__ import annotations

import torch

NJT = torch.nested._internal.nested_tensor.NestedTensor


def make_njt(B: int, max_len: int, M: int = 3, *, seed: int = 0, min_len: int = 0, requires_grad: bool = False,
             cache: str = "minmax", dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(nt, values): lengths in [min_len, max_len], both bounds present (B >= 2).

    Args:
        cache: which seqlens the NJT caches: "minmax", "max", "min" or "" (none, as ``nested_tensor_from_jagged``
            without them gives).
        requires_grad: the NJT is a leaf that requires grad (its values are not).
    """
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (B,), generator=gen)
    lengths[0] = max_len
    lengths[-1] = min_len
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    values = torch.randn(int(offsets[-1]), M, generator=gen, dtype=dtype)
    nt = torch.nested.nested_tensor_from_jagged(
        values, offsets, min_seqlen=min_len if "min" in cache else None,
        max_seqlen=max_len if "max" in cache else None)
    if requires_grad:
        nt = nt.detach().requires_grad_(True)
    return nt, values


def leaf_of_lengths(lengths: tuple[int, ...], tail: tuple[int, ...] = (3,), dtype=torch.float32, *,
                    max_seqlen: bool = False) -> torch.Tensor:
    """An NJT leaf that requires grad, of these sequence lengths and trailing dims: float64 normal values (seed 0) cast
    to ``dtype``; its max_seqlen cached or not."""
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(sum(lengths), *tail, generator=gen, dtype=torch.float64).to(dtype)
    offsets = torch.tensor((0, *lengths)).cumsum(0)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, max_seqlen=max(lengths) if max_seqlen else None)
    return nt.detach().requires_grad_()


def softmax_by_sequence(nt: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(nt, dim=1)`` sequence by sequence on dense tensors, differentiable in ``nt``'s values: the
    reference where torch's NJT softmax backward over the ragged dim is wrong (``test_lowering.py``)."""
    bounds, values = nt.offsets().tolist(), nt.values()
    pieces = [values[a:b].softmax(dim=0) for a, b in zip(bounds, bounds[1:])]
    return torch.nested.nested_tensor_from_jagged(torch.cat(pieces), nt.offsets())


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    if isinstance(expected, NJT):
        assert isinstance(actual, NJT)
        actual, expected = actual.values(), expected.values()
    torch.testing.assert_close(actual, expected, equal_nan=True, rtol=1e-5, atol=1e-6)


def seqlens(nt: torch.Tensor) -> tuple[int | None, int | None]:
    """The NJT's cached (min_seqlen, max_seqlen)."""
    return nt._maybe_min_seqlen, nt._maybe_max_seqlen
