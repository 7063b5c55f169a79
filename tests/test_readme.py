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
    drifted = README.replace("| sum_padded | 0.155 |", "| sum_padded | 0.100 |")
    assert drifted != README
    record = figures.seed_record()
    assert figures.render(drifted, figures.blocks(record)) == README
    empty = figures.render("<!-- repro:begin -->\n<!-- repro:end -->\n<!-- doctor:begin -->\n<!-- doctor:end -->\n",
                           figures.blocks(record))
    assert "| jaggedperf_njt | 0.172 |" in empty and "- `sum_padded`: slower by" in empty
    with pytest.raises(ValueError, match="no <!-- repro:begin -->"):
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
    block = figures.doctor_block(figures.DOCTOR)
    assert "- `sum_padded`: reworded: +101 µs" in block and "slower by" not in block
