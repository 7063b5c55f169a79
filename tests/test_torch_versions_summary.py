"""benchmarks/torch_versions_summary.py run as a user runs it: --help prints its usage and writes nothing, a folder
that is not there is an error, and the committed doctor runs summarise into summary.json and summary.md."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "torch_versions_summary.py"
RUNS = ROOT / "benchmarks" / "results" / "cpu" / "torch-versions-quiet"  # the published summary's doctor runs


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_help_prints_the_usage_and_writes_nothing(tmp_path):
    done = run("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "folder" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_is_not_there_is_an_error(tmp_path):
    done = run(str(tmp_path / "missing"), cwd=tmp_path)
    assert done.returncode == 2 and "is not a folder" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_summarises_the_committed_doctor_runs(tmp_path):
    for path in RUNS.glob("doctor-*.json"):
        shutil.copy(path, tmp_path / path.name)
    done = run(str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["seed_table"] is None
    assert {row["torch"] for row in summary["doctor"]} == {
        json.loads(p.read_text())["environment"]["torch"] for p in RUNS.glob("doctor-*.json")}
    assert "## The doctor's NJT split" in (tmp_path / "summary.md").read_text()
