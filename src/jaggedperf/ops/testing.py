"""Seams for tests and benchmarks: UNSTABLE, not part of jaggedperf's API (names and signatures change
with the kernels).

What production code never needs but tests and probes do: forcing a kernel path (a chunk size, a
whole-segments config), poisoning outputs so an unwritten element shows, launching planned kernels
through the JIT directly (the interpreter's path), the Python launch path alone, the fast tiers pinned,
a compiled kernel replayed with prebuilt arguments, configs overridden, and the kernels' building
blocks for candidate kernels. Everything here goes through the production planners and launchers;
nothing here is imported by the ops themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from jaggedperf.ops.config import (SEGMENT_TILE_ELEMENTS, MergeConfig, ReduceConfig, SegmentsConfig,  # noqa: F401
                                   SplitConfig, merge_config, next_pow2, override, reduce_config, set_override,
                                   sm_count, split_config, whole_segments)
from jaggedperf.ops.launch import TIERS, eager_key, force_tier, launch_all, launch_path  # noqa: F401
from jaggedperf.ops.launch.plan import Launch, Plan  # noqa: F401
from jaggedperf.ops.launch.tiers import prebuilt
from jaggedperf.ops.layer_norm.plan import (plan_layer_norm, plan_layer_norm_backward,  # noqa: F401
                                            plan_layer_norm_backward_parts, plan_layer_norm_parts)
from jaggedperf.ops.reduce import api, plan
from jaggedperf.ops.reduce.rowblock import RowBlockConfig, plan_rowblock, rowblock_config  # noqa: F401
from jaggedperf.ops.reduce.kernels import _group_bounds, _group_segments
from jaggedperf.ops.reduce.kernels import _group_tile as group_tile  # noqa: F401
from jaggedperf.ops.reduce.kernels import _reduce_group as reduce_group  # noqa: F401
from jaggedperf.ops.reduce.kernels import _segments_expand_kernel as segments_expand_kernel  # noqa: F401
from jaggedperf.ops.softmax.plan import plan_softmax, plan_softmax_backward, plan_softmax_parts  # noqa: F401
from jaggedperf.ops.tiles import TileConfig, tile_config  # noqa: F401

__all__ = [
    # configs: the buckets, and overriding them (the native path stands aside meanwhile)
    "MergeConfig", "ReduceConfig", "RowBlockConfig", "SegmentsConfig", "SplitConfig", "merge_config", "override",
    "reduce_config", "rowblock_config", "segments_config", "set_override", "sm_count", "split_config",
    # launch tiers: pin one (the native path stands aside meanwhile), run a plan through them, their state
    "TIERS", "eager_key", "force_tier", "launch_all", "launch_path",
    # forced plans, launched through the JIT (the interpreter's path); the families' splits at a forced part count
    "Launch", "Plan", "launch_expand", "launch_reduce", "plan_expand", "plan_reduce", "plan_rowblock", "run_direct",
    "plan_layer_norm_backward_parts", "plan_layer_norm_parts", "plan_softmax_parts",
    # the row-wise families' plans at a forced tile (``cfg=TileConfig(...)``; None: ``tile_config``)
    "TileConfig", "next_pow2", "plan_layer_norm", "plan_layer_norm_backward", "plan_softmax", "plan_softmax_backward",
    "tile_config",
    # the Python path alone, and its floor
    "prebuilt_launch", "python_path",
    # the kernels' building blocks, for candidate kernels
    "group_bounds", "group_tile", "reduce_group", "segments_expand_kernel",
]


@triton.jit
def group_bounds(offsets_ptr, g, n_segments, GROUP: tl.constexpr):
    """Group g's segment indices, which exist, and their [start, end) rows, for candidate kernels (the shipped
    kernels call the two halves where Inductor's write analysis needs them apart)."""
    segs, seg_ok = _group_segments(g, n_segments, GROUP)
    start, end = _group_bounds(offsets_ptr, segs, seg_ok)
    return segs, seg_ok, start, end


def plan_reduce(values, offsets, *, mean: bool = False, empty_zero: bool = False, max_seqlen=None,
                rows_per_chunk: int | None = None, segments: SegmentsConfig | None = None,
                rowblock: RowBlockConfig | bool | None = None, merge: MergeConfig | bool | None = None,
                split: SplitConfig | bool | None = None, whole_first: SplitConfig | bool | None = None,
                poison: float | None = None) -> Plan:
    """``reduce.plan.plan_reduce``, or a forced path: every path is correct whatever the lengths.

    Args:
        values, offsets, mean, empty_zero, max_seqlen: as for ``plan_reduce``.
        rows_per_chunk: force the balanced chunks with this R (tiny R exercises the combine).
        segments: force the whole-segments kernel with this config (wins over ``rows_per_chunk``).
        rowblock: force the row blocks (``reduce.rowblock``): True for the production config, or a
            RowBlockConfig; ``rows_per_chunk`` then forces their rows per program R (wins over both).
        merge: force the merge-path kernels (``reduce.merge``): True for the production config, or a MergeConfig;
            ``rows_per_chunk`` then forces their units per program K (wins over all but ``split``).
        split: force the split kernels (``reduce.split``): True for the production config, or a SplitConfig;
            ``rows_per_chunk`` then forces the long role's units per program K (wins over all the others).
        whole_first: the split's roles as two launches (``plan.plan_whole_first``), as ``split`` (wins over it).
        poison: fill every tensor the launches write (output and workspace) with this value first.

    Returns:
        the Plan (a forced one is never replayed by the native path).
    """
    if whole_first is not None and whole_first is not False:
        planned = plan.plan_whole_first(values, offsets, mean, empty_zero, None if whole_first is True else whole_first,
                                        rows_per_chunk)
    elif split is not None and split is not False:
        planned = plan.plan_split(values, offsets, mean, empty_zero, None if split is True else split, rows_per_chunk)
    elif merge is not None and merge is not False:
        planned = plan.plan_merge(values, offsets, mean, empty_zero, None if merge is True else merge, rows_per_chunk)
    elif rowblock is not None and rowblock is not False:
        cfg = None if rowblock is True else rowblock
        planned = plan_rowblock(values, offsets, mean, empty_zero, cfg, rows_per_chunk)
    elif segments is not None:
        planned = plan.plan_segments(values, offsets, mean, empty_zero, segments)
    elif rows_per_chunk is not None:
        cfg = reduce_config(values.shape[1], values.dtype, values.device)
        planned = plan.plan_chunks(values, offsets, mean, empty_zero, cfg, rows_per_chunk,
                                   _chunk_count(values.shape[0], rows_per_chunk), 0)
    else:
        planned = plan.plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
    _poison(planned, poison)
    return planned


def plan_expand(grad, offsets, n_rows, *, mean: bool = False, max_seqlen=None, rows_per_chunk: int | None = None,
                segments: SegmentsConfig | None = None, merge: MergeConfig | bool | None = None,
                split: SplitConfig | bool | None = None, poison: float | None = None) -> Plan:
    """``reduce.plan.plan_expand``, or a forced path (as ``plan_reduce``; a forced config's ``programs`` is
    ignored by the backward).

    Args:
        grad, offsets, n_rows, mean, max_seqlen: as for ``plan_expand``.
        rows_per_chunk, segments, merge, split, poison: as for ``plan_reduce``.

    Returns:
        the Plan.
    """
    if split is not None and split is not False:
        planned = plan.expand_split(grad, offsets, n_rows, mean, None if split is True else split, rows_per_chunk)
    elif merge is not None and merge is not False:
        planned = plan.expand_merge(grad, offsets, n_rows, mean, None if merge is True else merge, rows_per_chunk)
    elif segments is not None:
        planned = plan.expand_segments(grad, offsets, n_rows, mean, segments, max_seqlen)
    elif rows_per_chunk is not None:
        cfg = reduce_config(grad.shape[1], grad.dtype, grad.device)
        planned = plan.expand_chunks(grad, offsets, n_rows, mean, cfg, rows_per_chunk,
                                     _chunk_count(n_rows, rows_per_chunk))
    else:
        planned = plan.plan_expand(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen)
    _poison(planned, poison)
    return planned


def run_direct(launches) -> None:
    """Launch through the JIT (``kernel[grid](...)``): the normal path, and the interpreter's.

    Args:
        launches: a Plan's launches, in order.
    """
    for step in launches:
        step.kernel[step.grid](*step.args, num_warps=step.num_warps)


def forced_call(planner: Callable[..., Plan], *args) -> Callable[[], torch.Tensor]:
    """A call that plans with ``planner(*args)`` (a planner of ``reduce.plan``, e.g. ``plan_merge`` with a config)
    and runs its launches through the JIT, returning the plan's output: a forced path for benchmarks to time."""

    def call() -> torch.Tensor:
        planned = planner(*args)
        run_direct(planned.launches)
        return planned.out

    return call


def launch_reduce(values, offsets, *, mean: bool = False, empty_zero: bool = False, max_seqlen=None,
                  rows_per_chunk: int | None = None, segments: SegmentsConfig | None = None,
                  rowblock: RowBlockConfig | bool | None = None, merge: MergeConfig | bool | None = None,
                  split: SplitConfig | bool | None = None, whole_first: SplitConfig | bool | None = None,
                  poison: float | None = None) -> torch.Tensor:
    """Plan (``plan_reduce``) and run the sum/mean kernels through the JIT: no operator, no checks (tests run
    it under TRITON_INTERPRET=1).

    Args:
        as for ``plan_reduce``.

    Returns:
        the (B, M) output.
    """
    planned = plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen,
                          rows_per_chunk=rows_per_chunk, segments=segments, rowblock=rowblock, merge=merge,
                          split=split, whole_first=whole_first, poison=poison)
    run_direct(planned.launches)
    return planned.out


def launch_expand(grad, offsets, n_rows, *, mean: bool = False, max_seqlen=None, rows_per_chunk: int | None = None,
                  segments: SegmentsConfig | None = None, merge: MergeConfig | bool | None = None,
                  split: SplitConfig | bool | None = None, poison: float | None = None) -> torch.Tensor:
    """Plan (``plan_expand``) and run the backward kernel through the JIT.

    Args:
        as for ``plan_expand``.

    Returns:
        the (n_rows, M) output.
    """
    planned = plan_expand(grad, offsets, n_rows, mean=mean, max_seqlen=max_seqlen, rows_per_chunk=rows_per_chunk,
                          segments=segments, merge=merge, split=split, poison=poison)
    run_direct(planned.launches)
    return planned.out


def python_path(values, offsets, *, mean: bool, empty_zero: bool = False, max_seqlen=None) -> torch.Tensor:
    """The public function's Python path, native path skipped: checks, planning, the fast tiers (which
    offer the plan to the native path) or the operator.

    Args:
        values, offsets: as for ``jagged_sum``.
        mean: jagged_mean (else jagged_sum).
        empty_zero: the mean of an empty sequence is 0.
        max_seqlen: as for ``jagged_sum``.

    Returns:
        the output.
    """
    return api._python_reduce(values, offsets, "python_path", mean=mean, empty_zero=empty_zero,
                              max_seqlen=max_seqlen, validate=None)


def prebuilt_launch(values, offsets, *, mean: bool, empty_zero: bool = False, max_seqlen=None) -> Callable[[], None]:
    """The first kernel of a call's plan as the fast tiers launch it, its arguments prebuilt: the Python
    launch path's floor. Call the public function twice first (the second call verifies the tier).

    Args:
        values, offsets, mean, empty_zero, max_seqlen: the call.

    Returns:
        a zero-argument callable launching that kernel (into the plan's own output).

    Raises:
        LookupError: the kernel is not cached yet, or no fast tier is active.
    """
    planned = plan.plan_reduce(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
    return prebuilt(planned.launches[0], eager_key(values, offsets))


def segments_config(n_cols: int, max_seqlen: int, n_segments: int, device: torch.device,
                    tile_elements: int | None = None) -> SegmentsConfig | None:
    """``config.segments_config``, with another tile budget if asked.

    Args:
        n_cols, max_seqlen, n_segments, device: as for ``config.segments_config``.
        tile_elements: replaces SEGMENT_TILE_ELEMENTS.

    Returns:
        the config, or None when the chunked kernels would run.
    """
    return whole_segments(int(n_cols), int(max_seqlen), int(n_segments), sm_count(device),
                          tile_elements or SEGMENT_TILE_ELEMENTS)


def _chunk_count(n_rows, rows_per_chunk: int):
    return max(-(-n_rows // rows_per_chunk), 1)


def _poison(planned: Plan, value: float | None) -> None:
    if value is None:
        return
    for step in planned.launches:
        for tensor in step.written:
            # an integer tensor (the whole-first flags) gets a value no kernel writes there: -7
            tensor.fill_(value if tensor.is_floating_point() else -7)
