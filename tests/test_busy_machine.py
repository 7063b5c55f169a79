"""A busy machine still gives an answer, and says how to get a clean one: a speedup with an unstable side is shown as
the ratio of the two walls, marked unstable and without colour, in the terminal's tables, the report and the heatmaps;
it never becomes a finding; and a run with unstable cells ends with one line on getting clean numbers."""

from dataclasses import replace

import pytest
from rich.console import Console

from helpers.fake_results import make_record
from jaggedperf.lab.result import UNSTABLE, RunRecord
from jaggedperf.lab.results import tables
from jaggedperf.lab.results.figures import heatmap_data
from jaggedperf.lab.results.markdown import render_report
from jaggedperf.lab.results.views import shape_of
from jaggedperf.lab.runner import attach_speedups

SEED = "compile:max-autotune-no-cudagraphs"


@pytest.fixture(scope="module")
def shaky():
    """The fake run with nanmean_padded's eager cell at the first case unstable (its compiled cells ok), speedups
    attached as a run attaches them (none where a side is unstable)."""
    record = make_record()
    first = record.results[0].case
    results = [replace(r, status=UNSTABLE, speedup_vs_eager=None)
               if (r.implementation, r.mode, r.case) == ("nanmean_padded", "eager", first)
               else replace(r, speedup_vs_eager=None) for r in record.results]
    attach_speedups(results)
    eager = next(r for r in results if r.status == UNSTABLE)
    compiled = next(r for r in results if (r.implementation, r.mode, r.case) == ("nanmean_padded", SEED, first))
    return RunRecord(record.environment, results, record.copy_gbps), eager, compiled


def _text(renderable) -> str:
    console = Console(width=400, record=True)
    console.print(renderable)
    return console.export_text()


def test_a_speedup_with_an_unstable_side_is_shown_marked_not_dropped(shaky):
    record, eager, compiled = shaky
    assert compiled.speedup_vs_eager is None  # the run records none: not a finding
    ratio = eager.wall.median_ms / compiled.wall.median_ms
    assert tables.shown_speedup(compiled, eager) == (pytest.approx(ratio), False)
    mine = [r for r in record.results if r.case == eager.case and r.implementation == "nanmean_padded"]
    assert f"{ratio:.2f}× (unstable)" in _text(tables.seed_table(mine, SEED))
    row = next(line for line in _text(tables.cells_table(mine)).splitlines() if SEED in line)
    assert f"{ratio:.2f} (unstable)" in row
    assert not any("nanmean_padded at " + eager.case.label in line for line in tables.findings(record.results, SEED))
    settled = next(r for r in record.results if r.status != UNSTABLE and r.mode == SEED)
    assert tables.shown_speedup(settled, None) == (settled.speedup_vs_eager, True)


def test_the_report_and_the_heatmap_show_the_unsettled_ratio_marked(shaky):
    record, eager, compiled = shaky
    ratio = eager.wall.median_ms / compiled.wall.median_ms
    text = render_report(record)
    assert f"| {compiled.case.label} | nanmean_padded | {SEED} | ok |" in text
    assert f"{ratio:.2f}× (unstable) |" in text
    (heatmap,) = [h for h in heatmap_data(record) if h.kind == "speedup" and h.mode == SEED
                  and h.shape == shape_of(compiled)]
    panel = next(p for p in heatmap.panels if p.name == "nanmean_padded")
    at = (heatmap.seqlens.index(compiled.case.seqlen), heatmap.sparsities.index(compiled.case.sparsity))
    assert panel.unstable_mask()[at] and panel.unstable_value(at) == pytest.approx(ratio)
    assert panel.values[at] != panel.values[at]  # NaN: no colour, never a "× slower"


def test_a_run_with_unstable_cells_says_how_to_get_clean_numbers(shaky):
    record, _, _ = shaky
    advice = tables.unstable_advice(record.results)
    assert advice.startswith(f"1 of {len(record.results)} cells unstable: ")
    assert "other programs closed" in advice and "--attempts" in advice and "--cpu-load ignore" in advice
    calm = [replace(r, status="ok") if r.status == UNSTABLE else r for r in record.results]
    assert tables.unstable_advice(calm) is None
