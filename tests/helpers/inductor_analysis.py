"""Run Inductor's write analysis on every kernel of every launch path; print JSON (test_inductor_analysis)."""

import dataclasses
import json

import torch
import triton
from triton.backends.compiler import GPUTarget

import torch._higher_order_ops.triton_kernel_wrap as tkw
from jaggedperf.ops import testing


class CudaTarget:
    """A Triton driver naming an sm_90 target: TTIR generation needs no device."""

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")


def analysed_writes(launch) -> list[str]:
    # torch 2.11: identify_mutated_tensors; later: identify_accessed_tensors
    kwargs = dict(zip(launch.kernel.arg_names, launch.args))
    if hasattr(tkw, "identify_accessed_tensors"):
        written = {dep.name for dep in tkw.identify_accessed_tensors(launch.kernel, kwargs, {}).read_writes.writes}
    else:
        written = set(tkw.identify_mutated_tensors(launch.kernel, kwargs, {}))
    return sorted(name for name in written if isinstance(kwargs.get(name), torch.Tensor))


def declared_writes(launch) -> list[str]:
    ids = {id(t) for t in launch.written}
    return sorted(name for name, arg in zip(launch.kernel.arg_names, launch.args) if id(arg) in ids)


def segments(programs: int):
    return dataclasses.replace(testing.segments_config(8, 16, 64, torch.device("cpu")), programs=programs)


# tiles smaller than the batch, with the flat window (window <= block_l) compiled in
MERGE_TINY = testing.MergeConfig(block_m=8, block_l=8, group=2, seg_rows=2, seg_tiles=2, window=8, expand_window=4,
                                 search=4, num_warps=1, programs_per_sm=1, min_units=1, block_p=2)


# the split's whole-segments options (1, 4) and the merge path's tiny tiles for its long role
SPLIT_TINY = testing.SplitConfig(block_m=8, block_l=8, group=2, seg_rows=2, seg_tiles=2, window=8, expand_window=4,
                                 search=4, num_warps=1, programs_per_sm=1, min_units=1, block_p=2, tile=64, tiles=2,
                                 rows_cap=4)


def _grad(offsets):  # the backward's input of the expand: one row per segment
    return torch.randn(offsets.numel() - 1, 8)


PLANS = {
    "chunks": lambda v, o: testing.plan_reduce(v, o, mean=True, rows_per_chunk=7),
    "rowblock": lambda v, o: testing.plan_reduce(v, o, mean=True, rowblock=True, rows_per_chunk=7),
    "segments": lambda v, o: testing.plan_reduce(v, o, mean=True, segments=segments(0)),
    "segments-loop": lambda v, o: testing.plan_reduce(v, o, mean=True, segments=segments(2)),
    "merge": lambda v, o: testing.plan_reduce(v, o, mean=True, merge=True),
    "merge-tiny": lambda v, o: testing.plan_reduce(v, o, mean=True, merge=MERGE_TINY, rows_per_chunk=7),
    "split": lambda v, o: testing.plan_reduce(v, o, mean=True, split=True),
    "split-tiny": lambda v, o: testing.plan_reduce(v, o, mean=True, split=SPLIT_TINY, rows_per_chunk=7),
    "expand-merge": lambda v, o: testing.plan_expand(_grad(o), o, v.shape[0], mean=True, merge=True),
    "expand-split": lambda v, o: testing.plan_expand(_grad(o), o, v.shape[0], mean=True, split=True),
    "expand-chunks": lambda v, o: testing.plan_expand(_grad(o), o, v.shape[0], mean=True, rows_per_chunk=7),
    "expand-segments": lambda v, o: testing.plan_expand(_grad(o), o, v.shape[0], mean=True, segments=segments(0),
                                                        max_seqlen=16),
}


def analyse(plans) -> dict:
    """Inductor's write analysis of every launch of ``plans(values, offsets)`` (name → Plan), on (40, 8) values
    in five segments (one empty), with int64 and then int32 offsets, compiled for an sm_90 target.

    Returns:
        ``{"<name>/<offsets dtype>": {kernel name: {"analysed": [...], "declared": [...]}}}``.
    """
    triton.runtime.driver.set_active(CudaTarget())
    out = {}
    for dtype in (torch.int64, torch.int32):
        values = torch.randn(40, 8)
        offsets = torch.tensor([0, 3, 3, 16, 30, 40], dtype=dtype)
        for name, planned in plans(values, offsets).items():
            out[f"{name}/{str(dtype).removeprefix('torch.')}"] = {
                launch.kernel.fn.__name__: {"analysed": analysed_writes(launch), "declared": declared_writes(launch)}
                for launch in planned.launches}
    return out


def main() -> None:
    print(json.dumps(analyse(lambda v, o: {path: make(v, o) for path, make in PLANS.items()})))


if __name__ == "__main__":
    main()
