#!/usr/bin/env python3
"""The row blocks (``ops/reduce/rowblock.py``, reached only through ``jaggedperf.ops.testing``) against the default
path, on the five shape classes where the default path loses without max_seqlen: device time of a CUDA-graph replay
of each plan's launches (planned once; L2 flushed before each replay), checked first against float64 and for bitwise
equal repeats. One JSON.

Variants: ``default`` (``plan_reduce`` without max_seqlen), ``default+max_seqlen``, ``rowblock`` (production config),
``rowblock scan`` (every boundary tile scans: few_segments = 0), ``rowblock masked`` (few_segments = 64: boundary
tiles sum each segment by a mask, whatever their count), ``rowblock 2 warps``; and the floor (the values' bytes at
the device's copy bandwidth). And the default chunks with 2×, 4× and 16× their rows per chunk (``chunks ×4 rows``,
...): fewer pieces for the combine of a segment that crosses many chunks (the giant); and the combine with more
pieces a step and more warps (``combine 128 pieces, 4 warps``, ``combine 256 pieces, 8 warps``, the first with ×2
rows).

Run:  PYTHONPATH=src python3 benchmarks/rowblock_probe.py --out $OUT/rowblock_probe.json          (~1 minute)
      TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/rowblock_probe.py --cpu-smoke --out /tmp/rb.json
      (shapes scaled down, correctness only: the plumbing)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ops_bench import _reference  # noqa: E402  (the float64 reference of the benchmarks: index_add over segments)

from jaggedperf.inputs import Case, make_lengths  # noqa: E402
from jaggedperf.ops import testing  # noqa: E402


def lengths_for(cls: str, scale: int, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """(lengths, M) of a shape class; ``scale`` divides B (and the giant's N) for the CPU smoke run."""
    if cls == "seed":  # 512 × 64, lengths 1..160 (~41k rows)
        return torch.randint(1, 161, (512 // scale,), generator=gen), 64
    if cls == "giant":  # one segment of 2·10^6 rows × 64
        return torch.tensor([2_000_000 // scale**2]), 64
    if cls == "empty":  # 10^5 × 64, 90% empty, the rest 1..83 rows (~420k rows)
        b = 100_000 // scale
        keep = torch.rand(b, generator=gen) < 0.1
        return torch.where(keep, torch.randint(1, 84, (b,), generator=gen), 0), 64
    if cls == "narrow":  # 10^4 × 4, lengths 1..16
        return torch.randint(1, 17, (10_000 // scale,), generator=gen), 4
    if cls == "powerlaw":  # 4096 × 64, Pareto(1.5) lengths capped at 400 (mean ~12)
        u = torch.rand(4096 // scale, generator=gen)
        return (u.pow(-1 / 1.5) * 4).floor().clamp(1, 400).to(torch.int64), 64
    if cls == "heavy":  # the kernel bars' power-law shape under 100 MB: the inputs' heavy lengths, 4096 × 128, ≤ 1000
        return make_lengths(Case(4096 // scale, 128, 1000, 0.0, "heavy")), 128
    raise ValueError(cls)


CLASSES = ("seed", "giant", "empty", "narrow", "powerlaw", "heavy")


def variants(values, offsets, max_seqlen):
    base = testing.rowblock_config(values.shape[1], values.dtype)
    rows = int(testing.plan_reduce(values, offsets).launches[0].args[7])  # the default chunks' rows_per_chunk
    return {
        "default": dict(),
        "default+max_seqlen": dict(max_seqlen=max_seqlen),
        "rowblock": dict(rowblock=True),
        "rowblock scan": dict(rowblock=dataclasses.replace(base, few_segments=0)),
        "rowblock masked": dict(rowblock=dataclasses.replace(base, few_segments=64)),
        "rowblock 2 warps": dict(rowblock=dataclasses.replace(base, num_warps=2)),
        # fewer, longer chunks: a segment crossing many chunks is combined by one program, 32 pieces a step (the
        # giant's ~4,200 pieces: ~130 dependent steps); 4× / 16× the rows leave 1/4 and 1/16 of the steps
        "chunks ×4 rows": dict(rows_per_chunk=4 * rows),
        "chunks ×16 rows": dict(rows_per_chunk=16 * rows),
        "chunks ×2 rows": dict(rows_per_chunk=2 * rows),
        # or the combine itself wider: more pieces a step (fewer dependent steps), more warps to load them
        "combine 128 pieces, 4 warps": dict(config=dict(block_p=128, combine_warps=4)),
        "combine 256 pieces, 8 warps": dict(config=dict(block_p=256, combine_warps=8)),
        "chunks ×2 rows, combine 128 pieces, 4 warps": dict(rows_per_chunk=2 * rows,
                                                             config=dict(block_p=128, combine_warps=4)),
    }


def check(out, values, offsets) -> float:
    # the largest error relative to the tests' bound (2e-5·Σ|x| + 1e-5·|ref|): must stay under 1
    ref = _reference(values, offsets, mean=False)
    scale = _reference(values.abs(), offsets, mean=False)
    return float(((out.double() - ref).abs() / (2e-5 * scale + 1e-5 * ref.abs() + 1e-30)).max()) if ref.numel() else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--classes", default=",".join(CLASSES))
    ap.add_argument("--rep-ms", type=int, default=40)
    args = ap.parse_args()
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    scale = 64 if args.cpu_smoke else 1
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "cases": []}
    if device.type == "cuda":
        from jaggedperf.lab import timing
        result["copy_gbps"] = timing.copy_bandwidth_gbps(device)
    gen = torch.Generator().manual_seed(0)
    for cls in args.classes.split(","):
        lengths, m = lengths_for(cls, scale, gen)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(device)
        values = torch.randn(int(lengths.sum()), m, generator=gen).to(device)
        case = {"class": cls, "B": lengths.numel(), "N": values.shape[0], "M": m, "variants": {}}
        if "copy_gbps" in result:
            case["floor_us"] = values.numel() * 4 / (result["copy_gbps"] * 1e3)
        for name, kw in variants(values, offsets, int(lengths.max())).items():
            row = {}
            try:
                with testing.override(kw.pop("config", None)):  # a ReduceConfig's fields replaced (None: none)
                    plan = testing.plan_reduce(values, offsets, **kw)
                row["grid"] = [list(map(int, launch.grid)) for launch in plan.launches]
                testing.run_direct(plan.launches)
                first = plan.out.clone()
                testing.run_direct(plan.launches)
                row["bitwise_repeat"] = bool(torch.equal(first.view(torch.uint8), plan.out.view(torch.uint8)))
                row["error_over_bound"] = check(first, values, offsets)
                if device.type == "cuda":
                    from jaggedperf.lab import timing
                    graph = timing.capture_graph(lambda: testing.run_direct(plan.launches), device)
                    dt = timing.replay_device_time(graph.replay, rep_ms=args.rep_ms)
                    row.update(median_us=dt.median_us, p20_us=dt.p20_us, p80_us=dt.p80_us)
            except Exception as e:  # keep the other variants' numbers
                row["error"] = f"{type(e).__name__}: {e}"
            case["variants"][name] = row
            print(cls, name, json.dumps(row), file=sys.stderr, flush=True)
        result["cases"].append(case)
    result["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    bad = [(c["class"], n) for c in result["cases"] for n, r in c["variants"].items()
           if "error" in r or not r.get("bitwise_repeat") or r.get("error_over_bound", 0) >= 1]
    print("failed:", bad) if bad else print("all variants correct and deterministic")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
