"""Where an op's float64 reference is computed: on its batch's device, or on the CPU when the device has no room.

The reference is what every contender's output is checked against (``lab.measure.correctness.check_output``
compares where the reference lies). Computed where the batch is, a large batch's float64 copy, scatters and sums
run on the GPU in milliseconds; on the CPU they took seconds for a 0.5-0.8 GB batch, and its copy came back to the
GPU for the comparisons. A reference needs a few float64 copies of the values at once (up to ~6× an fp32 batch's
bytes); where the device runs out of memory, it is computed again on the CPU: slower, the same result.

On CUDA, ``index_add_`` and ``scatter_reduce_`` add with atomics, in no fixed order. That is fine for a reference:
a max is exact in any order; a float64 sum in another order differs by ~length × 1e-16 relative, far under the
tightest tolerance it is compared with (fp32's 1e-4, ``correctness.TOLERANCE``); a NaN reaches a sum in any order.
"""

from __future__ import annotations

import functools
from typing import Callable, TypeVar

import torch

B = TypeVar("B")  # the op's batch type (``registry.Batch``: ``JaggedBatch``, ``rec_block.LookupBatch``)

CPU = torch.device("cpu")


def on_batch_device(compute: Callable[[B, torch.device], torch.Tensor]) -> Callable[[B], torch.Tensor]:
    """``reference(batch)`` from ``compute(batch, device)``, which reads the batch's tensors onto ``device`` in
    float64 and computes there: run on ``batch.values.device``, then on the CPU if that device is out of memory.

    The result is float64 on the device it was computed on; a caller compares where it lies or moves it.
    """

    @functools.wraps(compute)
    def reference(batch: B) -> torch.Tensor:
        device = batch.values.device
        try:
            return compute(batch, device)
        except torch.OutOfMemoryError:
            if device.type == "cpu":
                raise
        # out of the except block: the exception (and the failed attempt's tensors its frames hold) is gone
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return compute(batch, CPU)

    return reference


def segments(batch: B, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(lengths (B,), the segment of each of the N rows (N,)), int64 on ``device``: what every reference groups the
    batch's rows by."""
    lengths = batch.offsets.to(device, torch.int64).diff()
    rows = batch.values.shape[0]
    return lengths, torch.repeat_interleave(torch.arange(batch.B, device=device), lengths, output_size=rows)


def segment_sums(rows: torch.Tensor, segment: torch.Tensor, n_segments: int) -> torch.Tensor:
    """float64 sums of ``rows`` (N, ...) by ``segment`` (N,): (n_segments, ...), 0 for an empty segment."""
    sums = torch.zeros((n_segments, *rows.shape[1:]), dtype=torch.float64, device=rows.device)
    return sums.index_add_(0, segment, rows)
