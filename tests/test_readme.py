"""The README is a user guide that cannot drift: its quick start runs as written, its links exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jaggedperf.lab.results import readme

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
    assert not re.search(r"\brun \d+\b", README), "run logs belong in git history, not the README"


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


SCRIPT = "benchmarks/readme_figures.py"
READ = (*readme.SEED_TABLES, readme.DOCTOR, readme.HEADLINE)  # what the script reads


def _scratch_tree(tmp_path: Path, readme_text: str) -> Path:
    """A copy of what the script touches: itself, a README, the results it reads (the figure it draws lands here)."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / SCRIPT).write_text((ROOT / SCRIPT).read_text())
    for path in READ:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).symlink_to(ROOT / path)
    (tmp_path / "README.md").write_text(readme_text)
    return tmp_path


def _run_script(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(tree / SCRIPT), *args], cwd=tree, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))


def test_readme_blocks_are_what_the_committed_results_give():
    """`python benchmarks/readme_figures.py --check`: the repro table, the doctor's verdicts and the figure's
    link in the README are regenerated from the committed results by the code that renders them."""
    done = _run_script(ROOT, "--check")
    assert done.returncode == 0, done.stderr[-3000:]


def _drifted(text: str) -> str:
    """The README with the repro table's first sum_padded figure changed (a block out of date)."""
    return re.sub(r"^(\| sum_padded \| )[0-9.]+[†‡]*", r"\g<1>0.100001", text, count=1, flags=re.M)


def test_readme_figures_rewrites_a_drifted_block_and_only_its_blocks_and_draws_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    drifted = _drifted(README)
    assert drifted != README
    tree = _scratch_tree(tmp_path, drifted)
    done = _run_script(tree)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tree / "README.md").read_text() == README
    figure = str(readme.FIGURE)
    assert f"]({figure})" in README
    assert (tree / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_figures_render_every_block_from_the_committed_results():
    drifted = _drifted(README)
    assert drifted != README
    record = readme.seed_record(ROOT)
    assert readme.render(drifted, readme.blocks(ROOT, record)) == README
    empty = readme.render("".join(f"<!-- {name}:begin -->\n<!-- {name}:end -->\n" for name in
                                  ("headline", "repro", "doctor")), readme.blocks(ROOT, record))
    assert re.search(r"^\| jaggedperf_njt \| [0-9.]+", empty, flags=re.M)
    assert re.search(r"^- `sum_padded`‡?: slower by", empty, flags=re.M)  # marked only while another table disagrees
    assert "| B512-M64-L100-s0.1 | jaggedperf_njt | 0.020 | 0.288 (0.07×) | 0.090 (0.22×) | 0.065 |" in empty
    # its own run, the same kind of machine; ‡: this run's doctor measured its eager call 38% slower
    assert "| unbind_mean | 6.104‡ | 7.352 (0.83×) | 6.074 | cut > 120 s |" in empty
    with pytest.raises(ValueError, match="no <!-- headline:begin -->"):
        readme.render("no markers", readme.blocks(ROOT, record))


def test_readme_figures_refuses_a_readme_without_its_markers(tmp_path):
    done = _run_script(_scratch_tree(tmp_path, "no markers\n"), "--check")
    assert done.returncode == 2 and "has no <!-- headline:begin -->" in done.stderr
    assert "Traceback" not in done.stderr


def test_readme_doctor_verdicts_are_what_todays_code_diagnoses_from_the_recorded_evidence(monkeypatch):
    """The doctor block is the recorded evidence diagnosed by today's verdicts (``doctor --from``)."""
    from jaggedperf.lab.doctor import verdicts

    monkeypatch.setattr(verdicts, "verdict", lambda e, delta, parts: f"reworded: {delta:+.0f} µs")
    block = readme.doctor_block(ROOT, readme.DOCTOR, set())
    assert "- `sum_padded`: reworded: +163 µs" in block and "slower by" not in block


def test_every_figure_the_readme_tables_show_is_stable_and_agreed_or_marked():
    """Each table's figures come from a committed results file; a figure shown without a mark was judged stable by its
    run (the headline's: by today's stats, from its samples) and agrees, within the spreads, with every other table
    showing the same cell."""
    record = readme.seed_record(ROOT)
    cells = readme.shown(ROOT, record)
    assert {c.table for c in cells} == {"headline", "repro", "doctor"}
    disagree = readme.disagreeing(cells)
    for path in (readme.HEADLINE, *readme.SEED_TABLES, readme.DOCTOR):
        assert (ROOT / path).is_file() and str(path) in README
    for c in cells:
        mark = readme.marks(c, disagree)
        if not mark:
            assert c.stable is True, c
            assert all(readme.agree(c, o) for o in cells if o.key == c.key), c
        assert f"{c.median_ms:.3f}{mark}" in README or c.table == "doctor", c  # the doctor's figures are in µs prose


def test_two_figures_agree_unless_they_moved_by_the_labs_rule():

    def fig(median, p20=None, p80=None, table="a"):
        return readme.Shown(table, "i", "eager", "c", median, p20, p80, True)

    assert readme.agree(fig(0.127, 0.122, 0.138), fig(0.135, 0.130, 0.150, "b"))
    assert not readme.agree(fig(0.021, 0.019, 0.027), fig(0.040, table="b"))  # the headline vs the repro table
    assert readme.agree(fig(1.00), fig(1.08)) and not readme.agree(fig(1.00), fig(1.2))  # no spreads: within 10%
    # two runs of a device-bound cell 1.5% apart with 1% spreads: not moved (stats.MIN_CHANGE); 15% apart: moved
    assert readme.agree(fig(6.104, 6.07, 6.14), fig(6.195, 6.16, 6.23, "b"))
    assert not readme.agree(fig(0.113, 0.110, 0.116), fig(0.130, 0.127, 0.133, "b"))
    a, b = fig(0.021, 0.019, 0.027), fig(0.040, table="b")
    assert readme.disagreeing([a, b]) == {a, b} and readme.marks(a, {a}) == "‡"


def test_the_readme_figures_note_says_which_cells_are_unstable_and_which_were_cut():
    """The figure's footer is honest about the committed run: its unstable cells, if any, are counted (hatched) and
    unbind_mean's compiled cell at the second shape, cut at its time budget, is named as timed out."""
    pytest.importorskip("matplotlib")
    from jaggedperf.lab.modes import SEED_COMPILED_MODE
    from jaggedperf.lab.results import figures, plot

    record = readme.seed_record(ROOT)
    (heatmap,) = [h for h in figures.heatmap_data(record) if h.kind == "speedup" and h.mode == SEED_COMPILED_MODE]
    unstable = sum(r.status == "unstable" for r in record.results if r.mode == SEED_COMPILED_MODE)
    assert heatmap.unstable >= unstable and heatmap.left_out["timed out"] == 1
    note = plot._heatmap_note(heatmap)
    assert "1 timed out" in note and "all cells ok" not in note
    if heatmap.unstable:  # (the committed run has none: every cell settled; tests/lab/test_plot.py hatches some)
        assert re.search(rf"\b{heatmap.unstable} cells? unstable", note)
    else:
        assert "unstable" not in note


def test_the_install_routes_name_extras_and_scripts_that_exist():
    """Each install route names what it runs: the extras of every `pip install -e` are pyproject's, the scripts exist,
    and the own-environment route names its own commands (the main job, the tests) in place of the scripts."""
    project = (ROOT / "pyproject.toml").read_text()
    section = project[project.index("[project.optional-dependencies]"):].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w+) = \[", section, re.M))  # (tomllib is 3.11+; the project runs on 3.10)
    install = README[README.index("## Install"):README.index("## Quick start")]
    asked = [set(m.split(",")) for m in re.findall(r'pip install -e "\.\[([\w,]+)\]"', install)]
    assert asked and all(a <= extras for a in asked), asked
    assert {"plot", "triton"} in asked  # a CPU needs Triton for the ops; CPU builds of torch bring none
    for script in re.findall(r"`bash (scripts/[\w.-]+)", install):
        assert (ROOT / script).is_file(), script
    own = install[install.index("**Your own environment**"):]
    assert "`jaggedperf repro`" in own and "pytest" in own
