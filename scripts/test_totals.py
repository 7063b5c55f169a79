"""The closing line of scripts/test.sh's two-pass run: the whole run's totals from each pass's pytest summary line.

Usage: python scripts/test_totals.py SUMMARIES_FILE SECONDS. SUMMARIES_FILE holds each pass's last lines: its
summary line (``== 1981 passed, 126 skipped, 2239 deselected in 41.24s ==``) and what pytest printed just before it;
"deselected" is left out (each pass deselects the other's tests), the other counts are added. A pass that pytest
stopped before its end (a session timeout, an interrupt, ``-x``) printed why just above its summary: the closing line
says so, since its counts then leave out the tests never run.
"""

from __future__ import annotations

import re
import sys

ORDER = ("failed", "passed", "skipped", "xfailed", "xpassed", "errors", "warnings")
ALIASES = {"error": "errors", "warning": "warnings"}
# a pass's summary line: counts (or "no tests ran"), then its time, "in 41.24s" (maybe "(0:00:41)"), inside "="
SUMMARY = re.compile(r"^[= ]*(\d+ [a-z]+|no tests ran)\b.* in \d+(\.\d+)?s\b")
# what pytest prints above the summary of a session it stopped early, between rows of "!"
STOPPED = re.compile(r"session-timeout|Interrupted|stopping after|KeyboardInterrupt|Timeout")


def summaries(lines: list[str]) -> list[str]:
    """The passes' summary lines among ``lines``."""
    return [line for line in lines if SUMMARY.search(line)]


def stops(lines: list[str]) -> list[str]:
    """Why pytest stopped a pass early, one entry a stop (its row of "!" stripped)."""
    return [line.strip("! ") for line in lines if not SUMMARY.search(line) and STOPPED.search(line)]


def totals(lines: list[str]) -> dict[str, int]:
    """The counts of every summary line in ``lines``, added up (deselected left out)."""
    out: dict[str, int] = {}
    for line in summaries(lines):
        for count, word in re.findall(r"(\d+) ([a-z]+)", line):
            word = ALIASES.get(word, word)
            if word in ORDER:
                out[word] = out.get(word, 0) + int(count)
    return out


def closing_line(lines: list[str], seconds: int) -> str:
    counts = totals(lines)
    parts = [f"{counts[w]} {w}" for w in ORDER if counts.get(w)]
    minutes, secs = divmod(seconds, 60)
    line = (f"whole run ({len(summaries(lines))} passes): {', '.join(parts) or 'no tests'} in {minutes} min {secs} s")
    stopped = stops(lines)
    if stopped:
        line += f"; NOT ALL RUN, stopped early: {'; '.join(stopped)}"
    return line


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        summary = [line.strip() for line in f if line.strip()]
    print(closing_line(summary, int(sys.argv[2])))
