#!/usr/bin/env python3
"""Without max_seqlen, how close does the jagged sum come to the best peer, to the same call with max_seqlen and to
its floors, on every length distribution? (the split, the merge path, and the routing of calls without max_seqlen)

Per shape (first ``NARROW_RULE_CHECK``; then the issue's classes: seed 512 × 64, narrow 10^4 × 4, odd width
2048 × 24, 90% empty 10^5 × 64, power-law 4096 × 64, all-one-row 10^6 × 8, bimodal 10^5 × 8; then
``CLASS_RULE_CHECK``; then the neighbours and bf16; the two checks are the shapes two candidate routing rules were
checked on), every contender in the same run:

- correctness first, strict: the routed plan without max_seqlen (the split or the merge path) through the JIT with its outputs and
  workspace poisoned, sum and mean forward and the mean backward, each element against float64 within the dtype's
  tolerance of Σ|x| (``checks``); then each timed contender against float64 by relative error
  (``jaggedperf.lab.reduce_row``; a wrong one is recorded, not timed);
- device time by CUDA-graph replay with L2 flushed (``harness.device_time``; a call that cannot be captured is
  recorded as failed): ours without max_seqlen (as routed: ``plan.plan_reduce``; the path it took is recorded), ours
  with it, the merge path and the split forced (``plan.plan_merge``, ``plan.plan_split``), ``torch.segment_reduce``,
  Inductor's padded sum given the true max (where the padded tensor fits and the compile budget lasts); bitwise
  repeats of ours; the route's bar: ours without max_seqlen within 5% of the faster of the two forced paths
  (where it fails, the path main does not take was faster);
- the split's neighbours (``plan.plan_split`` forced): its grid at 1 and 4 programs an SM a role (the same compiled
  kernels), and on ``VARIANT_SHAPES`` its whole-segments tile at half the elements and with one tile a short
  segment (TILES = 1: longer ones go to the long role);
- the whole-first arrangement (``plan.plan_whole_first``: the split's two roles as two launches, the long one
  skipped on the device where no segment is long), at the split's config, with half its whole-segments tile, and
  routed on the device to the merge path where a program would take more than 1 or 2 groups (``WHOLE_FIRST``);
- on shapes >= 16 MB: jagged_mean without max_seqlen too (sum and mean within 5%);
- the floors: bytes that must move / the copy bandwidth, and the practical floor, an empty kernel's replay + an
  elementwise kernel reading and writing the same bytes (two empty kernels in one graph: the two-launch floor);
- the backward (expand) without and with max_seqlen and by the merge path on the shapes of ``BACKWARD``;
- beside each of the issue's classes, the prediction written before the run (``PREDICTED``, docs/performance.md).

Run on the GPU machine from the repository root (``--warm-workers K``: every contender's compiles first, in K
processes at once, into the Triton and Inductor caches the timed process then reads, for at most ``--warm-s``;
``--deadline-s`` bounds the whole run: no shape starts past it less a shape's margin, in that order):

    PYTHONPATH=src python3 benchmarks/merge_path_bench.py --out $OUT/split --warm-workers 12 --commit HASH

writes ``split.json`` (medians and quantiles per contender, the checks, the bars, the command and commit) and
``split.md`` under --out (``jaggedperf.lab.harness.write_summary``), rewritten after every shape; ``--from JSON``
judges a run again and rewrites its two files (no run). ``--cpu-smoke``:
tiny shapes on the CPU under TRITON_INTERPRET=1 (set for it), one wall-timed call a contender, no Inductor: the
plumbing and the strict checks only, numbers meaningless (under two minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import harness, reduce_row
from jaggedperf.lab.measure import timing

DEVICE = torch.device("cuda")
SMOKE_RUN = False  # --cpu-smoke: one wall-timed call a contender
# the bars: without max_seqlen <= 1.1× the best peer and <= 1.15× the call with it; >= 16 MB <= 1.3× the practical
# floor, sum and mean within 5%; the backward without <= 1.1× with; bitwise repeats; the route within 5% of the faster
# of the split and the merge path
BAR1, BAR1_HINT, BAR2, BAR2_SPREAD, BAR3, BAR6 = 1.1, 1.15, 1.3, 0.05, 1.1, 1.05
NAME = "split"

# Two shape-only rules for routing calls without max_seqlen to the split, each checked on shapes it was not fitted
# on (docs/performance.md 3d): the split where N // B is 4-255 rows (fp32, any M), checked on CLASS_RULE_CHECK; the
# split on fp32 rows of <= 32 columns at 2-255 rows, fitted on those too, checked on NARROW_RULE_CHECK. Both failed
# (the split lost on empty-heavy, high-variance and one-column shapes inside them): main routes neither. Mean rows a
# segment in the comments.
NARROW_RULE_CHECK = [
    Case(100_000, 16, 64, 0.9, "empty"),  # 3.2, 90% empty
    Case(50_000, 8, 128, 0.9, "empty"),  # 6.4, 90% empty
    Case(300_000, 1, 20, 0.5),  # 10.0, M = 1
    Case(30_000, 3, 100, 0.2),  # 75, M = 3
    Case(8192, 32, 300, 0.2),  # 225
    Case(65536, 12, 16, 0.0, "heavy"),  # 2.0, power-law
    Case(20_000, 32, 40, 0.5),  # 20
    Case(1_000_000, 4, 6, 0.0),  # 5.5
    Case(2048, 17, 400, 0.6),  # 157, M = 17
    Case(1_000_000, 8, 2, 0.0, "fixed"),  # 2 rows each
    Case(200_000, 16, 2, 0.0),  # 2.0, lengths 1-2
    Case(4096, 16, 1000, 0.3),  # 701: the merge path
]
CLASS_RULE_CHECK = [
    Case(50_000, 32, 10, 0.0),  # 8.5
    Case(100_000, 32, 128, 0.9, "empty"),  # 6.4, 90% empty
    Case(20_000, 64, 32, 0.75, "empty"),  # 4.0, 75% empty
    Case(32768, 32, 200, 0.0, "heavy"),  # 4.9, power-law
    Case(200_000, 8, 12, 0.0),  # 10.5
    Case(8192, 128, 64, 0.5),  # 32
    Case(4096, 256, 128, 0.5),  # 64
    Case(256, 48, 300, 0.2),  # 222
    Case(1024, 64, 400, 0.4),  # 237
    Case(4096, 128, 1000, 0.0, "heavy"),  # 27, power-law (the kernel bars' powerlaw_small)
    Case(2048, 1000, 256, 0.2),  # 192, M = 1000 (the kernel bars' odd width)
    Case(100_000, 16, 6, 0.5),  # 3.0
    Case(3000, 40, 500, 0.0),  # 425
    Case(512, 64, 700, 0.3),  # 496
]
SHAPES = [  # (class, a Case or ("bimodal", B, M, dtype)): the second rule's check, the classes, the first
    # rule's check, then neighbours and bf16
    *(("narrow_rule_check", case) for case in NARROW_RULE_CHECK),
    ("seed", Case(512, 64, 100, 0.1)),
    ("seed", Case(512, 64, 500, 0.75)),
    ("narrow", Case(10_000, 4, 16, 0.5)),
    ("odd_width", Case(2048, 24, 256, 0.2)),
    ("empty", Case(100_000, 64, 64, 0.9, "empty")),
    ("powerlaw", Case(4096, 64, 400, 0.0, "heavy")),
    ("ones", Case(1_000_000, 8, 1, 0.0, "fixed")),
    ("bimodal", ("bimodal", 100_000, 8, "float32")),
    *(("class_rule_check", case) for case in CLASS_RULE_CHECK),
    ("seed", Case(512, 64, 100, 0.1, dtype="bfloat16")),
    ("narrow", Case(100_000, 8, 16, 0.5)),
    ("bars", Case(65536, 16, 64, 0.5)),
    ("giant", Case(1, 64, 2_000_000, 0.0, "fixed")),
    ("empty", Case(1_000_000, 16, 32, 0.95, "empty")),
    ("powerlaw", Case(16384, 20, 1000, 0.0, "heavy")),
    ("powerlaw", Case(4096, 128, 1000, 0.0, "heavy", "bfloat16")),
    ("ones", Case(1_000_000, 8, 1, 0.0, "fixed", "bfloat16")),
    ("bars", Case(1024, 256, 1000, 0.5)),
    ("bimodal", ("bimodal", 100_000, 8, "bfloat16")),
    ("powerlaw_large", Case(20000, 128, 2000, 0.0, "heavy")),
]
SMOKE = [("narrow", Case(40, 4, 16, 0.5)), ("ones", Case(300, 8, 1, 0.0, "fixed")),
         ("bimodal", ("bimodal", 60, 8, "float32")), ("odd_width", Case(6, 24, 40, 0.2))]
# the classes: the split's device µs predicted before its first GPU run (median, low, high), from the
# mechanisms in docs/performance.md ("The split: floors and predictions")
PREDICTED = {"B512-M64-L100-s0.1": (10.5, 9.0, 12.5), "B10000-M4-L16-s0.5": (8.5, 7.0, 10.5),
             "B2048-M24-L256-s0.2": (30.0, 22.0, 40.0), "B100000-M64-L64-s0.9-empty": (70.0, 55.0, 95.0),
             "B4096-M64-L400-s0-heavy": (13.0, 10.0, 18.0), "B1000000-M8-L1-s0-fixed": (30.0, 24.0, 40.0),
             "bimodal-B100000-M8-fp32": (460.0, 380.0, 600.0)}
BACKWARD = {"B512-M64-L100-s0.1", "B10000-M4-L16-s0.5", "B100000-M8-L16-s0.5", "B65536-M16-L64-s0.5",
            "B1000000-M8-L1-s0-fixed", "B4096-M64-L400-s0-heavy", "B1-M64-L2000000-s0-fixed",
            "B100000-M64-L64-s0.9-empty", "B1024-M256-L1000-s0.5", "bimodal-B100000-M8-fp32", "B2048-M24-L256-s0.2",
            "B40-M4-L16-s0.5", "bimodal-B60-M8-fp32"}
# the split's whole-segments tile at half the elements, and TILES = 1 (a compile each)
VARIANT_SHAPES = {"B512-M64-L100-s0.1", "B10000-M4-L16-s0.5", "B2048-M24-L256-s0.2", "B100000-M64-L64-s0.9-empty",
                  "B4096-M64-L400-s0-heavy", "B1000000-M8-L1-s0-fixed", "B40-M4-L16-s0.5"}
PATHS = {"merge": "merge", "reduce": "chunks", "segments": "whole segments", "segments_loop": "whole segments",
         "split": "split"}
VARIANTS = ("split_pps1", "split_pps4", "split_half_tile", "split_tiles1")
SKIP: set = set()  # --skip: contenders whose names start with one of these are not run
SHAPE_MARGIN_S = 45  # no shape starts later than this before the deadline (the slowest shape's measurement)


def bimodal_lengths(B: int, seed: int = 1337) -> torch.Tensor:
    """98% of the segments 1-4 rows, 2% 10^4-3·10^4 rows."""
    gen = torch.Generator().manual_seed(seed)
    short = torch.randint(1, 5, (B,), generator=gen)
    low, high = (10_000, 30_001) if B >= 1000 else (20, 40)  # (--cpu-smoke's batches are tiny)
    long = torch.randint(low, high, (B,), generator=gen)
    return torch.where(torch.rand(B, generator=gen) < 0.02, long, short)


def build(spec):
    if isinstance(spec, Case):
        batch = make_batch(spec, DEVICE)
        return spec.label, batch.values, batch.offsets, batch.max_seqlen
    _, B, M, dtype = spec
    lengths = bimodal_lengths(B)
    offsets = torch.zeros(B + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    values = torch.randn(int(offsets[-1]), M, generator=torch.Generator().manual_seed(1337)).to(DEVICE)
    values = values.to(getattr(torch, dtype))
    return label_of(spec), values, offsets.to(DEVICE), int(lengths.max())


def stat(value) -> dict | None:
    """A timing's median and quantiles (no samples), flagged unstable where p20-p80 passes 10% of the median."""
    if not isinstance(value, dict):
        return None
    spread = (value["p80_us"] - value["p20_us"]) / value["median_us"] if value["median_us"] else 0.0
    return {k: round(value[k], 3) for k in ("median_us", "p20_us", "p80_us")} | {"unstable": spread > 0.1}


def device_time(fn, rep: int) -> dict:
    """``reduce_row.device_time`` (CUDA-graph replay, L2 flushed); under --cpu-smoke one call's wall."""
    if not SMOKE_RUN:
        return reduce_row.device_time(fn, rep, DEVICE)
    start = time.perf_counter()
    fn()
    us = (time.perf_counter() - start) * 1e6
    return {"median_us": us, "p20_us": us, "p80_us": us, "method": "cpu-smoke-wall"}


def timed(row: dict, name: str, fn, ref, tol: float, rep: int, repeat_check: bool = False) -> None:
    """``fn`` checked against ``ref`` (not timed when wrong), its repeats bitwise, then its device time."""
    try:
        out = fn()
        err = reduce_row.rel_error(out, ref)
        row[f"{name}_rel_error"], row[f"{name}_correct"] = err, err <= tol
        if err > tol:
            row[name] = f"not timed: relative error {err:.2e} > {tol:g}"
            return
        if repeat_check:
            row[f"{name}_deterministic"] = all(reduce_row.bitwise_equal(out, fn()) for _ in range(3))
        del out
        row[name] = stat(device_time(fn, rep))
    except Exception as exc:  # noqa: BLE001 - a contender that fails is recorded, the run goes on
        row[name] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"


def checks(row: dict, values, offsets) -> None:
    """The routed plan without max_seqlen (the split) through the JIT, every tensor it writes poisoned first: sum
    (NaN poison) and mean (a finite poison: an empty segment's mean is NaN) forward, the mean backward, each element
    against float64 within the dtype's tolerance (``checks_ok``)."""
    from jaggedperf.ops import testing

    tol = reduce_row.tolerance(values.dtype)
    found = {}
    try:
        for mean, poison in ((False, float("nan")), (True, 12345.0)):
            out = testing.launch_reduce(values, offsets, mean=mean, poison=poison)
            ref = reduce_row.reference(values, offsets, mean=mean)
            scale = reduce_row.reference(values.abs(), offsets, mean=mean)
            found["mean" if mean else "sum"] = reduce_row.elementwise_error(out, ref, scale)
            del out, ref, scale
        lengths = offsets.long().diff()
        grad = torch.randn(offsets.numel() - 1, values.shape[1], device=values.device).to(values.dtype)
        back = testing.launch_expand(grad, offsets, values.shape[0], mean=True, poison=float("nan"))
        ref = (grad.double() / lengths.clamp_min(1).unsqueeze(1).double()).repeat_interleave(
            lengths, dim=0, output_size=values.shape[0])
        found["expand_mean"] = reduce_row.elementwise_error(back, ref, ref.abs())
        del back, ref
    except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
        found["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    row["checks"] = {k: (v if isinstance(v, str) else float(f"{v:.3g}")) for k, v in found.items()}
    row["checks_ok"] = "error" not in found and all(v <= tol for v in found.values())


def split_variants(values) -> dict:
    """The split's neighbours: the production config's grid at 1 and 4 programs an SM a role, its whole-segments
    tile at half the elements, and one tile a short segment."""
    from jaggedperf.ops.config import split_config

    base = split_config(values.shape[1], values.dtype)
    return {"split_pps1": dataclasses.replace(base, programs_per_sm=1),
            "split_pps4": dataclasses.replace(base, programs_per_sm=4),
            "split_half_tile": dataclasses.replace(base, tile=max(base.tile // 2, base.block_m)),
            "split_tiles1": dataclasses.replace(base, tiles=1)}


WHOLE_FIRST = ("whole_first", "whole_first_half", "whole_first_routed1", "whole_first_routed2")


def whole_first_variants(values) -> dict:
    """The whole-first arrangement (``plan.plan_whole_first``) at the split's config, with half its whole-segments
    tile, and routed on the device to the merge path where a first-launch program would take more than 1 or 2
    groups."""
    from jaggedperf.ops.config import split_config

    base = split_config(values.shape[1], values.dtype)
    return dict(zip(WHOLE_FIRST, (base, dataclasses.replace(base, tile=max(base.tile // 2, base.block_m)),
                                  dataclasses.replace(base, whole_groups_max=1),
                                  dataclasses.replace(base, whole_groups_max=2))))


def copy_time(nbytes: int, rep: int) -> dict:
    """An elementwise kernel reading nbytes / 2 and writing as many (a graph's memcpy node runs on the copy engine,
    not a floor for a kernel)."""
    src = torch.randn(max(nbytes // 8, 4), device=DEVICE)
    dst = torch.empty_like(src)
    return device_time(lambda: torch.neg(src, out=dst), rep)


def routed_path(values, offsets, max_seqlen=None) -> str:
    """The path ``plan_reduce`` takes for the call (its first launch's kernel)."""
    from jaggedperf.ops.reduce import plan

    planned = plan.plan_reduce(values, offsets, mean=False, empty_zero=False, max_seqlen=max_seqlen)
    return PATHS.get(planned.launches[0].key[0], planned.launches[0].key[0])


def ours(values, offsets, *, mean: bool = False, max_seqlen=None):
    """Our call as a user makes it (the public function: the fast tiers, then the native path); on the CPU (smoke)
    the routed plan through the interpreter, since the public function's CPU kernel is pure torch."""
    if DEVICE.type == "cpu":
        from jaggedperf.ops import testing

        return lambda: testing.launch_reduce(values, offsets, mean=mean, max_seqlen=max_seqlen)
    fn = jaggedperf.jagged_mean if mean else jaggedperf.jagged_sum
    return lambda: fn(values, offsets, max_seqlen=max_seqlen)


def contenders(label, values, offsets, hint, must) -> list:
    """(name, callable, mean?) of every contender of a shape, in timing order (the backward's apart)."""
    from jaggedperf.ops.reduce import plan
    from jaggedperf.ops.testing import forced_call as forced  # a planned path forced, run through the JIT

    off64 = offsets.long()
    variants = split_variants(values)
    out = [("ours_plain", ours(values, offsets), False),
           ("ours_hinted", ours(values, offsets, max_seqlen=hint), False),
           ("merge_plain", forced(plan.plan_merge, values, offsets, False, False), False),
           ("split_plain", forced(plan.plan_split, values, offsets, False, False), False)]
    for name in VARIANTS[:2] + (VARIANTS[2:] if label in VARIANT_SHAPES else ()):
        out.append((name, forced(plan.plan_split, values, offsets, False, False, variants[name]), False))
    out += [(name, forced(plan.plan_whole_first, values, offsets, False, False, cfg), False)
            for name, cfg in whole_first_variants(values).items()]
    out.append(("segment_reduce", lambda: torch.segment_reduce(values, "sum", offsets=off64, axis=0), False))
    if must >= 16e6:
        out.append(("ours_plain_mean", ours(values, offsets, mean=True), True))
    return [c for c in out if not any(c[0].startswith(prefix) for prefix in SKIP)]


def backward_contenders(values, offsets, hint, grad) -> list:
    from jaggedperf.ops import testing

    n = values.shape[0]
    return [("expand_plain", lambda: testing.launch_expand(grad, offsets, n)),
            ("expand_hinted", lambda: testing.launch_expand(grad, offsets, n, max_seqlen=hint)),
            ("expand_merge", lambda: testing.launch_expand(grad, offsets, n, merge=True))]


def padded_bytes(offsets, hint, values) -> int:
    return offsets.numel() * max(hint, 1) * values.shape[1] * values.element_size()


def warm(spec) -> None:
    """Every contender of a shape called once (its compiles, into the shared caches): no reference, no timing."""
    label, values, offsets, hint = build(spec)
    must = reduce_row.must_move_bytes(values, offsets)
    for _, fn, _ in contenders(label, values, offsets, hint, must):
        fn()
    from jaggedperf.ops import testing

    testing.launch_reduce(values, offsets, mean=True)  # the checks' mean
    if padded_bytes(offsets, hint, values) <= 6e9:
        torch.compile(reduce_row.padded_fn("sum", max(hint, 1)), dynamic=False)(values, offsets)
    grad = torch.randn(offsets.numel() - 1, values.shape[1], device=DEVICE).to(values.dtype)
    testing.launch_expand(grad, offsets, values.shape[0], mean=True)  # the checks' backward
    if label in BACKWARD:
        for _, fn in backward_contenders(values, offsets, hint, grad):
            fn()
    torch.cuda.synchronize()


def measure(cls: str, spec, gbps: float, floors: dict, inductor_left: list) -> dict:
    label, values, offsets, hint = build(spec)
    must = reduce_row.must_move_bytes(values, offsets)
    rep = 25 if must > 500e6 else 40
    tol = reduce_row.tolerance(values.dtype)
    row = {"class": cls, "case": label, "dtype": str(values.dtype).removeprefix("torch."), "B": offsets.numel() - 1,
           "M": values.shape[1], "N": values.shape[0], "max_seqlen": hint, "MB": round(must / 1e6, 1),
           "floor_us": round(reduce_row.floor_us(must, gbps), 2), "plain_path": routed_path(values, offsets),
           "hinted_path": routed_path(values, offsets, hint), "predicted_us": PREDICTED.get(label)}
    checks(row, values, offsets)
    row["copy"] = stat(copy_time(must, rep))
    row["practical_floor_us"] = round(row["copy"]["median_us"] + floors["empty_kernel_us"], 2)
    ref = reduce_row.reference(values, offsets, mean=False)
    mref = None
    for name, fn, mean in contenders(label, values, offsets, hint, must):
        if mean and mref is None:
            mref = reduce_row.reference(values, offsets, mean=True)
        timed(row, name, fn, mref if mean else ref, tol, rep, repeat_check=name in ("ours_plain", "ours_hinted"))
    del mref
    if SMOKE_RUN or padded_bytes(offsets, hint, values) > 6e9 or inductor_left[0] <= 0:
        row["inductor_padded"] = "skipped: " + ("cpu smoke" if SMOKE_RUN else "too large"
                                                if padded_bytes(offsets, hint, values) > 6e9
                                                else "compile budget spent")
    else:
        torch._dynamo.reset()
        compiled = torch.compile(reduce_row.padded_fn("sum", max(hint, 1)), dynamic=False)
        clock = harness.within(None)
        timed(row, "inductor_padded", lambda: compiled(values, offsets), ref, tol, rep)
        inductor_left[0] -= clock.elapsed()
    if label in BACKWARD:
        grad = torch.randn(offsets.numel() - 1, values.shape[1], device=DEVICE).to(values.dtype)
        eref = grad.double().repeat_interleave(offsets.diff(), dim=0, output_size=values.shape[0])
        for name, fn in backward_contenders(values, offsets, hint, grad):
            timed(row, name, fn, eref, tol, rep, repeat_check=name == "expand_plain")
    row["bars"] = judge(row)
    return row


def judge(row: dict) -> dict:
    """The bars of one shape: True / False, or None where a bar does not apply or a number is missing."""
    med = {k: v["median_us"] if isinstance(v, dict) and "median_us" in v else None for k, v in row.items()}
    peers = {p: med[p] for p in reduce_row.PEERS if med.get(p) is not None and row.get(f"{p}_correct")}
    row["best_peer"] = min(peers, key=peers.get) if peers else None
    p, h, mean = med.get("ours_plain"), med.get("ours_hinted"), med.get("ours_plain_mean")
    big = row["MB"] >= 16
    ep, eh = med.get("expand_plain"), med.get("expand_hinted")
    predicted = row.get("predicted_us")
    forced_paths = [med[k] for k in ("merge_plain", "split_plain") if med.get(k) is not None]
    return {"0_checks": bool(row.get("checks_ok")),
            "1_peer": None if p is None or not peers else p <= BAR1 * min(peers.values()),
            "1_hinted": None if p is None or h is None else p <= BAR1_HINT * h,
            "2_floor": None if p is None or not big else p <= BAR2 * row["practical_floor_us"],
            "2_sum_mean": None if p is None or mean is None or not big else abs(mean - p) <= BAR2_SPREAD * p,
            "3_backward": None if ep is None or eh is None else ep <= BAR3 * eh,
            "4_deterministic": bool(row.get("ours_plain_deterministic") and row.get("ours_hinted_deterministic")),
            "5_predicted": None if p is None or not predicted else predicted[1] <= p <= predicted[2],
            "6_route": None if p is None or len(forced_paths) < 2 else p <= BAR6 * min(forced_paths)}


BAR_KEYS = ("0_checks", "1_peer", "1_hinted", "2_floor", "2_sum_mean", "3_backward", "4_deterministic",
            "5_predicted", "6_route")


def _fmt(value) -> str:
    if not isinstance(value, dict):
        return "—"
    return f"{value['median_us']:.1f}{'*' if value['unstable'] else ''}"


def _mark(ok) -> str:
    return "·" if ok is None else "✓" if ok else "✗"


def markdown(data: dict) -> str:
    meta, rows = data["meta"], data["rows"]
    lines = ["# The jagged sum without max_seqlen: the split, the merge path, the peers and the floors", "",
             f"{meta.get('gpu')}, torch {meta.get('torch')}, triton {meta.get('triton')}; copy "
             f"{data['copy_gbps']:.0f} GB/s; an empty kernel's graph replay {data['empty_kernel_us']:.2f} µs, two in "
             f"one graph {data['two_empty_kernels_us']:.2f} µs. jagged_sum, device µs by CUDA-graph replay with L2 "
             "flushed (median; * marks p20-p80 wider than 10% of it); floor = bytes / copy bandwidth; practical "
             "floor = an empty kernel's replay + an elementwise kernel reading and writing the same bytes.", "",
             "Bars: 0 the split's strict checks (poisoned outputs; sum, mean and the mean backward, each element "
             "against float64); 1 without max_seqlen ≤ 1.1× the best peer and ≤ 1.15× the same call with "
             "max_seqlen; 2 (≥ 16 MB) ≤ 1.3× the practical floor, sum and mean within 5%; 3 the backward without ≤ "
             "1.1× with; 4 bitwise repeats; 5 inside the range predicted before the run; 6 the route (ours without) "
             "within 5% of the faster of the merge path and the split forced. `split 1 / 4 / ½ / t1`: "
             "the split at 1 and 4 programs an SM a role (production: "
             f"{data.get('split_pps', '?')}), with half its whole-segments tile, and with TILES = 1. `whole-first / "
             "½ / r1 / r2`: its two roles as two launches (the long one skipped where no segment is long), at its "
             "tile, at half, and routed on the device to the merge path where a program would take > 1 / > 2 groups.",
             "", "| class | case | MB | floor | practical | predicted | ours without (path) | merge | split | "
             "split 1 / 4 / ½ / t1 | whole-first / ½ / r1 / r2 | ours with (path) | segment_reduce | Inductor padded | "
             "mean without | bwd without / with / merge | 0 | 1 peer | 1 with | 2 floor | 2 sum≈mean | 3 | 4 | 5 | "
             "6 route |",
             "|" + "---|" * 25]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['class']} | {r['case']} | error: {r['error'][:80]} |" + " |" * 22)
            continue
        b = r["bars"]
        back = "—" if not isinstance(r.get("expand_plain"), dict) else \
            f"{_fmt(r['expand_plain'])} / {_fmt(r.get('expand_hinted'))} / {_fmt(r.get('expand_merge'))}"
        split = " / ".join(_fmt(r.get(v)) for v in VARIANTS)
        predicted = "—" if not r.get("predicted_us") else "{:g} ({:g}–{:g})".format(*r["predicted_us"])
        lines.append(
            f"| {r['class']} | {r['case']} | {r['MB']} | {r['floor_us']:.1f} | {r['practical_floor_us']:.1f} | "
            f"{predicted} | {_fmt(r.get('ours_plain'))} ({r['plain_path']}) | {_fmt(r.get('merge_plain'))} | "
            f"{_fmt(r.get('split_plain'))} | {split} | {' / '.join(_fmt(r.get(w)) for w in WHOLE_FIRST)} | "
            f"{_fmt(r.get('ours_hinted'))} ({r['hinted_path']}) | "
            f"{_fmt(r.get('segment_reduce'))} | {_fmt(r.get('inductor_padded'))} | {_fmt(r.get('ours_plain_mean'))} | "
            f"{back} | " + " | ".join(_mark(b.get(k)) for k in BAR_KEYS) + " |")
    counts: dict = {}
    for r in rows:
        for bar, ok in r.get("bars", {}).items():
            held, failed = counts.get(bar, (0, 0))
            counts[bar] = (held + (ok is True), failed + (ok is False))
    lines += ["", "## Bars over the shapes", "", "| bar | holds | fails |", "|---|---:|---:|"]
    lines += [f"| {bar} | {held} | {failed} |" for bar, (held, failed) in counts.items()]
    failed_checks = [f"{r['case']} {r.get('checks')}" for r in rows if not r.get("checks_ok", True)]
    if failed_checks:
        lines += ["", "Strict checks failed: " + "; ".join(failed_checks) + "."]
    if data["skipped"]:
        lines += ["", "Not measured (the deadline): " + ", ".join(data["skipped"]) + "."]
    return "\n".join(lines)


def label_of(spec) -> str:
    return spec.label if isinstance(spec, Case) else \
        f"bimodal-B{spec[1]}-M{spec[2]}-{'fp32' if spec[3] == 'float32' else 'bf16'}"


def warm_in_parallel(workers: int, only: str, seconds: float) -> dict:
    """``--warm-only`` over ``workers`` shards of the shapes, in that many processes at once (the native path off
    there, one Inductor compile thread each), for at most ``seconds``: a worker still running then is stopped (what
    it compiled stays cached; the timed process compiles the rest). Returns each shard's exit status and the tail of
    its errors."""
    env = {**os.environ, "JAGGEDPERF_NATIVE": "0", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, __file__, "--out", os.devnull, "--warm-only", "--shard",
                               f"{i}/{workers}", "--only", only, "--skip", ",".join(sorted(SKIP))], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(workers)]
    clock = harness.within(seconds)
    found = {}
    for i, proc in enumerate(procs):
        try:
            _, err = proc.communicate(timeout=max(seconds - clock.elapsed(), 1))
            found[str(i)] = {"rc": proc.returncode, "stderr": err[-600:]}
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            found[str(i)] = {"rc": "stopped at --warm-s", "stderr": (err or "")[-600:]}
    return found


def main() -> int:
    global DEVICE, SMOKE_RUN
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory of split.json and split.md")
    ap.add_argument("--inductor-s", type=float, default=70.0, help="total Inductor compile time allowed")
    ap.add_argument("--only", default="", help="comma-separated case labels or prefixes (default: all)")
    ap.add_argument("--deadline-s", type=float, default=450.0,
                    help="the whole run's seconds: no shape starts later than a shape's margin before it")
    ap.add_argument("--warm-workers", type=int, default=0, help="compile everything first in this many processes")
    ap.add_argument("--warm-s", type=float, default=170.0, help="the most seconds the warm-up may take")
    ap.add_argument("--warm-only", action="store_true", help="(a warm-up worker) call every contender once, exit")
    ap.add_argument("--shard", default="0/1", help="(a warm-up worker) i/k: every k-th shape from the i-th")
    ap.add_argument("--commit", default="", help="the commit measured (a copy of the tree may have no .git)")
    ap.add_argument("--skip", default="", help="comma-separated contender name prefixes not to run (e.g. split,whole)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (plumbing only)")
    ap.add_argument("--from", dest="from_json", default="",
                    help="no run: judge a run's split.json again and write its two files under --out")
    args = ap.parse_args()
    SKIP.update(filter(None, args.skip.split(",")))
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        for row in data["rows"]:
            if "error" not in row:
                row["bars"] = judge(row)
        harness.write_summary(args.out, NAME, data, markdown(data))
        print(markdown(data))
        return 0
    run = harness.within(args.deadline_s - SHAPE_MARGIN_S)
    shapes = SHAPES
    if args.cpu_smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":  # the kernels on CPU tensors: set before Triton is imported
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "TRITON_INTERPRET": "1"})
        DEVICE, shapes, SMOKE_RUN = torch.device("cpu"), SMOKE, True
    elif not torch.cuda.is_available():
        print("no CUDA device (use --cpu-smoke to check the plumbing)", file=sys.stderr)
        return 1
    only = set(filter(None, args.only.split(",")))
    shapes = [(cls, spec) for cls, spec in shapes
              if not only or any(label_of(spec).startswith(o) for o in only)]
    if args.warm_only:
        index, count = map(int, args.shard.split("/"))
        for _, spec in shapes[index::count]:
            try:
                warm(spec)
            except Exception:  # noqa: BLE001 - the timed run records the failure
                traceback.print_exc()
            torch.cuda.empty_cache()
        return 0
    data = {"meta": harness.meta(), "rows": [], "skipped": [], "errors": {}, "deadline_s": args.deadline_s}
    if args.commit:
        data["meta"]["git_commit"] = args.commit
    data["meta"]["gpu"] = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu"
    if args.warm_workers and DEVICE.type == "cuda":
        clock = harness.within(None)
        data["warm"] = warm_in_parallel(args.warm_workers, args.only, args.warm_s)
        data["warm_s"] = round(clock.elapsed(), 1)
        print(f"warm-up {data['warm_s']} s: " + ", ".join(f"{k} rc {v['rc']}" for k, v in data["warm"].items()),
              flush=True)
    if DEVICE.type == "cuda":
        jaggedperf.ops.prepare_native_launch()
    from jaggedperf.ops.config import split_config
    data["split_pps"] = split_config(64, torch.float32).programs_per_sm
    data["copy_gbps"] = timing.copy_bandwidth_gbps(DEVICE) if DEVICE.type == "cuda" else 1.0
    empty = torch.empty(1, device=DEVICE)

    def two_kernels():
        empty.add_(0)
        empty.add_(0)

    data["empty_kernel_us"] = device_time(lambda: empty.add_(0), 40)["median_us"]
    data["two_empty_kernels_us"] = device_time(two_kernels, 40)["median_us"]
    print(f"copy {data['copy_gbps']:.0f} GB/s, empty kernel {data['empty_kernel_us']:.2f} µs", flush=True)
    inductor_left = [args.inductor_s]
    for cls, spec in shapes:
        label = label_of(spec)
        if not run.left():
            data["skipped"].append(label)
            continue
        try:
            row = measure(cls, spec, data["copy_gbps"], data, inductor_left)
        except Exception as exc:  # noqa: BLE001 - a shape that fails is recorded, the run goes on
            row = {"class": cls, "case": label, "error": f"{type(exc).__name__}: {exc}"}
            data["errors"][label] = traceback.format_exc()
        data["rows"].append(row)
        print(f"[{run.elapsed():6.1f}s] {cls} {label}: checks {row.get('checks')}, " +
              ", ".join(f"{k} {_fmt(row.get(k))}" for k in ("ours_plain", "merge_plain", "split_plain", "ours_hinted",
                                                            "segment_reduce", "inductor_padded")),
              flush=True)
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
        harness.write_summary(args.out, NAME, data, markdown(data))
    data["run_s"] = round(run.elapsed(), 1)
    harness.write_summary(args.out, NAME, data, markdown(data))
    print(markdown(data))
    failed = [r["case"] for r in data["rows"] if not r.get("checks_ok")]
    if failed:
        print(f"strict checks failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
