"""Regenerate the README's repro table, the doctor's verdicts and the speedup figure from committed H200
results, and rewrite the README between its marker comments (``<!-- NAME:begin -->`` … ``<!-- NAME:end -->``).

    python benchmarks/readme_figures.py           # rewrite README.md, draw the figure
    python benchmarks/readme_figures.py --check   # exit 1 when README.md differs from what the results give

``tests/test_readme.py`` runs ``--check``, so the README cannot drift from the committed results or from the
code that renders them. The blocks hold only numbers read from the results files and the words today's code
gives them (the doctor's verdicts are diagnosed again from its recorded evidence: ``doctor --from``); the figure is
drawn by the lab's plot code (its PNG bytes depend on matplotlib's version, so only its presence is checked).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import tempfile
from pathlib import Path

from jaggedperf.lab.doctor import saved, verdicts
from jaggedperf.lab.modes import EAGER, SEED_COMPILED_MODE
from jaggedperf.lab.result import OK, RunRecord
from jaggedperf.lab.results.atomic import write_text_atomic
from jaggedperf.lab.results.store import load_results
from jaggedperf.lab.results.views import impl_rank

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
H200 = Path("benchmarks/results/h200")
SEED_TABLES = (H200 / "seed-table-shape1.json", H200 / "seed-table-shape2.json")
DOCTOR = H200 / "doctor-seed.json.gz"  # `jaggedperf doctor --json` of run 3 (raw/run3.tar.xz), stage timings dropped
FIGURE = H200 / "figures" / "seed-speedup.png"


def seed_record() -> RunRecord:
    """The two seed-table files as one record; a cell measured in both keeps the later file's result."""
    records = [load_results(ROOT / path) for path in SEED_TABLES]
    cells = {}
    for record in records:
        for r in record.results:
            cells[(r.op, r.implementation, r.mode, r.case)] = r
    return RunRecord(records[0].environment, list(cells.values()), records[0].copy_gbps)


def repro_block(record: RunRecord) -> str:
    """One row per implementation, per seed shape: eager ms and the seed's compiled mode in ms (speedup vs eager)."""
    cases = list(dict.fromkeys(r.case for r in record.results))
    index = {(r.implementation, r.mode, r.case): r for r in record.results}
    impls = sorted({r.implementation for r in record.results}, key=impl_rank)
    header = ["implementation"] + [f"{c.label}: {what}" for c in cases for what in ("eager", "compiled")]
    lines = [f"| {' | '.join(header)} |", "|---|" + "---:|" * (len(header) - 1)]
    for impl in impls:
        cells = []
        for case in cases:
            eager, compiled = index.get((impl, EAGER, case)), index.get((impl, SEED_COMPILED_MODE, case))
            cells.append(_ms(eager))
            speedup = f" ({compiled.speedup_vs_eager:.2f}×)" if _ok(compiled) and compiled.speedup_vs_eager else ""
            cells.append(_ms(compiled) + speedup)
        lines.append(f"| {impl} | {' | '.join(cells)} |")
    env = record.environment
    return "\n".join([
        f"`jaggedperf repro` on the {env.get('gpu')} (torch {env.get('torch')}): wall per call in ms, eager vs "
        f"`{SEED_COMPILED_MODE}` (speedup vs eager; below 1× is the seed's finding). Files: `{SEED_TABLES[0]}`, "
        f"`{SEED_TABLES[1]}` (— : not measured, the compile was cut).",
        "",
        *lines,
    ])


def doctor_block(path: Path) -> str:
    """The doctor's verdict per implementation at the first seed shape: the evidence it recorded, diagnosed again
    by today's ``verdicts`` (so that a change to the verdicts' words shows here)."""
    record = verdicts.diagnose_run(saved.load_evidence(ROOT / path))
    first = record.diagnoses[0].case_label
    lines = [f"`jaggedperf doctor` at {first} (`{path}`), compiled − eager split into measured parts; its verdicts:"]
    lines += [f"- `{d.implementation}`: {d.verdict}" for d in record.diagnoses if d.case_label == first]
    return "\n".join(lines)


def figure_block() -> str:
    return f"![eager vs {SEED_COMPILED_MODE} per implementation at the seed shapes]({FIGURE})"


def draw_figure(record: RunRecord, to: Path) -> None:
    """The speedup figure of the seed's compiled mode, drawn by the lab's plot code, copied to ``to``."""
    from jaggedperf.lab.results import plot

    with tempfile.TemporaryDirectory() as tmp:
        (figure,) = [f for f in plot.speedup_heatmaps(record, tmp) if f.name.startswith("speedup_")
                     and SEED_COMPILED_MODE.replace(":", "-") in f.name]
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(figure.png, to)


def render(readme: str, blocks: dict[str, str]) -> str:
    """``readme`` with each block's text between its markers.

    Raises:
        ValueError: a block's markers are missing.
    """
    for name, text in blocks.items():
        pattern = re.compile(rf"(<!-- {name}:begin -->\n)(?:.*?\n)?(<!-- {name}:end -->)", re.S)
        if not pattern.search(readme):
            raise ValueError(f"README.md has no <!-- {name}:begin --> … <!-- {name}:end --> markers")
        readme = pattern.sub(lambda m: m.group(1) + text + "\n" + m.group(2), readme)
    return readme


def blocks(record: RunRecord) -> dict[str, str]:
    return {"repro": repro_block(record) + "\n\n" + figure_block(), "doctor": doctor_block(DOCTOR)}


def _ms(r) -> str:
    return f"{r.wall.median_ms:.3f}" if _ok(r) else "—"


def _ok(r) -> bool:
    return r is not None and r.status == OK and r.wall is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when README.md would change")
    args = parser.parse_args(argv)
    record = seed_record()
    current = README.read_text()
    wanted = render(current, blocks(record))
    if args.check:
        if wanted != current or not (ROOT / FIGURE).is_file():
            diff = difflib.unified_diff(current.splitlines(), wanted.splitlines(), "README.md", "regenerated", lineterm="")
            print("\n".join(diff) or f"{FIGURE} is missing", file=sys.stderr)
            print("README.md is not what the committed results give: run python benchmarks/readme_figures.py",
                  file=sys.stderr)
            return 1
        return 0
    draw_figure(record, ROOT / FIGURE)
    if wanted != current:
        write_text_atomic(README, wanted)
    print(f"README.md {'rewritten' if wanted != current else 'unchanged'}; figure {FIGURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
