"""The CLI's tables with the boundary (jagged-compile:) beside the seed's compiled mode, and the result views
that key on mode names handling that family."""

import pytest
from rich.console import Console

from jaggedperf.lab.result import RunRecord
from jaggedperf.lab.results import tables
from jaggedperf.lab.results.figures import heatmap_data
from jaggedperf.lab.results.markdown import render_report
from jaggedperf.lab.results.views import mode_rank
from helpers.fake_results import ALL_MODES, make_record

SEED = "compile:max-autotune-no-cudagraphs"
BOUNDARY = "jagged-compile:max-autotune-no-cudagraphs"


@pytest.fixture(scope="module")
def record() -> RunRecord:
    """The bf16 shape of the fake record, eager and both families of the seed's mode."""
    full = make_record(modes=ALL_MODES)
    keep = [r for r in full.results if r.case.dtype == "bfloat16" and r.mode in ("eager", SEED, BOUNDARY)]
    return RunRecord(full.environment, keep, full.copy_gbps)


def render(table) -> str:
    console = Console(width=400, record=True)
    console.print(table)
    return console.export_text()


def test_seed_table_puts_the_boundary_wall_and_speedup_beside_the_seeds(record):
    rows = tables.seed_rows(record.results, SEED, BOUNDARY)
    row = next(r for r in rows if r["implementation"] == "sum_padded")
    assert row["boundary"].mode == BOUNDARY and row["boundary_speedup"] == row["boundary"].speedup_vs_eager
    text = render(tables.seed_table(record.results, SEED, boundary_mode=BOUNDARY))
    header = next(line for line in text.splitlines() if "implementation" in line)
    assert header.index("speedup") < header.index("jagged-compile µs") < header.index("jagged-compile speedup")
    assert f"{row['boundary'].wall.median_ms * 1e3:.1f}" in text and f"{row['boundary_speedup']:.2f}×" in text
    assert "jagged-compile" not in render(tables.seed_table(record.results, SEED))  # only when asked


def test_findings_say_what_the_boundary_measured_where_the_seeds_mode_is_slower(record):
    lines = tables.findings(record.results, SEED, BOUNDARY)
    assert lines and all("slower than eager" in line and f"; {BOUNDARY}: " in line for line in lines)
    assert all(BOUNDARY not in line for line in tables.findings(record.results, SEED))


def test_report_and_heatmaps_key_on_jagged_compile_modes_in_the_labs_order(record):
    assert mode_rank(SEED) < mode_rank(BOUNDARY) < mode_rank("graph")
    report = render_report(record, {})
    assert f"\n### {BOUNDARY}\n" in report and f"| {BOUNDARY} |" in report
    maps = [h for h in heatmap_data(record) if h.kind == "speedup"]
    assert [h.mode for h in maps] == [SEED, BOUNDARY]
    assert len({h.name for h in maps}) == 2


def test_unstable_cells_show_their_figures_but_never_a_finding(record):
    from dataclasses import replace

    from jaggedperf.lab.result import UNSTABLE

    slow = next(r for r in record.results if r.mode == SEED and r.speedup_vs_eager < 1)
    shaky = [replace(r, status=UNSTABLE, reason="wall IQR is 85% of the median (> 10%); after 3 attempts")
             if r.key == slow.key else r for r in record.results]
    assert any(slow.implementation in line for line in tables.findings(record.results, SEED))
    assert not any(line.startswith(f"{slow.implementation} at {slow.case.label}")
                   for line in tables.findings(shaky, SEED))
    text = render(tables.cells_table(shaky))
    line = next(x for x in text.splitlines() if slow.implementation in x and SEED in x and slow.case.label in x)
    us = tables._us
    assert us(slow.wall.median_ms * 1e3) in line and "unstable" in line and "±" not in text
    assert f"{us(slow.wall.p20_ms * 1e3)}–{us(slow.wall.p80_ms * 1e3)}" in line
    assert any("unstable: " in p and "85%" in p for p in tables.problems(shaky))
