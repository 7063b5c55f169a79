"""JaggedBatch: one jagged input as plain tensors, with the metadata an NJT would cache.

A batch is ``values (total_len, M)`` plus ``offsets (B+1,)``: sequence ``b`` is
``values[offsets[b]:offsets[b+1]]``. The host-side integers (``max_seqlen``, ``min_seqlen``,
``padded_len``) are computed once when the batch is made, so nothing that reads them later
needs a device sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jaggedperf.checks import check_layout, check_offsets


@dataclass(frozen=True)
class JaggedBatch:
    values: torch.Tensor  # (total_len, M), contiguous
    offsets: torch.Tensor  # (B+1,), int64, offsets[0] == 0, non-decreasing, offsets[-1] == total_len
    max_seqlen: int  # longest sequence (0 when B == 0)
    min_seqlen: int  # shortest sequence (0 when B == 0)
    padded_len: int  # length the padded implementations pad to (the case's nominal seqlen)

    @property
    def B(self) -> int:
        return self.offsets.numel() - 1

    @property
    def M(self) -> int:
        return self.values.shape[1]

    @property
    def total_len(self) -> int:
        return self.values.shape[0]

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    def lengths(self) -> torch.Tensor:
        return self.offsets.diff()

    def nbytes(self) -> int:
        """Bytes of the jagged input itself (values + offsets)."""
        return _nbytes(self.values) + _nbytes(self.offsets)

    def padded_nbytes(self) -> int:
        """Bytes of the dense (B, padded_len, M) tensor a padded implementation materialises."""
        return self.B * self.padded_len * self.M * self.values.element_size()

    def to(self, device: torch.device | str) -> "JaggedBatch":
        return JaggedBatch(
            self.values.to(device), self.offsets.to(device), self.max_seqlen, self.min_seqlen, self.padded_len
        )

    def to_nested(self) -> torch.Tensor:
        """A jagged-layout NestedTensor view of the same storage, with max/min seqlen cached."""
        return torch.nested.nested_tensor_from_jagged(
            self.values, self.offsets, min_seqlen=self.min_seqlen, max_seqlen=self.max_seqlen
        )

    @classmethod
    def from_tensors(
        cls, values: torch.Tensor, offsets: torch.Tensor, padded_len: int | None = None
    ) -> "JaggedBatch":
        """Build a batch from values/offsets, checking them (this reads the offsets: one sync)."""
        check_layout(values, offsets, dtypes=(values.dtype,))
        check_offsets(values, offsets)
        lengths = offsets.diff().cpu()
        longest = int(lengths.max()) if lengths.numel() else 0
        shortest = int(lengths.min()) if lengths.numel() else 0
        return cls(values, offsets.to(torch.int64), longest, shortest, longest if padded_len is None else padded_len)

    @classmethod
    def from_nested(cls, nt: torch.Tensor, padded_len: int | None = None) -> "JaggedBatch":
        if not (nt.is_nested and nt.layout == torch.jagged):
            raise ValueError("from_nested: expected a NestedTensor with layout=torch.jagged")
        if nt.dim() != 3:
            raise ValueError(f"from_nested: expected a (B, j, M) NestedTensor, got {nt.dim()} dims")
        return cls.from_tensors(nt.values(), nt.offsets(), padded_len)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()
