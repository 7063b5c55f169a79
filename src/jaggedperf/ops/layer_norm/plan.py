"""Planning a jagged layer norm (and its backward): the output and the one launch that fills it, one program
per segment (``kernels``; the shared ``jaggedperf.ops.rowwise.plan_rowwise``)."""

from __future__ import annotations

from jaggedperf.ops.launch.plan import Plan
from jaggedperf.ops.layer_norm.kernels import _layer_norm_backward_kernel, _layer_norm_kernel
from jaggedperf.ops.rowwise import plan_rowwise
from jaggedperf.ops.tiles import TileConfig


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
    return plan_rowwise(_layer_norm_kernel, "layer_norm", (values,), offsets, (float(eps),), column_blocks=False,
                        max_seqlen=max_seqlen, cfg=cfg)


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
    return plan_rowwise(_layer_norm_backward_kernel, "layer_norm_backward", (values, grad), offsets, (float(eps),),
                        column_blocks=False, max_seqlen=max_seqlen, cfg=cfg)
