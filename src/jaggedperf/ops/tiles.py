"""Tiles of a segment's rows, shared by the row-wise families (``softmax``, ``layer_norm``): the host's choice
of tile and the ``@triton.jit`` building blocks their kernels address memory with.

A row-wise family's kernel runs one program per segment (and, for softmax, per column block). Its tile is
``(BLOCK_L, BLOCK_M)`` elements of the segment's rows; a segment that fits one tile is read once and kept in
registers, a longer one loops over tiles (two or three passes). The tile comes from M and, when known, the
longest sequence (``max_seqlen``, a host int or a SymInt's hint: no guard), never from N or B, so that
``torch.compile(dynamic=True)`` sees one graph. Any tile is correct whatever the lengths: an understated
``max_seqlen`` makes segments loop, never go wrong.

Inductor's write analysis (see ``jaggedperf.ops.reduce.kernels._reduce_kernel``): a store address must never
come from a helper that received the offsets pointer. So the kernels load their segment's offsets themselves;
``rows_of`` (which clamps them) and ``tile`` (which addresses) take no offsets pointer.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from jaggedperf.ops.config import next_pow2

MAX_BLOCK_M = 256  # the widest column block; wider rows take several


@dataclass(frozen=True)
class TileConfig:
    """The tile of a row-wise family's kernel."""

    block_l: int  # rows per tile (power of two): a segment of at most this many rows is read once
    block_m: int  # columns per tile (power of two)
    num_warps: int


@dataclass(frozen=True)
class TileBudget:
    """How large a kernel's tile may grow, and its warps when it does: each kernel's own, from the H200."""

    elements: int  # BLOCK_L × BLOCK_M at most (a power of two)
    full_warps: int  # warps for a tile of >= 4096 elements; smaller tiles take 4 (>= 1024) or 2


# 8192 elements (the whole-segments reduce's budget, config.SEGMENT_TILE_ELEMENTS) at 8 warps: the layer norm's
# forward (4096 elements at 4 warps was 4-6% slower on its ≥ 64 MB shapes), and any kernel whose programs are fewer
# than the SMs (rowwise.plan_rowwise) or whose longest sequence only this tile holds whole (the layer norm's backward).
WIDE = TileBudget(8192, 8)
# Softmax (both ways) and the layer norm's backward: 4096 elements at 4 warps. At 8192 / 8 warps they take 115-255
# registers a thread for sm_90 (one or two programs an SM); on the H200 (docs/performance.md) this
# tile took softmax's forward at 65536 × 64 from 687 to 393 µs and at 1024 × 256 from 491 to 457, the layer
# norm's backward from 836 / 1126 to 674 / 911, and was level (±1.5 µs) on the seed shapes' softmax.
LEAN = TileBudget(4096, 4)


def tile_config(n_cols: int, max_seqlen=None, budget: TileBudget = WIDE) -> TileConfig:
    """The tile for rows of ``n_cols`` columns and sequences of at most ``max_seqlen`` rows.

    Args:
        n_cols: M.
        max_seqlen: the longest sequence (an int, a SymInt: its hint, with no guard), or None: the largest tile.
        budget: the kernel's TileBudget.

    Returns:
        the TileConfig: BLOCK_M = next_pow2(M) up to MAX_BLOCK_M; BLOCK_L fills the budget's elements, or covers
        max_seqlen when that is fewer rows.
    """
    block_m = min(next_pow2(int(n_cols)), MAX_BLOCK_M)
    block_l = max(budget.elements // block_m, 1)
    hint = hint_of(max_seqlen)
    if hint is not None:
        block_l = min(block_l, next_pow2(hint))
    elements = block_l * block_m
    return TileConfig(block_l, block_m, budget.full_warps if elements >= 4096 else 4 if elements >= 1024 else 2)


def hint_of(n):
    """A host int's value, or a SymInt's example value without installing a guard.

    Args:
        n: an int, a SymInt or None.

    Returns:
        an int, or None (None given, or a SymInt with no hint).
    """
    if n is None or type(n) is int:
        return n
    hint = getattr(getattr(n, "node", None), "hint", None)
    return int(hint) if hint is not None else None


@triton.jit
def rows_of(start, end, n_rows):
    # a segment's rows [start, end), its loaded offsets clamped into [0, n_rows): whatever the offsets say, no
    # row outside values is touched (bad offsets give unspecified values, never an out-of-bounds access)
    start = tl.minimum(tl.maximum(start.to(tl.int64), 0), n_rows)
    end = tl.minimum(tl.maximum(end.to(tl.int64), start), n_rows)
    return start, end


@triton.jit
def tile(base_ptr, r, end, c, n_cols, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # rows [r, min(r + BLOCK_L, end)) × columns [c, min(c + BLOCK_M, n_cols)) of the (rows, n_cols) tensor at
    # base_ptr: the pointers (BLOCK_L, BLOCK_M), int64 row addressing, and which of them to touch
    rows = r + tl.arange(0, BLOCK_L).to(tl.int64)
    cols = c + tl.arange(0, BLOCK_M)
    mask = (rows < end)[:, None] & (cols < n_cols)[None, :]
    return base_ptr + rows[:, None] * n_cols + cols[None, :], mask


@triton.jit
def part_rows(start, end, part, PARTS: tl.constexpr, BLOCK_L: tl.constexpr):
    # rows [r0, r1) of part `part` of PARTS of a segment's rows [start, end) (the split kernels: several programs per
    # segment): tile-aligned spans, the last ones maybe empty
    span = tl.cdiv(tl.cdiv(end - start, PARTS), BLOCK_L) * BLOCK_L
    r0 = tl.minimum(start + part * span, end)
    return r0, tl.minimum(r0 + span, end)
