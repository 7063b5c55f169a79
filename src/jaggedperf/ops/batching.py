"""The operators' vmap rules (``torch.func.vmap``, per-sample gradients ``vmap(grad(f))``): a batch of samples folded
into what each operator already spans, one call of it, where torch's fallback calls the operator once a sample and
warns of the cost.

- by columns, where every column is its own problem (sum, mean, their backward ``expand``, softmax and its
  backward): samples (S, rows, M) become columns (rows, S·M), the result (rows', S, M);
- by segments, where a segment's len × M elements are one problem (layer norm and its backward): samples become
  S copies of the segments, (S·N, M) over the offsets repeated, copy k shifted by k·N, the last offset the sample's
  own shifted by (S − 1)·N. Repeated so, offsets are valid exactly where the sample's are (a wrong first or last
  offset, a decrease anywhere, stays one), so the operator's own checks judge them, eagerly and traced (an
  invalid offset's message then names the repeated offsets);
- offsets that differ between samples (a batched offsets tensor), or samples of more than ``CPU_FOLD_ELEMENTS``
  elements in all on the CPU: the operator once a sample, stacked. The CPU kernels make several passes over their
  operand, and folded wide they leave the cache: the fold took 0.18-0.88x the per-sample calls' time up to 2^19
  elements in all, 1.3-1.8x at 3.3 M (torch 2.13, one thread, sum, softmax and layer norm, M = 32 and 64). CUDA
  folds always (one launch for all samples).

Invariants: each rule calls the operator itself (``torch.ops.jaggedperf``), so its checks, its autograd kernel and its
device branch serve the folded call; a sample's result is the operator's on that sample alone; max_seqlen is a
per-segment bound, unchanged by either fold.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["CPU_FOLD_ELEMENTS", "register_vmap"]

CPU_FOLD_ELEMENTS = 2**19  # the most elements (all samples of an operand) the CPU folds into one call

Fold = Literal["columns", "segments"]


def register_vmap(operator, name: str, tensors: int, fold: Fold) -> None:
    """Register ``operator``'s (a ``triton_op``) vmap rule.

    Args:
        operator: the operator's definition; ``name``: its name under ``torch.ops.jaggedperf``.
        tensors: how many (rows, M) tensors lead its arguments; the offsets follow them, then its other arguments.
        fold: how samples fold into one call (the module's docstring).
    """

    def rule(info, in_dims, *args):
        call = getattr(torch.ops.jaggedperf, name)
        leading, offsets, rest = args[:tensors], args[tensors], args[tensors + 1:]
        if in_dims[tensors] is not None:  # offsets differ between samples
            return _per_sample(call, info.batch_size, in_dims, args), 0
        samples = [_samples_first(t, d, info.batch_size) for t, d in zip(leading, in_dims[:tensors])]
        if samples[0].device.type == "cpu" and samples[0].numel() > CPU_FOLD_ELEMENTS:
            return _per_sample(call, info.batch_size, in_dims, args), 0
        if fold == "columns":
            return _by_columns(call, samples, offsets, rest), 1
        return _by_segments(call, samples, offsets, rest), 0

    register = getattr(operator, "register_vmap", None)
    if register is not None:  # a torch without it (before 2.4) keeps its per-sample fallback
        register(rule)


def _samples_first(t: torch.Tensor, in_dim: int | None, size: int) -> torch.Tensor:
    """(S, rows, M): ``t`` with its sample dim first, or repeated for each sample where it has none."""
    return t.movedim(in_dim, 0) if in_dim is not None else t.expand(size, *t.shape)


def _by_columns(call, samples: list, offsets: torch.Tensor, rest: tuple) -> torch.Tensor:
    size, _, width = samples[0].shape
    folded = [s.permute(1, 0, 2).reshape(s.shape[1], size * width) for s in samples]
    out = call(*folded, offsets, *rest)
    return out.view(out.shape[0], size, width)


def _by_segments(call, samples: list, offsets: torch.Tensor, rest: tuple) -> torch.Tensor:
    size, n_rows, width = samples[0].shape
    wide = offsets.to(torch.int64)
    shifts = torch.arange(size, device=offsets.device, dtype=torch.int64).unsqueeze(1) * n_rows
    repeated = torch.cat([(wide[:-1].unsqueeze(0) + shifts).reshape(-1), wide[-1:] + (size - 1) * n_rows])
    out = call(*(s.reshape(size * n_rows, width) for s in samples), repeated, *rest)
    return out.view(size, n_rows, width)


def _per_sample(call, size: int, in_dims: tuple, args: tuple) -> torch.Tensor:
    def sample(k: int) -> tuple:
        return tuple(a.select(d, k) if d is not None else a for a, d in zip(args, in_dims))

    return torch.stack([call(*sample(k)) for k in range(size)])
