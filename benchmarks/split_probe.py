#!/usr/bin/env python3
"""Softmax's forward at few long sequences (fewer (sequence, column block) programs than SMs): the split over parts
(``ops.softmax.plan.plan_softmax_parts``) at several part counts against the one-program kernel with each of its
looping first passes (per element, per column), side by side in one process (issue 20); and at one shape whose
programs fill the GPU, the one-program kernel's two passes.

Why: at 8 × 4000 × 4096 fp32 the one-program kernel is 128 programs of 4000 rows, one an SM; per element it took 490
µs (run 61) against Inductor's padded program at 454, per column 643 (run 58). The split reads and writes the same
bytes as the one-program kernel (x twice, y once) over 4-16× the programs, its stats pass per column or per element
(benchmarks/NOTES.md, session 14: in bf16, run 62, the per-column passes were 2× slower than per element).
Each plan's output is checked against float64 (``spec.reference``) before it is timed.

Run:  PYTHONPATH=src python3 benchmarks/split_probe.py --out $OUT/split_probe.json        (~2 minutes on an H200)
Writes the JSON (every plan's median/p20/p80) and prints one Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from family_bench import DEVICE, device_time  # noqa: E402

from jaggedperf.impls.registry import get_op  # noqa: E402
from jaggedperf.inputs import Case  # noqa: E402
from jaggedperf.lab import timing  # noqa: E402
from jaggedperf.lab.correctness import check_output  # noqa: E402
from jaggedperf.ops import testing  # noqa: E402

# few long sequences: 128, 128 and 64 one-program programs on the H200's 132 SMs; then the family bars' 1024 × 256
# shape, whose 1024 programs fill the GPU: there the plan takes the one-program kernel per column, and bf16's per-column
# pass was 2-2.6× slower than per element at the few-program shapes (run 63): the routing question for it
CASES = [Case(8, 4096, 4000, 0.0, "fixed"), Case(8, 4096, 4000, 0.0, "fixed", dtype="bfloat16"),
         Case(32, 1024, 2000, 0.0, "fixed"), Case(32, 1024, 2000, 0.0, "fixed", dtype="bfloat16"),
         Case(64, 256, 8000, 0.5), Case(64, 256, 8000, 0.5, dtype="bfloat16"),
         Case(1024, 256, 1000, 0.5), Case(1024, 256, 1000, 0.5, dtype="bfloat16")]
PARTS = (4, 8, 16)


def plans(values, offsets, max_seqlen) -> dict:
    """name → a closure planning and launching that plan, returning its output."""
    def run(planner):
        def call():
            planned = planner()
            testing.run_direct(planned.launches)
            return planned.out
        return call

    named = {"production": lambda: testing.plan_softmax(values, offsets, max_seqlen=max_seqlen),
             "one-program per element": lambda: testing.plan_softmax(values, offsets, max_seqlen=max_seqlen,
                                                                     per_element=True),
             "one-program per column": lambda: testing.plan_softmax(values, offsets, max_seqlen=max_seqlen,
                                                                    per_element=False)}
    for per_element in (False, True):
        for parts in PARTS:
            named[f"split {parts}{' per element' if per_element else ''}"] = (
                lambda p=parts, e=per_element: testing.plan_softmax_parts(values, offsets, parts=p,
                                                                          max_seqlen=max_seqlen, per_element=e))
    return {name: run(planner) for name, planner in named.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file")
    args = parser.parse_args()
    copy_gbps = timing.copy_bandwidth_gbps(DEVICE)
    spec = get_op("jagged_softmax")
    rows, start = [], time.time()
    for case in CASES:
        batch = spec.make_batch(case, DEVICE)
        reference = spec.reference(batch)
        production = testing.plan_softmax(batch.values, batch.offsets, max_seqlen=batch.max_seqlen)
        row = {"case": case.label, "dtype": case.dtype, "copy_gbps": copy_gbps,
               "floor_us": spec.must_move_bytes(batch) / (copy_gbps * 1e3),
               "production": [list(step.key) + [list(step.grid)] for step in production.launches], "plans": {}}
        for name, fn in plans(batch.values, batch.offsets, batch.max_seqlen).items():
            ok, _, error = check_output(fn(), reference, case.dtype)
            row["plans"][name] = {"ok": ok, "error": error} | (device_time(fn) if ok else {})
        rows.append(row)
        Path(args.out).write_text(json.dumps({"rows": rows, "seconds": time.time() - start}, indent=1))
        del batch, reference
        torch.cuda.empty_cache()
    names = list(rows[0]["plans"])
    print("softmax forward, device µs: median [p20, p80] (L2 flushed)\n")
    print("| case | dtype | floor µs | " + " | ".join(names) + " |")
    print("|---|---|---:|" + "---:|" * len(names))
    for r in rows:
        cells = [f"{p['median_us']:.1f} [{p['p20_us']:.0f}, {p['p80_us']:.0f}]" if p["ok"] else "wrong"
                 for p in r["plans"].values()]
        print(f"| {r['case']} | {r['dtype']} | {r['floor_us']:.1f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
