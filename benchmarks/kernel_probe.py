#!/usr/bin/env python3
"""Candidate kernel designs for the shapes where jaggedperf's reduction is off the floor (#3's bars 1,
2 and 5): the seed shapes (latency-bound, one wave) and many tiny rows (65536 × 16 × 64). One run on the
GPU times each candidate beside the shipped kernels and beside a plain streaming read of the same
bytes (what any kernel reading them can hope for at this size). Every candidate is first checked
against float64.

Candidates (all jagged *sums*; the mean is the same traffic):
- ``shipped``: ``testing.launch_reduce`` with max_seqlen (the whole-segments kernel) and without (chunks);
- ``persist``: the whole-segments body in a persistent loop over groups, grid = SMs × k, the loop
  pipelined by triton (``tl.range(num_stages=S)``) so a group's offsets load overlaps the one before;
- ``prefetch``: the same loop, with the next group's offsets loaded by hand before this group's rows
  (run 17's own kernel; since ``ed1cdfa`` the shipped ``_segments_loop_kernel``, the same code);
- ``flat``: for narrow rows, a program's GROUP segments read as one dense run of rows
  [offsets[g0], offsets[g0+GROUP]) in BLOCK_R-row tiles (no per-segment padding), each row's segment found
  by comparing with the group's ends, the per-segment sums by a one-hot reduction;
- ``flatscan`` (round 5): a group's rows read as one dense run in BLOCK_R-row tiles like ``flat``, but the
  per-segment sums taken from the tile's running sum along rows (``tl.cumsum``) at each segment's start and
  end (``tl.gather``): about log2(lanes) shuffles per element instead of GROUP selects;
- ``stream``: a flat read of values into one fp32 partial per program (not a jagged op: the reference);
- ``stream dep`` (round 5): the same read, but each program first loads where to start from a cold int64
  array, as any jagged kernel must read its offsets before its rows (the floor with one dependent load);
  ``stream write dep`` the same for the backward's plain write;
- backward: the shipped chunked expand against ``seg_expand`` (whole segments, one store per tile), and a
  plain write of the same bytes (round 4); ``split_expand`` (round 6), a program per segment and tile of
  BLOCK_T rows, so that the rows each SM writes even out at the seed shapes (run 30 ran its own copy of that
  kernel; the shipped one has done it since ``4b8319e``, and the probe launches that).

Run:  PYTHONPATH=src python3 benchmarks/kernel_probe.py --out $OUT/kernel_probe.json
      TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/kernel_probe.py --cpu-smoke   (correctness only)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import torch
import triton
import triton.language as tl

from jaggedperf.ops import testing
from jaggedperf.ops.testing import SegmentsConfig, group_bounds, group_tile, reduce_group

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


# ---- candidate kernels ------------------------------------------------------------------------------


@triton.jit(do_not_specialize=["n_rows", "n_segments", "n_groups"])
def _persist_kernel(values_ptr, offsets_ptr, out_ptr, n_rows, n_cols, n_segments, n_groups,
                    GROUP: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    for g in tl.range(tl.program_id(0), n_groups, tl.num_programs(0), num_stages=STAGES):
        g = tl.program_id(0) * 0 + g  # a tensor (the interpreter's tl.range yields plain ints)
        segs, seg_ok, start, end = group_bounds(offsets_ptr, g, n_segments, GROUP)
        reduce_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                      False, False, GROUP, BLOCK_L, BLOCK_M)  # the shipped whole-segments body, as a sum


@triton.jit
def _tile_of(values_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L: tl.constexpr):
    # rows [r, r + BLOCK_L) of each segment of a group, loaded: (GROUP, BLOCK_L, BLOCK_M) in fp32
    ptrs, mask = group_tile(values_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L)
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit(do_not_specialize=["n_rows", "n_segments", "n_groups"])
def _prefetch2_kernel(values_ptr, offsets_ptr, out_ptr, n_rows, n_cols, n_segments, n_groups,
                      GROUP: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr):
    # persistent: the next group's offsets two steps ahead, its first row tile one step ahead of the reduction
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    step = tl.num_programs(0)
    g = tl.program_id(0)
    segs, seg_ok, start, end = group_bounds(offsets_ptr, g, n_segments, GROUP)
    length = end - start
    tile = _tile_of(values_ptr, start, length, 0, n_rows, n_cols, cols, col_mask, BLOCK_L)
    nsegs, nok, nstart, nend = group_bounds(offsets_ptr, g + step, n_segments, GROUP)
    nlength = nend - nstart
    while g < n_groups:
        ntile = _tile_of(values_ptr, nstart, nlength, 0, n_rows, n_cols, cols, col_mask, BLOCK_L)
        nnsegs, nnok, nnstart, nnend = group_bounds(offsets_ptr, g + 2 * step, n_segments, GROUP)
        nnlength = nnend - nnstart
        acc = tile
        for r in range(BLOCK_L, tl.minimum(tl.max(length, axis=0), n_rows), BLOCK_L):  # segments past one tile
            acc += _tile_of(values_ptr, start, length, r, n_rows, n_cols, cols, col_mask, BLOCK_L)
        tl.store(out_ptr + segs[:, None] * n_cols + cols[None, :], tl.sum(acc, axis=1),
                 mask=seg_ok[:, None] & col_mask[None, :])
        g += step
        segs, seg_ok, start, length, tile = nsegs, nok, nstart, nlength, ntile
        nsegs, nok, nstart, nlength = nnsegs, nnok, nnstart, nnlength


@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _flat_kernel(values_ptr, offsets_ptr, out_ptr, n_rows, n_cols, n_segments,
                 GROUP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_M: tl.constexpr, DOT: tl.constexpr):
    g0 = tl.program_id(0).to(tl.int64) * GROUP
    segs = g0 + tl.arange(0, GROUP)
    seg_ok = segs < n_segments
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    first = tl.load(offsets_ptr + g0).to(tl.int64)
    ends = tl.load(offsets_ptr + segs + 1, mask=seg_ok, other=0).to(tl.int64)
    last = tl.max(ends, axis=0)  # offsets are nondecreasing: the group's last end
    acc = tl.zeros([GROUP, BLOCK_M], dtype=tl.float32)
    ends_b = tl.where(seg_ok, ends, last + 1)
    for r in range(first, tl.minimum(last, n_rows), BLOCK_R):
        rows = r + tl.arange(0, BLOCK_R)
        row_ok = rows < tl.minimum(last, n_rows)
        x = tl.load(values_ptr + rows[:, None] * n_cols + cols[None, :], mask=row_ok[:, None] & col_mask[None, :],
                    other=0.0).to(tl.float32)
        seg_of = tl.sum((ends_b[None, :] <= rows[:, None]).to(tl.int32), axis=1)  # (BLOCK_R,) local segment
        onehot = seg_of[None, :] == tl.arange(0, GROUP)[:, None]  # (GROUP, BLOCK_R)
        if DOT:
            acc += tl.dot(onehot.to(tl.float32), x, input_precision="ieee")
        else:
            acc += tl.sum(tl.where(onehot[:, :, None], x[None, :, :], 0.0), axis=1)
    tl.store(out_ptr + segs[:, None] * n_cols + cols[None, :], acc, mask=seg_ok[:, None] & col_mask[None, :])


@triton.jit
def _lean_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask,
                GROUP: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr, EXACT_M: tl.constexpr):
    # _reduce_group with its addressing computed once per segment: a (GROUP,) row pointer, plus one (BLOCK_L,
    # BLOCK_M) offset tile shared by every segment (compile-time when EXACT_M: n_cols == BLOCK_M is the stride),
    # and one row bound per segment (its rows clamped to [0, n_rows)) instead of three compares per element
    stride = BLOCK_M if EXACT_M else n_cols
    first = tl.minimum(tl.maximum(start, 0), n_rows)
    avail = tl.maximum(tl.minimum(end, n_rows) - first, 0)  # readable rows of each segment
    seg_ptr = values_ptr + first * stride
    steps = tl.arange(0, BLOCK_L)
    inner = steps[:, None] * stride + cols[None, :]
    acc = tl.zeros([GROUP, BLOCK_L, BLOCK_M], dtype=tl.float32)
    for r in range(0, tl.max(avail, axis=0), BLOCK_L):
        mask = (steps[None, :] < (avail - r)[:, None])[:, :, None]
        if not EXACT_M:
            mask = mask & col_mask[None, None, :]
        acc += tl.load(seg_ptr[:, None, None] + r * stride + inner[None, :, :], mask=mask, other=0.0).to(tl.float32)
    out_ptrs = out_ptr + segs[:, None] * n_cols + cols[None, :]
    tl.store(out_ptrs, tl.sum(acc, axis=1), mask=seg_ok[:, None] & col_mask[None, :])


@triton.jit(do_not_specialize=["n_rows", "n_segments"])
def _lean_kernel(values_ptr, offsets_ptr, out_ptr, n_rows, n_cols, n_segments, GROUP: tl.constexpr,
                 BLOCK_L: tl.constexpr, BLOCK_M: tl.constexpr, EXACT_M: tl.constexpr):
    # the shipped _segments_loop_kernel (next group's offsets loaded ahead) around _lean_group; with one
    # program per group it is the shipped _segments_kernel's traffic
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    n_groups = (n_segments + GROUP - 1) // GROUP
    g = tl.program_id(0)
    step = tl.num_programs(0)
    segs, seg_ok, start, end = group_bounds(offsets_ptr, g, n_segments, GROUP)
    while g < n_groups:
        next_segs, next_ok, next_start, next_end = group_bounds(offsets_ptr, g + step, n_segments, GROUP)
        _lean_group(values_ptr, out_ptr, segs, seg_ok, start, end, n_rows, n_cols, cols, col_mask, GROUP, BLOCK_L,
                    BLOCK_M, EXACT_M)
        g += step
        segs, seg_ok, start, end = next_segs, next_ok, next_start, next_end


@triton.jit
def _tile_prefix(csum, upto, BLOCK_R: tl.constexpr, BLOCK_M: tl.constexpr):
    # sum of a tile's first `upto` rows (GROUP,) for every column, from its running sum csum (BLOCK_R, BLOCK_M):
    # 0 when upto <= 0, the whole tile when upto >= BLOCK_R
    idx = tl.minimum(tl.maximum(upto - 1, 0), BLOCK_R - 1).to(tl.int32)
    picked = tl.gather(csum, tl.broadcast_to(idx[:, None], (idx.shape[0], BLOCK_M)), axis=0)
    return tl.where((upto > 0)[:, None], picked, 0.0)


@triton.jit(do_not_specialize=["n_rows", "n_segments", "n_groups"])
def _flatscan_kernel(values_ptr, offsets_ptr, out_ptr, n_rows, n_cols, n_segments, n_groups,
                     GROUP: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_M: tl.constexpr):
    # program p reduces groups p, p + P, ... (P = grid axis 0); a group's rows [first, last) in dense tiles
    cols = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    col_mask = cols < n_cols
    g = tl.program_id(0).to(tl.int64)
    while g < n_groups:
        segs, seg_ok, start, end = group_bounds(offsets_ptr, g, n_segments, GROUP)
        first = tl.maximum(tl.load(offsets_ptr + g * GROUP).to(tl.int64), 0)
        last = tl.minimum(tl.max(end, axis=0), n_rows)
        acc = tl.zeros([GROUP, BLOCK_M], dtype=tl.float32)
        for r in range(first, last, BLOCK_R):
            rows = r + tl.arange(0, BLOCK_R)
            x = tl.load(values_ptr + rows[:, None] * n_cols + cols[None, :],
                        mask=(rows < last)[:, None] & col_mask[None, :], other=0.0).to(tl.float32)
            csum = tl.cumsum(x, axis=0)
            acc += _tile_prefix(csum, end - r, BLOCK_R, BLOCK_M) - _tile_prefix(csum, start - r, BLOCK_R, BLOCK_M)
        tl.store(out_ptr + segs[:, None] * n_cols + cols[None, :], acc, mask=seg_ok[:, None] & col_mask[None, :])
        g += tl.num_programs(0)


@triton.jit
def _stream_kernel(x_ptr, starts_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr, DEP: tl.constexpr):
    # a flat read of x, one fp32 partial per program; DEP: the program first loads where it starts (pid·BLOCK·ITERS)
    # from starts[pid], cold in L2, as a jagged kernel reads its offsets before its rows
    if DEP:
        base = tl.load(starts_ptr + tl.program_id(0))
    else:
        base = tl.program_id(0).to(tl.int64) * (BLOCK * ITERS)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


@triton.jit
def _stream_write_kernel(out_ptr, starts_ptr, n, BLOCK: tl.constexpr, DEP: tl.constexpr):
    # writes BLOCK fp32 per program (the program id): a plain write of n elements, the backward's reference;
    # DEP: the program's start (pid·BLOCK) loaded from starts[pid] first, as in _stream_kernel
    if DEP:
        offs = tl.load(starts_ptr + tl.program_id(0)) + tl.arange(0, BLOCK)
    else:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32) + tl.program_id(0), mask=offs < n)


# ---- runners -----------------------------------------------------------------------------------------


def _sms(device):
    return testing.sm_count(device)


def _programs(n_segments, group, per_sm, device):
    # SMs × per_sm programs, at most one per group; per_sm 0: one per group
    groups = -(-n_segments // group)
    return max(1, groups if per_sm == 0 else min(groups, _sms(device) * per_sm))


def _looping(kernel, values, offsets, cfg, per_sm, *constexprs):
    # a grid of SMs × per_sm programs (at most one per group; per_sm 0: one per group), each looping over groups
    B, M = offsets.numel() - 1, values.shape[1]
    out = torch.empty(B, M, device=values.device)
    groups = -(-B // cfg.group)
    grid = (_programs(B, cfg.group, per_sm, values.device), -(-M // cfg.block_m))
    kernel[grid](values, offsets, out, values.shape[0], M, B, groups, cfg.group, cfg.block_l, cfg.block_m,
                 *constexprs, num_warps=cfg.num_warps)
    return out


def persist(values, offsets, cfg, per_sm, stages):
    return _looping(_persist_kernel, values, offsets, cfg, per_sm, stages)


def prefetch(values, offsets, cfg, per_sm):
    # the shipped looping kernel (kernels._segments_loop_kernel: the next group's offsets loaded ahead)
    import dataclasses

    programs = _programs(offsets.numel() - 1, cfg.group, per_sm, values.device)
    return testing.launch_reduce(values, offsets, segments=dataclasses.replace(cfg, programs=programs))


def prefetch2(values, offsets, cfg, per_sm):
    return _looping(_prefetch2_kernel, values, offsets, cfg, per_sm)


def flat(values, offsets, group, block_r, warps, dot):
    B, M = offsets.numel() - 1, values.shape[1]
    block_m = max(16, triton.next_power_of_2(M)) if dot else triton.next_power_of_2(M)
    out = torch.empty(B, M, device=values.device)
    _flat_kernel[(-(-B // group), -(-M // block_m))](values, offsets, out, values.shape[0], M, B, group, block_r,
                                                     block_m, dot, num_warps=warps)
    return out


def stream(values, block, iters, warps, dep=False):
    # a callable reading values once into per-program partials (dep: after one dependent load), and its output
    n = values.numel()
    programs = -(-n // (block * iters))
    starts = torch.arange(programs, device=values.device, dtype=torch.int64) * (block * iters)
    out = torch.empty(programs, device=values.device)
    return lambda: _stream_kernel[(programs,)](values, starts, out, n, block, iters, dep, num_warps=warps), out


def flatscan(values, offsets, group, block_r, warps, per_sm):
    cfg = SegmentsConfig(group, block_r, triton.next_power_of_2(values.shape[1]), warps)
    return _looping(_flatscan_kernel, values, offsets, cfg, per_sm)


def lean(values, offsets, cfg, per_sm):
    # as _looping, without the group count (the kernel run 26 timed computes its own)
    B, M = offsets.numel() - 1, values.shape[1]
    out = torch.empty(B, M, device=values.device)
    _lean_kernel[(_programs(B, cfg.group, per_sm, values.device), -(-M // cfg.block_m))](
        values, offsets, out, values.shape[0], M, B, cfg.group, cfg.block_l, cfg.block_m, M == cfg.block_m,
        num_warps=cfg.num_warps)
    return out


def seg_expand(grad, offsets, n_rows, cfg):
    # the shipped whole-segments backward (kernels._segments_expand_kernel; run 17 ran the same code from here)
    return testing.launch_expand(grad, offsets, n_rows, mean=True, segments=cfg)


def split_expand(grad, offsets, n_rows, longest, block_t, warps):
    # the shipped whole-segments backward, one segment a program, its rows spread over programs of block_t rows
    # (grid axis 2; since 4b8319e what plan_expand picks for long segments, with 32 rows)
    B, M = grad.shape
    out = torch.empty(n_rows, M, device=grad.device, dtype=grad.dtype)
    block_m = triton.next_power_of_2(M)
    tiles = max(-(-longest // block_t), 1)
    testing.segments_expand_kernel[(B, -(-M // block_m), tiles)](grad, offsets, out, n_rows, M, B, tiles, True, 1,
                                                                 block_t, block_m, num_warps=warps)
    return out


def stream_write(out, block, warps, dep=False):
    # a callable writing every element of out once (dep: after one dependent load)
    programs = -(-out.numel() // block)
    starts = torch.arange(programs, device=out.device, dtype=torch.int64) * block
    return lambda: _stream_write_kernel[(programs,)](out, starts, out.numel(), block, dep, num_warps=warps)


def _round1(cands, values, offsets, base, M):
    import dataclasses

    for per_sm in (2, 4, 8):
        for stages in (1, 3):  # (no cp.async for these loads in the sm_90 PTX: 3 should equal 1)
            cands[f"persist k{per_sm} s{stages}"] = (lambda k=per_sm, s=stages: persist(values, offsets, base, k, s))
        cands[f"prefetch k{per_sm}"] = lambda k=per_sm: prefetch(values, offsets, base, k)
        if base.group > 1:
            half = dataclasses.replace(base, group=base.group // 2)
            cands[f"prefetch k{per_sm} g{half.group}"] = lambda k=per_sm, c=half: prefetch(values, offsets, c, k)
    if M <= 32:
        for group in (8, 16, 32):
            for block_r in (32, 64, 128):
                for warps in (1, 2, 4):
                    if group * block_r * max(M, 16) <= 32768:
                        cands[f"flat g{group} r{block_r} w{warps}"] = (
                            lambda g=group, r=block_r, w=warps: flat(values, offsets, g, r, w, False))
                    if group >= 16 and block_r >= 16:
                        cands[f"flat-dot g{group} r{block_r} w{warps}"] = (
                            lambda g=group, r=block_r, w=warps: flat(values, offsets, g, r, w, True))


def _log_case(results, case):
    for r in (r for r in results["rows"] if r["case"] == case.label):
        us = r.get("device_us")
        log(f"  {r['candidate']:<34} err {r.get('rel_error', float('nan')):.1e} "
            + (f"{us:7.2f} us  {us / r['floor_us']:.2f}x" if us else r.get("error", "")[:120]))


# ---- the run -----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="kernel_probe.json")
    parser.add_argument("--round", type=int, choices=(1, 2, 3, 4, 5, 6), default=2, help="which candidate set (see main)")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes under TRITON_INTERPRET=1: correctness")
    args = parser.parse_args()
    import dataclasses

    from jaggedperf.impls.jagged_mean import must_move_bytes
    from jaggedperf.inputs import Case, make_batch
    from jaggedperf.lab import timing
    from jaggedperf.lab.grid import SEED_CASES

    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    cases = [*SEED_CASES, Case(65536, 16, 64, 0.2)]
    if args.round == 3:  # short sequences at several widths: where segments_config takes whole segments
        cases = [Case(65536, 16, 64, 0.2), Case(32768, 64, 32, 0.2), Case(4096, 64, 32, 0.2), Case(16384, 32, 64, 0.2),
                 Case(8192, 128, 16, 0.2), Case(131072, 8, 32, 0.2), Case(2048, 256, 16, 0.2), Case(16384, 64, 100, 0.1)]
    if args.round == 6:  # the backward at the seed shapes
        cases = list(SEED_CASES)
    if args.cpu_smoke:
        cases = [Case(37, 16, 20, 0.2), Case(9, 64, 70, 0.5), Case(40, 5, 9, 0.0, "heavy")]
    results = {"meta": {"torch": torch.__version__, "triton": triton.__version__, "argv": sys.argv,
                        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None},
               "rows": [], "errors": []}
    if device.type == "cuda":
        results["meta"]["copy_gbps"] = timing.copy_bandwidth_gbps(device)
        log(f"copy bandwidth {results['meta']['copy_gbps']:.0f} GB/s")
    copy_gbps = results["meta"].get("copy_gbps", 1.0)

    def device_us(fn):
        if device.type != "cuda":
            return None
        return timing.profile_kernels(fn, device, calls=30, flush=True).median_us

    for case in cases:
        batch = make_batch(case, device)
        values, offsets, longest = batch.values, batch.offsets, batch.max_seqlen
        B, M = offsets.numel() - 1, values.shape[1]
        ref = torch.ops.jaggedperf.jagged_sum(values.double().cpu(), offsets.cpu())  # the CPU kernel, fp64
        mean_ref = torch.ops.jaggedperf.jagged_mean(values.double().cpu(), offsets.cpu(), True)
        floor = must_move_bytes(batch) / (copy_gbps * 1e9) * 1e6
        base = testing.segments_config(M, longest, B, device) or testing.SegmentsConfig(1, 64, min(256, M), 2)
        base = dataclasses.replace(base, block_m=triton.next_power_of_2(base.block_m))
        log(f"{case.label}: N={values.shape[0]} max_seqlen={longest} floor {floor:.2f} us, segments {base}")
        cands = {
            "shipped segments": lambda: testing.launch_reduce(values, offsets, max_seqlen=longest),
            "shipped chunks": lambda: testing.launch_reduce(values, offsets),
        }
        if args.round == 1:  # run 17: persistent loops, prefetched offsets, flat row tiles
            _round1(cands, values, offsets, base, M)
        elif args.round == 4:  # run 24: the looping kernel's tile, warps and programs at 65536×16
            sms = testing.sm_count(device)
            cands["mean shipped segments"] = lambda: testing.launch_reduce(values, offsets, mean=True, empty_zero=True,
                                                                          max_seqlen=longest)
            if B >= 65536:
                for group, block_l in ((4, 64), (8, 32), (8, 64), (16, 32), (16, 64)):
                    for warps in (1, 2, 4):
                        for per_sm in (4, 8, 16):
                            c = testing.SegmentsConfig(group, block_l, 16, warps, programs=sms * per_sm)
                            cands[f"mean loop {group}x{block_l}x16 w{warps} k{per_sm}"] = (
                                lambda c=c: testing.launch_reduce(values, offsets, mean=True, empty_zero=True,
                                                                 segments=c))
        elif args.round == 5:  # dense group tiles with a running-sum split; mean beside the sum
            cands["mean shipped segments"] = lambda: testing.launch_reduce(values, offsets, mean=True, empty_zero=True,
                                                                          max_seqlen=longest)
            tiles = [(1, base.block_l, 1), (1, base.block_l, 2), (1, base.block_l, 4)] if base.group == 1 else [
                (4, 64, 2), (4, 64, 4), (8, 32, 1), (8, 32, 2), (8, 32, 4), (8, 64, 2), (8, 64, 4), (16, 32, 2),
                (16, 32, 4)]
            for group, block_l, warps in tiles:
                c = dataclasses.replace(base, group=group, block_l=block_l, num_warps=warps)
                for per_sm in ((0,) if base.group == 1 else (0, 4, 8, 16)):
                    cands[f"lean {group}x{block_l}x{c.block_m} w{warps} k{per_sm}"] = (
                        lambda c=c, k=per_sm: lean(values, offsets, c, k))
            if M <= 32:
                for group in (8, 16):
                    for block_r in (64, 128):
                        for warps in (1, 2, 4):
                            for per_sm in (0, 8):
                                cands[f"flatscan g{group} r{block_r} w{warps} k{per_sm}"] = (
                                    lambda g=group, r=block_r, w=warps, k=per_sm: flatscan(values, offsets, g, r, w, k))
        elif args.round == 3:  # run 20: whole segments, one program per group or looping, around the default
            sms = testing.sm_count(device)
            groups = {base.group, max(base.group // 2, 1)}
            for cfg in {dataclasses.replace(base, group=g, num_warps=w, programs=p) for g in groups
                        for w in (1, 2, 4, 8) for p in (0, 8 * sms) if p == 0 or 4 * p <= -(-B // g)}:
                cands[f"segments g{cfg.group} w{cfg.num_warps} p{cfg.programs}"] = (
                    lambda c=cfg: testing.launch_reduce(values, offsets, segments=c))
        else:  # run 18: offsets two groups ahead and the first row tile one group ahead; programs per SM, warps
            for per_sm in (4, 8, 16, 32):
                for cfg in {base, dataclasses.replace(base, group=max(base.group // 2, 1))}:
                    for warps in (1, 2, 4):
                        c = dataclasses.replace(cfg, num_warps=warps)
                        label = f"k{per_sm} g{c.group} w{warps}"
                        cands[f"prefetch {label}"] = lambda k=per_sm, c=c: prefetch(values, offsets, c, k)
                        cands[f"prefetch2 {label}"] = lambda k=per_sm, c=c: prefetch2(values, offsets, c, k)
        for name, fn in cands.items():
            row = {"case": case.label, "candidate": name, "floor_us": floor}
            try:
                out = fn()
                want = mean_ref if name.startswith("mean ") else ref  # "mean ...": jagged means (as the op's default)
                err = float((out.double().cpu() - want).norm() / want.norm().clamp_min(1e-30))
                row["rel_error"] = err
                if err <= 1e-5:
                    row["device_us"] = device_us(fn)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"
                results["errors"].append(traceback.format_exc())
            results["rows"].append(row)
        if args.round == 3:
            _log_case(results, case)
            continue
        reads = [(2048, 1, 4), (4096, 1, 4), (4096, 2, 8), (8192, 1, 8), (8192, 2, 8)]
        for block, iters, warps in [] if args.round == 6 else reads:
            for dep in (False, True) if args.round == 5 else (False,):  # round 5: also after one dependent load
                fn, out = stream(values, block, iters, warps, dep)
                fn()
                err = abs(float(out.double().sum()) - float(values.double().sum())) / max(1.0, float(values.abs().sum()))
                results["rows"].append({"case": case.label, "candidate": f"stream{' dep' * dep} b{block} i{iters} "
                                        f"w{warps}", "floor_us": floor, "rel_error": err, "device_us": device_us(fn)})
        # backward: grad (B, M) to (N, M), mean
        grad = torch.randn(B, M, device=device)
        n_rows = values.shape[0]
        lengths = offsets.diff()
        gref = (grad.double() / lengths.clamp_min(1).unsqueeze(1).double()).repeat_interleave(
            lengths, dim=0, output_size=n_rows).cpu()
        bfloor = floor  # the forward's bytes the other way: grad (B, M) and offsets read, (N, M) written
        bw = {"shipped expand": lambda: testing.launch_expand(grad, offsets, n_rows, mean=True),
              "shipped expand max_seqlen": lambda: testing.launch_expand(grad, offsets, n_rows, mean=True,
                                                                        max_seqlen=longest)}
        for tile in (2048, 4096, 8192):
            cfg = testing.segments_config(M, longest, B, device, tile_elements=tile)
            if cfg is not None:
                for warps in (1, 2, 4):
                    c = dataclasses.replace(cfg, num_warps=warps)
                    bw[f"seg_expand {c.group}x{c.block_l}x{c.block_m} w{warps}"] = (
                        lambda c=c: seg_expand(grad, offsets, n_rows, c))
        written = torch.empty(n_rows * M, device=device)
        for block, warps in ((2048, 4), (4096, 4), (8192, 8)):  # a plain write of grad_values' bytes
            for dep in (False, True) if args.round >= 5 else (False,):  # round 5 on: also after one dependent load
                fn = stream_write(written, block, warps, dep)
                fn()
                results["rows"].append({"case": case.label, "candidate": f"backward stream write{' dep' * dep} b{block} "
                                        f"w{warps}", "floor_us": bfloor, "rel_error": 0.0, "device_us": device_us(fn)})
        if args.round == 6:  # small programs, many per SM: a tile of rows each
            for block_t in (8, 16, 32, 64):
                for warps in (1, 2, 4):
                    bw[f"split_expand t{block_t} w{warps}"] = (
                        lambda t=block_t, w=warps: split_expand(grad, offsets, n_rows, longest, t, w))
        for name, fn in bw.items():
            row = {"case": case.label, "candidate": "backward " + name, "floor_us": bfloor}
            try:
                out = fn()
                row["rel_error"] = float((out.double().cpu() - gref).norm() / gref.norm())
                if row["rel_error"] <= 1e-6:
                    row["device_us"] = device_us(fn)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {exc}"
                results["errors"].append(traceback.format_exc())
            results["rows"].append(row)
        del batch, values, offsets, grad
        _log_case(results, case)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    log(f"wrote {args.out}")
    bad = [r for r in results["rows"] if "error" in r or r.get("rel_error", 0) > 1e-5]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
