"""Implementations of jagged_mean: out[b] = mean of values[offsets[b]:offsets[b+1]] over rows, (B, M).

The first three are the ones timed in pytorch/pytorch#160355 (and tritonbench's jagged_mean),
written the way the seed wrote them: they take a jagged NestedTensor and the padded ones pad to
the case's nominal seqlen. An empty sequence gives NaN (0/0), as torch.mean does.
"""

from __future__ import annotations

import torch

from jaggedperf import ops
from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.reference import on_batch_device, segment_sums, segments
from jaggedperf.impls.registry import Op, implementation, register_op


@on_batch_device
def reference(batch: JaggedBatch, device: torch.device) -> torch.Tensor:
    """float64 on the batch's device (``impls.reference``): per-sequence sums by index_add, divided by the lengths
    (0/0 -> NaN)."""
    lengths, segment = segments(batch, device)
    sums = segment_sums(batch.values.detach().to(device, torch.float64), segment, batch.B)
    return sums / lengths.unsqueeze(1).to(torch.float64)


def must_move_bytes(batch: JaggedBatch) -> int:
    """Read values and offsets once, write the (B, M) result once."""
    return batch.nbytes() + batch.B * batch.M * batch.values.element_size()


register_op(Op("jagged_mean", reference, must_move_bytes, "mean over each sequence's rows: (B, M)"))


# --- the seed's three -----------------------------------------------------------------------


def _padded(values, offsets, padded_len, padding_value=0.0):
    return torch.ops.aten._jagged_to_padded_dense_forward(
        values, [offsets], max_lengths=[padded_len], padding_value=padding_value
    )


def unbind_mean_plain(values, offsets, padded_len):
    lengths = offsets.diff().tolist()  # one sync: the plain form has no cached lengths
    return torch.cat([torch.mean(t, dim=0).unsqueeze(0) for t in torch.split(values, lengths)])


@implementation("jagged_mean", "unbind_mean", takes="njt", plain=unbind_mean_plain,
                description="seed #1: unbind the NJT, torch.mean each sequence, cat")
def unbind_mean(nt):
    return torch.cat([torch.mean(t, dim=0).unsqueeze(0) for t in nt.unbind()])


def nanmean_padded_plain(values, offsets, padded_len):
    return torch.nanmean(_padded(values, offsets, padded_len, float("nan")), dim=1)


@implementation("jagged_mean", "nanmean_padded", takes="njt", pads=True, plain=nanmean_padded_plain,
                description="seed #2: pad with NaN to seqlen, torch.nanmean")
def nanmean_padded(nt, padded_len):
    return torch.nanmean(_padded(nt.values(), nt.offsets(), padded_len, float("nan")), dim=1)


def sum_padded_plain(values, offsets, padded_len):
    return torch.sum(_padded(values, offsets, padded_len), dim=1) / offsets.diff().unsqueeze(1)


@implementation("jagged_mean", "sum_padded", takes="njt", pads=True, plain=sum_padded_plain,
                description="seed #3: pad with 0 to seqlen, torch.sum, divide by lengths")
def sum_padded(nt, padded_len):
    return torch.sum(_padded(nt.values(), nt.offsets(), padded_len), dim=1) / nt.offsets().diff().unsqueeze(1)


# --- other torch ways -----------------------------------------------------------------------


def njt_mean_plain(values, offsets, padded_len):
    return torch.nested.nested_tensor_from_jagged(values, offsets).mean(dim=1)


@implementation("jagged_mean", "njt_mean", takes="njt", plain=njt_mean_plain,
                description="NestedTensor .mean(dim=1) over the ragged dim")
def njt_mean(nt):
    return nt.mean(dim=1)


@implementation("jagged_mean", "segment_reduce", takes="dense",
                description="torch.segment_reduce(values, 'mean', offsets=offsets)")
def segment_reduce(values, offsets):
    return torch.segment_reduce(values, "mean", offsets=offsets, axis=0)


# --- ours -----------------------------------------------------------------------------------


def native_launch(device: torch.device) -> dict | None:
    """Setup hook of our implementations: on CUDA, build (or load) the ops' native launch path, which
    their eager calls take once it is there, so that no cell times the build or the Python path.

    Args:
        device: the device the cells run on.

    Returns:
        ``{"native_launch": {status, reason, build_seconds}}`` on CUDA; None elsewhere (nothing to build).
    """
    if device.type != "cuda":
        return None
    state = ops.prepare_native_launch()
    return {"native_launch": {k: state[k] for k in ("status", "reason", "build_seconds")}}


def jaggedperf_plain(values, offsets, padded_len):
    # the same launch as the NJT's: its cached max_seqlen takes the whole-segments kernel, so the twin is told the
    # lengths' bound too (padded_len >= every length), not left to the two chunked launches
    return ops.jagged_mean(values, offsets, max_seqlen=padded_len)


@implementation("jagged_mean", "jaggedperf", takes="dense", takes_max_seqlen=True, setup=native_launch,
                description="jaggedperf.ops.jagged_mean(values, offsets, max_seqlen=…): balanced Triton "
                            "kernels (pure torch on the CPU)")
def jaggedperf_mean(values, offsets, max_seqlen):
    return ops.jagged_mean(values, offsets, max_seqlen=max_seqlen)


@implementation("jagged_mean", "jaggedperf_njt", takes="njt", plain=jaggedperf_plain, setup=native_launch,
                description="jaggedperf.ops.jagged_mean(nt): the same op on the seed's NestedTensor input")
def jaggedperf_mean_njt(nt):
    return ops.jagged_mean(nt)
