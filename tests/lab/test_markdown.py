import re

import pytest

from jaggedperf.lab.results.markdown import render_report
from jaggedperf.lab.result import OK, RunRecord
from helpers.fake_results import ENVIRONMENT, MODES, make_record


@pytest.fixture(scope="module")
def record() -> RunRecord:
    return make_record()


@pytest.fixture(scope="module")
def report(record) -> str:
    return render_report(record, {"Roofline": "run-plots/roofline_jagged_mean.png", "A (b) c": "dir with space/x.png"})


def section(report: str, title: str) -> str:
    start = report.index(f"\n{title}\n")
    nxt = report.find("\n## ", start + len(title) + 2)
    return report[start: nxt if nxt >= 0 else None]


def rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("|---")]


def test_environment_table(report):
    env = rows(section(report, "## Environment"))
    assert ["gpu", "NVIDIA H200"] in env and ["torch", "2.13.0+cu130"] in env and ["triton", "3.6.0"] in env
    assert ["command", f"`{ENVIRONMENT['command']}`"] in env
    assert ["copy bandwidth", "3900 GB/s"] in env


def test_status_summary(report, record):
    text = section(report, "## Status")
    n = len(record.results)
    assert f"375 ok · 0 unstable · 1 wrong · 6 skipped · 14 error of {n} cells." in text
    table = rows(text)
    assert table[0] == ["mode", "ok", "unstable", "wrong", "skipped", "error"]
    assert ["graph", "54", "0", "0", "1", "11"] in table


def test_seed_style_table_per_case_and_mode(report, record):
    text = section(report, "## Speedup vs eager")
    for mode in MODES[1:]:
        assert f"\n### {mode}\n" in text
    # the first case under max-autotune-no-cudagraphs: sum_padded's eager and compiled wall and the speedup
    block = text[text.index("### compile:max-autotune-no-cudagraphs"):]
    block = block[block.index("#### B512-M64-L100-s0.1"):]
    table = rows(block[: block.index("\n####", 5)])
    assert table[0] == ["implementation", "eager µs", "compile:max-autotune-no-cudagraphs µs", "speedup"]
    eager, compiled = [r for r in record.results if r.implementation == "sum_padded" and r.case.label == "B512-M64-L100-s0.1"
                       and r.mode in ("eager", "compile:max-autotune-no-cudagraphs")]
    row = next(r for r in table if r[0] == "sum_padded")
    assert float(row[1]) == pytest.approx(eager.wall.median_ms * 1e3, abs=0.05)
    assert float(row[2]) == pytest.approx(compiled.wall.median_ms * 1e3, abs=0.05)
    ratio = eager.wall.median_ms / compiled.wall.median_ms
    assert ratio < 1 and row[3] == f"**{ratio:.2f}×**"  # slower than eager stands out
    # a failing cell shows its status instead of a time
    block = text[text.index("### compile:max-autotune\n"):]
    block = block[block.index("#### B512-M64-L10000-s0.1"):]
    assert ["unbind_mean", next(r for r in rows(block) if r[0] == "unbind_mean")[1], "error", "—"] in rows(block)


def test_full_table_and_failures(report, record):
    table = rows(section(report, "## All cells"))
    assert table[0] == ["case", "implementation", "mode", "status", "wall µs (median)", "wall µs (p20–p80)", "device µs",
                        "host µs", "kernels/call", "GB/s", "% copy", "speedup", "compile s"]
    assert len(table) == len(record.results) + 1
    r = next(r for r in record.results if r.status == OK and r.implementation == "jaggedperf" and r.mode == "eager")
    row = next(x for x in table if x[:3] == [r.case.label, "jaggedperf", "eager"])
    assert row[4] == f"{r.wall.median_ms * 1e3:.1f}" and row[6] == f"{r.device_time.median_us:.1f}"
    assert row[5] == f"{r.wall.p20_ms * 1e3:.1f}–{r.wall.p80_ms * 1e3:.1f}"
    assert "±" not in report
    assert row[9] == f"{r.gbps:.0f}" and row[10] == f"{r.pct_of_copy:.1f}"
    failures = rows(section(report, "## Failures"))
    assert len(failures) == 1 + sum(r.status != OK for r in record.results)
    assert failures[1][0] == "wrong" and "0.31" in failures[1][4]
    # a reason with a pipe stays inside its cell
    assert any(f[4] == r"RuntimeError: operation not permitted when stream is capturing \| capture failed" for f in failures)


def test_plots_are_linked_relatively(report):
    text = section(report, "## Plots")
    assert "![Roofline](run-plots/roofline_jagged_mean.png)" in text
    assert "![A (b) c](<dir with space/x.png>)" in text


def test_without_plots_and_with_resumed_headers(record):
    env = dict(record.environment, more=[dict(record.environment, date="2026-12-02T08:00:00+00:00")])
    text = render_report(RunRecord(env, record.results[:40], record.copy_gbps))
    assert "## Plots" not in text
    assert "1. date = 2026-12-02T08:00:00+00:00" in text


def test_empty_and_all_ok_runs_render():
    text = render_report(RunRecord({}, [], None))
    assert "0 cells on unknown device" in text and "None: every cell is ok." in text
    ok = [r for r in make_record().results if r.status == OK][:10]
    assert "None: every cell is ok." in render_report(RunRecord({}, ok, None))


def test_unstable_cells_are_listed_with_their_figures_and_give_no_speedup(record):
    from dataclasses import replace

    from jaggedperf.lab.result import UNSTABLE, Stability

    shaky_key = next(r.key for r in record.results if r.status == OK and r.mode == "compile:max-autotune-no-cudagraphs"
                     and r.implementation == "sum_padded")
    why = "wall IQR is 85% of the median (> 10%); after 3 attempts"
    results = [replace(r, status=UNSTABLE, reason=why, speedup_vs_eager=None,
                       stability=Stability(False, 0.85, 0.02, 3, 0.1, 0.1, [why], other_cpu=1.9))
               if r.key == shaky_key else r for r in record.results]
    text = render_report(RunRecord(record.environment, results, record.copy_gbps))
    shaky = next(r for r in results if r.key == shaky_key)
    unstable = rows(section(text, "## Unstable cells"))
    assert unstable[1][:3] == [shaky.case.label, "sum_padded", "compile:max-autotune-no-cudagraphs"]
    assert unstable[1][5:9] == ["85%", "+2%", "3", "1.90"] and unstable[1][9] == why
    block = section(text, "## Speedup vs eager")
    block = block[block.index("### compile:max-autotune-no-cudagraphs"):]
    block = block[block.index(f"#### {shaky.case.label}"):]
    row = next(r for r in rows(block[: block.index("\n####", 5)]) if r[0] == "sum_padded")
    assert row[2] == f"{shaky.wall.median_ms * 1e3:.1f} (unstable)" and row[3] == "—"
    assert all(f[0] != "unstable" for f in rows(section(text, "## Failures")))
    assert "None: every timed cell settled" in section(render_report(record), "## Unstable cells")
