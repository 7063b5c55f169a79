# AOT ID: ['0_inference']
from ctypes import c_void_p, c_long, c_int
import torch
import math
import random
import os
import tempfile
from math import inf, nan
from cmath import nanj
from torch._inductor.hooks import run_intermediate_hooks
from torch._inductor.utils import maybe_profile
from torch._inductor.codegen.memory_planning import _align as align
from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import start_graph, end_graph
from torch._C import _cuda_getCurrentRawStream as get_raw_stream

aten = torch.ops.aten
inductor_ops = torch.ops.inductor
_quantized = torch.ops._quantized
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
assert_alignment = torch._C._dynamo.guards.assert_alignment
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
empty_strided_cpu_pinned = torch._C._dynamo.guards._empty_strided_cpu_pinned
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
empty_strided_xpu = torch._C._dynamo.guards._empty_strided_xpu
empty_strided_mtia = torch._C._dynamo.guards._empty_strided_mtia
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
alloc_from_pool = torch.ops.inductor._alloc_from_pool
async_compile = AsyncCompile()
empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p


# Original path: /work/main/src/jaggedperf/ops/reduce.py:255
_segments_kernel_0 = async_compile.triton('_segments_kernel', '''

import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties

@triton_heuristics.user_autotune(
    configs=[{'num_warps': 2, 'num_stages': 3}],
    inductor_meta={'grid_type': 'FixedGrid', 'fixed_grid': ['_grid_0', '_grid_1', '_grid_2'], 'extra_launcher_args': ['_grid_0', '_grid_1', '_grid_2'], 'kernel_name': '_segments_kernel_0', 'backend_hash': '91D1D1166449D9E2EB66EB9770C9E2C3B0FEB787341F27FEB4D3F0338DA50336', 'assert_indirect_indexing': True, 'autotune_local_cache': True, 'autotune_pointwise': True, 'autotune_remote_cache': None, 'force_disable_caches': False, 'dynamic_scale_rblock': True, 'max_autotune': True, 'max_autotune_pointwise': False, 'min_split_scan_rblock': 256, 'spill_threshold': 16, 'store_cubin': False, 'deterministic': False, 'force_filter_reduction_configs': False, 'mix_order_reduction_allow_multi_stages': False, 'are_deterministic_algorithms_enabled': False, 'coordinate_descent_tuning': True, 'coordinate_descent_search_radius': 1, 'coordinate_descent_check_all_directions': False},
    triton_meta={'signature': {'values_ptr': '*fp32', 'offsets_ptr': '*i64', 'out_ptr': '*fp32', 'n_rows': 'i32', 'n_cols': 'i32', 'n_segments': 'i32', 'MEAN': 'constexpr', 'EMPTY_ZERO': 'constexpr', 'GROUP': 'constexpr', 'BLOCK_L': 'constexpr', 'BLOCK_M': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, max_threads_per_block=1024, warp_size=32), 'constants': {'MEAN': True, 'EMPTY_ZERO': False, 'GROUP': 1, 'BLOCK_L': 128, 'BLOCK_M': 64}, 'configs': [{(0,): [['tt.divisibility', 16]], (1,): [['tt.divisibility', 16]], (2,): [['tt.divisibility', 16]], (4,): [['tt.divisibility', 16]], (5,): [['tt.divisibility', 16]]}]},
    filename=__file__,
    custom_kernel=True,
)
@triton.jit
def _segments_kernel(
    values_ptr,  # (n_rows, n_cols) contiguous, fp32/bf16/fp16
    offsets_ptr,  # (n_segments + 1,) int32/int64
    out_ptr,  # (n_segments, n_cols) in values' dtype: every row written by the program of its group
    n_rows,  # N: rows outside [0, N) are never read, whatever the offsets say
    n_cols,  # M (specialised)
    n_segments,  # B
    MEAN: tl.constexpr,  # divide by the length
    EMPTY_ZERO: tl.constexpr,  # mean of an empty segment is 0 (else NaN)
    GROUP: tl.constexpr,  # segments per program: grid axis 0 = cdiv(B, GROUP)
    BLOCK_L: tl.constexpr,  # rows of each segment per tile: a segment of <= BLOCK_L rows is one load
    BLOCK_M: tl.constexpr,  # columns per program (grid axis 1)
):
    # Two dependent memory round trips when every segment fits a tile: the offsets, then all rows of
    # GROUP segments in one (GROUP, BLOCK_L, BLOCK_M) load.
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    segs, seg_ok, start, end = _group_bounds(offsets_ptr, tl.program_id(0), n_segments, GROUP)
    _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                  MEAN, EMPTY_ZERO, GROUP, BLOCK_L, BLOCK_M)

@triton.jit
def _group_bounds(offsets_ptr, g, n_segments, GROUP: tl.constexpr):
    # group g's segment indices (GROUP,), which exist, and their [start, end) rows; two loads of GROUP+1 offsets
    segs = g.to(tl.int64) * GROUP + tl.arange(0, GROUP)
    seg_ok = segs < n_segments
    start = tl.load(offsets_ptr + segs, mask=seg_ok, other=0).to(tl.int64)
    end = tl.load(offsets_ptr + segs + 1, mask=seg_ok, other=0).to(tl.int64)
    return segs, seg_ok, start, end

@triton.jit
def _reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                  MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr, GROUP: tl.constexpr, BLOCK_L: tl.constexpr,
                  BLOCK_M: tl.constexpr):
    # One group of whole segments (`segs`, their rows [start, end)): every row in (GROUP, BLOCK_L, BLOCK_M)
    # tiles, one tile when every segment fits; longer segments loop, to the group's longest (so a max_seqlen
    # that understates the lengths costs time, never correctness). Rows outside [0, n_rows) are never read.
    length = end - start
    acc = tl.zeros([GROUP, BLOCK_L, BLOCK_M], dtype=tl.float32)
    for r in range(0, tl.minimum(tl.max(length, axis=0), n_rows), BLOCK_L):  # bounded by N, even for bad offsets
        ptrs, mask = _group_tile(values_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L)
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    res = _finish(tl.sum(acc, axis=1), length[:, None], MEAN, EMPTY_ZERO)
    out_ptrs = out_ptr + segs[:, None] * n_cols + cols[None, :]
    tl.store(out_ptrs, res.to(out_ptr.dtype.element_ty), mask=seg_ok[:, None] & col_mask[None, :])

@triton.jit
def _group_tile(base_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L: tl.constexpr):
    # Rows [r, r + BLOCK_L) of each segment of a group (rows [start, start + length)) of the (n_rows, n_cols)
    # tensor at base_ptr, columns `cols`: the pointers (GROUP, BLOCK_L, BLOCK_M) and which of them to touch,
    # never a row outside [0, n_rows).
    steps = tl.arange(0, BLOCK_L)
    rows = start[:, None] + r + steps[None, :]  # (GROUP, BLOCK_L)
    row_ok = ((r + steps)[None, :] < length[:, None]) & (rows >= 0) & (rows < n_rows)
    ptrs = base_ptr + (rows * n_cols)[:, :, None] + cols[None, None, :]
    return ptrs, row_ok[:, :, None] & col_mask[None, None, :]

@triton.jit
def _finish(acc, length, MEAN: tl.constexpr, EMPTY_ZERO: tl.constexpr):
    # A finished segment's value from its fp32 sum: sum, or mean (empty: 0/0 = NaN, or 0).
    if MEAN:
        acc = acc / length.to(tl.float32)
        if EMPTY_ZERO:
            acc = tl.where(length == 0, 0.0, acc)
    return acc
''', device_str='cuda')


async_compile.wait(globals())
del async_compile

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def recursively_apply_fns(self, fns):
        new_callables = []
        for fn, c in zip(fns, self.partitions):
            new_callables.append(fn(c))
        self.partitions = new_callables

    def call(self, args):
        arg0_1, arg1_1, arg2_1 = args
        args.clear()
        s33 = arg0_1
        assert_size_stride(arg1_1, (s33, 64), (64, 1))
        assert_size_stride(arg2_1, (513, ), (1, ))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((512, 64), (64, 1), torch.float32)
            # Topologically Sorted Source Nodes: [jagged_mean], Original ATen: []
            stream0 = get_raw_stream(0)
            _segments_kernel_0.run(arg1_1, arg2_1, buf0, s33, 64, 512, 512, 1, 1, stream=stream0)
            del arg1_1
            del arg2_1
        return (buf0, )

runner = Runner(partitions=[])
call = runner.call
recursively_apply_fns = runner.recursively_apply_fns


def get_args():
    from torch._dynamo.testing import rand_strided
    arg0_1 = 41056
    arg1_1 = rand_strided((41056, 64), (64, 1), device='cuda:0', dtype=torch.float32)
    arg2_1 = rand_strided((513, ), (1, ), device='cuda:0', dtype=torch.int64)
    return [arg0_1, arg1_1, arg2_1]


def benchmark_compiled_module(args, times=10, repeat=10):
    from torch._inductor.utils import print_performance
    fn = lambda: call(list(args))
    return print_performance(fn, times=times, repeat=repeat)


if __name__ == "__main__":
    from torch._inductor.wrapper_benchmark import compiled_module_main
    args = get_args()
    compiled_module_main('None', lambda times, repeat: benchmark_compiled_module(args, times=times, repeat=repeat))
