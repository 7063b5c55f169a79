"""The jagged softmax kernels (``@triton.jit`` only): forward and backward.

Input: ``values (N, M)`` (N = total_len) and ``offsets (B+1,)``; output ``(N, M)`` in values' dtype: for each
sequence b and column j, the softmax of ``values[offsets[b]:offsets[b+1], j]`` (along the ragged dimension),
computed in fp32. An empty sequence has no rows: nothing to write.

Design: one program per (segment, column block); grid = (max(B, 1), cdiv(M, BLOCK_M)).

- A segment of at most BLOCK_L rows is one tile: loaded once, its per-column max subtracted, exponentiated,
  summed and written from registers (reads N·M·s once, writes N·M·s).
- A longer one loops over row tiles twice: a pass finds each column's max and the sum of exp(x − max), then a
  pass writes exp(x − max) / sum. The first pass has two variants (PER_ELEMENT, the plan's choice):
  - per column (False): each tile's column max and sum are reduced over its rows and merged into running ones
    (rescaled whenever the max grows): one exp per element, the fewest registers; for programs that fill the GPU.
  - per element (True): each tile element keeps the running max of the rows it has seen and its rescaled sum
    (no reduction across the tile inside the loop, so one tile's loads never wait on the last one's reductions),
    merged over the tile's rows once after the loop: two exps per element and two more fp32 tiles; for programs
    fewer than the SMs (each a latency-bound loop) whose sequences are too short for the split, and for bf16/fp16
    (where the per-column pass's reductions over the rows cost 2-3×: ``rowwise.narrow_loads_loop``).
  A running max of −inf is taken as 0 where it is subtracted, so that exponentials of −inf are 0 (not NaN) while a
  later tile may still bring a finite value; a column that stays all −inf gives 0/0 = NaN, as torch.softmax does.
- Few long segments (fewer programs than SMs): the split at the end, PARTS programs per (segment, column block).
- The backward (``dx = y · (g − Σ_rows g·y)``) has the same two shapes: one tile, or a pass summing g·y into a
  tile-shaped fp32 accumulator (fixed order: deterministic, no atomics) then a pass writing.
- Rows are addressed in int64; the segment's offsets are clamped into [0, N) (``tiles.rows_of``), so bad
  offsets never make a program read or write outside the tensors.
- Inductor's write analysis: the offsets are loaded here, in the kernel, never by a helper (see
  ``jaggedperf.ops.tiles``).
"""

import triton
import triton.language as tl

from jaggedperf.ops.tiles import part_rows, rows_of, tile


@triton.jit
def _column_stats_per_column(values_ptr, start, end, c, n_cols, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # each column's max over rows [start, end) and Σ exp(x − max): every tile reduced over its rows and merged into
    # the running pair, rescaled when the max grows (registers: the tile and two BLOCK_M vectors)
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_M], dtype=tl.float32)
    for r in range(start, end, BLOCK_L):
        ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
        x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, tl.max(x, axis=0))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        scale = tl.where(m == float("-inf"), 0.0, tl.exp(m - safe))  # s is 0 while m is -inf
        s = s * scale + tl.sum(tl.where(mask, tl.exp(x - safe[None, :]), 0.0), axis=0)
        m = new_m
    return m, s


@triton.jit
def _column_stats_per_element(values_ptr, start, end, c, n_cols, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # the same pair, kept per tile element through the loop (the running max of the rows it has seen, Σ exp(x −
    # that max)) and merged over the tile's rows after it (registers: three fp32 tiles); a masked element loads −inf
    # and adds exp(−inf) = 0
    m_acc = tl.full([BLOCK_L, BLOCK_M], float("-inf"), tl.float32)
    s_acc = tl.zeros([BLOCK_L, BLOCK_M], dtype=tl.float32)
    for r in range(start, end, BLOCK_L):
        ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
        x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m_acc, x)
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)  # s_acc is 0 while its max is -inf
        s_acc = s_acc * tl.exp(m_acc - safe) + tl.exp(x - safe)
        m_acc = new_m
    m = tl.max(m_acc, axis=0)
    safe = tl.where(m == float("-inf"), 0.0, m)
    return m, tl.sum(s_acc * tl.exp(m_acc - safe[None, :]), axis=0)


@triton.jit
def _write(values_ptr, out_ptr, start, end, c, n_cols, m, s, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # the last pass over rows [start, end) of the column block at c: exp(x − m) / s, m and s each column's max and
    # Σ exp(x − max) over the whole segment
    for r in range(start, end, BLOCK_L):
        ptrs, mask = tile(values_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
        x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
        out_ptrs, mask = tile(out_ptr, r, end, c, n_cols, BLOCK_L, BLOCK_M)
        tl.store(out_ptrs, (tl.exp(x - m[None, :]) / s[None, :]).to(out_ptr.dtype.element_ty), mask=mask)


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
    PER_ELEMENT: tl.constexpr,  # a longer segment's first pass: per-element running statistics, else per column
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
        if PER_ELEMENT:
            m, s = _column_stats_per_element(values_ptr, start, end, c, n_cols, BLOCK_L, BLOCK_M)
        else:
            m, s = _column_stats_per_column(values_ptr, start, end, c, n_cols, BLOCK_L, BLOCK_M)
        _write(values_ptr, out_ptr, start, end, c, n_cols, m, s, BLOCK_L, BLOCK_M)


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


# --- split over parts: few long segments ------------------------------------------------------------------------
# With fewer (segment, column block) programs than SMs (8 sequences of 4000 × 4096: 128 programs of 4000 rows), each
# program's loop is the kernel's time. The split runs PARTS programs per (segment, column block) (grid (max(B, 1),
# column blocks, PARTS)), each on a tile-aligned range of the rows (``tiles.part_rows``): the first launch writes each
# part's column max and Σ exp(x − max) to an fp32 workspace, the second combines a segment's parts in the same fixed
# order in every program (deterministic, no atomics) and writes its part's rows. x is read twice, y written once, as
# in the one-program kernel. Workspace addresses come from the program ids only (Inductor's write analysis:
# ``jaggedperf.ops.tiles``).


# reads its part's rows of its column block once; writes 2 · BLOCK_M floats
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _softmax_stats_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    ws_ptr,  # (n_segments · PARTS · 2 · n_cols,) fp32: part p's column max at (seg · PARTS + p) · 2 · n_cols + j,
    #          its Σ exp(x − max) n_cols further (an empty part: −inf and 0)
    n_rows,  # N: rows outside [0, N) are never touched, whatever the offsets say
    n_cols,  # M (specialised)
    n_segments,  # B: programs past it (grid axis 0 is max(B, 1)) do nothing
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
    PARTS: tl.constexpr,  # programs per (segment, column block) (grid axis 2)
    PER_ELEMENT: tl.constexpr,  # the part's pass: per-element running statistics, else per column
):
    seg = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_M
    part = tl.program_id(2)
    if seg < n_segments:
        start, end = rows_of(tl.load(offsets_ptr + seg), tl.load(offsets_ptr + seg + 1), n_rows)
        r0, r1 = part_rows(start, end, part, PARTS, BLOCK_L)
        if PER_ELEMENT:
            m, s = _column_stats_per_element(values_ptr, r0, r1, c, n_cols, BLOCK_L, BLOCK_M)
        else:
            m, s = _column_stats_per_column(values_ptr, r0, r1, c, n_cols, BLOCK_L, BLOCK_M)
        cols = c + tl.arange(0, BLOCK_M)
        base = (seg * PARTS + part) * 2 * n_cols
        tl.store(ws_ptr + base + cols, m, mask=cols < n_cols)
        tl.store(ws_ptr + base + n_cols + cols, s, mask=cols < n_cols)


# reads the segment's PARTS summaries of its columns and its part's rows once; writes its part's rows once
@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _softmax_parts_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    ws_ptr,  # (n_segments · PARTS · 2 · n_cols,) fp32: the stats kernel's summaries (read only)
    out_ptr,  # (n_rows, n_cols) in values' dtype: this program's rows of its column block
    n_rows,  # N
    n_cols,  # M (specialised)
    n_segments,  # B
    BLOCK_L: tl.constexpr,  # rows per tile
    BLOCK_M: tl.constexpr,  # columns per program
    PARTS: tl.constexpr,  # programs per (segment, column block)
):
    seg = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_M
    part = tl.program_id(2)
    if seg < n_segments:
        start, end = rows_of(tl.load(offsets_ptr + seg), tl.load(offsets_ptr + seg + 1), n_rows)
        r0, r1 = part_rows(start, end, part, PARTS, BLOCK_L)
        cols = c + tl.arange(0, BLOCK_M)
        ok = cols < n_cols
        m = tl.full([BLOCK_M], float("-inf"), tl.float32)  # the segment's column max: every part's, in order
        for p in range(PARTS):
            m = tl.maximum(m, tl.load(ws_ptr + (seg * PARTS + p) * 2 * n_cols + cols, mask=ok, other=float("-inf")))
        safe = tl.where(m == float("-inf"), 0.0, m)
        s = tl.zeros([BLOCK_M], dtype=tl.float32)  # Σ exp(x − m): each part's sum rescaled to m, in order
        for p in range(PARTS):
            base = (seg * PARTS + p) * 2 * n_cols
            m_p = tl.load(ws_ptr + base + cols, mask=ok, other=float("-inf"))
            s_p = tl.load(ws_ptr + base + n_cols + cols, mask=ok, other=0.0)
            s += tl.where(m_p == float("-inf"), 0.0, s_p * tl.exp(m_p - safe))  # an empty part adds nothing
        _write(values_ptr, out_ptr, r0, r1, c, n_cols, m, s, BLOCK_L, BLOCK_M)
