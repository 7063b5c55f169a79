"""The jagged softmax kernels (``@triton.jit`` only): forward and backward.

Input: ``values (N, M)`` (N = total_len) and ``offsets (B+1,)``; output ``(N, M)`` in values' dtype: for each
sequence b and column j, the softmax of ``values[offsets[b]:offsets[b+1], j]`` (along the ragged dimension),
computed in fp32. An empty sequence has no rows: nothing to write.

Design: one program per (segment, column block); grid = (max(B, 1), cdiv(M, BLOCK_M)).

- A segment of at most BLOCK_L rows is one tile: loaded once, its per-column max subtracted, exponentiated,
  summed and written from registers (reads N·M·s once, writes N·M·s).
- A longer one loops over row tiles twice: an online pass keeps, per element of the tile, the running max of
  the rows it has seen and the sum of exp(x − max) rescaled whenever that max grows (elementwise: no reduction
  across the tile's rows inside the loop, so the loads of one tile do not wait on the last one's reductions);
  the tile's rows are merged into each column's max and sum once, after the loop; then a pass writes
  exp(x − max) / sum. A running max of −inf is taken as 0 where it is subtracted, so that exponentials of −inf
  are 0 (not NaN) while a later tile may still bring a finite value; a column that stays all −inf gives 0/0 =
  NaN, as torch.softmax does.
- The backward (``dx = y · (g − Σ_rows g·y)``) has the same two shapes: one tile, or a pass summing g·y into a
  tile-shaped fp32 accumulator (fixed order: deterministic, no atomics) then a pass writing.
- Rows are addressed in int64; the segment's offsets are clamped into [0, N) (``tiles.rows_of``), so bad
  offsets never make a program read or write outside the tensors.
- Inductor's write analysis: the offsets are loaded here, in the kernel, never by a helper (see
  ``jaggedperf.ops.tiles``).
"""

import triton
import triton.language as tl

from jaggedperf.ops.tiles import rows_of, tile


# reads the segment's rows of its column block once if they fit one tile, else twice; writes them once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _softmax_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64: segment s is rows [offsets[s], offsets[s+1])
    out_ptr,  # (n_rows, n_cols) in values' dtype: each segment's rows written by its programs
    n_rows,  # N: rows outside [0, N) are never touched, whatever the offsets say
    n_cols,  # M (specialised)
    n_segments,  # B: programs past it (grid axis 0 is max(B, 1)) do nothing
    BLOCK_L: tl.constexpr,  # rows per tile: a segment of <= BLOCK_L rows is read once
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    seg = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_M
    ok = seg < n_segments
    start, end = rows_of(tl.load(offsets_ptr + seg, mask=ok, other=0), tl.load(offsets_ptr + seg + 1, mask=ok,
                                                                              other=0), n_rows)
    if end - start <= BLOCK_L:
        ptrs, mask = tile(values_ptr, start, end, c, n_cols, BLOCK_L, BLOCK_M)
        x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
        p = tl.where(mask, tl.exp(x - tl.max(x, axis=0)[None, :]), 0.0)
        out_ptrs, mask = tile(out_ptr, start, end, c, n_cols, BLOCK_L, BLOCK_M)
        tl.store(out_ptrs, (p / tl.sum(p, axis=0)[None, :]).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        # per tile element: the running max of the rows it has seen, and Σ exp(x − that max) (fp32 registers,
        # 2 × BLOCK_L × BLOCK_M); a masked element loads −inf and adds exp(−inf) = 0
        m_acc = tl.full([BLOCK_L, BLOCK_M], float("-inf"), tl.float32)
        s_acc = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
        for r in range(start, end, BLOCK_L):
            ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
            new_m = tl.maximum(m_acc, x)
            safe = tl.where(new_m == float("-inf"), 0.0, new_m)  # s_acc is 0 while its max is -inf
            s_acc = s_acc * tl.exp(m_acc - safe) + tl.exp(x - safe)
            m_acc = new_m
        m = tl.max(m_acc, axis=0)  # each column's max, then its Σ exp(x − max), merged over the tile's rows
        safe = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(s_acc * tl.exp(m_acc - safe[None, :]), axis=0)
        for r in range(start, end, BLOCK_L):
            ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
            y = tl.exp(x - m[None, :]) / s[None, :]
            out_ptrs, mask = tile(out_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)


# reads the segment's rows of y and grad once if they fit one tile, else twice; writes grad_values' once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _softmax_backward_kernel(
    out_ptr,  # (n_rows, n_cols) the forward's output y, contiguous, fp32/bf16/fp16
    grad_ptr,  # (n_rows, n_cols) the gradient of y, contiguous, y's dtype
    offsets_ptr,  # (n_segments + 1,) int32/int64
    grad_values_ptr,  # (n_rows, n_cols) in y's dtype: y · (grad − Σ_rows grad·y), per segment and column
    n_rows,  # N: rows outside [0, N) are never touched
    n_cols,  # M (specialised)
    n_segments,  # B: programs past it do nothing
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    seg = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_M
    ok = seg < n_segments
    start, end = rows_of(tl.load(offsets_ptr + seg, mask=ok, other=0), tl.load(offsets_ptr + seg + 1, mask=ok,
                                                                              other=0), n_rows)
    if end - start <= BLOCK_L:
        ptrs, mask = tile(out_ptr, start, end, c, n_cols, BLOCK_L, BLOCK_M)
        y = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        gptrs, mask = tile(grad_ptr, start, end, c, n_cols, BLOCK_L, BLOCK_M)
        g = tl.load(gptrs, mask=mask, other=0.0).to(tl.float32)
        dx = y * (g - tl.sum(g * y, axis=0)[None, :])
        dptrs, mask = tile(grad_values_ptr, start, end, c, n_cols, BLOCK_L, BLOCK_M)
        tl.store(dptrs, dx.to(grad_values_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
        for r in range(start, end, BLOCK_L):
            ptrs, mask = tile(out_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            gptrs, mask = tile(grad_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32) * tl.load(gptrs, mask=mask, other=0.0).to(
                tl.float32)
        dot = tl.sum(acc, axis=0)
        for r in range(start, end, BLOCK_L):
            ptrs, mask = tile(out_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            gptrs, mask = tile(grad_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            y = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
            dx = y * (tl.load(gptrs, mask=mask, other=0.0).to(tl.float32) - dot[None, :])
            dptrs, mask = tile(grad_values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
            tl.store(dptrs, dx.to(grad_values_ptr.dtype.element_ty), mask=mask)
