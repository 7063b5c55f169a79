"""Planning a jagged sum/mean (and its backward): the output, the workspace and the launches.

``plan_reduce`` / ``plan_expand`` choose the kernels (``kernels``) and their grids from the call's
shapes and the configs (``jaggedperf.ops.config``), allocate what the kernels write, and describe each
launch as a ``Launch``; the caller runs them (``op``: through the fast tiers eagerly, ``wrap_triton``
when traced). The whole-segments kernel when ``max_seqlen`` is known and short; else the balanced
chunks. Nothing here reads a tensor's values: under ``torch.compile(dynamic=True)`` N and B may be
SymInts and planning installs no guard on them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from jaggedperf.ops.config import (EXPAND_SPLIT_ROWS, EXPAND_SPLIT_WARPS, SEGMENT_TILES, SegmentsConfig,
                                   reduce_config, segments_config, sm_count)
from jaggedperf.ops.reduce.kernels import (_combine_kernel, _expand_kernel, _reduce_kernel, _segments_expand_kernel,
                                          _segments_kernel, _segments_loop_kernel)


@dataclass
class Launch:
    """One kernel launch: what ``kernel[grid](*args, num_warps=num_warps)`` needs, and what it writes."""

    kernel: object
    grid: tuple
    args: tuple  # positional, constexprs included (the order of the kernel's signature)
    num_warps: int
    written: tuple  # tensors the kernel writes (the fast path's self-check compares them)
    key: tuple  # kernel name + constexprs: with the caller's dtypes/alignment, what the JIT specialises on
    native: dict | None = None  # what the native path needs to launch it (_native.offer): sources, grid, plan


def _chunking(n_rows, n_cols: int, cfg, device: torch.device, rows_per_chunk=None):
    """(R, C, column blocks). R from N and the target program count only; sym-friendly (no branch on N)."""
    col_blocks = -(-n_cols // cfg.block_m)
    if rows_per_chunk is None:
        target_chunks = max(1, -(-(sm_count(device) * cfg.programs_per_sm) // col_blocks))
        per = (n_rows + target_chunks - 1) // target_chunks
        per = (per + cfg.block_l - 1) // cfg.block_l * cfg.block_l
        rows_per_chunk = _max(per, cfg.min_chunk_rows)
    n_chunks = _max((n_rows + rows_per_chunk - 1) // rows_per_chunk, 1)
    return rows_per_chunk, n_chunks, col_blocks


def _max(a, b):
    # builtin max on ints (eager: ~20x cheaper); torch.sym_max on SymInts (no guard under torch.compile)
    if type(a) is int and type(b) is int:
        return a if a > b else b
    return torch.sym_max(a, b)


def plan_reduce(values, offsets, *, mean: bool, empty_zero: bool, max_seqlen=None, rows_per_chunk=None,
                segments: SegmentsConfig | None = None, poison: float | None = None):
    """Allocate the output (and workspace) and describe the launches of a jagged sum/mean.

    With ``max_seqlen`` known (a host int, or a SymInt under torch.compile: ``_segments_for``) and short
    enough (``segments_config``), one program per group of whole segments: one launch, no search
    (``_segments_kernel``). Otherwise the balanced chunks: chunks stop at their end and a second launch
    combines the pieces of the segments that cross one.
    ``segments`` forces the whole-segments kernel with that config and ``rows_per_chunk`` forces R (tests
    use tiny chunks and groups to exercise every path: each is correct whatever the lengths;
    ``max_seqlen`` only decides the balance); ``poison`` (a value, e.g. NaN) fills output and workspace
    first, so an element nobody writes shows.
    """
    n_rows, n_cols = values.shape
    n_segments = offsets.shape[0] - 1
    if segments is None and max_seqlen is not None and rows_per_chunk is None:
        segments = _segments_for(n_cols, max_seqlen, n_segments, values.device)
    if segments is not None:
        return _plan_segments(values, offsets, mean, empty_zero, segments, poison)
    cfg = reduce_config(n_cols, values.dtype, values.device)
    n_cols = int(n_cols)
    rows, chunks, col_blocks = _chunking(n_rows, n_cols, cfg, values.device, rows_per_chunk)
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    grid = (chunks, col_blocks, 1)
    # (2·C, M) fp32 pieces + C int32 crossing slots, one allocation
    ws = torch.empty((2 * chunks * n_cols + chunks,), dtype=torch.float32, device=values.device)
    if poison is not None:
        out.fill_(poison)
        ws.fill_(poison)
    reduce_args = (values, offsets, out, ws, n_rows, n_cols, n_segments, rows, chunks,
                   mean, empty_zero, cfg.block_l, cfg.block_m)
    combine_args = (offsets, out, ws, n_cols, rows, chunks, mean, empty_zero, cfg.block_p, cfg.block_m)
    # the native path redoes _chunking per call (so one plan serves every N and B) unless R was forced
    plan = None if rows_per_chunk is not None else {
        "block_m": cfg.block_m, "group": 0, "programs": 0, "block_l": cfg.block_l,
        "chunk_programs": sm_count(values.device) * cfg.programs_per_sm, "min_chunk_rows": cfg.min_chunk_rows}
    return out, (Launch(_reduce_kernel, grid, reduce_args, cfg.num_warps, (out, ws), ("reduce", *reduce_args[-4:]),
                        plan and {"sources": REDUCE_SOURCES, "grid": "chunks", "plan": plan}),
                 Launch(_combine_kernel, grid, combine_args, cfg.num_warps, (out,), ("combine", *combine_args[-4:]),
                        plan and {"sources": COMBINE_SOURCES, "grid": "chunks", "plan": plan}))


def _segments_for(n_cols, max_seqlen, n_segments, device) -> SegmentsConfig | None:
    """``segments_config`` of the values of max_seqlen and B: host ints, or under torch.compile SymInts'
    hints, with one guard.

    Traced, the config comes from the values the graph is first compiled with, with no guard on B and
    one on max_seqlen: that every sequence still fits the config's tiles (past it, a recompile takes
    the chunked kernels; for host ints segments_config has already checked it). A later, smaller B or
    max_seqlen runs the same config (correct, maybe a larger tile than it needs); nothing about B or N
    ever recompiles.
    """
    seqlen_hint, segments_hint = _hint(max_seqlen), _hint(n_segments)
    if seqlen_hint is None or segments_hint is None:
        return None
    cfg = segments_config(n_cols, seqlen_hint, segments_hint, device)
    if cfg is not None and not (max_seqlen <= cfg.block_l * SEGMENT_TILES):  # the guard (True for the hint)
        return None
    return cfg


def _hint(n):
    # a host int's value, or a SymInt's example value without installing a guard (None when it has none)
    if type(n) is int:
        return n
    hint = getattr(getattr(n, "node", None), "hint", None)
    return int(hint) if hint is not None else None


def _plan_segments(values, offsets, mean, empty_zero, cfg: SegmentsConfig, poison):
    n_rows, n_cols = values.shape
    n_segments = offsets.shape[0] - 1
    out = torch.empty((n_segments, n_cols), dtype=values.dtype, device=values.device)
    if poison is not None:
        out.fill_(poison)
    # one program per group, or (cfg.programs) a fixed grid of programs looping over the groups
    kernel, name, programs = (_segments_loop_kernel, "segments_loop", cfg.programs) if cfg.programs else \
        (_segments_kernel, "segments", _max(-(-n_segments // cfg.group), 1))
    grid = (programs, -(-int(n_cols) // cfg.block_m), 1)
    args = (values, offsets, out, n_rows, int(n_cols), n_segments, mean, empty_zero, cfg.group, cfg.block_l,
            cfg.block_m)
    plan = {"block_m": cfg.block_m, "group": 0 if cfg.programs else cfg.group, "programs": cfg.programs,
            "block_l": 0, "chunk_programs": 0, "min_chunk_rows": 0}
    native = {"sources": SEGMENT_SOURCES, "grid": "segments", "plan": plan}
    return out, (Launch(kernel, grid, args, cfg.num_warps, (out,), (name, *args[-5:]), native),)


# what fills the kernels' runtime arguments, in order (the native path's parameter sources)
SEGMENT_SOURCES = ("values", "offsets", "out", "n_rows", "n_cols", "n_segments")
REDUCE_SOURCES = ("values", "offsets", "out", "workspace", "n_rows", "n_cols", "n_segments", "rows_per_chunk",
                  "n_chunks")
COMBINE_SOURCES = ("offsets", "out", "workspace", "n_cols", "rows_per_chunk", "n_chunks")


def plan_expand(grad, offsets, n_rows, *, mean: bool, max_seqlen=None, rows_per_chunk=None,
                segments: SegmentsConfig | None = None, poison: float | None = None):
    """Allocate grad_values (n_rows, M) and describe the launch that fills it: with ``max_seqlen`` known
    and short (as for the forward, ``_segments_for``; ``segments`` forces a config, whose ``programs`` the
    backward ignores), one program per group of whole segments; otherwise the balanced chunks."""
    n_segments, n_cols = grad.shape
    if segments is None and max_seqlen is not None and rows_per_chunk is None:
        segments = _segments_for(n_cols, max_seqlen, n_segments, grad.device)
    out = torch.empty((n_rows, n_cols), dtype=grad.dtype, device=grad.device)
    if poison is not None:
        out.fill_(poison)
    if segments is not None:
        tiles, segments = _expand_tiles(segments, max_seqlen)
        grid = (_max(-(-n_segments // segments.group), 1), -(-int(n_cols) // segments.block_m), tiles)
        args = (grad, offsets, out, n_rows, int(n_cols), n_segments, tiles, mean, segments.group, segments.block_l,
                segments.block_m)
        return out, (Launch(_segments_expand_kernel, grid, args, segments.num_warps, (out,),
                            ("segments_expand", *args[-4:])),)
    cfg = reduce_config(n_cols, grad.dtype, grad.device)
    n_cols = int(n_cols)
    rows, chunks, col_blocks = _chunking(n_rows, n_cols, cfg, grad.device, rows_per_chunk)
    args = (grad, offsets, out, n_rows, n_cols, n_segments, rows, mean, cfg.block_l, cfg.block_m)
    return out, (Launch(_expand_kernel, (chunks, col_blocks, 1), args, cfg.num_warps, (out,), ("expand", *args[-3:])),)


def _expand_tiles(cfg: SegmentsConfig, max_seqlen):
    # Programs on grid axis 2, and the config they run. A segment alone in its program whose rows take more
    # than one tile: its rows spread over programs of EXPAND_SPLIT_ROWS rows each, so that every SM writes
    # about as many rows whatever the lengths (the bars' second seed shape, up to 275 rows: 5.76 against
    # 6.59 µs, run 30; spreading whole 128-row tiles gained nothing, run 25). Decided on max_seqlen's
    # value (a SymInt's hint: no guard); the last program writes whatever lies past the others, so any
    # max_seqlen is correct.
    hint = None if max_seqlen is None else _hint(max_seqlen)
    if cfg.group != 1 or hint is None or hint <= cfg.block_l:
        return 1, cfg
    split = dataclasses.replace(cfg, block_l=EXPAND_SPLIT_ROWS, num_warps=EXPAND_SPLIT_WARPS)
    return _max(-(-max_seqlen // EXPAND_SPLIT_ROWS), 1), split


def run_direct(launches) -> None:
    """Launch through the JIT (``kernel[grid](...)``): the normal path, and the interpreter's."""
    for launch in launches:
        launch.kernel[launch.grid](*launch.args, num_warps=launch.num_warps)


def launch_reduce(values, offsets, *, mean=False, empty_zero=False, max_seqlen=None, rows_per_chunk=None,
                  segments=None, poison=None):
    """Run the sum/mean kernels directly (no operator, no checks). Tests call it under TRITON_INTERPRET=1."""
    out, launches = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen,
                                rows_per_chunk=rows_per_chunk, segments=segments, poison=poison)
    run_direct(launches)
    return out


def launch_expand(grad, offsets, n_rows, *, mean=False, max_seqlen=None, rows_per_chunk=None, segments=None,
                  poison=None):
    """Run the backward kernel directly (no operator, no checks)."""
    out, launches = plan_expand(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen,
                                rows_per_chunk=rows_per_chunk, segments=segments, poison=poison)
    run_direct(launches)
    return out
