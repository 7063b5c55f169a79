"""Planning a jagged layer norm (and its backward): the output and the launches that fill it, one program per
segment (``kernels``; the shared ``jaggedperf.ops.rowwise.plan_rowwise``); or, with fewer segments than SMs, the
split over ``parts`` programs per segment (``plan_layer_norm_parts``, ``split_parts``)."""

from __future__ import annotations

from jaggedperf.ops.launch.plan import Plan
from jaggedperf.ops.layer_norm.kernels import (_layer_norm_backward_kernel, _layer_norm_backward_parts_kernel,
                                              _layer_norm_backward_sums_kernel, _layer_norm_kernel,
                                              _layer_norm_moments_kernel, _layer_norm_parts_kernel)
from jaggedperf.ops.rowwise import plan_rowwise, split_launcher, split_workspace
from jaggedperf.ops.rowwise import split_parts as rowwise_split_parts
from jaggedperf.ops.config import next_pow2
from jaggedperf.ops.tiles import LEAN, MAX_BLOCK_M, WIDE, TileConfig, hint_of, tile_config


def plan_layer_norm(values, offsets, eps: float, *, max_seqlen=None, cfg: TileConfig | None = None) -> Plan:
    """Allocate the output and describe the launches of a jagged layer norm: one program per segment, or, with
    fewer segments than SMs, the split over parts (``split_parts``).

    Args:
        values: (N, M) contiguous, fp32/bf16/fp16 (fp64 on the CPU under the interpreter).
        offsets: (B + 1,) contiguous int32/int64 on values' device.
        eps: added to each segment's variance.
        max_seqlen: an upper bound on the lengths (an int, a SymInt) or None: it sizes the tile only.
        cfg: force the one-program kernel's tile (tests); None: the production choice.

    Returns:
        the Plan: its ``out`` (N, M) in values' dtype, filled once its launches have run.
    """
    parts = split_parts(values, offsets, max_seqlen) if cfg is None else 0
    if parts:
        return plan_layer_norm_parts(values, offsets, eps, parts=parts, max_seqlen=max_seqlen)
    # The wide tile, but for rows narrower than a full column block when max_seqlen is unknown: unsized, the wide tile
    # is 128 rows at M = 64 whatever the lengths, 670 µs at 65536 × ≤ 64 × 64 on the H200 where the
    # lean tile's launch (the same as with max_seqlen = 64) took 432; at M = 256 both tiles loop, and the
    # lean one was 4% slower at 1024 × 256 (docs/performance.md).
    unsized_narrow = hint_of(max_seqlen) is None and next_pow2(int(values.shape[1])) < MAX_BLOCK_M
    budget = LEAN if unsized_narrow else WIDE
    return plan_rowwise(_layer_norm_kernel, "layer_norm", (values,), offsets, (float(eps),), column_blocks=False,
                        max_seqlen=max_seqlen, cfg=cfg, budget=budget)


def plan_layer_norm_backward(values, grad, offsets, eps: float, *, max_seqlen=None,
                             cfg: TileConfig | None = None) -> Plan:
    """Allocate grad_values and describe the launches of the layer norm's backward (split as the forward).

    Args:
        values: the forward's (N, M) input x, contiguous.
        grad: (N, M) the gradient of the output, contiguous, x's dtype.
        offsets, eps, max_seqlen: as for ``plan_layer_norm``.
        cfg: force the one-program kernel's tile (tests); None: the split, or the lean tile but where only the wide
            one holds a whole sequence.

    Returns:
        the Plan: its ``out`` (N, M) grad_values in x's dtype.
    """
    parts = split_parts(values, offsets, max_seqlen) if cfg is None else 0
    if parts:
        return plan_layer_norm_backward_parts(values, grad, offsets, eps, parts=parts, max_seqlen=max_seqlen)
    # The lean tile, but the wide one where it alone holds the longest sequence (one pass instead of a loop): on the
    # H200 the wide tile won at the first seed shape (21.4 / 12.8 µs fp32 / bf16, lean 24.3 / 14.9), the lean
    # one where both tiles hold the sequences (65536 × ≤ 64: 674 µs, wide 836) or neither does (the second seed shape
    # 35.9 / 24.5 against 40.5 / 28.0; 1024 × 256: 911 against 1126).
    longest = hint_of(max_seqlen)
    wide_only = longest is not None and (tile_config(values.shape[1], None, LEAN).block_l < longest
                                         <= tile_config(values.shape[1], None, WIDE).block_l)
    return plan_rowwise(_layer_norm_backward_kernel, "layer_norm_backward", (values, grad), offsets, (float(eps),),
                        column_blocks=False, max_seqlen=max_seqlen, cfg=cfg, budget=WIDE if wide_only else LEAN)


def plan_layer_norm_parts(values, offsets, eps: float, *, parts: int, max_seqlen=None,
                          cfg: TileConfig | None = None) -> Plan:
    """The layer norm split over ``parts`` programs per segment: per-part moments, then each part normalised.

    Args:
        values, offsets, eps, max_seqlen: as for ``plan_layer_norm``.
        parts: programs per segment (a power of two); any value is correct whatever the lengths.
        cfg: force a tile (tests); None: ``parts_tile``.

    Returns:
        the Plan: two launches (moments, then normalise), its ``out`` (N, M) in values' dtype.
    """
    out, launch = split_launcher(values, offsets, parts, cfg or parts_tile(values.shape[1], max_seqlen),
                                 column_blocks=False)
    ws = split_workspace(offsets.shape[0] - 1, parts, 3, values.device)  # (count, mean, M2) per part
    return Plan(out, (launch(_layer_norm_moments_kernel, "ln_moments", (values, offsets, ws), ws),
                      launch(_layer_norm_parts_kernel, "ln_parts", (values, offsets, ws, out, float(eps)), out)))


def plan_layer_norm_backward_parts(values, grad, offsets, eps: float, *, parts: int, max_seqlen=None,
                                   cfg: TileConfig | None = None) -> Plan:
    """The backward split over ``parts`` programs per segment: moments, per-part Σg and Σg·x̂, then each part.

    Args:
        values, grad, offsets, eps, max_seqlen: as for ``plan_layer_norm_backward``.
        parts: programs per segment (a power of two).
        cfg: force a tile (tests); None: ``parts_tile``.

    Returns:
        the Plan: three launches, its ``out`` (N, M) grad_values in x's dtype.
    """
    out, launch = split_launcher(values, offsets, parts, cfg or parts_tile(values.shape[1], max_seqlen),
                                 column_blocks=False)
    ws = split_workspace(offsets.shape[0] - 1, parts, 3, values.device)  # (count, mean, M2) per part
    sums = split_workspace(offsets.shape[0] - 1, parts, 3, values.device)  # (Σ g, Σ g · x̂, Σ x̂) per part
    return Plan(out, (
        launch(_layer_norm_moments_kernel, "ln_moments", (values, offsets, ws), ws),
        launch(_layer_norm_backward_sums_kernel, "ln_backward_sums", (values, grad, offsets, ws, sums, float(eps)),
               sums),
        launch(_layer_norm_backward_parts_kernel, "ln_backward_parts",
               (values, grad, offsets, ws, sums, out, float(eps)), out)))


SPLIT_PROGRAMS_PER_SM = 4  # the programs per SM its split aims at (the 2048-element tile: 64-128 registers a thread)


def split_parts(values, offsets, max_seqlen=None) -> int:
    """Programs per segment for the layer norm's split, or 0 where one program per segment is the better plan
    (``rowwise.split_parts`` with the split's tile, ``parts_tile``).

    At 8 × 4000 × 4096 fp32 on the H200, 64 parts took the forward from 5,361 µs to 512 (Inductor's padded
    program: 1,908; torch eager: 2,374) and the backward from 11,576 to 912.

    Args:
        values: (N, M), offsets: (B + 1,): their sizes only (ints or SymInts' hints, no guard).
        max_seqlen: as for ``plan_layer_norm`` (it sizes the split's tile).

    Returns:
        parts per segment (a power of two), or 0: as ``rowwise.split_parts`` at SPLIT_PROGRAMS_PER_SM.
    """
    return rowwise_split_parts(offsets.shape[0] - 1, values.shape[0], values.shape[1],
                               lambda: parts_tile(values.shape[1], max_seqlen), values.device, column_blocks=False,
                               programs_per_sm=SPLIT_PROGRAMS_PER_SM)


PARTS_TILE_ELEMENTS = 2048


def parts_tile(n_cols: int, max_seqlen=None) -> TileConfig:
    """The split kernels' tile: 2048 elements (8 × 256 for wide rows) at 4 warps, a quarter of the one-program
    kernel's. Its part of a segment is read in a loop either way (no one-tile path to fill), and the split
    wants several programs resident on each SM: compiled for sm_90, the 8192-element tile at 8 warps takes
    234–255 registers a thread (one program per SM, the backward spilling), this one 64–128 (4–8 per SM, no
    spill).

    Args:
        n_cols: M.
        max_seqlen: the longest sequence (an int, a SymInt: its hint, no guard), or None.
    """
    block_m = min(next_pow2(int(n_cols)), MAX_BLOCK_M)
    block_l = max(PARTS_TILE_ELEMENTS // block_m, 1)
    hint = hint_of(max_seqlen)
    if hint is not None:
        block_l = min(block_l, next_pow2(max(hint, 1)))
    elements = block_l * block_m
    return TileConfig(block_l, block_m, 4 if elements >= 2048 else 2 if elements >= 512 else 1)
