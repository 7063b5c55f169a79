"""A GPU test run read back from its junit XML: every test's outcome and the numbers the bars recorded.

``scripts/test.sh`` writes NAME.untimed.xml and NAME.timed.xml for ``--junitxml NAME.xml`` (its two passes): read
both. A pass cut by a time limit still ends with pytest's usual summary line, counting only what ran; given the
``pytest --co -q`` output of the same selection, ``not_run`` names every collected test with no result.

    python -m jaggedperf.lab.junit out/gpu.untimed.xml out/gpu.timed.xml --json tests.json \
        [--collected collected.txt] > tests.md        # exit 1: a failure, a strict xpass or a test without a result
    python -m jaggedperf.lab.junit out/gpu.timed.xml --bars --json bars.json > bars.md   # the bars' table

The bar tests record what they measured as junit properties (``record_property``), so one XML holds every number.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


@dataclass
class TestOutcome:
    file: str
    name: str  # with its parameters, as pytest names it
    outcome: str  # one of OUTCOMES
    message: str  # the first line of the failure, error or skip; "" when it passed
    time_s: float
    numbers: dict = field(default_factory=dict)  # what the test recorded (``record_property``): name -> float or word


def outcome_of(case: ET.Element) -> tuple[str, str]:
    """(outcome, first line of its message) of one junit <testcase>; xfail and strict xpass told apart."""
    for tag in ("failure", "error", "skipped"):
        node = case.find(tag)
        if node is None:
            continue
        message = (node.get("message") or node.text or "").strip()
        if tag == "skipped" and "xfail" in ((node.get("type") or "") + message).lower():
            return "xfailed", message.splitlines()[0] if message else ""
        if tag == "failure" and "XPASS(strict)" in message + (node.text or ""):
            return "xpassed", "XPASS(strict): the bar holds, its xfail mark must go"
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
        if (case.get("classname"), case.get("name")) == ("pytest", "internal"):  # pytest's own, not a test's
            cause = [line for line in (node.text or "").strip().splitlines() if line.strip()][-1:] or [message]
            return outcome, f"pytest's internal error (xdist's, after an interrupt, is the cut pass's): {cause[0]}"
        return outcome, message.splitlines()[0] if message else ""
    return "passed", ""


def read(paths: list[str]) -> tuple[list[TestOutcome], float]:
    """Every named test case of the XML files, and the files' summed run time in seconds."""
    tests, seconds = [], 0.0
    for path in paths:
        root = ET.parse(path).getroot()
        for suite in ([root] if root.tag == "testsuite" else root.findall("testsuite")):
            seconds += float(suite.get("time", 0))
            for case in suite.iter("testcase"):
                if case.get("name") is None:  # a run cut by its time limit leaves its last test unnamed
                    continue
                outcome, message = outcome_of(case)
                file = case.get("file") or case.get("classname") or ""  # xunit1 (pyproject's) names the file
                tests.append(TestOutcome(file, case.get("name"), outcome, message, float(case.get("time", 0)),
                                         recorded(case)))
    return tests, seconds


def collected_ids(paths: list[str]) -> list[str]:
    """The node ids (``file::name``) listed by ``pytest --co -q`` in these files, in order, without repeats."""
    ids: dict[str, None] = {}
    for path in paths:
        with open(path) as f:
            ids.update((line.strip(), None) for line in f if "::" in line and not line.startswith(" "))
    return list(ids)


def not_run(tests: list[TestOutcome], collected: list[str]) -> list[str]:
    """The collected node ids with no result in the XML (a cut run's tail, a crashed worker's tests)."""
    ran = {f"{t.file}::{t.name}" for t in tests}
    return [node for node in collected if node not in ran]


def markdown(tests: list[TestOutcome], seconds: float, missing: list[str] | None = None, collected: int = 0) -> str:
    """Outcomes per test file, every failure and strict xfail with its first line, the skip reasons counted."""
    by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for t in tests:
        by_file[t.file][t.outcome] += 1
    total = collections.Counter(t.outcome for t in tests)
    head = ", ".join(f"{total[o]} {o}" for o in OUTCOMES if total[o])
    lines = [f"{len(tests)} tests in {seconds:.0f} s of test time: {head}", ""]
    if missing:
        lines += [f"**Incomplete: {len(missing)} of the {collected} collected tests have no result** "
                  "(the pass was cut by its time limit, or a worker died):", ""]
        lines += [f"- `{node}`" for node in missing] + [""]
    lines += ["| test file | " + " | ".join(OUTCOMES) + " |", "|---|" + "---:|" * len(OUTCOMES)]
    for file in sorted(by_file):
        lines.append(f"| {file} | " + " | ".join(str(by_file[file][o] or "") for o in OUTCOMES) + " |")
    bad = [t for t in tests if t.outcome in ("failed", "error", "xpassed")]
    if bad:
        lines += ["", "Failures:", ""] + [f"- `{t.file}::{t.name}` ({t.outcome}): {t.message}" for t in bad]
    xfails = [t for t in tests if t.outcome == "xfailed"]
    if xfails:
        lines += ["", "Expected failures (xfails, each with its reason):", ""]
        lines += [f"- `{t.file}::{t.name}`: {t.message}" for t in xfails]
    skips = collections.Counter(t.message for t in tests if t.outcome == "skipped")
    if skips:
        lines += ["", "Skip reasons:", ""] + [f"- {n} × {reason}" for reason, n in skips.most_common()]
    return "\n".join(lines) + "\n"



# --- the bars' numbers --------------------------------------------------------------------------

TITLES = {
    "test_forward_within_10_percent_of_the_floor": "1. forward ≤ 1.10× floor",
    "test_seed_shapes_within_3_us_of_the_floor": "2. seed shapes ≤ floor + 3 µs",
    "test_seed_shapes_wall_below_segment_reduce_and_sum_padded":
        "3. wall ≤ 0.6× segment_reduce, ≤ 0.2× sum_padded",
    "test_compiled_never_slower_than_eager": "4. compiled never slower than eager",
    "test_bf16_within_60_percent_of_fp32": "5a. bf16 ≤ 0.6× fp32",
    "test_backward_within_20_percent_of_its_floor": "5b. backward ≤ 1.2× its floor",
    # the torch.compile bars (tests/gpu/test_compile_bars_gpu.py)
    "test_boundary_compiled_faster_than_eager": "c1a. boundary faster than eager",
    "test_boundary_host_within_15_percent_of_plain_compiled": "c1b. boundary host ≤ 1.15× plain compiled",
    "test_our_njt_through_the_boundary_near_our_plain_compiled_and_one_kernel":
        "c2. jaggedperf_njt through the boundary ≤ 1.2× jaggedperf compiled, one kernel",
    "test_our_op_under_reduce_overhead_replays_graphs_without_skips": "c3a. reduce-overhead: no skip, graphs replayed",
    "test_our_op_under_reduce_overhead_within_10_percent_of_graph_mode": "c3b. reduce-overhead ≤ 1.1× graph mode",
    "test_model_block_compiled_at_least_1_3x_faster_than_eager": "c4. model block compiled ≥ 1.3× eager",
    "test_no_recompile_over_20_calls_of_varying_batches": "c6. no recompile over 20 varying calls",
}


def bars(path: str) -> dict:
    """The bar tests of one junit XML (those ``TITLES`` names): outcome and every recorded number, per test."""
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
                     "numbers": recorded(case)})
    suite_props = suite.find("properties")
    meta = {p.get("name"): p.get("value") for p in suite_props.iter("property")} if suite_props is not None else {}
    return {"meta": meta, "time_s": float(suite.get("time", 0)), "rows": rows}


def recorded(case: ET.Element) -> dict:
    """What one junit <testcase> recorded (``record_property``): name -> float, or the word as written."""
    return {p.get("name"): _value(p.get("value")) for p in case.iter("property")}


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


def bars_markdown(report: dict) -> str:
    """One table row per bar test: its title, case, outcome and what it measured."""
    copy = float(report["meta"].get("copy_gbps", "nan"))
    lines = [f"copy bandwidth {copy:.0f} GB/s; {len(report['rows'])} bar tests", "",
             "| bar | case | outcome | measured |", "|---|---|---|---|"]
    for row in report["rows"]:
        lines.append(f"| {TITLES.get(row['test'], row['test'])} | {row['case'] or 'seed / all shapes'} | "
                     f"{row['outcome']} | {_numbers(row['numbers'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaggedperf.lab.junit", description=__doc__.splitlines()[0])
    parser.add_argument("xml", nargs="+")
    parser.add_argument("--json", help="also write the report as JSON here")
    parser.add_argument("--collected", nargs="*", default=[],
                        help="`pytest --co -q` outputs of the same selections: name the tests with no result")
    parser.add_argument("--bars", action="store_true", help="the bar tests' numbers, one table row per test")
    args = parser.parse_args(argv)
    if args.bars:
        report = bars(args.xml[0])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
        sys.stdout.write(bars_markdown(report))
        return 0
    tests, seconds = read(args.xml)
    collected = collected_ids(args.collected)
    missing = not_run(tests, collected)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"time_s": seconds, "tests": [asdict(t) for t in tests], "not_run": missing}, f, indent=1)
    sys.stdout.write(markdown(tests, seconds, missing, len(collected)))
    return 1 if missing or any(t.outcome in ("failed", "error", "xpassed") for t in tests) else 0


if __name__ == "__main__":
    sys.exit(main())
