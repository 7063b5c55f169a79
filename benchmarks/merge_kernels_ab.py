#!/usr/bin/env python3
"""Did a change to the merge-path kernels move their time? Two trees' merge path, kernel by kernel, side by side.

A tree is a directory holding ``src/jaggedperf`` (``git archive COMMIT src | tar -x -C DIR``). Each run of a tree is
this script's ``--worker`` in a process of its own with that tree's package first on the path, so both trees run the
same measurement on their own kernels; runs alternate (before, after, before, after, ...). Per shape (``SHAPES``:
the seed's, narrow rows, many short segments, one-row and 90% empty segments, power-law, odd and wide rows), in
each run:

- correctness first: the merge path's sum and mean (``plan.plan_merge``, forced) and its backward (the mean's
  expand, ``plan.expand_merge``) against float64 (``reduce_row.rel_error``: relative L2 over the reference's finite
  elements, inf where their NaNs differ, so a mean's empty segments count too; recorded, never skipped);
- device time of a whole call by CUDA-graph replay with L2 flushed (``harness.device_time``): the sum, the mean and
  the backward;
- the mean's kernels by torch.profiler (20 calls, L2 flushed): the reduction and the combine, µs a call.

Judged: a kernel or a call *moved* where the after/before ratio of the runs' medians passes ``--min-change`` and the
two trees' values over all runs do not overlap (the call's p20–p80 over every run).

Run on the GPU machine from the repository root:

    python3 benchmarks/merge_kernels_ab.py --before DIR [--after .] --out OUT [--runs 2]

writes ``OUT/raw/`` (each run's JSON) and the summary ``OUT/merge-kernels-ab.{json,md}``. ``--cpu-smoke``: tiny
shapes under TRITON_INTERPRET=1, one call each, no profiler, numbers meaningless: the plumbing only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

SHAPES = [(512, 64, 100, 0.1, "tritonbench", "float32"), (512, 64, 500, 0.75, "tritonbench", "float32"),
          (10_000, 4, 16, 0.5, "tritonbench", "float32"), (65536, 16, 64, 0.2, "tritonbench", "float32"),
          (32768, 64, 32, 0.2, "tritonbench", "float32"), (1_000_000, 8, 1, 0.0, "fixed", "float32"),
          (100_000, 64, 64, 0.9, "empty", "float32"), (4096, 64, 400, 0.0, "heavy", "float32"),
          (2048, 24, 256, 0.2, "tritonbench", "float32"), (4096, 128, 32768, 0.0, "heavy", "float32"),
          (10_000, 4, 16, 0.5, "tritonbench", "bfloat16")]
SMOKE = [(6, 64, 40, 0.2, "tritonbench", "float32"), (40, 4, 16, 0.5, "tritonbench", "bfloat16")]
CALLS = ("sum", "mean", "backward")
KERNELS = ("reduce", "combine")  # the mean's two launches, by the profiler's kernel names
TREES = ("before", "after")


def worker(smoke: bool) -> list[dict]:
    """This process's tree measured on every shape: one dict a shape (``case``, ``errors``, ``calls``: median, p20,
    p80 µs a call, ``kernels``: µs a call)."""
    from jaggedperf.inputs import Case, make_batch
    from jaggedperf.lab import harness, reduce_row
    from jaggedperf.lab.measure import timing
    from jaggedperf.ops import testing
    from jaggedperf.ops.reduce import plan

    device = torch.device("cpu" if smoke else "cuda")
    rows = []
    for B, M, seqlen, sparsity, distribution, dtype in SMOKE if smoke else SHAPES:
        case = Case(B, M, seqlen, sparsity, distribution, dtype)
        batch = make_batch(case, device)
        values, offsets = batch.values, batch.offsets
        grad = torch.randn(offsets.numel() - 1, M, device=device, dtype=values.dtype)
        calls = {"sum": testing.forced_call(plan.plan_merge, values, offsets, False, False),
                 "mean": testing.forced_call(plan.plan_merge, values, offsets, True, False),
                 "backward": testing.forced_call(plan.expand_merge, grad, offsets, values.shape[0], True)}
        refs = {"sum": reduce_row.reference(values, offsets, mean=False),
                "mean": reduce_row.reference(values, offsets, mean=True),
                "backward": reduce_row.expand_reference(grad, offsets, values.shape[0], mean=True)}
        row = {"case": case.label, "errors": {}, "calls": {}, "kernels": {}}
        for name, fn in calls.items():
            # NaN-aware: a mean's empty segments are NaN in both (0/0); a NaN where the other has none is inf
            row["errors"][name] = reduce_row.rel_error(fn(), refs[name])
            if not smoke:
                t = harness.device_time(fn, device, rep_ms=30)
                row["calls"][name] = [round(t[k], 2) for k in ("median_us", "p20_us", "p80_us")]
        if not smoke:
            for kernel in timing.profile_kernels(calls["mean"], device, calls=20).kernels:
                role = next((r for r in KERNELS if r in kernel.name), kernel.name[:40])
                row["kernels"][role] = round(kernel.us_per_call, 2)
        rows.append(row)
        del batch, values, offsets, grad
    return rows


def summarize(runs: dict[str, list[list[dict]]], min_change: float) -> list[dict]:
    """Per shape and measure: both trees' values over their runs, the ratio of the runs' medians, whether it moved,
    and the largest error either tree's outputs had against float64."""
    from jaggedperf.lab.measure import stats  # here: a worker imports only its own tree's package, however old

    out = []
    for i, first in enumerate(runs["before"][0]):
        row = {"case": first["case"], "max_error": max(max(r[i]["errors"].values()) for t in TREES for r in runs[t]),
               "measures": []}
        for kind, names in (("kernel", KERNELS), ("call", CALLS)):
            for name in names:
                got = {t: [r[i]["kernels" if kind == "kernel" else "calls"].get(name) for r in runs[t]] for t in TREES}
                if any(v is None for t in TREES for v in got[t]):
                    continue
                mid = {t: statistics.median(v if kind == "kernel" else [x[0] for x in v]) for t, v in got.items()}
                span = {t: (min(v), max(v)) if kind == "kernel" else (min(x[1] for x in v), max(x[2] for x in v))
                        for t, v in got.items()}
                ratio = mid["after"] / mid["before"]
                moved = stats.moved(mid["before"], mid["after"], span["before"], span["after"], min_change)
                row["measures"].append({"kind": kind, "name": name, "before_us": mid["before"],
                                        "after_us": mid["after"], "ratio": ratio, "moved": moved, "runs": got})
        out.append(row)
    return out


def render(rows: list[dict], before: str, after: str, min_change: float) -> str:
    lines = ["# The merge-path kernels, two trees side by side", "",
             f"Before: `{before}`; after: `{after}`. Kernels: the mean's two launches by torch.profiler (20 calls, L2 "
             "flushed), µs a call; calls: CUDA-graph replay with L2 flushed, medians over the runs (the backward: the "
             f"mean's expand). **Bold**: moved (the ratio past {min_change:.0%} and the trees' values over every run "
             "apart). Every output checked against float64 first (largest relative error in the last column).", "",
             "| case | " + " | ".join(f"{n} before | {n} after" for n in (*KERNELS, *CALLS)) + " | error |",
             "|---|" + "---:|" * (2 * (len(KERNELS) + len(CALLS))) + "---:|"]
    for row in rows:
        cells = {m["name"]: m for m in row["measures"]}
        parts = []
        for name in (*KERNELS, *CALLS):
            m = cells.get(name)
            if m is None:
                parts += ["—", "—"]
                continue
            after = f"{m['after_us']:.1f} ({m['ratio']:.2f}×)"
            parts += [f"{m['before_us']:.1f}", f"**{after}**" if m["moved"] else after]
        lines.append(f"| {row['case']} | " + " | ".join(parts) + f" | {row['max_error']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, help="the tree before the change (holding src/jaggedperf)")
    ap.add_argument("--after", type=Path, default=Path("."), help="the tree after it (default: this one)")
    ap.add_argument("--out", type=Path, help="directory of raw/ and merge-kernels-ab.{json,md}")
    ap.add_argument("--runs", type=int, default=2, help="runs of each tree, alternating")
    ap.add_argument("--min-change", type=float, default=0.03)
    ap.add_argument("--label-before", default="", help="what the before tree is (a commit)")
    ap.add_argument("--label-after", default="", help="what the after tree is (a commit)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes under TRITON_INTERPRET=1 (plumbing only)")
    ap.add_argument("--worker", action="store_true", help="(internal) measure this process's tree, print JSON")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.cpu_smoke)))
        return 0
    if args.before is None or args.out is None:
        ap.error("--before and --out are required")
    from jaggedperf.lab import harness

    raw = args.out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if args.cpu_smoke:
        env["TRITON_INTERPRET"] = "1"
    runs: dict[str, list] = {t: [] for t in TREES}
    for i in range(args.runs):
        for tree in TREES if i % 2 == 0 else TREES[::-1]:
            root = (args.before if tree == "before" else args.after).resolve()
            cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"] + (["--cpu-smoke"] if args.cpu_smoke
                                                                                 else [])
            done = subprocess.run(cmd, env=dict(env, PYTHONPATH=str(root / "src")), capture_output=True, text=True)
            (raw / f"{tree}-{i}.log").write_text(done.stderr)
            if done.returncode != 0:
                raise RuntimeError(f"the {tree} tree's run {i} exited {done.returncode}: {done.stderr[-2000:]}")
            (raw / f"{tree}-{i}.json").write_text(done.stdout)
            runs[tree].append(json.loads(done.stdout))
            print(f"{tree} run {i} done", file=sys.stderr, flush=True)
    rows = summarize(runs, args.min_change)
    before = args.label_before or str(args.before)
    after = args.label_after or str(args.after)
    data = {"meta": harness.meta(argv), "before": before, "after": after, "runs": args.runs, "rows": rows}
    for path in harness.write_summary(args.out, "merge-kernels-ab", data, render(rows, before, after,
                                                                                 args.min_change)):
        print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
