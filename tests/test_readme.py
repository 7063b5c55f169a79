"""The README is a user guide that cannot drift: its quick start runs as written, its links exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _block(name: str) -> str:
    match = re.search(rf"<!-- {name}:begin -->(.*?)<!-- {name}:end -->", README, re.S)
    assert match, f"README has no {name} block"
    return match.group(1)


def quickstart_commands() -> list[str]:
    code = re.search(r"```bash\n(.*?)```", _block("quickstart"), re.S).group(1)
    return [line.strip() for line in code.splitlines() if line.strip() and not line.startswith("#")]


def test_readme_is_a_guide_not_a_log():
    assert len(README.splitlines()) <= 200
    assert not re.search(r"\brun \d+\b", README), "run logs belong in docs/ or NOTES"


@pytest.mark.parametrize("path", re.findall(r"`((?:docs|benchmarks)/[\w./-]+)`", README))
def test_paths_the_readme_names_exist(path):
    assert (ROOT / path).exists(), path


@pytest.mark.parametrize("command", quickstart_commands())
def test_quickstart_runs_as_written(command):
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
               COLUMNS="100")
    done = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert done.stdout.strip()


def _readme_figures():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import readme_figures
    finally:
        sys.path.pop(0)
    return readme_figures


def test_readme_blocks_are_what_the_committed_results_give():
    """`python benchmarks/readme_figures.py --check`: the repro table, the doctor's verdicts and the figure's
    link in the README are regenerated from benchmarks/results/h200 by the code that renders them."""
    done = subprocess.run([sys.executable, "benchmarks/readme_figures.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert done.returncode == 0, done.stderr[-3000:]


def test_readme_figures_rewrites_a_drifted_block_and_only_its_blocks():
    figures = _readme_figures()
    drifted = README.replace("| sum_padded | 0.155†‡ |", "| sum_padded | 0.100 |")
    assert drifted != README
    record = figures.seed_record()
    assert figures.render(drifted, figures.blocks(record)) == README
    empty = figures.render("".join(f"<!-- {name}:begin -->\n<!-- {name}:end -->\n" for name in
                                   ("headline", "repro", "doctor")), figures.blocks(record))
    assert "| jaggedperf_njt | 0.172†‡ |" in empty and "- `sum_padded`†‡: slower by" in empty
    assert "| B512-M64-L100-s0.1 | jaggedperf_njt | 0.021†‡ | 0.587†‡ (0.04×) | 0.131† (0.16×) |" in empty
    with pytest.raises(ValueError, match="no <!-- headline:begin -->"):
        figures.render("no markers", figures.blocks(record))


def test_readme_figure_is_drawn_by_the_lab(tmp_path):
    pytest.importorskip("matplotlib")
    figures = _readme_figures()
    figures.draw_figure(figures.seed_record(), tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_doctor_verdicts_are_diagnosed_again_by_todays_code(monkeypatch):
    """The doctor block is the recorded evidence diagnosed by today's verdicts: a change of wording shows there."""
    figures = _readme_figures()
    from jaggedperf.lab.doctor import verdicts

    monkeypatch.setattr(verdicts, "verdict", lambda e, delta, parts: f"reworded: {delta:+.0f} µs")
    block = figures.doctor_block(figures.DOCTOR, set())
    assert "- `sum_padded`†: reworded: +101 µs" in block and "slower by" not in block


def test_every_figure_the_readme_tables_show_is_stable_and_agreed_or_marked():
    """Each table's figures come from a committed results file; a figure shown without a mark was judged stable by its
    run (the headline's: by today's stats, from its samples) and agrees, within the spreads, with every other table
    showing the same cell."""
    figures = _readme_figures()
    record = figures.seed_record()
    cells = figures.shown(record)
    assert {c.table for c in cells} == {"headline", "repro", "doctor"}
    disagree = figures.disagreeing(cells)
    for path in (figures.HEADLINE, *figures.SEED_TABLES, figures.DOCTOR):
        assert (ROOT / path).is_file() and str(path) in README
    for c in cells:
        mark = figures.marks(c, disagree)
        if not mark:
            assert c.stable is True, c
            assert all(figures.agree(c, o) for o in cells if o.key == c.key), c
        assert f"{c.median_ms:.3f}{mark}" in README or c.table == "doctor", c  # the doctor's figures are in µs prose


def test_two_figures_agree_when_their_spreads_overlap():
    figures = _readme_figures()

    def fig(median, p20=None, p80=None, table="a"):
        return figures.Shown(table, "i", "eager", "c", median, p20, p80, True)

    assert figures.agree(fig(0.127, 0.122, 0.138), fig(0.135, 0.130, 0.150, "b"))
    assert not figures.agree(fig(0.021, 0.019, 0.027), fig(0.040, table="b"))  # the headline vs the repro table
    assert figures.agree(fig(1.00), fig(1.08)) and not figures.agree(fig(1.00), fig(1.2))  # no spreads: within 10%
    a, b = fig(0.021, 0.019, 0.027), fig(0.040, table="b")
    assert figures.disagreeing([a, b]) == {a, b} and figures.marks(a, {a}) == "‡"
