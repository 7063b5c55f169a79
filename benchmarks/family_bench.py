#!/usr/bin/env python3
"""How fast are jagged_softmax and jagged_layer_norm against their floor and against torch? (the row-wise family)

Per op × shape × dtype, after a correctness check of every contender against float64 (a wrong one is
recorded, not timed):

- device time (µs, median with p20/p80, L2 flushed) by CUDA-graph replay where the call can be captured,
  else the sum of its kernels from torch.profiler (the column ``method`` says which);
- the floor: the op's must-move bytes (read values + offsets, write the output) / the copy bandwidth measured
  in the same run, and each contender's ratio to it;
- contenders: ours (max_seqlen known; unknown), every torch eager contender the lab registers (unbind, padded
  round trip, the NJT op), our Helion kernels (``helion``, where helion installs: ``impls/helion_contenders``;
  fixed configs unless $JAGGEDPERF_HELION_AUTOTUNE), and Inductor's compiled padded program (``torch.compile`` of
  the padded round trip on plain tensors, mode max-autotune-no-cudagraphs, dynamic=False);
- our backward against its floor (read y or x, and the gradient; write the values' gradient);
- with ``--ops jagged_mean,jagged_sum``: the reductions too (forward only: ours, torch's, helion's).

Shapes: the seed's (512, 64, 100, 0.1) and (512, 64, 500, 0.75) in fp32 and bf16, and three of >= 64 MB in
fp32 (many mid-length sequences, many short ones, a few very long ones: the looping passes).

Each row is ``jaggedperf.lab.family.row``, the measurement the family's bars judge (tests/gpu/test_family_bars_gpu.py).

Run:  PYTHONPATH=src python3 benchmarks/family_bench.py --out $OUT/family
Writes family_bench.json (every number, versions, errors, the command and commit) and family_bench.md (one table per
op) under --out (``jaggedperf.lab.harness.write_summary``).
Each cell records its own error and the run goes on; the files are rewritten after every cell. About 30-60 s a cell
on an H200 (Inductor's max-autotune compile of each shape): `--budget-s` starts no cell past it.
"""

from __future__ import annotations

import argparse
import traceback

import torch

import jaggedperf
from jaggedperf.impls.registry import get_op
from jaggedperf.lab import harness
from jaggedperf.lab.measure import timing
from jaggedperf.lab.family import DEVICE, OPS, cells, row


def markdown(results: dict) -> str:
    lines = [f"# jagged family on {results['meta'].get('gpu')}", "",
             f"copy bandwidth {results['copy_gbps']:.0f} GB/s; device µs (median, L2 flushed); ×floor = time / "
             "(must-move bytes / copy bandwidth)", ""]
    for op in results["ops"]:
        rows = [r for r in results["rows"] if r["op"] == op]
        if not rows:
            continue
        names = sorted({n for r in rows for n in r["contenders"]})
        lines += [f"## {op}", "", "| case | dtype | MB | floor µs | " + " | ".join(names) +
                  " | helion / ours | backward (×floor) |", "|---|---|---:|---:|" + "---:|" * len(names) + "---:|---:|"]
        for r in rows:
            cellsx = []
            for n in names:
                c = r["contenders"].get(n, {})
                cellsx.append(f"{c['median_us']:.1f} ({c['x_floor']:.2f}×)" if "median_us" in c else
                              f"{c['untimed_one_call_us'] / 1e3:.0f} ms (one call)" if "untimed_one_call_us" in c else
                              ("wrong" if c.get("ok") is False else "error" if "error" in c else "—"))
            b = r.get("backward")
            back = "—" if b is None else f"{b['median_us']:.1f} ({b['x_floor']:.2f}×)" if "median_us" in b else "error"
            ratio = f"{r['helion_over_ours']:.2f}" if "helion_over_ours" in r else "—"
            lines.append(f"| {r['case']} | {r['dtype']} | {r['values_mb']:.0f} | {r['floor_us']:.1f} | "
                         + " | ".join(cellsx) + f" | {ratio} | {back} |")
        lines.append("")
    if results["meta"].get("helion_unavailable"):
        lines += [f"helion not measured: {results['meta']['helion_unavailable']}", ""]
    if results.get("not_run"):
        lines += ["not run (past the budget): " + ", ".join(results["not_run"]), ""]
    if results["errors"]:
        lines += ["## errors", ""] + [f"- {k}: {v.splitlines()[0]}" for k, v in results["errors"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for family_bench.json and family_bench.md")
    parser.add_argument("--quick", action="store_true", help="the seed shapes only")
    parser.add_argument("--only", default=None, help="comma-separated case labels (as in the table) to run alone")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no new cell after this many seconds (the rest listed as not run)")
    parser.add_argument("--large-dtypes", default="float32",
                        help="comma-separated dtypes of the large shapes (float32,bfloat16; labels gain the dtype)")
    parser.add_argument("--ops", default=",".join(OPS),
                        help="comma-separated; jagged_softmax, jagged_layer_norm (default), jagged_mean, jagged_sum")
    args = parser.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    budget = harness.within(args.budget_s)
    results = {"meta": harness.meta(), "copy_gbps": timing.copy_bandwidth_gbps(DEVICE), "rows": [], "errors": {},
               "ops": ops}
    helion_reason = get_op(ops[0]).unavailable.get("helion")
    if helion_reason:
        results["meta"]["helion_unavailable"] = helion_reason
    else:
        from jaggedperf.impls.helion_contenders import load_helion
        try:
            results["meta"].update(load_helion(DEVICE))
        except Exception as exc:  # noqa: BLE001 - installed but not importable: its cells record it too
            results["meta"]["helion_unavailable"] = f"{type(exc).__name__}: {exc}"
    jaggedperf.ops.prepare_native_launch()
    # shape by shape across the ops (every op's seed cells before any large one), the files rewritten after each
    # cell: a run cut short by its budget or a signal keeps every finished cell
    only = set(args.only.split(",")) if args.only else None
    large_dtypes = tuple(args.large_dtypes.split(","))
    todo = [(op, case) for case in cells(large_dtypes) if not args.quick or (case.B, case.M) == (512, 64)
            if only is None or case.label in only for op in ops]
    results["not_run"] = []
    for op, case in todo:
        if not budget.left():
            results["not_run"].append(f"{op} {case.label} {case.dtype}")
            continue
        try:
            results["rows"].append(row(op, case, results["copy_gbps"]))
        except Exception:  # noqa: BLE001
            results["errors"][f"{op} {case.label} {case.dtype}"] = traceback.format_exc()
        torch.cuda.empty_cache()
        write(results, args.out, budget)
    write(results, args.out, budget)
    return 0


def write(results: dict, out: str, budget: harness.Budget) -> None:
    results["seconds"] = budget.elapsed()
    harness.write_summary(out, "family_bench", results, markdown(results))


if __name__ == "__main__":
    raise SystemExit(main())
