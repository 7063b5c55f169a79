#!/usr/bin/env python3
"""A whole test run (``bash scripts/test.sh --junitxml run.xml`` or ``pytest -m gpu --junitxml``) from its
junit XML files to JSON and a Markdown summary: outcomes per test file, every failure with its first line,
the skip reasons counted. scripts/test.sh's two passes write NAME.untimed.xml and NAME.timed.xml: pass both.

A pass cut by its time limit (``timeout -s INT``) still ends with pytest's usual summary line, counting only what
ran: it reads like a complete run. With ``--collected`` (the ``pytest --co -q`` output of the same selection) the
report names every collected test that has no result, and the run counts as incomplete (exit status 1).

Run:  python3 benchmarks/test_run_report.py run.untimed.xml run.timed.xml --json tests.json \
          [--collected collected.untimed.txt collected.timed.txt] > tests.md
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


@dataclass
class TestOutcome:
    file: str
    name: str  # with its parameters, as pytest names it
    outcome: str  # one of OUTCOMES
    message: str  # the first line of the failure, error or skip; "" when it passed
    time_s: float


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
                tests.append(TestOutcome(file, case.get("name"), outcome, message, float(case.get("time", 0))))
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
        lines += ["", "Expected failures (strict xfails naming a measured limit):", ""]
        lines += [f"- `{t.file}::{t.name}`: {t.message}" for t in xfails]
    skips = collections.Counter(t.message for t in tests if t.outcome == "skipped")
    if skips:
        lines += ["", "Skip reasons:", ""] + [f"- {n} × {reason}" for reason, n in skips.most_common()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xml", nargs="+")
    parser.add_argument("--json", help="also write every test's outcome as JSON here")
    parser.add_argument("--collected", nargs="*", default=[],
                        help="`pytest --co -q` outputs of the same selections: name the tests with no result")
    args = parser.parse_args()
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
