"""Make the project's virtual environment, reusing a torch that the chosen Python already has.

Run by ``scripts/setup-env.sh`` (which then activates the environment) with the Python that should
host it. Standard library only: it runs before anything is installed.

Two routes:

- **reuse**: the host Python imports torch >= MIN_TORCH (a CUDA build on a GPU machine, or a CPU
  build). The environment is made with ``--system-site-packages`` *and* a ``.pth`` file naming the
  host's own site directories: when the host is itself a virtualenv (or conda env), the system site
  that ``venv`` sees is its base interpreter's, not the host's, so torch would be missing without it.
  Nothing is downloaded for torch; the project is linked by a ``.pth`` file and a console script, so
  no build backend or network is needed. Packages still missing are installed, offline from
  whatever pip's configuration allows, and named in one error when that fails.
- **fresh**: no usable torch. A plain environment with torch pinned to PINNED_TORCH (a CPU build where
  only that is at hand) and Triton for the interpreter, then ``pip install -e``.

The environment is kept once made; it is remade when its Python can no longer import torch.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

MIN_TORCH = (2, 6)
PINNED_TORCH = "torch==2.13.0"
PINNED_TRITON = "triton==3.7.1"  # CPU builds of torch bring no Triton; the tests run it under TRITON_INTERPRET=1
BASE_REQUIREMENTS = {"numpy": "numpy", "rich": "rich>=13"}  # import name -> requirement
EXTRAS = {
    "plot": {"matplotlib": "matplotlib>=3.7"},
    "test": {"pytest": "pytest>=7", "xdist": "pytest-xdist>=3", "hypothesis": "hypothesis>=6",
             "matplotlib": "matplotlib>=3.7"},
}
# Best effort, per extra: installed where pip can get them (a machine with network: CI), else skipped with one
# notice (the offline GPU box); the tests that need them skip without them. Tried once per environment
# (OPTIONAL_MARK lists what was tried), so an offline machine does not wait on pip at every run.
# sweep --ray's tests (tests/lab/test_sweep_ray.py); PyTorch's NJT OpInfo database, which imports expecttest
# (tests/boundary/test_conformance.py, which CI requires); ruff, the linter tests/test_tree.py runs
OPTIONAL = {"test": {"ray": "ray>=2.40", "expecttest": "expecttest>=0.2", "ruff": "ruff>=0.6"}}
OPTIONAL_MARK = "jaggedperf-optional-tried.txt"
# The GPU box's Triton, beside the environment's own (best effort with the test extra, where it differs): the offline
# sm_90 compile tests (tests/ops/test_merge_compile.py) compile the kernels with it too, so a kernel that only the
# GPU box's compiler rejects fails CPU CI, not the device run (a Triton 3.7 layout-pass crash, and 3.6 differs).
DEVICE_TRITON = "triton==3.6.0"
DEVICE_TRITON_DIR = "jaggedperf-device-triton"
LINK_NAME = "jaggedperf-src.pth"
HOST_LINK_NAME = "jaggedperf-host-site.pth"

PROBE = """
import json, site, sys, sysconfig
info = {"prefix": sys.prefix, "base_prefix": sys.base_prefix, "version": list(sys.version_info[:2])}
dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
try:
    dirs += site.getsitepackages()
except AttributeError:  # some old virtualenvs
    pass
info["site_dirs"] = list(dict.fromkeys(d for d in dirs if d))
try:
    import torch
    info["torch"] = torch.__version__
    # where torch lives, which a .pth file or PYTHONPATH may have added beside the site directories
    info["site_dirs"].append(str(__import__("pathlib").Path(torch.__file__).resolve().parent.parent))
except Exception as exc:
    info["torch"] = None
    info["torch_error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


class SetupError(RuntimeError):
    """A set-up step that cannot succeed here; the message says what to do."""


@dataclass(frozen=True)
class Host:
    python: str
    prefix: str
    base_prefix: str
    site_dirs: tuple[str, ...]
    torch: str | None  # version, or None when torch is missing or unusable

    @property
    def usable_torch(self) -> bool:
        return self.torch is not None and _version_tuple(self.torch) >= MIN_TORCH


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def probe(python: str) -> Host:
    """What the given Python is and whether it imports torch."""
    done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True)
    if done.returncode != 0:
        raise SetupError(f"cannot run {python}: {done.stderr.strip() or done.stdout.strip()}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    return Host(python, info["prefix"], info["base_prefix"], tuple(info["site_dirs"]), info.get("torch"))


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _site_packages(venv: Path) -> Path:
    python = venv_python(venv)
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _imports(python: Path, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def _has_pip(python: Path) -> bool:
    return _imports(python, "pip")


def _pip(python: Path, *args: str, quiet: bool = False) -> None:
    # quiet: pip's own output captured (a best-effort install says its one line instead). pip byte-compiles what it
    # installs: where PYTHONDONTWRITEBYTECODE is set (the CPU machine this was measured on) Python never writes a .pyc,
    # so without pip's every process compiled torch's modules from source again (--no-compile saved 36 s of set-up and
    # cost ~3 min of tests).
    cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args]
    if subprocess.run(cmd, capture_output=quiet).returncode != 0:
        raise SetupError(f"pip failed: {' '.join(cmd[3:])}")


def _make_venv(host: Host, venv: Path, *, system_site: bool) -> None:
    args = [host.python, "-m", "venv", *(["--system-site-packages"] if system_site else []), str(venv)]
    if subprocess.run(args, capture_output=True).returncode != 0:
        # no ensurepip on this Python (Debian's python3 without python3-venv, some virtualenvs): no pip inside
        done = subprocess.run([*args[:3], "--without-pip", *args[3:]], capture_output=True, text=True)
        if done.returncode != 0:
            raise SetupError(f"cannot make a virtual environment with {host.python}: {done.stderr.strip()}")


def _link_host(host: Host, venv: Path) -> None:
    # The host's own site directories after the environment's own: torch (and whatever else the host has)
    # imports from where the host keeps it, while packages installed into the environment come first.
    own = _site_packages(venv)
    dirs = [d for d in host.site_dirs if Path(d).is_dir() and Path(d).resolve() != own.resolve()]
    (own / HOST_LINK_NAME).write_text("".join(f"{d}\n" for d in dirs))


def _link_project(root: Path, venv: Path) -> None:
    # What an editable install does, without a build backend or the network: src on the path, and the CLI.
    own = _site_packages(venv)
    (own / LINK_NAME).write_text(f"{root / 'src'}\n")
    script = venv / "bin" / "jaggedperf"
    script.write_text(textwrap.dedent(f"""\
        #!{venv_python(venv)}
        import sys
        from jaggedperf.cli import main
        if __name__ == "__main__":  # spawned workers (repro/run --timeout, sweep) import this file again
            sys.exit(main())
        """))
    script.chmod(0o755)


def _missing(python: Path, requirements: dict[str, str]) -> list[str]:
    return [req for module, req in requirements.items() if not _imports(python, module)]


def _install_missing(python: Path, requirements: dict[str, str]) -> None:
    missing = list(dict.fromkeys(_missing(python, requirements)))
    if not missing:
        return
    if not _has_pip(python):
        raise SetupError(f"missing {', '.join(missing)} and no pip in {python.parent.parent}: install them into "
                         f"the Python that has torch, then run this again")
    try:
        _pip(python, *missing)
    except SetupError as exc:
        raise SetupError(f"missing {', '.join(missing)} and pip could not install them ({exc}); install them "
                         f"into the Python that has torch (offline: from wheels), then run this again") from None


def requirements_for(extra: str | None) -> dict[str, str]:
    wanted = dict(BASE_REQUIREMENTS)
    if extra:
        for name in extra.split(","):
            if name not in EXTRAS:
                raise SetupError(f"unknown extra {name!r}; known: {', '.join(EXTRAS)}")
            wanted.update(EXTRAS[name])
    return wanted


def optional_for(extra: str | None) -> dict[str, str]:
    """The best-effort requirements of the extras named in ``extra`` (import name -> requirement)."""
    wanted: dict[str, str] = {}
    for name in (extra or "").split(","):
        wanted.update(OPTIONAL.get(name, {}))
    return wanted


def install_optional(python: Path, venv: Path, requirements: dict[str, str]) -> list[str]:
    """Try to install each missing optional requirement once per environment; never fail.

    Returns:
        the requirements tried and not installed (each said once on stderr).
    """
    tried = _tried(venv)
    missing = [req for module, req in requirements.items() if req not in tried and not _imports(python, module)]
    failed = []
    has_pip = bool(missing) and _has_pip(python)
    for req in missing:
        try:
            if not has_pip:
                raise SetupError("no pip")
            _pip(python, "--retries", "0", "--timeout", "15", req, quiet=True)
        except SetupError:
            failed.append(req)
            print(f"setup-env: {req} not installed (optional; the tests that need it skip)", file=sys.stderr)
    if missing:
        _mark_tried(venv, tried | set(missing))
    return failed


def _tried(venv: Path) -> set[str]:
    """The best-effort requirements already tried in ``venv`` (OPTIONAL_MARK): each is tried once."""
    mark = venv / OPTIONAL_MARK
    return set(mark.read_text().split()) if mark.exists() else set()


def _mark_tried(venv: Path, requirements: set[str]) -> None:
    (venv / OPTIONAL_MARK).write_text("".join(f"{req}\n" for req in sorted(requirements)))


def install_device_triton(python: Path, venv: Path) -> bool:
    """Install DEVICE_TRITON under ``venv / DEVICE_TRITON_DIR`` (no dependencies: put first on PYTHONPATH by the
    tests that compile with it), unless the environment's own Triton is that version, it is there, or it was tried;
    never fail. Returns whether it is there."""
    target = venv / DEVICE_TRITON_DIR
    if (target / "triton" / "__init__.py").exists():
        return True
    version = DEVICE_TRITON.split("==")[1]
    own = subprocess.run([str(python), "-c", "import triton; print(triton.__version__)"], capture_output=True,
                         text=True)
    tried = _tried(venv)
    if own.stdout.strip() == version or DEVICE_TRITON in tried:
        return False
    try:
        _pip(python, "--retries", "0", "--timeout", "15", "--no-deps", "--target", str(target), DEVICE_TRITON,
             quiet=True)
    except SetupError:
        shutil.rmtree(target, ignore_errors=True)
        print(f"setup-env: {DEVICE_TRITON} not installed beside the environment's Triton (optional; the compile "
              f"tests against it skip)", file=sys.stderr)
    _mark_tried(venv, tried | {DEVICE_TRITON})
    return (target / "triton" / "__init__.py").exists()


def _usable(venv: Path, root: Path) -> bool:
    python = venv_python(venv)
    if not python.exists():
        return False
    check = (f"import sys, torch, jaggedperf; from pathlib import Path; "
             f"sys.exit(0 if Path(jaggedperf.__file__).resolve().is_relative_to(Path({str(root)!r}).resolve()) else 1)")
    return subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0


def set_up(root: Path, venv: Path, host_python: str, extra: str | None) -> str:
    """Make (or keep) ``venv`` for the project at ``root``; returns the route taken."""
    wanted = requirements_for(extra)
    if _usable(venv, root):
        if (_site_packages(venv) / LINK_NAME).exists():  # linked by this script: rewrite what an older one wrote
            _link_project(root, venv)
        _install_missing(venv_python(venv), wanted)
        _best_effort(venv, extra)
        return "kept"
    if venv.exists():
        raise SetupError(f"{venv} exists but cannot import torch and jaggedperf from {root}: remove it and run "
                         f"this again")
    host = probe(host_python)
    try:
        route = _make(root, venv, host, wanted)
    except BaseException:  # a half-made environment would be kept by the next run: remove it
        shutil.rmtree(venv, ignore_errors=True)
        raise
    _best_effort(venv, extra)
    return route


def _best_effort(venv: Path, extra: str | None) -> None:
    """The installs that never fail: the extras' optional requirements, and with the test extra the GPU box's Triton."""
    install_optional(venv_python(venv), venv, optional_for(extra))
    if "test" in (extra or "").split(","):
        install_device_triton(venv_python(venv), venv)


def _make(root: Path, venv: Path, host: Host, wanted: dict[str, str]) -> str:
    python = venv_python(venv)
    if host.usable_torch:
        _make_venv(host, venv, system_site=True)
        _link_host(host, venv)
        if not _imports(python, "torch"):
            raise SetupError(f"the environment made from {host.python} cannot import torch {host.torch}")
        _link_project(root, venv)
        _install_missing(python, wanted)
        return f"reuse torch {host.torch} from {host.prefix}"
    _make_venv(host, venv, system_site=False)
    if not _has_pip(python):
        raise SetupError(f"{host.python} has no usable torch (>= {'.'.join(map(str, MIN_TORCH))}) and no pip to "
                         f"install one")
    _pip(python, PINNED_TORCH)
    if not _imports(python, "triton"):
        try:
            _pip(python, PINNED_TRITON)
        except SetupError:
            print("setup-env: Triton unavailable; the ops' Triton kernels will be skipped", file=sys.stderr)
    _pip(python, *dict.fromkeys(wanted.values()))
    try:  # an ordinary editable install where a build backend can be had; else the same link as reuse
        _pip(python, "--no-deps", "-e", str(root))
    except SetupError:
        _link_project(root, venv)
    return f"fresh: {PINNED_TORCH}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="the project's checkout")
    parser.add_argument("--venv", type=Path, required=True, help="the environment to make or keep")
    parser.add_argument("--python", default="python3", help="the Python to reuse or build from")
    parser.add_argument("--extra", default=None, help="comma-separated extras: " + ", ".join(EXTRAS))
    args = parser.parse_args(argv)
    try:
        route = set_up(args.root.resolve(), args.venv.absolute(), args.python, args.extra)
    except SetupError as exc:
        print(f"setup-env: error: {exc}", file=sys.stderr)
        return 1
    if route != "kept":
        print(f"setup-env: {args.venv}: {route}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
