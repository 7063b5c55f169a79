"""Implementations of jagged_sum: out[b] = sum of values[offsets[b]:offsets[b+1]] over rows, (B, M).

tritonbench's jagged_sum contenders (unbind, padded dense, the NestedTensor op) and ours; the padded ones pad
to the case's nominal seqlen, as ``jagged_mean``'s do. An empty sequence sums to 0.
"""

from __future__ import annotations

import torch

from jaggedperf import ops
from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.jagged_mean import _padded, native_launch
from jaggedperf.impls.jagged_mean import must_move_bytes as mean_bytes
from jaggedperf.impls.reference import on_batch_device, segment_sums, segments
from jaggedperf.impls.registry import Op, implementation, register_op


@on_batch_device
def reference(batch: JaggedBatch, device: torch.device) -> torch.Tensor:
    """float64 on the batch's device (``impls.reference``): each sequence's rows summed, every sequence at once by
    index_add (an empty sequence sums to 0; tests/lab hold it to the loop). Not a loop: a launch a sequence on the
    GPU."""
    _, segment = segments(batch, device)
    return segment_sums(batch.values.detach().to(device, torch.float64), segment, batch.B)


register_op(Op("jagged_sum", reference, mean_bytes, "sum over each sequence's rows: (B, M)"))


@implementation("jagged_sum", "unbind_sum", takes="njt", description="unbind the NJT, torch.sum each sequence, cat")
def unbind_sum(nt):
    return torch.cat([torch.sum(t, dim=0).unsqueeze(0) for t in nt.unbind()])


@implementation("jagged_sum", "sum_padded", takes="njt", pads=True,
                description="pad with 0 to seqlen (_jagged_to_padded_dense_forward), torch.sum")
def sum_padded(nt, padded_len):
    return torch.sum(_padded(nt.values(), nt.offsets(), padded_len), dim=1)


@implementation("jagged_sum", "njt_sum", takes="njt", description="NestedTensor .sum(dim=1) over the ragged dim")
def njt_sum(nt):
    return nt.sum(dim=1)


@implementation("jagged_sum", "segment_reduce", takes="dense",
                description="torch.segment_reduce(values, 'sum', offsets=offsets)")
def segment_reduce(values, offsets):
    return torch.segment_reduce(values, "sum", offsets=offsets, axis=0)


@implementation("jagged_sum", "jaggedperf", takes="dense", takes_max_seqlen=True, setup=native_launch,
                description="jaggedperf.ops.jagged_sum(values, offsets, max_seqlen=…)")
def jaggedperf_sum(values, offsets, max_seqlen):
    return ops.jagged_sum(values, offsets, max_seqlen=max_seqlen)


@implementation("jagged_sum", "jaggedperf_njt", takes="njt", setup=native_launch,
                description="jaggedperf.ops.jagged_sum(nt) on the NestedTensor")
def jaggedperf_sum_njt(nt):
    return ops.jagged_sum(nt)
