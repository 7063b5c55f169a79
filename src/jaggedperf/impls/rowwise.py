"""What the jagged_softmax and jagged_layer_norm contenders share: the byte count, the padded round trip
(``_jagged_to_padded_dense_forward`` → a dense op → ``_padded_dense_to_jagged_forward``), and registering
tritonbench's torch baselines and ours for a row-wise op (output jagged like the input, ``(total_len, M)``).

Every implementation returns the ``(total_len, M)`` values (an NJT result's ``.values()``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.jagged_mean import native_launch
from jaggedperf.impls.registry import Op, implementation, register_op


def must_move_bytes(batch: JaggedBatch) -> int:
    """Read values and offsets once, write the (total_len, M) result once."""
    return batch.nbytes() + batch.values.numel() * batch.values.element_size()


def padded_round_trip(values, offsets, padded_len, dense_op: Callable, padding_value: float):
    """Pad to (B, padded_len, M), apply ``dense_op(padded, lengths)``, and take the sequences' rows back.

    Args:
        values, offsets: the jagged input.
        padded_len: the case's nominal seqlen (every sequence's length is at most it).
        dense_op: (B, L, M) padded, (B,) lengths → (B, L, M).
        padding_value: what fills the padding (-inf for softmax, 0 for layer norm).

    Returns:
        (total_len, M).
    """
    padded = torch.ops.aten._jagged_to_padded_dense_forward(values, [offsets], max_lengths=[padded_len],
                                                            padding_value=padding_value)
    dense = dense_op(padded, offsets.diff())
    return torch.ops.aten._padded_dense_to_jagged_forward(dense, [offsets], values.shape[0])


def register_rowwise(name: str, description: str, reference, *, per_sequence: Callable, njt_op: Callable | None,
                     njt_note: str, dense_op: Callable, padding_value: float, ours: Callable) -> None:
    """Register op ``name`` with tritonbench's torch contenders and ours.

    Args:
        name: the op's name.
        description: one line for ``jaggedperf list``.
        reference: batch → float64 (total_len, M) on the batch's device (``impls.reference``).
        per_sequence: (len, M) → (len, M), the torch op on one sequence (``unbind_*``).
        njt_op: NJT → NJT, torch's op on the NestedTensor (``njt_*``), or None when torch has none.
        njt_note: how the NJT contender calls torch.
        dense_op, padding_value: the padded contender (``padded_round_trip``).
        ours: ``ours(values_or_nt, offsets=None, max_seqlen=None)``, the jaggedperf function.
    """
    short = name.removeprefix("jagged_")
    register_op(Op(name, reference, must_move_bytes, description))

    @implementation(name, f"unbind_{short}", takes="njt",
                    description=f"unbind the NJT, torch's {short} on each sequence, cat")
    def unbind(nt):
        return torch.cat([per_sequence(t) for t in nt.unbind()])

    @implementation(name, f"{short}_padded", takes="njt", pads=True,
                    description=f"pad to seqlen, masked dense {short}, back to jagged (tritonbench's padded)")
    def padded(nt, padded_len):
        return padded_round_trip(nt.values(), nt.offsets(), padded_len, dense_op, padding_value)

    if njt_op is not None:
        @implementation(name, f"njt_{short}", takes="njt", description=njt_note)
        def njt(nt):
            return njt_op(nt).values()

    @implementation(name, "jaggedperf", takes="dense", takes_max_seqlen=True, setup=native_launch,
                    description=f"jaggedperf.ops.{name}(values, offsets, max_seqlen=…): Triton kernels "
                                "(pure torch on the CPU)")
    def jaggedperf_dense(values, offsets, max_seqlen):
        return ours(values, offsets, max_seqlen=max_seqlen)

    @implementation(name, "jaggedperf_njt", takes="njt", setup=native_launch,
                    description=f"jaggedperf.ops.{name}(nt): NJT in, NJT out")
    def jaggedperf_njt(nt):
        return ours(nt).values()
