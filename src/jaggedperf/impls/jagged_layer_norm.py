"""Implementations of jagged_layer_norm: each sequence normalised over all of its len × M elements, no affine
(``torch.layer_norm(t, t.shape)`` per sequence t; tritonbench's jagged_layer_norm); (total_len, M)."""

from __future__ import annotations

import torch

from jaggedperf import ops
from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.rowwise import register_rowwise

EPS = 1e-5  # torch.layer_norm's default, and ours


def reference(batch: JaggedBatch) -> torch.Tensor:
    """float64 on the CPU: torch.layer_norm(t, t.shape) of each sequence t, in a loop."""
    values = batch.values.detach().to("cpu", torch.float64)
    bounds = batch.offsets.tolist()
    out = torch.empty_like(values)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            out[a:b] = torch.layer_norm(values[a:b], values[a:b].shape, eps=EPS)
    return out


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
