"""Planning a jagged layer norm (and its backward): the output and the one launch that fills it.

One program per segment (``kernels``); the tile comes from M and max_seqlen
(``jaggedperf.ops.tiles.tile_config``). Nothing here reads a tensor's values: under
``torch.compile(dynamic=True)`` N and B may be SymInts and planning installs no guard on them.
"""

from __future__ import annotations

import torch

from jaggedperf.ops.launch.plan import Launch, Plan, sym_max
from jaggedperf.ops.layer_norm.kernels import _layer_norm_backward_kernel, _layer_norm_kernel
from jaggedperf.ops.tiles import TileConfig, tile_config


def plan_layer_norm(values, offsets, eps: float, *, max_seqlen=None, cfg: TileConfig | None = None) -> Plan:
    """Allocate the output and describe the launch of a jagged layer norm.

    Args:
        values: (N, M) contiguous, fp32/bf16/fp16 (fp64 on the CPU under the interpreter).
        offsets: (B + 1,) contiguous int32/int64 on values' device.
        eps: added to each segment's variance.
        max_seqlen: an upper bound on the lengths (an int, a SymInt) or None: it sizes the tile only.
        cfg: force a tile (tests); None: ``tile_config``.

    Returns:
        the Plan: its ``out`` (N, M) in values' dtype, filled once its launch has run.
    """
    n_rows, n_cols = values.shape
    cfg = cfg or tile_config(n_cols, max_seqlen)
    out = torch.empty((n_rows, n_cols), dtype=values.dtype, device=values.device)
    args = (values, offsets, out, float(eps), n_rows, int(n_cols), offsets.shape[0] - 1, cfg.block_l, cfg.block_m)
    return Plan(out, (Launch(_layer_norm_kernel, _grid(offsets), args, cfg.num_warps, (out,),
                             ("layer_norm", cfg.block_l, cfg.block_m)),))


def plan_layer_norm_backward(values, grad, offsets, eps: float, *, max_seqlen=None,
                             cfg: TileConfig | None = None) -> Plan:
    """Allocate grad_values and describe the launch of the layer norm's backward.

    Args:
        values: the forward's (N, M) input x, contiguous.
        grad: (N, M) the gradient of the output, contiguous, x's dtype.
        offsets, eps, max_seqlen, cfg: as for ``plan_layer_norm``.

    Returns:
        the Plan: its ``out`` (N, M) grad_values in x's dtype.
    """
    n_rows, n_cols = values.shape
    cfg = cfg or tile_config(n_cols, max_seqlen)
    grad_values = torch.empty((n_rows, n_cols), dtype=values.dtype, device=values.device)
    args = (values, grad, offsets, grad_values, float(eps), n_rows, int(n_cols), offsets.shape[0] - 1, cfg.block_l,
            cfg.block_m)
    return Plan(grad_values, (Launch(_layer_norm_backward_kernel, _grid(offsets), args, cfg.num_warps,
                                     (grad_values,), ("layer_norm_backward", cfg.block_l, cfg.block_m)),))


def _grid(offsets) -> tuple:
    # a program per segment (at least one: a grid of 0 is not launched)
    return (sym_max(offsets.shape[0] - 1, 1), 1, 1)
