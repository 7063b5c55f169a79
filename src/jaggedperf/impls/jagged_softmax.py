"""Implementations of jagged_softmax: the softmax of each sequence along the ragged dimension, per column;
(total_len, M) like the input (tritonbench's jagged_softmax)."""

from __future__ import annotations

import torch

from jaggedperf import ops
from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.rowwise import register_rowwise


def reference(batch: JaggedBatch) -> torch.Tensor:
    """float64 on the CPU: torch.softmax(dim=0) of each sequence, in a loop."""
    values = batch.values.detach().to("cpu", torch.float64)
    bounds = batch.offsets.tolist()
    out = torch.empty_like(values)
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[a:b] = torch.softmax(values[a:b], dim=0)
    return out


def _masked_softmax(padded, lengths):
    # padded with -inf: the padding's exponentials are 0 (an empty sequence's NaNs are never taken back)
    return torch.softmax(padded, dim=1)


register_rowwise("jagged_softmax", "softmax of each sequence along its rows, per column: (total_len, M)",
                 reference, per_sequence=lambda t: torch.softmax(t, dim=0),
                 njt_op=lambda nt: torch.softmax(nt, dim=1),
                 njt_note="torch.softmax(nt, dim=1): NestedTensor softmax over the ragged dim",
                 dense_op=_masked_softmax, padding_value=float("-inf"), ours=ops.jagged_softmax)
