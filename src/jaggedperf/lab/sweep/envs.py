"""Sweeps under other torch versions: one virtual environment per version, cached between runs, the
project linked into each, and the same sweep run in each by that environment's Python.

An environment is made with uv when it is on the PATH, else with ``venv`` and pip, from the Python
running this one (so every version runs the same interpreter). Only the project's own requirements
go in beside torch (numpy, rich); the project itself is linked by a ``.pth`` file naming its ``src``,
as ``scripts/setup_env.py`` links it, so no build backend and no copy is needed, and an edit of the
checkout is seen by every environment at once. Where the package index offers a CPU build of the
version (a ``+cpu`` wheel), pip prefers it, being the higher version; otherwise the index's build comes
with the CUDA libraries it links, which a CPU sweep loads but never uses.

Invariants:

- an environment is usable only once its marker file is written, last, after torch imported in it; one
  without the marker (a build that was killed) is removed and made again;
- one builder per environment at a time: the build holds the sweep's lock on the environment's folder;
- a sweep in an environment is the ordinary engine (``plan_sweep`` + ``run_sweep``) run by that
  environment's Python on a job handed over as a pickle: planning, resume, timeouts and the results
  file are the engine's, only the interpreter changes. Nothing crosses back but the results file and a
  small JSON status file.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from jaggedperf.inputs import Case
from jaggedperf.lab import runner
from jaggedperf.lab.sweep import lock
from jaggedperf.lab.sweep.scheduler import Settings

CACHE_ENV = "JAGGEDPERF_ENV_CACHE"  # where the environments live (default ~/.cache/jaggedperf/torch-envs)
MARKER = "jaggedperf-env.json"  # written last: its presence means the environment is whole
REQUIREMENTS = ("numpy", "rich>=13")  # the project's own (pyproject's dependencies but torch)
LINK_NAME = "jaggedperf-src.pth"  # the same name scripts/setup_env.py gives the project's link
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")

Runner = Callable[..., subprocess.CompletedProcess]  # subprocess.run's shape; a test may hand its own


class EnvError(RuntimeError):
    """An environment could not be made or used; the message says which step failed and how."""


@dataclass(frozen=True)
class TorchEnv:
    """A ready environment: the version asked for, its folder, and the torch it imports."""

    requested: str  # "2.11" or "2.11.0", as asked
    path: Path
    torch: str  # torch.__version__ in it, "2.11.0" or "2.13.0+cpu"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def parse_versions(text: str) -> list[str]:
    """``"2.11,2.13.0"`` as a list of versions, each once, in order.

    Args:
        text: comma-separated ``MAJOR.MINOR`` or ``MAJOR.MINOR.PATCH``.

    Returns:
        The versions.

    Raises:
        ValueError: an empty list or a version that is not of that form.
    """
    versions = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in versions if not _VERSION.match(v)]
    if bad or not versions:
        raise ValueError(f"--torch: expected versions like 2.11 or 2.13.0, comma-separated; got {text!r}")
    return list(dict.fromkeys(versions))


def requirement(version: str) -> str:
    """The pip requirement for ``version``: ``2.11`` is the newest 2.11.x, ``2.11.0`` exactly that."""
    return f"torch=={version}" if version.count(".") == 2 else f"torch=={version}.*"


def cache_dir() -> Path:
    """Where environments are kept: ``$JAGGEDPERF_ENV_CACHE`` or ``~/.cache/jaggedperf/torch-envs``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "jaggedperf" / "torch-envs")


def ensure_env(version: str, *, root: Path, cache: Path | None = None, python: str = sys.executable,
               run: Runner = subprocess.run) -> TorchEnv:
    """The environment of torch ``version``, made if it is not cached yet (see the module's notes).

    Args:
        version: ``MAJOR.MINOR[.PATCH]``.
        root: the project's checkout (its ``src`` is linked into the environment).
        cache: where environments are kept (default ``cache_dir()``).
        python: the interpreter the environment is made from.
        run: runs each step (``subprocess.run``'s signature).

    Returns:
        The ready environment.

    Raises:
        EnvError: a step failed (the message names it and holds the tool's last lines of output).
        lock.SweepLocked: another process is making the same environment.
    """
    cache = cache or cache_dir()
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}" if python == sys.executable else _python_tag(python, run)
    path = cache / f"torch-{version}-{tag}"
    with lock.hold(path):
        marker = _read_marker(path)
        if marker is None:
            shutil.rmtree(path, ignore_errors=True)  # a build that did not finish
            _build(path, version, python, run)
            marker = {"torch": _torch_version(path, run)}
        _link_project(path, root, run)  # again when kept: the checkout may have moved
        (path / MARKER).write_text(json.dumps({**marker, "requested": version}) + "\n")
    return TorchEnv(version, path, marker["torch"])


def _python_tag(python: str, run: Runner) -> str:
    done = _step(run, [python, "-c", "import sys; print(f'py{sys.version_info[0]}{sys.version_info[1]}')"],
                 "probe the Python")
    return done.stdout.strip()


def _read_marker(path: Path) -> dict | None:
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    python = path / "bin" / "python"
    return marker if isinstance(marker, dict) and marker.get("torch") and python.exists() else None


def _build(path: Path, version: str, python: str, run: Runner) -> None:
    """Make the environment at ``path`` and install torch ``version`` and the requirements into it."""
    uv = shutil.which("uv")
    env_python = str(path / "bin" / "python")
    wanted = [requirement(version), *REQUIREMENTS]
    try:
        if uv:
            _step(run, [uv, "venv", "--python", python, str(path)], "make the environment (uv venv)")
            _step(run, [uv, "pip", "install", "--python", env_python, *wanted], "install torch (uv pip)")
        else:
            _step(run, [python, "-m", "venv", str(path)], "make the environment (python -m venv)")
            _step(run, [env_python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *wanted],
                  "install torch (pip)")
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # no half-made environment is kept
        raise


def _torch_version(path: Path, run: Runner) -> str:
    done = _step(run, [str(path / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                 "import torch in the new environment")
    return done.stdout.strip().splitlines()[-1]


def _link_project(path: Path, root: Path, run: Runner) -> None:
    done = _step(run, [str(path / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                 "find the environment's site-packages")
    site = Path(done.stdout.strip().splitlines()[-1])
    site.mkdir(parents=True, exist_ok=True)
    (site / LINK_NAME).write_text(f"{Path(root).resolve() / 'src'}\n")


def _step(run: Runner, cmd: list[str], what: str) -> subprocess.CompletedProcess:
    done = run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = " ".join(((done.stderr or "") + (done.stdout or "")).split())[-600:]
        raise EnvError(f"could not {what}: {' '.join(cmd[:4])} ... exited {done.returncode}: {tail}")
    return done


# --- a sweep in an environment ----------------------------------------------------------------------


@dataclass
class SweepJob:
    """What a sweep in another environment runs: the grid, how to measure it, where its workers go."""

    out: Path
    op: str
    cases: list[Case]
    implementations: list[str]
    modes: list[str]
    options: runner.Options
    settings: Settings = field(default_factory=Settings)
    gpus: int | str | None = "all"
    device: str | None = None  # "cuda", "cpu", None: the best present
    retry_failed: bool = False
    accept_settings: bool = False


@dataclass
class JobOutcome:
    """How a sweep in an environment ended."""

    returncode: int  # 0: done; 1: the sweep could not go on; 2: the plan was refused; else the process's
    error: str | None  # the engine's message when it did not finish
    written: int  # cells written by this run
    log: Path  # the environment's Python's output (its workers' goes to the job's log_path)


def version_out(out: Path, version: str) -> Path:
    """The results file of ``version`` beside ``out``: ``r.jsonl`` -> ``r.torch-2.11.jsonl``."""
    out = Path(out)
    return out.with_name(f"{out.stem}.torch-{version}{out.suffix}")


def run_job(env: TorchEnv, job: SweepJob, *, log: Path) -> JobOutcome:
    """Run ``job`` in ``env`` by its Python (this module's ``main``), waiting for it to end.

    Args:
        env: from ``ensure_env``.
        job: the sweep; its ``out`` is written by the other Python.
        log: where that Python's stdout and stderr go (appended).

    Returns:
        Its exit code, the engine's error if any, how many cells it wrote.

    Raises:
        OSError: the job or the log cannot be written.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="jaggedperf-job-") as tmp:
        job_path, status_path = Path(tmp) / "job.pickle", Path(tmp) / "status.json"
        job_path.write_bytes(pickle.dumps(job))
        with open(log, "ab") as sink:
            code = subprocess.run([str(env.python), "-m", "jaggedperf.lab.sweep.envs", str(job_path), str(status_path)],
                                  stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        try:
            status = json.loads(status_path.read_text())
        except (OSError, ValueError):
            status = {"error": f"the sweep under torch {env.torch} ended with exit code {code} before it said why "
                               f"(see {log})", "written": 0}
    return JobOutcome(code, status.get("error"), int(status.get("written") or 0), log)


def _serve_job(job_path: str, status_path: str) -> int:
    """In the environment's Python: run the pickled job with the ordinary engine; write the status file."""
    from jaggedperf.lab.plugins import import_plugins
    from jaggedperf.lab.results.store import ResultsFileError
    from jaggedperf.lab.sweep.plan import plan_sweep
    from jaggedperf.lab.sweep.scheduler import SweepError, run_sweep
    from jaggedperf.lab.sweep.slots import worker_slots

    job: SweepJob = pickle.loads(Path(job_path).read_bytes())
    status: dict = {"error": None, "written": 0}
    code = 0
    try:
        import_plugins(job.settings.plugins)
        slots = worker_slots(job.gpus, job.device)
        device = slots[0].device
        plan = plan_sweep(job.out, job.op, job.cases, job.implementations, job.modes,
                          byte_limit=job.options.byte_limit, device=device, settings=job.options.settings(device=device),
                          accept_settings=job.accept_settings, retry_failed=job.retry_failed)
        status["written"] = len(run_sweep(plan, slots, job.options, job.settings).results)
    except (KeyError, ValueError, ResultsFileError, lock.SweepLocked) as exc:  # the plan was refused
        status["error"], code = str(exc), 2
    except SweepError as exc:
        status["error"], code = str(exc), 1
    Path(status_path).write_text(json.dumps(status))
    return code


if __name__ == "__main__":
    sys.exit(_serve_job(sys.argv[1], sys.argv[2]))
