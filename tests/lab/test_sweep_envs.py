"""Sweeps under other torch versions, orchestration only (no downloads): environments made by a stand-in for
venv and pip whose Python is this one, cached and remade; a job run in an environment by its Python with
the ordinary engine; the CLI's --torch end to end on the installed torch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import runner
from jaggedperf.lab.result import OK
from jaggedperf.lab.results import store
from jaggedperf.lab.sweep import envs

ROOT = Path(__file__).resolve().parents[2]
C1, C2 = Case(8, 3, 20, 0.5), Case(6, 2, 10, 0.3)


def _python_here(env: Path) -> None:
    """``env/bin/python`` runs this Python (a script, not a link: a link would lose this venv's site)."""
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (env / "bin" / "python").chmod(0o755)


class FakeTools:
    """Stands in for ``python -m venv`` and pip: a "made" environment's Python is a link to this one, and its
    torch the installed one; every command is recorded; ``fail`` makes the install step fail."""

    def __init__(self, fail: bool = False):
        self.commands, self.fail = [], fail

    def __call__(self, cmd, **kwargs):
        self.commands.append(cmd)
        if cmd[1:3] == ["-m", "venv"] or cmd[1] == "venv":  # python -m venv DIR, uv venv --python P DIR
            _python_here(Path(cmd[-1]))
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if "pip" in cmd and "install" in cmd:
            return subprocess.CompletedProcess(cmd, 1 if self.fail else 0, "", "ERROR: no such version" if self.fail else "")
        if "sysconfig" in cmd[-1]:  # where the project link goes: a folder of the fake environment
            site = Path(cmd[0]).parent.parent / "site"
            return subprocess.CompletedProcess(cmd, 0, f"{site}\n", "")
        return subprocess.run(cmd, **kwargs)  # import torch: the real one


def test_versions_and_requirements_are_parsed_and_checked():
    assert envs.parse_versions("2.11, 2.13.0,2.11") == ["2.11", "2.13.0"]
    assert (envs.requirement("2.11"), envs.requirement("2.13.0")) == ("torch==2.11.*", "torch==2.13.0")
    with pytest.raises(ValueError, match="expected versions like 2.11"):
        envs.parse_versions("2.11,latest")
    assert envs.version_out(Path("/x/r.jsonl"), "2.11") == Path("/x/r.torch-2.11.jsonl")


def test_an_environment_is_made_once_cached_and_a_half_made_one_is_remade(tmp_path, monkeypatch):
    monkeypatch.setattr(envs.shutil, "which", lambda name: None)  # no uv: venv + pip
    tools = FakeTools()
    env = envs.ensure_env("2.11", root=ROOT, cache=tmp_path, run=tools)
    assert env.path == tmp_path / f"torch-2.11-py{sys.version_info[0]}{sys.version_info[1]}"
    assert env.torch == torch.__version__ and env.python.exists()
    pip = next(c for c in tools.commands if "pip" in c)
    assert pip[-3:] == ["torch==2.11.*", "numpy", "rich>=13"]
    assert (env.path / "site" / envs.LINK_NAME).read_text() == f"{ROOT / 'src'}\n"  # the project linked
    assert json.loads((env.path / envs.MARKER).read_text())["torch"] == torch.__version__

    tools.commands.clear()
    assert envs.ensure_env("2.11", root=ROOT, cache=tmp_path, run=tools) == env  # cached: nothing installed
    assert not any("pip" in c or "venv" in c for c in tools.commands)

    (env.path / envs.MARKER).unlink()  # as a killed build leaves it
    envs.ensure_env("2.11", root=ROOT, cache=tmp_path, run=tools)
    assert any("venv" in c for c in tools.commands)


def test_uv_is_used_when_present_and_a_failed_install_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(envs.shutil, "which", lambda name: "/opt/uv" if name == "uv" else None)
    tools = FakeTools(fail=True)
    with pytest.raises(envs.EnvError, match="could not install torch .uv pip."):
        envs.ensure_env("2.15", root=ROOT, cache=tmp_path, run=tools)
    assert [c[:2] for c in tools.commands[:2]] == [["/opt/uv", "venv"], ["/opt/uv", "pip"]]
    monkeypatch.setattr(envs.shutil, "which", lambda name: None)
    with pytest.raises(envs.EnvError, match="could not install torch .pip.*no such version"):
        envs.ensure_env("2.15", root=ROOT, cache=tmp_path, run=tools)
    assert not (tmp_path / f"torch-2.15-py{sys.version_info[0]}{sys.version_info[1]}").exists()


def _this_python_as_env(tmp_path) -> envs.TorchEnv:
    _python_here(tmp_path / "env")
    return envs.TorchEnv("installed", tmp_path / "env", torch.__version__)


def test_a_job_runs_in_the_environment_with_the_ordinary_engine_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    env = _this_python_as_env(tmp_path)
    out = tmp_path / "r.jsonl"
    options = runner.Options(device=torch.device("cpu"), warmup=1, iters=2)
    job = envs.SweepJob(out, "jagged_mean", [C1, C2], ["segment_reduce"], ["eager"], options, device="cpu")
    outcome = envs.run_job(env, job, log=tmp_path / "env.log")
    assert (outcome.returncode, outcome.error, outcome.written) == (0, None, 2)
    results = store.load_results(out).results
    assert {r.status for r in results} == {OK} and {r.extra["torch"] for r in results} == {torch.__version__}
    assert envs.run_job(env, job, log=tmp_path / "env.log").written == 0  # the same job again: all done

    other = envs.SweepJob(out, "jagged_mean", [C1, Case(4, 2, 10, 0.5)], ["segment_reduce"], ["eager"],
                          runner.Options(device=torch.device("cpu"), warmup=1, iters=3), device="cpu")
    refused = envs.run_job(env, other, log=tmp_path / "env.log")  # measured otherwise: the plan is refused
    assert refused.returncode == 2 and "iters: 2 in the file, 3 now" in refused.error


def test_sweep_cli_torch_runs_each_version_and_puts_them_side_by_side(tmp_path, monkeypatch, capsys):
    from jaggedperf.cli import main

    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    made = []

    def fake_env(version, *, root):  # no download: every "version" is this Python
        made.append(version)
        return _this_python_as_env(tmp_path / version)

    monkeypatch.setattr(envs, "ensure_env", fake_env)
    out = tmp_path / "r.jsonl"
    args = ["sweep", "--out", str(out), "--B", "4", "--M", "2", "--seqlen", "10", "--sparsity", "0.5",
            "--impls", "segment_reduce", "--modes", "eager", "--warmup", "1", "--iters", "2", "--device", "cpu",
            "--torch", "2.11,2.13"]
    assert main([*args, "--plan"]) == 0  # each version's plan, nothing made nor run
    assert made == [] and capsys.readouterr().out.count("1 to run on 1 worker") == 2
    assert main(args) == 0
    assert made == ["2.11", "2.13"]
    for version in made:
        assert len(store.load_results(envs.version_out(out, version)).results) == 1
    text = (tmp_path / "r.torch-versions.md").read_text()
    assert "B4-M2-L10-s0.5 | segment_reduce | eager" in text
    assert "side by side: " in capsys.readouterr().out
