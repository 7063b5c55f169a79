#!/usr/bin/env python3
"""The bars' GPU tests (tests/gpu/test_bars_gpu.py) from their junit XML to JSON and a Markdown table.

Each test records what it measured as junit properties (``record_property``), so the XML of one
``pytest -m bars --junitxml bars.xml`` run holds every number; this script only reshapes it.

Run:  python3 benchmarks/bars_report.py bars.xml --json bars.json > bars.md   (also takes a whole -m gpu run's XML)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET

from test_run_report import outcome_of  # benchmarks/ is this script's sys.path[0]

TITLES = {
    "test_bar1_forward_within_10_percent_of_the_floor": "1. forward ≤ 1.10× floor",
    "test_bar2_seed_shapes_within_3_us_of_the_floor": "2. seed shapes ≤ floor + 3 µs",
    "test_bar3_seed_shapes_wall_below_segment_reduce_and_sum_padded": "3. wall ≤ 0.6× segment_reduce, ≤ 0.2× sum_padded",
    "test_bar4_compiled_never_slower_than_eager": "4. compiled never slower than eager",
    "test_bar5_bf16_within_60_percent_of_fp32": "5a. bf16 ≤ 0.6× fp32",
    "test_bar5_backward_within_20_percent_of_its_floor": "5b. backward ≤ 1.2× its floor",
    # issue #15 (tests/gpu/test_compile_bars_gpu.py)
    "test_boundary_compiled_faster_than_eager_and_host_near_plain": "15.1 boundary faster than eager, host ≤ 1.15× plain",
    "test_boundary_compiled_faster_than_eager": "15.1a boundary faster than eager",
    "test_boundary_host_within_15_percent_of_plain_compiled": "15.1b boundary host ≤ 1.15× plain compiled",
    "test_our_njt_through_the_boundary_near_our_plain_compiled_and_one_kernel":
        "15.2 jaggedperf_njt through the boundary ≤ 1.2× jaggedperf compiled, one kernel",
    "test_our_op_under_reduce_overhead_replays_graphs_without_skips": "15.3a reduce-overhead: no skip, graphs replayed",
    "test_our_op_under_reduce_overhead_within_10_percent_of_graph_mode": "15.3b reduce-overhead ≤ 1.1× graph mode",
    "test_model_block_compiled_at_least_1_3x_faster_than_eager": "15.4 model block compiled ≥ 1.3× eager",
    "test_no_recompile_over_20_calls_of_varying_batches": "15.6 no recompile over 20 varying calls",
}


def read(path: str) -> dict:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    rows = []
    for case in suite.iter("testcase"):
        if case.get("name") is None:  # a run cut by its time limit leaves its last test unnamed
            continue
        name, _, param = case.get("name").partition("[")
        if name not in TITLES:  # a whole `pytest -m gpu` run's XML holds the other GPU tests too
            continue
        outcome, _ = outcome_of(case)
        rows.append({"test": name, "case": param.rstrip("]"), "outcome": outcome,
                     "numbers": {p.get("name"): _value(p.get("value")) for p in case.iter("property")}})
    suite_props = suite.find("properties")
    meta = {p.get("name"): p.get("value") for p in suite_props.iter("property")} if suite_props is not None else {}
    return {"meta": meta, "time_s": float(suite.get("time", 0)), "rows": rows}


def _value(text: str):
    # measured numbers are floats; a few properties are words (e.g. the native launch path's status)
    try:
        return float(text)
    except ValueError:
        return text


def _numbers(numbers: dict) -> str:
    if set(numbers) == {"device_us", "floor_us", "ratio"}:
        return f"{numbers['device_us']:.2f} µs, floor {numbers['floor_us']:.2f} µs: **{numbers['ratio']:.2f}×**"
    if set(numbers) == {"fp32_us", "bf16_us", "ratio"}:
        return f"bf16 {numbers['bf16_us']:.1f} µs, fp32 {numbers['fp32_us']:.1f} µs: **{numbers['ratio']:.2f}×**"
    by_case: dict = {}
    for key, value in numbers.items():  # "<case> <implementation or mode> wall_us"
        match = re.fullmatch(r"(\S+) (\S+) wall_us", key)
        if match:
            by_case.setdefault(match.group(1), []).append(f"{match.group(2)} {value:.1f}")
    words = [f"{key.replace('_', ' ')}: {value}" for key, value in numbers.items() if isinstance(value, str)]
    return "<br>".join([*(f"{case}: {', '.join(parts)} µs" for case, parts in by_case.items()), *words])


def markdown(report: dict) -> str:
    lines = [f"copy bandwidth {float(report['meta'].get('copy_gbps', 'nan')):.0f} GB/s; {len(report['rows'])} bar tests", "", "| bar | case | outcome | measured |", "|---|---|---|---|"]
    for row in report["rows"]:
        lines.append(f"| {TITLES.get(row['test'], row['test'])} | {row['case'] or 'seed / all shapes'} | "
                     f"{row['outcome']} | {_numbers(row['numbers'])} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("xml")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    report = read(args.xml)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    sys.stdout.write(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
