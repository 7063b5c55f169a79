"""Implementations of jagged_layer_norm: each sequence normalised over all of its len × M elements, no affine
(``torch.layer_norm(t, t.shape)`` per sequence t; tritonbench's jagged_layer_norm); (total_len, M)."""

from __future__ import annotations

import torch

from jaggedperf import ops
from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.reference import on_batch_device, segment_sums, segments
from jaggedperf.impls.rowwise import register_rowwise

EPS = 1e-5  # torch.layer_norm's default, and ours


@on_batch_device
def reference(batch: JaggedBatch, device: torch.device) -> torch.Tensor:
    """float64 on the batch's device (``impls.reference``): torch.layer_norm(t, t.shape) of each sequence t, every
    sequence at once: (x − mean) / sqrt(var + eps) over its len × M elements, the biased variance taken from the
    centred values (two passes, as exact as float64 allows); NaN and ±inf make their sequence NaN, as torch's does
    (tests/lab hold it to the loop).

    Not a loop over sequences: that is a launch or more a sequence on the GPU (65536 at the family's short shape)
    and a layer norm call a sequence on the CPU.
    """
    values = batch.values.detach().to(device, torch.float64, copy=True)  # its own copy: centred in place below
    lengths, segment = segments(batch, device)
    count = (lengths * batch.M).to(torch.float64)  # an empty sequence's 0/0 is never gathered back
    mean = segment_sums(values.sum(1), segment, batch.B) / count
    centred = values.sub_(mean[segment].unsqueeze(1))
    var = segment_sums(centred.square().sum(1), segment, batch.B) / count
    return centred.mul_(torch.rsqrt(var + EPS)[segment].unsqueeze(1))


def _masked_layer_norm(padded, lengths):
    # padded with 0: sums over (L, M) are the sequences' sums; deviations are masked to the real rows
    n = (lengths * padded.shape[2]).clamp_min(1).to(padded.dtype).view(-1, 1, 1)
    mask = (torch.arange(padded.shape[1], device=padded.device)[None, :] < lengths[:, None]).unsqueeze(2)
    mean = padded.sum(dim=(1, 2), keepdim=True) / n
    centred = (padded - mean) * mask
    var = centred.square().sum(dim=(1, 2), keepdim=True) / n
    return centred * torch.rsqrt(var + EPS)


register_rowwise("jagged_layer_norm", "layer norm of each sequence over its len × M elements: (total_len, M)",
                 reference, per_sequence=lambda t: torch.layer_norm(t, t.shape, eps=EPS),
                 njt_op=lambda nt: torch.nn.functional.layer_norm(nt, nt.shape[1:], eps=EPS),
                 njt_note="F.layer_norm(nt, nt.shape[1:]): NestedTensor layer norm over (j, M)",
                 dense_op=_masked_layer_norm, padding_value=0.0, ours=ops.jagged_layer_norm)
