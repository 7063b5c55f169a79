"""The typed plan both launch paths share, for every op family.

A planner (``jaggedperf.ops.reduce.plan``) turns a call into a ``Plan``: the output it allocated and
the ``Launch``es that fill it. The Python path runs the launches (``tiers.launch_all``, or
``wrap_triton`` when traced); the native path replays the same kernels from C++ for later calls with
the same key, sizing their grids per call from ``Plan.native_plan()`` (a ``NativePlan``) and filling
their parameters as each ``Launch.native`` (a ``NativeKernel``) says. ``chunking`` is the arithmetic
that sizes balanced chunks; ``native.cpp``'s ``geometry_of`` redoes it in C++ (a CPU test compares them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from jaggedperf.ops.config import MergeConfig, ReduceConfig, SegmentsConfig
from jaggedperf.ops.launch.layout import GridKind, Source


@dataclass(frozen=True)
class NativeKernel:
    """What the native path needs of one kernel besides its compiled signature (a constant per kernel)."""

    sources: tuple[Source, ...]  # what fills its runtime arguments, in its signature's order
    grid: GridKind  # how its grid axis 0 is sized


@dataclass(slots=True)
class Launch:
    """One kernel launch: what ``kernel[grid](*args, num_warps=num_warps)`` needs, and what it writes."""

    kernel: object  # a triton JITFunction
    grid: tuple  # 3 ints (or SymInts when traced)
    args: tuple  # positional, constexprs included (the order of the kernel's signature)
    num_warps: int
    written: tuple  # tensors the kernel writes (the fast tiers' self-check poisons and compares them)
    key: tuple  # kernel name + constexprs: with the call's eager_key, what the JIT specialises on
    native: NativeKernel | None = None  # None: the native path never launches this kernel


@dataclass(frozen=True)
class NativePlan:
    """How the native path sizes a plan's grids for each call (the fields of native.cpp's Plan, by name)."""

    block_m: int  # grid axis 1 = cdiv(M, block_m)
    group: int  # segments kernels: > 0: axis 0 = cdiv(B, group); 0: `programs` looping programs
    programs: int
    chunk_programs: int  # chunks kernels (> 0): the programs aimed at, for ``chunking``, ...
    block_l: int  # ... rows per tile ...
    min_chunk_rows: int  # ... and the fewest rows in a chunk
    grid_z: int = 1  # grid axis 2 of every kernel (> 1: the backward spreads each long segment over tiles)
    units: int = 0  # 1: ``chunking`` counts rows + segments (the merge path's units) instead of rows


@dataclass(slots=True)
class Plan:
    """A call's output and the launches that fill it; and what sized their grids, for the native path."""

    out: torch.Tensor
    launches: tuple[Launch, ...]
    # what sized the grids; None: the native path cannot replay this plan (a chunk size chosen by hand)
    config: ReduceConfig | SegmentsConfig | MergeConfig | None = None
    chunk_programs: int = 0  # a chunked plan's programs aimed at (SM count × programs per SM)

    def native_plan(self) -> NativePlan | None:
        """The grid sizing the native path replays for this plan's kernels.

        Returns:
            a NativePlan, or None when the plan has no config to replay.
        """
        cfg = self.config
        if not isinstance(cfg, (SegmentsConfig, ReduceConfig, MergeConfig)):
            return None
        grid_z = self.launches[0].grid[2]  # the native path launches every kernel of a plan with the same axis 2
        if isinstance(cfg, MergeConfig):  # reduce/plan.py's merge_grid: chunking of N + B units in programs
            return NativePlan(block_m=cfg.block_m, group=0, programs=0, chunk_programs=self.chunk_programs, block_l=1,
                              min_chunk_rows=cfg.min_units, grid_z=grid_z, units=1)
        if isinstance(cfg, SegmentsConfig):
            return NativePlan(block_m=cfg.block_m, group=0 if cfg.programs else cfg.group, programs=cfg.programs,
                              chunk_programs=0, block_l=0, min_chunk_rows=0, grid_z=grid_z)
        return NativePlan(block_m=cfg.block_m, group=0, programs=0, chunk_programs=self.chunk_programs,
                          block_l=cfg.block_l, min_chunk_rows=cfg.min_chunk_rows, grid_z=grid_z)


def chunking(n_rows, col_blocks: int, chunk_programs: int, block_l: int, min_chunk_rows: int):
    """Balanced chunks of the rows: about ``chunk_programs`` programs over the grid, whatever N.

    Args:
        n_rows: N (an int, or a SymInt under torch.compile: no branch on it, so no guard).
        col_blocks: grid axis 1, cdiv(M, block_m).
        chunk_programs: the programs aimed at over the whole grid.
        block_l: rows per tile (a chunk is a whole number of tiles).
        min_chunk_rows: the fewest rows in a chunk.

    Returns:
        (R, C): rows per chunk and the chunk count, C = max(cdiv(N, R), 1).
    """
    target_chunks = max(1, -(-chunk_programs // col_blocks))
    per = (n_rows + target_chunks - 1) // target_chunks
    per = (per + block_l - 1) // block_l * block_l
    rows_per_chunk = sym_max(per, min_chunk_rows)
    return rows_per_chunk, sym_max((n_rows + rows_per_chunk - 1) // rows_per_chunk, 1)


def sym_max(a, b):
    """``max`` that installs no guard on SymInts.

    Args:
        a, b: ints or SymInts.

    Returns:
        builtin max on ints (eagerly ~20x cheaper); ``torch.sym_max`` otherwise.
    """
    if type(a) is int and type(b) is int:
        return a if a > b else b
    return torch.sym_max(a, b)
