#!/usr/bin/env python3
"""Markdown tables from an ``ops_bench.py`` JSON: device time against the floor per shape, the
whole-segments grid, the config grid's best, and the host wall per call.

    python3 benchmarks/ops_report.py benchmarks/results/h200/ops.json -o benchmarks/results/h200/ops.md
"""

from __future__ import annotations

import argparse
import json
import sys


def _us(d) -> str:
    return f"{d['median_us']:.1f}" if isinstance(d, dict) else "—"


def _spread(d) -> str:
    return f"{d['median_us']:.1f} ({d['p20_us']:.1f}–{d['p80_us']:.1f})" if isinstance(d, dict) else "—"


def _ratio(d, floor) -> str:
    return f"{d['median_us'] / floor:.2f}" if isinstance(d, dict) and floor else "—"


def render(run: dict, title: str) -> str:
    meta = run["meta"]
    copy = (run.get("copy") or {}).get("gbps")
    lines = [f"# {title}", "",
             f"Command: `{meta.get('command')}`.",
             f"torch {meta.get('torch')}, triton {meta.get('triton')}, {meta.get('gpu')}, copy bandwidth "
             f"{copy:.0f} GB/s (read + write).",
             "Device time: CUDA-graph replay, L2 flushed before each replay, median (p20–p80), µs. Floor = bytes that "
             "must move (values + offsets read once, output written once) / that copy bandwidth. Every row was "
             "first checked against float64 (relative error ≤ 1e-5 fp32, ≤ 1e-2 bf16).",
             *([f"A one-element kernel under the same method takes {run['null_kernel']['median_us']:.1f} µs "
                "(what the measurement costs with no work)."] if isinstance(run.get("null_kernel"), dict) else []),
             "",
             "`no max_seqlen`: the balanced two-launch path (what `torch.compile` runs when no max_seqlen is passed). `max_seqlen given`: the "
             "eager call with the batch's max_seqlen (the whole-segments kernel where `segments_config` picks it: "
             "the seed shapes, and at 65536×16 and 32768×64 its looping form; elsewhere the same path as the first column). `dense sum`: "
             "`values.sum(0)`, a dense reduction that reads the same bytes: what a read of this size costs here.",
             *(["", "`kernels`: the same call's kernel durations summed (torch.profiler, L2 flushed before each call, "
                "median): the device time without the replay's own launch."]
               if any("kernels" in r for r in run.get("forward", [])) else []),
             "",
             "| case | dtype | floor | no max_seqlen | × floor | kernels | max_seqlen given | × floor | kernels | "
             "dense sum | segment_reduce |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in run.get("forward", []):
        lines.append(
            f"| {r['case']} | {r['dtype']} | {r['floor_us']:.1f} | {_spread(r.get('device'))} | "
            f"{_ratio(r.get('device'), r['floor_us'])} | {_us(r.get('kernels'))} | {_us(r.get('device_hinted'))} | "
            f"{_ratio(r.get('device_hinted'), r['floor_us'])} | {_us(r.get('kernels_hinted'))} | "
            f"{_us(r.get('dense_sum_device'))} | {_us(r.get('segment_reduce_device'))} |")
    if run.get("backward"):
        lines += ["", "Backward (`jagged_expand`, mean, fp32): floor = grad read + offsets + grad_values written. Graph "
                  "replay and kernel sums as above; `max_seqlen`: what autograd passes when the forward had it.", "",
                  "| case | floor | graph | × floor | kernels | × floor | max_seqlen: graph | kernels | × floor |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for b in run["backward"]:
            f = b["floor_us"]
            lines.append(f"| {b['case']} | {f:.1f} | {_us(b.get('device'))} | {_ratio(b.get('device'), f)} | "
                         f"{_us(b.get('kernels'))} | {_ratio(b.get('kernels'), f)} | {_us(b.get('device_hinted'))} | "
                         f"{_us(b.get('kernels_hinted'))} | {_ratio(b.get('kernels_hinted'), f)} |")
    seg = [r for r in run.get("segments_grid", []) if isinstance(r.get("device"), dict)]
    if seg:
        lines += ["", "Whole-segments kernel, configs tried (fp32):", "",
                  "| case | group | block_l | block_m | warps | looping programs | µs | × floor | default |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in seg:
            c = r["config"]
            lines.append(f"| {r['case']} | {c['group']} | {c['block_l']} | {c['block_m']} | {c['num_warps']} | "
                         f"{c.get('programs') or '—'} | "
                         f"{r['device']['median_us']:.1f} | {r['ratio_to_floor']:.2f} | {'yes' if r.get('bucket') else ''} |")
    if run.get("grid_best"):
        lines += ["", f"Config grid ({run.get('grid_dtype', 'fp32')}; one field at a time around the bucket):", "",
                  "| case | dtype | bucket µs | best µs | best config |", "|---|---|---:|---:|---|"]
        for g in run["grid_best"]:
            keys = ("block_l", "block_m", "num_warps", "programs_per_sm", "min_chunk_rows")
            best = ", ".join(f"{k}={g['best'][k]}" for k in keys)
            bucket_us = f"{g['bucket_us']:.1f}" if g.get("bucket_us") else "—"
            lines.append(f"| {g['case']} | {g.get('dtype', 'fp32')} | {bucket_us} | {g['best_us']:.1f} | {best} |")
    if run.get("host"):
        lines += ["", "Wall per call (seed method: 50 warm-up, 200 calls, sync after each; median µs; L2 warm):", "",
                  "| case | jagged_mean | jagged_mean(max_seqlen=…) | jagged_mean(nt) | torch.ops.jaggedperf.jagged_mean | "
                  "torch.segment_reduce | device µs |", "|---|---:|---:|---:|---:|---:|---:|"]
        for h in run["host"]:
            w = h["wall_us"]
            lines.append(f"| {h['case']} | {_us(w.get('fast_path'))} | {_us(w.get('fast_path_hinted'))} | "
                         f"{_us(w.get('nested_tensor'))} | {_us(w.get('op_torch_ops'))} | {_us(w.get('segment_reduce'))} | "
                         f"{h.get('device_us', 0):.1f} |")
    path = run.get("launch_path") or {}
    lines += ["", f"Eager launch path: {path.get('tier')} (verified: {path.get('verified_tier')}; dropped: "
              f"{', '.join(path.get('dropped') or []) or 'none'}).", ""]
    if run.get("errors"):
        lines += [f"Sections that failed: {', '.join(run['errors'])}.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="ops_bench.py JSON")
    parser.add_argument("-o", "--out", required=True, help="Markdown file to write")
    parser.add_argument("--title", default="jaggedperf ops on the H200")
    args = parser.parse_args()
    with open(args.results) as f:
        run = json.load(f)
    with open(args.out, "w") as f:
        f.write(render(run, args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
