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
READ = ("seed-table-shape1.json", "seed-table-shape2.json", "doctor-seed.json.gz")  # what the script reads


def _scratch_tree(tmp_path: Path, readme: str) -> Path:
    """A copy of what the script touches: itself, a README, the results it reads (the figure it draws lands here)."""
    (tmp_path / "benchmarks" / "results" / "h200").mkdir(parents=True)
    (tmp_path / SCRIPT).write_text((ROOT / SCRIPT).read_text())
    for name in READ:
        (tmp_path / "benchmarks" / "results" / "h200" / name).symlink_to(ROOT / "benchmarks" / "results" / "h200" / name)
    (tmp_path / "README.md").write_text(readme)
    return tmp_path


def _run_script(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(tree / SCRIPT), *args], cwd=tree, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))


def test_readme_blocks_are_what_the_committed_results_give():
    """`python benchmarks/readme_figures.py --check`: the repro table, the doctor's verdicts and the figure's
    link in the README are regenerated from benchmarks/results/h200 by the code that renders them."""
    done = _run_script(ROOT, "--check")
    assert done.returncode == 0, done.stderr[-3000:]


def test_readme_figures_rewrites_a_drifted_block_and_only_its_blocks_and_draws_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    drifted = README.replace("| sum_padded | 0.155 |", "| sum_padded | 0.100 |")
    assert drifted != README
    tree = _scratch_tree(tmp_path, drifted)
    done = _run_script(tree)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tree / "README.md").read_text() == README
    figure = re.search(r"\]\((benchmarks/results/h200/figures/[\w.-]+\.png)\)", README).group(1)
    assert (tree / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_readme_figures_refuses_a_readme_without_its_markers(tmp_path):
    done = _run_script(_scratch_tree(tmp_path, "no markers\n"), "--check")
    assert done.returncode != 0 and "no <!-- repro:begin -->" in done.stderr


def test_readme_doctor_verdicts_are_what_todays_code_diagnoses_from_the_recorded_evidence():
    """The doctor block is the recorded evidence diagnosed by today's verdicts (``doctor --from``)."""
    from jaggedperf.lab.doctor import saved, verdicts

    record = verdicts.diagnose_run(saved.load_evidence(ROOT / "benchmarks" / "results" / "h200" / "doctor-seed.json.gz"))
    first = record.diagnoses[0].case_label
    wanted = [f"- `{d.implementation}`: {d.verdict}" for d in record.diagnoses if d.case_label == first]
    block = [line for line in _block("doctor").splitlines() if line.startswith("- `")]
    assert block == wanted
