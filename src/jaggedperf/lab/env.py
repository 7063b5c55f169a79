"""The environment a run happened in: versions, device, commit and command, for every results file."""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import torch


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def triton_version() -> str | None:
    """Triton's version, or None when Triton is not installed."""
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def git_commit() -> str | None:
    """Commit of the checkout this package runs from, with ``-dirty`` when it has local changes."""
    here = Path(__file__).resolve().parent
    commit = _run(["git", "rev-parse", "HEAD"], cwd=here)
    if commit is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here)
    return commit + ("-dirty" if dirty else "")


def gpu_facts(device: torch.device | None = None) -> dict:
    """The GPU's name, driver, SM count, L2 and memory size (``device``, else the current one); Nones without CUDA."""
    if not torch.cuda.is_available():
        return {"gpu": None, "driver": None, "sm_count": None, "l2_bytes": None}
    props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {
        "gpu": props.name,
        "driver": driver.splitlines()[0] if driver else None,
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "memory_bytes": props.total_memory,
    }


def environment(argv: list[str] | None = None, *, gpu: dict | None = None) -> dict:
    """What a results file records. ``gpu``: facts (as ``gpu_facts``) measured elsewhere, e.g. by a sweep's
    worker process, so that this process need not touch the GPU."""
    argv = sys.argv if argv is None else argv
    return {
        "torch": torch.__version__,
        "triton": triton_version(),
        "cuda": torch.version.cuda,
        **(gpu_facts() if gpu is None else gpu),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_count": _cpu_count(),
        "git_commit": git_commit(),
        "command": shlex.join(["jaggedperf", *argv[1:]]) if argv else None,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _cpu_count() -> int | None:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
