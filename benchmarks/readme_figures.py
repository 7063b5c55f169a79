"""Regenerate the README's tables and figure from committed H200 results (``jaggedperf.lab.results.readme``).

    python benchmarks/readme_figures.py           # rewrite README.md, draw the figure
    python benchmarks/readme_figures.py --check   # exit 1 when README.md differs from what the results give

The checkout is the one this script lies in (a scratch copy of the tree regenerates its own README).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from jaggedperf.lab.results import readme
from jaggedperf.lab.results.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when README.md would change")
    args = parser.parse_args(argv)
    record = readme.seed_record(ROOT)
    path = ROOT / "README.md"
    current = path.read_text()
    try:
        wanted = readme.render(current, readme.blocks(ROOT, record))
    except ValueError as error:  # a README without its generated blocks' markers
        print(f"readme_figures: {error}", file=sys.stderr)
        return 2
    if args.check:
        if wanted != current or not (ROOT / readme.FIGURE).is_file():
            diff = difflib.unified_diff(current.splitlines(), wanted.splitlines(), "README.md", "regenerated", lineterm="")
            print("\n".join(diff) or f"{readme.FIGURE} is missing", file=sys.stderr)
            print("README.md is not what the committed results give: run python benchmarks/readme_figures.py",
                  file=sys.stderr)
            return 1
        return 0
    readme.draw_figure(record, ROOT / readme.FIGURE)
    if wanted != current:
        write_text_atomic(path, wanted)
    print(f"README.md {'rewritten' if wanted != current else 'unchanged'}; figure {readme.FIGURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
