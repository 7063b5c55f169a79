"""Implementations of jagged_softmax: the softmax of each sequence along the ragged dimension, per column;
(total_len, M) like the input (tritonbench's jagged_softmax)."""

from __future__ import annotations

import torch

from jaggedperf import ops
from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.reference import on_batch_device, segment_sums, segments
from jaggedperf.impls.rowwise import register_rowwise


@on_batch_device
def reference(batch: JaggedBatch, device: torch.device) -> torch.Tensor:
    """float64 on the batch's device (``impls.reference``): torch.softmax(t, dim=0) of each sequence t, every
    sequence at once: per sequence and column exp(x − max) / Σ exp(x − max) (NaN and ±inf propagate as torch's do,
    whatever order the device's atomics take: a NaN or inf reaches its column's sum; tests/lab hold it to the loop).

    Not a loop over sequences: torch.softmax over dim 0 of a small tensor takes its parallel path once per sequence
    on the CPU, whose cost grows with the threads per core, as when many test workers share a machine (3.1 M float64
    rows: 0.81 s on one thread, 9.6 s with 16); on the GPU a loop is a launch or more a sequence.
    """
    values = batch.values.detach().to(device, torch.float64, copy=True)  # its own copy: changed in place below
    _, segment = segments(batch, device)
    index = segment.unsqueeze(1).expand_as(values)
    top = torch.full((batch.B, batch.M), float("-inf"), dtype=torch.float64, device=device)
    top.scatter_reduce_(0, index, values, "amax")
    exps = values.sub_(top[segment]).exp_()  # in place, as the division: two float64 copies of the values at most
    return exps.div_(segment_sums(exps, segment, batch.B)[segment])


def _masked_softmax(padded, lengths):
    # padded with -inf: the padding's exponentials are 0 (an empty sequence's NaNs are never taken back)
    return torch.softmax(padded, dim=1)


register_rowwise("jagged_softmax", "softmax of each sequence along its rows, per column: (total_len, M)",
                 reference, per_sequence=lambda t: torch.softmax(t, dim=0),
                 njt_op=lambda nt: torch.softmax(nt, dim=1),
                 njt_note="torch.softmax(nt, dim=1): NestedTensor softmax over the ragged dim",
                 dense_op=_masked_softmax, padding_value=float("-inf"), ours=ops.jagged_softmax)
