"""The README's generated blocks: the headline table, the repro table, the doctor's verdicts and the speedup figure,
all from committed GPU results, written into the README between its marker comments (``<!-- NAME:begin -->`` …
``<!-- NAME:end -->``).

Every figure a table shows is a ``Shown`` cell, and each is marked where it cannot be taken at its word: ``†`` where its
run recorded it unstable, or recorded no stability at all (older files; the headline's are judged again from their
samples by ``lab.measure.stats``), ``‡`` where another README table shows the same cell (implementation, mode, case) and the
two disagree beyond their spreads (``agree``: different runs on a shared host). ``tests/test_readme.py`` checks that no
unmarked figure is unstable or disagrees. One GPU session running REGENERATE gives tables that can drop the marks.

    python benchmarks/readme_figures.py           # rewrite README.md, draw the figure (this module's functions)
    python benchmarks/readme_figures.py --check   # exit 1 when README.md differs from what the results give

Every function that reads a results file takes the checkout's ``root`` (the files' paths are relative to it).
``tests/test_readme.py`` runs ``--check``, so the README cannot drift from the committed results or from the
code that renders them. The blocks hold only numbers read from the results files and the words today's code
gives them (the doctor's verdicts are diagnosed again from its recorded evidence: ``doctor --from``); the figure is
drawn by the lab's plot code (its PNG bytes depend on matplotlib's version, so only its presence is checked).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jaggedperf.lab.measure import stats
from jaggedperf.lab.budget import cut_after_s
from jaggedperf.lab.doctor import saved, verdicts
from jaggedperf.lab.modes import EAGER, SEED_COMPILED_MODE, boundary_twin
from jaggedperf.lab.result import OK, TIMED, Result, RunRecord
from jaggedperf.lab.results.store import load_results
from jaggedperf.lab.results.views import impl_rank

H200, H100 = Path("benchmarks/results/h200"), Path("benchmarks/results/h100")
# `jaggedperf repro` runs; a cell in several keeps the last file's result: unbind_mean alone (its compile takes 44-82 s
# at the first shape and passes 120 s at the second: a call of its own), then one run of five implementations in the
# main job's three modes (the headline's and the repro table's shared cells are then one measurement each: they cannot
# disagree). The last file names the machine; a row measured only on another one says which (``repro_block``).
SEED_TABLES = (H100 / "seed-table-unbind-mean.json.gz", H100 / "seed-table.json.gz")
DOCTOR = H100 / "doctor-seed.json.gz"  # `jaggedperf doctor --json` at the seed shapes
HEADLINE = H100 / "boundary-seed.json"  # benchmarks/boundary_bench.py's --out: the headline's plain-twin column
HEADLINE_IMPLS = ("nanmean_padded", "sum_padded", "njt_mean", "jaggedperf_njt")  # the NJT implementations
FIGURE = H100 / "figures" / "seed-speedup.png"
BOUNDARY_MODE = boundary_twin(SEED_COMPILED_MODE)
PLAIN_TWIN = "plain twin"  # the headline's fourth column: the same computation compiled on (values, offsets)
# The commands whose outputs, run in one GPU session, replace the last seed table, DOCTOR and HEADLINE (then commit
# them under benchmarks/results/<machine>, point the paths above at them and run this script).
REGENERATE = ("jaggedperf repro --impls unbind_mean --timeout 120 --json seed-table-unbind-mean.json; "
              "jaggedperf repro --impls nanmean_padded sum_padded njt_mean jaggedperf jaggedperf_njt --timeout 150 "
              "--json seed-table.json; jaggedperf doctor --json doctor-seed.json (the seed's three implementations; "
              "gzip all three); python3 benchmarks/boundary_bench.py --out DIR --impls "
              "nanmean_padded,sum_padded,njt_mean,jaggedperf_njt (DIR/boundary_bench.json as boundary-seed.json)")
UNSTABLE_MARK, DISAGREES_MARK = "†", "‡"


@dataclass(frozen=True)
class Shown:
    """One figure a README table shows: which table, which cell, its wall median and p20–p80 in ms (None: not
    recorded) and whether its run judged it stable (None: not recorded)."""

    table: str
    implementation: str
    mode: str
    case: str
    median_ms: float
    p20_ms: float | None
    p80_ms: float | None
    stable: bool | None

    @property
    def key(self) -> tuple:
        return (self.implementation, self.mode, self.case)


def agree(a: Shown, b: Shown) -> bool:
    """Whether two figures of one cell (two runs) agree: not ``stats.moved`` by the lab's one rule for two runs, their
    medians apart by more than ``stats.MIN_CHANGE`` *and* their p20–p80 ranges disjoint (a figure without quantiles is
    its median alone; two runs minutes apart drift by more than a device-bound cell's 1% spread, as the before/after
    rows do); with neither spread recorded, medians within stats.MAX_IQR_REL of each other."""
    if a.p20_ms is None and b.p20_ms is None:
        return abs(a.median_ms - b.median_ms) <= stats.MAX_IQR_REL * max(a.median_ms, b.median_ms)
    span_a = (a.p20_ms, a.p80_ms) if a.p20_ms is not None else (a.median_ms, a.median_ms)
    span_b = (b.p20_ms, b.p80_ms) if b.p20_ms is not None else (b.median_ms, b.median_ms)
    return not stats.moved(a.median_ms, b.median_ms, span_a, span_b, stats.MIN_CHANGE)


def disagreeing(cells: list[Shown]) -> set[Shown]:
    """The figures that disagree with a figure of the same cell in another table."""
    out = set()
    for a in cells:
        for b in cells:
            if a.key == b.key and a.table != b.table and not agree(a, b):
                out.add(a)
    return out


def marks(cell: Shown, disagree: set[Shown]) -> str:
    return (UNSTABLE_MARK if cell.stable is not True else "") + (DISAGREES_MARK if cell in disagree else "")


def footnote(cells: list[Shown], disagree: set[Shown]) -> str:
    """The legend of the marks ``cells`` carry (the headline's: the README's first table; the others use the same)."""
    used = "".join(marks(c, disagree) for c in cells)
    notes = []
    if UNSTABLE_MARK in used:
        notes.append(f"{UNSTABLE_MARK}: unstable in its run (spread or drift past {stats.MAX_IQR_REL:.0%}), or its "
                     "run recorded no stability")
    if DISAGREES_MARK in used:
        notes.append(f"{DISAGREES_MARK}: another table here shows the same cell more than {stats.MIN_CHANGE:.0%} away "
                     "and outside this one's spread (another run)")
    return ("In every table here, " + "; ".join(notes) + ". Not a finding until measured again." if notes else "")


def shown_of(table: str, r: Result, mode: str | None = None) -> Shown | None:
    """A lab result as a figure of ``table`` (None when it carries no timing)."""
    if r is None or r.status not in TIMED or r.wall is None:
        return None
    stable = None if r.stability is None else (r.status == OK and r.stability.stable)
    return Shown(table, r.implementation, mode or r.mode, r.case.label, r.wall.median_ms, r.wall.p20_ms,
                 r.wall.p80_ms, stable)


def headline_cells(root: Path, record: RunRecord) -> list[Shown]:
    """The headline's figures: eager, torch.compile and jaggedperf.compile of ``HEADLINE_IMPLS`` from the seed record
    (the repro table's own results where they share a cell), and the plain twin from ``HEADLINE``, judged stable or
    not from its samples by today's ``lab.measure.stats``."""
    cells = [c for r in record.results if r.implementation in HEADLINE_IMPLS
             and r.mode in (EAGER, SEED_COMPILED_MODE, BOUNDARY_MODE) and (c := shown_of("headline", r))]
    for r in json.loads((root / HEADLINE).read_text())["results"]:
        w = r.get("wall")
        if r["variant"] != PLAIN_TWIN or not r.get("ok") or not w:
            continue
        samples = stats.decode(w["samples_ms"]) if isinstance(w.get("samples_ms"), str) else w.get("samples_ms")
        stable = stats.stability(samples, stats.Policy(), to_us=1e3).stable if samples is not None else None
        cells.append(Shown("headline", r["implementation"], PLAIN_TWIN, r["case"], w["median_ms"], w.get("p20_ms"),
                           w.get("p80_ms"), stable))
    return cells


def repro_cells(record: RunRecord) -> list[Shown]:
    return [c for r in record.results if r.mode in (EAGER, SEED_COMPILED_MODE) and (c := shown_of("repro", r))]


def doctor_cells(root: Path, path: Path) -> list[Shown]:
    """The doctor's eager and compiled figures (not its plain twin's, graph's or other modes')."""
    from jaggedperf.lab.api import load

    results = load(root / path).record.results
    return [c for r in results if r.mode in (EAGER, SEED_COMPILED_MODE) and "input_form" not in r.extra
            and (c := shown_of("doctor", r))]


def headline_block(record: RunRecord, every: list[Shown], disagree: set[Shown]) -> str:
    """Per case and implementation: eager, torch.compile and jaggedperf.compile in the seed's mode (speedup vs eager,
    bold where the boundary wins), and the plain twin compiled; ms. Its legend covers the marks of ``every`` table."""
    cells = [c for c in every if c.table == "headline"]
    index = {c.key: c for c in cells}
    cases = list(dict.fromkeys(c.case for c in cells if c.mode != PLAIN_TWIN))
    impls = [i for i in HEADLINE_IMPLS if any(c.implementation == i for c in cells)]
    lines = ["| case | implementation | eager | `torch.compile` | `jaggedperf.compile` | plain twin compiled |",
             "|---|---|---:|---:|---:|---:|"]
    for case in cases:
        for impl in impls:
            eager = index.get((impl, EAGER, case))
            row = [case, impl, _fig(eager, disagree)]
            for mode in (SEED_COMPILED_MODE, BOUNDARY_MODE, PLAIN_TWIN):
                cell = index.get((impl, mode, case))
                text = _fig(cell, disagree)
                if cell and eager and mode != PLAIN_TWIN:
                    speedup = eager.median_ms / cell.median_ms
                    text += f" (**{speedup:.2f}×**)" if mode == BOUNDARY_MODE and speedup > 1 else f" ({speedup:.2f}×)"
                row.append(text)
            lines.append(f"| {' | '.join(row)} |")
    env = record.environment
    return "\n".join([
        f"Wall per call in ms, median of the timed calls with a sync after each (the issue's method); mode "
        f"`{SEED_COMPILED_MODE}`, speedups against eager. `jaggedperf repro` on the {env.get('gpu')}, torch "
        f"{env.get('torch')}, one run (`{SEED_TABLES[-1]}`); the plain twin from another run (`{HEADLINE}`, "
        "`benchmarks/boundary_bench.py`).", "", *lines, "", footnote(every, disagree)]).rstrip()


def _fig(cell: Shown | None, disagree: set[Shown]) -> str:
    return "—" if cell is None else f"{cell.median_ms:.3f}{marks(cell, disagree)}"


def _cut(r: Result | None) -> str | None:
    """A cell cut by its time budget (compile included) as the table shows it, e.g. ``cut > 240 s``; else None."""
    cut = cut_after_s(r) if r is not None else None
    return f"cut > {cut:g} s" if cut is not None else None


def seed_record(root: Path) -> RunRecord:
    """The seed-table files as one record with the last file's environment; a cell measured in several keeps the later
    file's result."""
    records = [load_results(root / path) for path in SEED_TABLES]
    cells = {}
    for record in records:
        for r in record.results:
            cells[(r.op, r.implementation, r.mode, r.case)] = r
    return RunRecord(records[-1].environment, list(cells.values()), records[-1].copy_gbps)


def seed_machines(root: Path) -> dict[str, str]:
    """Per implementation in the seed tables, the GPU of the last file that measured it."""
    machines = {}
    for path in SEED_TABLES:
        record = load_results(root / path)
        for r in record.results:
            machines[r.implementation] = str(record.environment.get("gpu"))
    return machines


def repro_block(record: RunRecord, disagree: set[Shown], machines: dict[str, str] | None = None) -> str:
    """One row per implementation, per seed shape: eager ms and the seed's compiled mode in ms (speedup vs eager); a row
    whose ``machines`` entry is not the record's GPU names its own."""
    cases = list(dict.fromkeys(r.case for r in record.results))
    index = {(r.implementation, r.mode, r.case): r for r in record.results}
    impls = sorted({r.implementation for r in record.results}, key=impl_rank)
    header = ["implementation"] + [f"{c.label}: {what}" for c in cases for what in ("eager", "compiled")]
    lines = [f"| {' | '.join(header)} |", "|---|" + "---:|" * (len(header) - 1)]
    for impl in impls:
        cells = []
        for case in cases:
            eager, compiled = index.get((impl, EAGER, case)), index.get((impl, SEED_COMPILED_MODE, case))
            cells.append(_fig(shown_of("repro", eager), disagree) if eager is not None else "—")
            speedup = f" ({compiled.speedup_vs_eager:.2f}×)" if _ok(compiled) and compiled.speedup_vs_eager else ""
            cells.append(_cut(compiled) or (_fig(shown_of("repro", compiled), disagree) if compiled is not None
                                             else "—") + speedup)
        other = (machines or {}).get(impl, record.environment.get("gpu"))
        label = impl if other == record.environment.get("gpu") else f"{impl} (on the {other})"
        lines.append(f"| {label} | {' | '.join(cells)} |")
    env = record.environment
    return "\n".join([
        f"`jaggedperf repro` on the {env.get('gpu')} (torch {env.get('torch')}): wall per call in ms, eager vs "
        f"`{SEED_COMPILED_MODE}` (speedup vs eager; below 1× is the seed's finding). Files: "
        f"{', '.join(f'`{p}`' for p in SEED_TABLES)}, the later one's where they share a cell (`cut > N s`: the cell "
        "passed its budget of N s, compile included, and was stopped; — : not measured).",
        "",
        *lines,
    ])


def doctor_block(root: Path, path: Path, disagree: set[Shown]) -> str:
    """The doctor's verdict per implementation at the first seed shape: the evidence it recorded, diagnosed again
    by today's ``verdicts`` (so that a change to the verdicts' words shows here); an implementation whose eager or
    compiled figure is marked carries the marks."""
    record = verdicts.diagnose_run(saved.load_evidence(root / path))
    first = record.diagnoses[0].case_label
    figures = {}
    for c in doctor_cells(root, path):
        figures[c.implementation] = figures.get(c.implementation, "") + marks(c, disagree)
    lines = [f"`jaggedperf doctor` at {first} (`{path}`), compiled − eager split into measured parts; its verdicts:"]
    lines += [f"- `{d.implementation}`{''.join(sorted(set(figures.get(d.implementation, ''))))}: {d.verdict}"
              for d in record.diagnoses if d.case_label == first]
    return "\n".join(lines)


def figure_block() -> str:
    return f"![eager vs {SEED_COMPILED_MODE} per implementation at the seed shapes]({FIGURE})"


def draw_figure(record: RunRecord, to: Path) -> None:
    """The speedup figure of the seed's compiled mode, drawn by the lab's plot code, copied to ``to``."""
    from jaggedperf.lab.results import plot

    with tempfile.TemporaryDirectory() as tmp:
        (figure,) = [f for f in plot.speedup_heatmaps(record, tmp) if f.name.startswith("speedup_")
                     and f.name.endswith("_" + SEED_COMPILED_MODE.replace(":", "-"))]
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


def shown(root: Path, record: RunRecord) -> list[Shown]:
    """Every figure the README's tables show."""
    return headline_cells(root, record) + repro_cells(record) + doctor_cells(root, DOCTOR)


def blocks(root: Path, record: RunRecord) -> dict[str, str]:
    """The README's blocks by marker name."""
    cells = shown(root, record)
    disagree = disagreeing(cells)
    return {"headline": headline_block(record, cells, disagree),
            "repro": repro_block(record, disagree, seed_machines(root)) + "\n\n" + figure_block(),
            "doctor": doctor_block(root, DOCTOR, disagree)}


def _ok(r) -> bool:
    return r is not None and r.status == OK and r.wall is not None
