"""The jagged layer norm kernels (``@triton.jit`` only): forward and backward.

Input: ``values (N, M)`` and ``offsets (B+1,)``; output ``(N, M)`` in values' dtype: each sequence normalised
over all of its len × M elements, no affine (``torch.layer_norm(t, t.shape)`` per sequence t), statistics in
fp32. An empty sequence has no rows: nothing to write.

Design: one program per segment, grid = (max(B, 1),); it walks the segment in (BLOCK_L, BLOCK_M) tiles. For
few long segments, the split kernels at the end run PARTS programs per segment (grid (max(B, 1), PARTS)).

- A segment whose rows fit one tile (length <= BLOCK_L and M <= BLOCK_M) is loaded once: mean, then the
  variance as the mean squared deviation from it (two passes over registers), then written.
- A longer one: a statistics pass over every tile (each tile's count, mean and M2 merged into the running ones
  by Chan's formula: a Welford variance, never E[x²] − E[x]²), then a pass that writes (x − mean) · rstd.
  Reads N·M·s twice, writes N·M·s. The split's moments keep a Welford update per tile element instead, merged
  once after the loop (``_moments_per_element``): its few programs' long loops wait on no reduction.
- The backward, dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) with x̂ = (x − mean) · rstd, recomputes the
  statistics from x (B floats were not worth a second output). On a segment longer than a tile one pass over x
  and g gives them with mean(g) and the co-moment Σ (x − x̄)(g − ḡ) = Σ g · (x − x̄), tile by tile merged by
  Chan's formulas (``_joint_moments``; fixed order: deterministic, no atomics); a second pass writes.
- Rows are addressed in int64; the segment's offsets are clamped into [0, N) (``tiles.rows_of``); the offsets
  are loaded here, never by a helper (Inductor's write analysis: ``jaggedperf.ops.tiles``).
"""

import triton
import triton.language as tl

from jaggedperf.ops.tiles import part_rows, rows_of, tile


@triton.jit
def _moments(values_ptr, start, end, n_cols, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr,
             PER_ELEMENT: tl.constexpr):
    # count, mean and sum of squared deviations (M2) of rows [start, end) × all columns (a Welford variance, never
    # E[x²] − E[x]²); an empty range gives (0, 0, 0). PER_ELEMENT: the split's long latency-bound loops, else the
    # one-program kernels (``_moments_per_tile``: fewer registers and no division per element).
    if PER_ELEMENT:
        return _moments_per_element(values_ptr, start, end, n_cols, BLOCK_L, BLOCK_M)
    else:
        return _moments_per_tile(values_ptr, start, end, n_cols, BLOCK_L, BLOCK_M)


@triton.jit
def _moments_per_tile(values_ptr, start, end, n_cols, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # each tile's own count, mean and M2 (its two reductions), merged into the running ones by Chan's formula
    mean = tl.sum(tl.zeros([BLOCK_M], dtype=tl.float32), axis=0)
    m2 = tl.sum(tl.zeros([BLOCK_M], dtype=tl.float32), axis=0)
    count = mean * 0.0
    for r in range(start, end, BLOCK_L):
        for c in range(0, n_cols, BLOCK_M):
            ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            n_tile = ((tl.minimum(end - r, BLOCK_L)) * (tl.minimum(n_cols - c, BLOCK_M))).to(tl.float32)
            tile_mean = tl.sum(tl.sum(x, axis=1), axis=0) / n_tile
            d = tl.where(mask, x - tile_mean, 0.0)
            count, mean, m2 = _merge(count, mean, m2, n_tile, tile_mean, tl.sum(tl.sum(d * d, axis=1), axis=0))
    return count, mean, m2


@triton.jit
def _moments_per_element(values_ptr, start, end, n_cols, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # Per tile element a Welford update of the values it has seen (elementwise: no reduction across the tile inside
    # the loop, so a tile's loads never wait on the last one's reductions); the tile's elements merged once after the
    # loop by the parallel (Chan) formula: the count-weighted mean, then Σ M2 plus each element's count × its mean's
    # squared deviation from it. Registers: two fp32 tiles. An element's count is not stored: the tiles are visited
    # row tile by row tile, column block by column block, and an element in range at (row tile i, column block k)
    # was in range at every earlier visit, so its count there is i · (column blocks its column meets) + k + 1, and
    # after the loop (row tiles its row meets) × (those blocks).
    cols = tl.arange(0, BLOCK_M)
    col_visits = tl.maximum(tl.cdiv(n_cols - cols, BLOCK_M), 0).to(tl.float32)  # column blocks column j meets
    mean = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
    for r in range(start, end, BLOCK_L):
        row_tile = ((r - start) // BLOCK_L).to(tl.float32)
        for c in range(0, n_cols, BLOCK_M):
            ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            count_here = row_tile * col_visits + (c // BLOCK_M + 1)  # ≥ 1; used only where in range
            delta = tl.where(mask, x - mean, 0.0)  # an element out of range is left as it is
            mean += delta / count_here[None, :]
            m2 += delta * (x - mean)
    rows = tl.arange(0, BLOCK_L)
    row_visits = tl.maximum(tl.cdiv(end - start - rows, BLOCK_L), 0).to(tl.float32)  # row tiles row k meets
    cnt = row_visits[:, None] * col_visits[None, :]
    count = tl.sum(tl.sum(cnt, axis=1), axis=0)
    total_mean = tl.sum(tl.sum(cnt * mean, axis=1), axis=0) / tl.maximum(count, 1.0)
    dev = mean - total_mean  # an element never visited has count 0: it adds nothing below
    return count, total_mean, tl.sum(tl.sum(m2 + cnt * dev * dev, axis=1), axis=0)


@triton.jit
def _joint_moments(values_ptr, grad_ptr, start, end, n_cols, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # Over rows [start, end) × all columns: x's count, mean and M2 exactly as ``_moments_per_tile`` computes them
    # (same tiles, same merges), g's mean, and the co-moment C = Σ (x − x̄)(g − ḡ), each tile's own merged by
    # Chan's formula (``_merge_joint``: no E[xg] − E[x]E[g] cancellation). C is what the backward needs of x̂ and
    # g: Σ g·x̂ = rstd · Σ g·(x − x̄) = rstd · C, so one pass reads x and g where two passes read x.
    mean = tl.sum(tl.zeros([BLOCK_M], dtype=tl.float32), axis=0)
    m2 = mean
    count = mean
    mean_g = mean
    co = mean
    for r in range(start, end, BLOCK_L):
        for c in range(0, n_cols, BLOCK_M):
            ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            gptrs, mask = tile(grad_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(gptrs, mask=mask, other=0.0).to(tl.float32)
            n_tile = ((tl.minimum(end - r, BLOCK_L)) * (tl.minimum(n_cols - c, BLOCK_M))).to(tl.float32)
            tile_mean = tl.sum(tl.sum(x, axis=1), axis=0) / n_tile
            tile_mean_g = tl.sum(tl.sum(g, axis=1), axis=0) / n_tile
            d = tl.where(mask, x - tile_mean, 0.0)
            # the tile's co-moment Σ d·(g − its ḡ) as Σ d·g − ḡ·Σ d: no second centred tile in registers, and Σ d
            # (0 but for the rounding of the tile's mean, which shifts every d alike) takes that shift out
            co_tile = tl.sum(tl.sum(d * g, axis=1), axis=0) - tile_mean_g * tl.sum(tl.sum(d, axis=1), axis=0)
            count, mean, m2, mean_g, co = _merge_joint(count, mean, m2, mean_g, co, n_tile, tile_mean,
                                                       tl.sum(tl.sum(d * d, axis=1), axis=0), tile_mean_g, co_tile)
    return count, mean, m2, mean_g, co


@triton.jit
def _merge_joint(count, mean, m2, mean_g, co, n_b, mean_b, m2_b, mean_g_b, co_b):
    # Chan's merge of two (count, x̄, M2, ḡ, C) summaries: x's part exactly ``_merge``; C_a + C_b + δx·δg·n_a·n_b/n
    share = n_b / tl.maximum(count + n_b, 1.0)
    delta_g = mean_g_b - mean_g
    co = co + co_b + (mean_b - mean) * delta_g * (count * share)
    count, mean, m2 = _merge(count, mean, m2, n_b, mean_b, m2_b)
    return count, mean, m2, mean_g + delta_g * share, co


@triton.jit
def _merge(count, mean, m2, n_b, mean_b, m2_b):
    # Chan's merge of two (count, mean, M2) summaries; a side with count 0 leaves the other as it is
    total = count + n_b
    share = n_b / tl.maximum(total, 1.0)
    delta = mean_b - mean
    return total, mean + delta * share, m2 + m2_b + delta * delta * (count * share)


@triton.jit
def _rstd(variance, eps):
    # 1/sqrt(variance + eps) in fp32 whatever eps's type: a Triton float argument is fp32 when launched from Python,
    # but Inductor passes a symbolic float (eps saved for a compiled backward) as fp64, and an fp64 rstd would turn
    # the backward's fp32 loop accumulators fp64, which Triton rejects
    return 1.0 / tl.sqrt((variance + eps).to(tl.float32))


@triton.jit
def _statistics(values_ptr, start, end, n_cols, eps, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # mean and 1/sqrt(var + eps) of rows [start, end) × all columns
    count, mean, m2 = _moments(values_ptr, start, end, n_cols, BLOCK_L, BLOCK_M, False)
    return mean, _rstd(m2 / count, eps)


# reads the segment's len·M·s bytes once if they fit one tile, else twice; writes them once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _layer_norm_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64: segment s is rows [offsets[s], offsets[s+1])
    out_ptr,  # (n_rows, n_cols) in values' dtype: each segment's rows written by its program
    eps,  # added to the variance (fp32)
    n_rows,  # N: rows outside [0, N) are never touched, whatever the offsets say
    n_cols,  # M (specialised)
    n_segments,  # B: programs past it (grid axis 0 is max(B, 1)) do nothing
    BLOCK_L: tl.constexpr,  # rows per tile: a segment of <= BLOCK_L rows (and M <= BLOCK_M) is read once
    BLOCK_M: tl.constexpr,  # columns per tile: the program loops over column blocks
):
    seg = tl.program_id(0).to(tl.int64)
    ok = seg < n_segments
    start, end = rows_of(tl.load(offsets_ptr + seg, mask=ok, other=0), tl.load(offsets_ptr + seg + 1, mask=ok,
                                                                              other=0), n_rows)
    if (end - start <= BLOCK_L) & (n_cols <= BLOCK_M):
        ptrs, mask = tile(values_ptr, start, end, 0, n_cols, BLOCK_L, BLOCK_M)
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        n = ((end - start) * n_cols).to(tl.float32)
        d = tl.where(mask, x - tl.sum(tl.sum(x, axis=1), axis=0) / n, 0.0)
        rstd = _rstd(tl.sum(tl.sum(d * d, axis=1), axis=0) / n, eps)
        out_ptrs, mask = tile(out_ptr, start, end, 0, n_cols, BLOCK_L, BLOCK_M)
        tl.store(out_ptrs, (d * rstd).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        mean, rstd = _statistics(values_ptr, start, end, n_cols, eps, BLOCK_L, BLOCK_M)
        for r in range(start, end, BLOCK_L):
            for c in range(0, n_cols, BLOCK_M):
                ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
                x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
                out_ptrs, mask = tile(out_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
                tl.store(out_ptrs, ((x - mean) * rstd).to(out_ptr.dtype.element_ty), mask=mask)


# reads the segment's x and grad once if they fit one tile, else twice each; writes once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _layer_norm_backward_kernel(
    values_ptr,  # (n_rows, n_cols) the forward's input x, contiguous, fp32/bf16/fp16
    grad_ptr,  # (n_rows, n_cols) the gradient of the output, contiguous, x's dtype
    offsets_ptr,  # (n_segments + 1,) int32/int64
    grad_values_ptr,  # (n_rows, n_cols) in x's dtype: rstd · (g − mean(g) − x̂ · mean(g · x̂)) per segment
    eps,  # as in the forward
    n_rows,  # N: rows outside [0, N) are never touched
    n_cols,  # M (specialised)
    n_segments,  # B: programs past it do nothing
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per tile
):
    seg = tl.program_id(0).to(tl.int64)
    ok = seg < n_segments
    start, end = rows_of(tl.load(offsets_ptr + seg, mask=ok, other=0), tl.load(offsets_ptr + seg + 1, mask=ok,
                                                                              other=0), n_rows)
    n = ((end - start) * n_cols).to(tl.float32)
    if (end - start <= BLOCK_L) & (n_cols <= BLOCK_M):
        ptrs, mask = tile(values_ptr, start, end, 0, n_cols, BLOCK_L, BLOCK_M)
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        gptrs, mask = tile(grad_ptr, start, end, 0, n_cols, BLOCK_L, BLOCK_M)
        g = tl.load(gptrs, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - tl.sum(tl.sum(x, axis=1), axis=0) / n, 0.0)
        rstd = _rstd(tl.sum(tl.sum(d * d, axis=1), axis=0) / n, eps)
        xhat = d * rstd
        mean_g = tl.sum(tl.sum(g, axis=1), axis=0) / n
        # (1/n) Σ (g − ḡ)·x̂ = rstd · (Σ d·g − ḡ·Σ d) / n: Σ d is 0 but for the rounding of the mean, which shifts
        # every d alike; taking it out keeps ḡ times that shift out of every gradient (as the looping branch does)
        mean_gx = rstd * (tl.sum(tl.sum(d * g, axis=1), axis=0) - mean_g * tl.sum(tl.sum(d, axis=1), axis=0)) / n
        dptrs, mask = tile(grad_values_ptr, start, end, 0, n_cols, BLOCK_L, BLOCK_M)
        tl.store(dptrs, (rstd * (g - mean_g - xhat * mean_gx)).to(grad_values_ptr.dtype.element_ty), mask=mask)
    else:
        count, mean, m2, mean_g, co = _joint_moments(values_ptr, grad_ptr, start, end, n_cols, BLOCK_L, BLOCK_M)
        rstd = _rstd(m2 / count, eps)
        mean_gx = rstd * co / count  # (1/n) Σ g · x̂
        for r in range(start, end, BLOCK_L):
            for c in range(0, n_cols, BLOCK_M):
                ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
                gptrs, mask = tile(grad_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
                xhat = (tl.load(ptrs, mask=mask, other=0.0).to(tl.float32) - mean) * rstd
                g = tl.load(gptrs, mask=mask, other=0.0).to(tl.float32)
                dptrs, mask = tile(grad_values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
                tl.store(dptrs, (rstd * (g - mean_g - xhat * mean_gx)).to(grad_values_ptr.dtype.element_ty),
                         mask=mask)


# --- split over parts: few long segments --------------------------------------------------------------------
# One program per segment leaves most SMs idle when B is small (8 segments of 4000 × 4096: 8 programs). The split
# kernels run PARTS programs per segment (grid (max(B, 1), PARTS)), each on a tile-aligned range of the segment's
# rows (``tiles.part_rows``); per-part summaries go to an fp32 workspace and every program of the segment combines
# them in the same fixed order (deterministic, no atomics). Forward: moments, then normalise (x read twice). Backward:
# moments, then Σg and Σg·x̂ per part, then write (x read three times, g twice). Workspace addresses come from the
# program ids only (Inductor's write analysis: ``jaggedperf.ops.tiles``).


@triton.jit
def _combined_statistics(ws_ptr, seg, eps, PARTS: tl.constexpr):
    # the segment's count, mean and 1/sqrt(var + eps) from its PARTS (count, mean, M2) summaries at
    # ws[(seg·PARTS + p)·3 + {0, 1, 2}], merged in order p = 0, 1, ... (the same in every program of the segment);
    # what it returns scales values, never addresses a store (Inductor's write analysis: ``ops/tiles.py``)
    count = tl.sum(tl.zeros([1], dtype=tl.float32), axis=0)  # a 0-d fp32 (the loop carries tensors)
    mean = count
    m2 = count
    for p in range(PARTS):
        base = (seg * PARTS + p) * 3
        count, mean, m2 = _merge(count, mean, m2, tl.load(ws_ptr + base), tl.load(ws_ptr + base + 1),
                                 tl.load(ws_ptr + base + 2))
    return count, mean, _rstd(m2 / count, eps)


# reads its part's rows once; writes 3 floats
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _layer_norm_moments_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16: x
    offsets_ptr,  # (n_segments + 1,) int32/int64
    ws_ptr,  # (n_segments · PARTS · 3,) fp32: this program's (count, mean, M2) at (seg · PARTS + part) · 3
    n_rows,  # N: rows outside [0, N) are never touched, whatever the offsets say
    n_cols,  # M (specialised)
    n_segments,  # B: programs past it (grid axis 0 is max(B, 1)) do nothing
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per tile: the program loops over column blocks
    PARTS: tl.constexpr,  # programs per segment (grid axis 1)
):
    seg = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    if seg < n_segments:
        start, end = rows_of(tl.load(offsets_ptr + seg), tl.load(offsets_ptr + seg + 1), n_rows)
        r0, r1 = part_rows(start, end, part, PARTS, BLOCK_L)
        count, mean, m2 = _moments(values_ptr, r0, r1, n_cols, BLOCK_L, BLOCK_M, True)
        base = (seg * PARTS + part) * 3
        tl.store(ws_ptr + base, count)
        tl.store(ws_ptr + base + 1, mean)
        tl.store(ws_ptr + base + 2, m2)


# reads its part's rows once and the segment's PARTS summaries; writes its part's rows once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _layer_norm_parts_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous: x
    offsets_ptr,  # (n_segments + 1,) int32/int64
    ws_ptr,  # (n_segments · PARTS · 3,) fp32: the moments kernel's summaries (read only)
    out_ptr,  # (n_rows, n_cols) in x's dtype: (x − mean) · rstd over this program's rows
    eps,  # added to the variance (fp32)
    n_rows,  # N
    n_cols,  # M (specialised)
    n_segments,  # B
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per tile
    PARTS: tl.constexpr,  # programs per segment
):
    seg = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    if seg < n_segments:
        start, end = rows_of(tl.load(offsets_ptr + seg), tl.load(offsets_ptr + seg + 1), n_rows)
        r0, r1 = part_rows(start, end, part, PARTS, BLOCK_L)
        count, mean, rstd = _combined_statistics(ws_ptr, seg, eps, PARTS)
        for r in range(r0, r1, BLOCK_L):
            for c in range(0, n_cols, BLOCK_M):
                ptrs, mask = tile(values_ptr, r, r1, c, n_cols, BLOCK_L, BLOCK_M)
                x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
                out_ptrs, mask = tile(out_ptr, r, r1, c, n_cols, BLOCK_L, BLOCK_M)
                tl.store(out_ptrs, ((x - mean) * rstd).to(out_ptr.dtype.element_ty), mask=mask)


# reads its part's x and grad once and the PARTS moment summaries; writes 3 floats
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _layer_norm_backward_sums_kernel(
    values_ptr,  # (n_rows, n_cols) the forward's input x, contiguous
    grad_ptr,  # (n_rows, n_cols) the gradient of the output, contiguous, x's dtype
    offsets_ptr,  # (n_segments + 1,) int32/int64
    ws_ptr,  # (n_segments · PARTS · 3,) fp32: the moments kernel's summaries (read only)
    sums_ptr,  # (n_segments · PARTS · 3,) fp32: this program's (Σ g, Σ g · x̂, Σ x̂) at (seg · PARTS + part) · 3
    eps,  # as in the forward
    n_rows,  # N
    n_cols,  # M (specialised)
    n_segments,  # B
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per tile
    PARTS: tl.constexpr,  # programs per segment
):
    seg = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    if seg < n_segments:
        start, end = rows_of(tl.load(offsets_ptr + seg), tl.load(offsets_ptr + seg + 1), n_rows)
        r0, r1 = part_rows(start, end, part, PARTS, BLOCK_L)
        count, mean, rstd = _combined_statistics(ws_ptr, seg, eps, PARTS)
        sum_g = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
        sum_gx = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
        sum_x = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
        for r in range(r0, r1, BLOCK_L):
            for c in range(0, n_cols, BLOCK_M):
                ptrs, mask = tile(values_ptr, r, r1, c, n_cols, BLOCK_L, BLOCK_M)
                gptrs, mask = tile(grad_ptr, r, r1, c, n_cols, BLOCK_L, BLOCK_M)
                g = tl.load(gptrs, mask=mask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (tl.load(ptrs, mask=mask, other=0.0).to(tl.float32) - mean) * rstd, 0.0)
                sum_g += g
                sum_gx += g * xhat
                sum_x += xhat
        base = (seg * PARTS + part) * 3
        tl.store(sums_ptr + base, tl.sum(tl.sum(sum_g, axis=1), axis=0))
        tl.store(sums_ptr + base + 1, tl.sum(tl.sum(sum_gx, axis=1), axis=0))
        tl.store(sums_ptr + base + 2, tl.sum(tl.sum(sum_x, axis=1), axis=0))


# reads its part's x and grad once and the segment's summaries; writes its part's rows once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _layer_norm_backward_parts_kernel(
    values_ptr,  # (n_rows, n_cols) x, contiguous
    grad_ptr,  # (n_rows, n_cols) the output's gradient, contiguous, x's dtype
    offsets_ptr,  # (n_segments + 1,) int32/int64
    ws_ptr,  # (n_segments · PARTS · 3,) fp32: moment summaries (read only)
    sums_ptr,  # (n_segments · PARTS · 3,) fp32: (Σ g, Σ g · x̂, Σ x̂) per part (read only)
    grad_values_ptr,  # (n_rows, n_cols) in x's dtype: rstd · (g − mean(g) − x̂ · mean(g · x̂)) over this program's rows
    eps,  # as in the forward
    n_rows,  # N
    n_cols,  # M (specialised)
    n_segments,  # B
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per tile
    PARTS: tl.constexpr,  # programs per segment
):
    seg = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    if seg < n_segments:
        start, end = rows_of(tl.load(offsets_ptr + seg), tl.load(offsets_ptr + seg + 1), n_rows)
        r0, r1 = part_rows(start, end, part, PARTS, BLOCK_L)
        count, mean, rstd = _combined_statistics(ws_ptr, seg, eps, PARTS)
        total_g = count * 0.0
        total_gx = total_g
        total_x = total_g
        for p in range(PARTS):  # the same fixed order in every program of the segment
            total_g += tl.load(sums_ptr + (seg * PARTS + p) * 3)
            total_gx += tl.load(sums_ptr + (seg * PARTS + p) * 3 + 1)
            total_x += tl.load(sums_ptr + (seg * PARTS + p) * 3 + 2)
        mean_g = total_g / count
        # mean((g − mean(g)) · x̂), equal to mean(g · x̂) since Σ x̂ = 0: the fp32 mean's rounding shifts every x̂
        # alike, and the shift, which Σ x̂ measures, then adds nothing (as the one-program kernel's co-moment)
        mean_gx = (total_gx - mean_g * total_x) / count
        for r in range(r0, r1, BLOCK_L):
            for c in range(0, n_cols, BLOCK_M):
                ptrs, mask = tile(values_ptr, r, r1, c, n_cols, BLOCK_L, BLOCK_M)
                gptrs, mask = tile(grad_ptr, r, r1, c, n_cols, BLOCK_L, BLOCK_M)
                xhat = (tl.load(ptrs, mask=mask, other=0.0).to(tl.float32) - mean) * rstd
                g = tl.load(gptrs, mask=mask, other=0.0).to(tl.float32)
                dptrs, mask = tile(grad_values_ptr, r, r1, c, n_cols, BLOCK_L, BLOCK_M)
                tl.store(dptrs, (rstd * (g - mean_g - xhat * mean_gx)).to(grad_values_ptr.dtype.element_ty),
                         mask=mask)
