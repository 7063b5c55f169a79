"""The README's set-up path (scripts/setup-env.sh → scripts/setup_env.py), offline.

The GPU machine's ``python3`` is itself a virtualenv holding torch; ``venv --system-site-packages`` made
from it sees the *base* interpreter's packages, not the host's, so torch went missing and pip tried the
network. These tests build such a host — a virtualenv whose torch lives only in its own site directories
— and run the set-up with the package index off.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import scripts
import torch

ROOT = Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup-env.sh"


def _base_python() -> str:
    return getattr(sys, "_base_executable", sys.executable)


def _host_venv(path: Path, *, with_torch: bool) -> Path:
    """A virtualenv without pip; with_torch: it imports this test run's torch through its own site dir."""
    subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if with_torch:
        # torch's own directory too: where this run's environment reuses a host's (the GPU machine's .venv
        # links /opt/torch/.venv through a .pth of its own), its site dirs do not hold torch, and a .pth
        # file in a directory that a .pth adds is not read
        ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                str(Path(torch.__file__).resolve().parents[1])}
        Path(site, "torch-from-elsewhere.pth").write_text("".join(f"{d}\n" for d in sorted(ours)))
    return python


def _offline_env(host: Path, venv: Path) -> dict[str, str]:
    # no index, no configured wheel folders: pip can install nothing
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "PIP_"))}
    empty = venv.parent / "no-wheels"
    empty.mkdir(exist_ok=True)
    env.update(PYTHON=str(host), JAGGEDPERF_VENV=str(venv), PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull,
               PIP_FIND_LINKS=str(empty),
               PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p))
    return env


def _source_and_run(env: dict[str, str], command: str, timeout: float = 300) -> subprocess.CompletedProcess:
    script = f'source "{SETUP}" test && {command}'
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_reuses_torch_of_a_virtualenv_host_offline(tmp_path):
    host = _host_venv(tmp_path / "host", with_torch=True)
    venv = tmp_path / "env"
    env = _offline_env(host, venv)
    probe = "python -c 'import torch, jaggedperf; print(torch.__file__); print(jaggedperf.__file__)'"
    # the CLI through a spawned worker process (--timeout): the launcher must not run main() when imported
    cli = ("jaggedperf run --device cpu --B 4 --M 2 --seqlen 5 --sparsity 0.5 --impls segment_reduce --modes eager "
           "--warmup 1 --iters 2 --timeout 120 >/dev/null")
    done = _source_and_run(env, f"{probe} && {cli} && echo CLI-OK")
    assert done.returncode == 0, done.stderr
    assert "reuse torch" in done.stderr
    torch_file, project_file, cli = done.stdout.strip().splitlines()[-3:]
    assert Path(torch_file).resolve() == Path(torch.__file__).resolve()
    assert Path(project_file).resolve().is_relative_to(ROOT / "src")
    assert cli == "CLI-OK"
    # a second run keeps what the first made, and the shell that sourced it has its own options back (bash -c's
    # default: no errexit, no nounset, no pipefail)
    again = _source_and_run(env, "python -c 'import jaggedperf' && echo \"flags=$- $(set -o | grep pipefail)\"")
    assert again.returncode == 0, again.stderr
    assert "reuse torch" not in again.stderr
    flags = again.stdout.strip().splitlines()[-1]
    assert flags.startswith("flags=") and not {"e", "u"} & set(flags.split()[0]) and flags.endswith("off"), flags


def test_host_without_torch_offline_fails_with_one_clear_error(tmp_path):
    host = _host_venv(tmp_path / "host", with_torch=False)
    done = _source_and_run(_offline_env(host, tmp_path / "env"), "true")
    assert done.returncode != 0
    assert "setup-env: error:" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "env").exists()  # nothing half-made is left for the next run to keep


@pytest.mark.parametrize("version, usable", [("2.11.0+cu130", True), ("2.6.0", True), ("2.5.1", False),
                                             ("2.13.0.dev20260101+cpu", True)])
def test_torch_version_floor(version, usable):
    host = _setup_module().Host("python3", "/p", "/p", (), version)
    assert host.usable_torch is usable


def _setup_module():
    return scripts.load("scripts/setup_env.py")


@pytest.fixture
def offline_pip(tmp_path, monkeypatch):
    """pip with no index and an empty wheel directory: every install fails, as on the offline GPU box."""
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))


def test_an_optional_requirement_that_cannot_be_had_is_skipped_once_with_a_notice(tmp_path, offline_pip, capsys):
    setup_env = _setup_module()
    wanted = {"jaggedperf_no_such_module": "jaggedperf-no-such-package==0.0"}
    python = Path(sys.executable)
    assert setup_env.install_optional(python, tmp_path, wanted) == ["jaggedperf-no-such-package==0.0"]
    assert "jaggedperf-no-such-package==0.0 not installed (optional" in capsys.readouterr().err
    assert setup_env.install_optional(python, tmp_path, wanted) == []  # tried once: an offline box waits once
    assert capsys.readouterr().err == ""
    assert setup_env.install_optional(python, tmp_path, {"json": "json-is-stdlib"}) == []  # importable: nothing to do


def test_the_gpu_box_triton_is_tried_once_beside_the_environment_and_never_fails(tmp_path, offline_pip, monkeypatch,
                                                                                 capsys):
    # offline: one notice, nothing left behind, not tried again; where the environment's own Triton is the GPU box's
    # version, nothing is tried at all
    setup_env = _setup_module()
    monkeypatch.setattr(setup_env, "DEVICE_TRITON", "jaggedperf-no-such-package==0.0")
    python = Path(sys.executable)
    assert setup_env.install_device_triton(python, tmp_path) is False
    assert "jaggedperf-no-such-package==0.0 not installed beside" in capsys.readouterr().err
    assert not (tmp_path / setup_env.DEVICE_TRITON_DIR).exists()
    assert setup_env.install_device_triton(python, tmp_path) is False
    assert capsys.readouterr().err == ""
    own = tmp_path / "own"
    own.mkdir()
    fake = own / "python"  # a Python whose triton reports the GPU box's version
    fake.write_text(f"#!/bin/sh\necho {setup_env.DEVICE_TRITON.split('==')[1]}\n")
    fake.chmod(0o755)
    assert setup_env.install_device_triton(fake, own) is False
    assert capsys.readouterr().err == "" and not (own / setup_env.OPTIONAL_MARK).exists()


def test_the_test_extra_asks_for_ray_expecttest_and_ruff_as_optional_only():
    # optional: the offline GPU box has neither; their tests skip there (CI, which has the network, requires both)
    setup_env = _setup_module()
    assert setup_env.optional_for("test") == {"ray": "ray>=2.40", "expecttest": "expecttest>=0.2",
                                                  "ruff": "ruff>=0.6"}
    assert not {"ray", "expecttest", "ruff"} & set(setup_env.requirements_for("test"))
    assert setup_env.optional_for("plot") == {} and setup_env.optional_for(None) == {}
