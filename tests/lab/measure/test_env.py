"""lab.measure.env.source_commit: the commit a benchmark records, never a bare ``-dirty``."""

import re
import subprocess
from pathlib import Path

import pytest

from jaggedperf.lab.measure import env


def test_outside_a_git_checkout_the_commit_is_unknown(monkeypatch):
    monkeypatch.setattr(env, "_run", lambda cmd, cwd=None: None)  # git absent, or no repository above the package
    assert env.source_commit() == "unknown"


def test_a_clean_or_changed_src_is_the_short_commit_or_the_commit_dirty(monkeypatch):
    answers = {"--short": "abc1234", "--show-toplevel": "/repo"}

    def run(cmd, cwd=None):
        if cmd[1] == "rev-parse":
            return answers[cmd[2]]
        assert cmd[1:] == ["diff", "--name-only", "HEAD", "--", "src"] and cwd == Path("/repo")
        return changed

    monkeypatch.setattr(env, "_run", run)
    changed = None
    assert env.source_commit() == "abc1234"
    changed = "src/jaggedperf/njt.py"
    assert env.source_commit() == "abc1234-dirty"


def test_in_this_checkout_it_names_head():
    here = Path(env.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert re.fullmatch(re.escape(head) + r"(-dirty)?", env.source_commit())
