"""Planning a jagged softmax (and its backward): the output and the one launch that fills it.

One program per (segment, column block) (``kernels``); the tile comes from M and max_seqlen
(``jaggedperf.ops.tiles.tile_config``). Nothing here reads a tensor's values: under
``torch.compile(dynamic=True)`` N and B may be SymInts and planning installs no guard on them.
"""

from __future__ import annotations

import torch

from jaggedperf.ops.launch.plan import Launch, Plan, sym_max
from jaggedperf.ops.softmax.kernels import _softmax_backward_kernel, _softmax_kernel
from jaggedperf.ops.tiles import TileConfig, tile_config


def plan_softmax(values, offsets, *, max_seqlen=None, cfg: TileConfig | None = None) -> Plan:
    """Allocate the output and describe the launch of a jagged softmax.

    Args:
        values: (N, M) contiguous, fp32/bf16/fp16 (fp64 on the CPU under the interpreter).
        offsets: (B + 1,) contiguous int32/int64 on values' device.
        max_seqlen: an upper bound on the lengths (an int, a SymInt) or None: it sizes the tile only.
        cfg: force a tile (tests); None: ``tile_config``.

    Returns:
        the Plan: its ``out`` (N, M) in values' dtype, filled once its launch has run.
    """
    n_rows, n_cols = values.shape
    cfg = cfg or tile_config(n_cols, max_seqlen)
    out = torch.empty((n_rows, n_cols), dtype=values.dtype, device=values.device)
    args = (values, offsets, out, n_rows, int(n_cols), offsets.shape[0] - 1, cfg.block_l, cfg.block_m)
    return Plan(out, (Launch(_softmax_kernel, _grid(offsets, n_cols, cfg), args, cfg.num_warps, (out,),
                             ("softmax", cfg.block_l, cfg.block_m)),))


def plan_softmax_backward(out, grad, offsets, *, max_seqlen=None, cfg: TileConfig | None = None) -> Plan:
    """Allocate grad_values and describe the launch of the softmax's backward.

    Args:
        out: the forward's (N, M) output y, contiguous.
        grad: (N, M) the gradient of y, contiguous, y's dtype.
        offsets, max_seqlen, cfg: as for ``plan_softmax``.

    Returns:
        the Plan: its ``out`` (N, M) grad_values = y · (grad − Σ_rows grad·y) per segment and column.
    """
    n_rows, n_cols = out.shape
    cfg = cfg or tile_config(n_cols, max_seqlen)
    grad_values = torch.empty((n_rows, n_cols), dtype=out.dtype, device=out.device)
    args = (out, grad, offsets, grad_values, n_rows, int(n_cols), offsets.shape[0] - 1, cfg.block_l, cfg.block_m)
    return Plan(grad_values, (Launch(_softmax_backward_kernel, _grid(offsets, n_cols, cfg), args, cfg.num_warps,
                                     (grad_values,), ("softmax_backward", cfg.block_l, cfg.block_m)),))


def _grid(offsets, n_cols, cfg: TileConfig) -> tuple:
    # a program per segment (at least one: a grid of 0 is not launched) and column block
    return (sym_max(offsets.shape[0] - 1, 1), -(-int(n_cols) // cfg.block_m), 1)
