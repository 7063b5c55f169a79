"""The closing line of scripts/test.sh's two-pass run: the whole run's totals from each pass's pytest summary line.

Usage: python scripts/test_totals.py SUMMARIES_FILE SECONDS. Each line of SUMMARIES_FILE is a pass's last line
(``== 1981 passed, 126 skipped, 2239 deselected in 41.24s ==``); "deselected" is left out (each pass deselects the
other's tests), the other counts are added.
"""

from __future__ import annotations

import re
import sys

ORDER = ("failed", "passed", "skipped", "xfailed", "xpassed", "errors", "warnings")
ALIASES = {"error": "errors", "warning": "warnings"}


def totals(lines: list[str]) -> dict[str, int]:
    """The counts of every summary line in ``lines``, added up (deselected left out)."""
    out: dict[str, int] = {}
    for line in lines:
        for count, word in re.findall(r"(\d+) ([a-z]+)", line):
            word = ALIASES.get(word, word)
            if word in ORDER:
                out[word] = out.get(word, 0) + int(count)
    return out


def closing_line(lines: list[str], seconds: int) -> str:
    counts = totals(lines)
    parts = [f"{counts[w]} {w}" for w in ORDER if counts.get(w)]
    minutes, secs = divmod(seconds, 60)
    return (f"whole run ({len(lines)} passes): {', '.join(parts) or 'no tests'} in {minutes} min {secs} s")


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        summary = [line.strip() for line in f if line.strip()]
    print(closing_line(summary, int(sys.argv[2])))
