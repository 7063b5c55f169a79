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
