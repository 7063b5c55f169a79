"""The environment a run happened in: versions, device, commit and command, for every results file, and
how quiet the machine was: CPU threads, load (other processes' CPU use), GPU clocks and other processes
on the GPU where ``nvidia-smi`` (or ``pynvml``) shows them.

Other processes' CPU use is read from ``/proc`` (Linux): the CPU time all processes took over an interval
(``/proc/stat``) less this process's own (``/proc/self/stat``), in CPUs (1.0 = one core kept busy). It is
None where ``/proc`` is missing; ``psutil`` is not needed.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

LOAD_INTERVAL_S = 0.1  # how long ``environment`` watches other processes' CPU use


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


def source_commit() -> str:
    """The checkout's short commit, with ``-dirty`` where its ``src/`` differs from it (the code a benchmark ran), or
    ``"unknown"`` outside a git checkout (a ``git archive`` copy, an installed package): never a suffix alone."""
    here = Path(__file__).resolve().parent
    commit = _run(["git", "rev-parse", "--short", "HEAD"], cwd=here)
    top = _run(["git", "rev-parse", "--show-toplevel"], cwd=here)
    if commit is None or top is None:
        return "unknown"
    changed = _run(["git", "diff", "--name-only", "HEAD", "--", "src"], cwd=Path(top))
    return commit + ("-dirty" if changed else "")


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
    worker process, so that this process need not touch the GPU.

    Besides versions and the command: ``threads`` (torch's intra-op CPU threads now; each result records
    its own) and ``load`` (``load_snapshot``: the machine's load average, other processes' CPU use over
    ``LOAD_INTERVAL_S``, GPU clocks and other processes on the GPU where visible)."""
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
        "threads": torch.get_num_threads(),
        "load": load_snapshot(gpu=gpu is None),
        "git_commit": git_commit(),
        "command": shlex.join(["jaggedperf", *argv[1:]]) if argv else None,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _cpu_count() -> int | None:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# --- load -----------------------------------------------------------------------------------------


def _proc_busy_ticks() -> int | None:
    """CPU ticks all processes spent busy since boot (``/proc/stat``, first line), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is inside user already
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values[:8]) - idle


def _own_ticks() -> int | None:
    """CPU ticks this process (all its threads) spent, user + system (``/proc/self/stat``), or None."""
    try:
        with open("/proc/self/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces: skip past its ')'
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


@dataclass
class CpuLoad:
    """A stopwatch for other processes' CPU use: ``start()``, then ``other_cpus()`` after the interval."""

    wall: float
    busy: int | None
    own: int | None

    @classmethod
    def start(cls) -> "CpuLoad":
        return cls(time.monotonic(), _proc_busy_ticks(), _own_ticks())

    def other_cpus(self, min_window_s: float = 0.0) -> float | None:
        """CPUs other processes kept busy since ``start`` (busy ticks of all less this process's, per second of
        wall), rounded to 0.01; None off Linux or when under 20 ms passed (ticks are 10 ms: too coarse).

        Args:
            min_window_s: watch at least this long, sleeping out the rest (a short window of 10 ms ticks says
                little; load that lasts, like a busy loop, is still there).
        """
        rest = min_window_s - (time.monotonic() - self.wall)
        if rest > 0:
            time.sleep(rest)
        elapsed = time.monotonic() - self.wall
        busy, own = _proc_busy_ticks(), _own_ticks()
        if None in (busy, own, self.busy, self.own) or elapsed < 0.02:
            return None
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        other = ((busy - self.busy) - (own - self.own)) / hz / elapsed
        return round(max(other, 0.0), 2)


def load_snapshot(*, gpu: bool = True, interval_s: float = LOAD_INTERVAL_S) -> dict:
    """How busy the machine is now.

    Args:
        gpu: also ask ``nvidia-smi`` (or ``pynvml``) for GPU clocks, utilisation and other processes.
        interval_s: how long to watch other processes' CPU use.

    Returns:
        ``{"loadavg": [1, 5, 15 min] or None, "other_cpus": CPUs other processes kept busy over the interval
        or None, "cpus": usable CPUs, "gpus": [per GPU: clocks, utilisation, processes] or None}``.
    """
    watch = CpuLoad.start()
    time.sleep(interval_s)
    out: dict = {"loadavg": _loadavg(), "other_cpus": watch.other_cpus(), "cpus": _cpu_count()}
    out["gpus"] = gpu_load() if gpu else None
    return out


def _loadavg() -> list[float] | None:
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except (OSError, ValueError):
        return os.getloadavg() if hasattr(os, "getloadavg") else None


_SMI_FIELDS = ("index", "uuid", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "utilization.gpu",
               "temperature.gpu", "power.draw", "clocks_throttle_reasons.active")


def gpu_load() -> list[dict] | None:
    """Per visible GPU: SM and memory clocks (now and max, MHz), utilisation %, temperature, power, active
    throttle reasons and the compute processes on it (pid, name, MiB) other than this one; from ``nvidia-smi``,
    else ``pynvml``; None when neither is there or there is no CUDA."""
    if not torch.cuda.is_available():
        return None
    text = _run(["nvidia-smi", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits"])
    if text is None:
        return _pynvml_load()
    gpus = []
    for line in text.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(_SMI_FIELDS):
            gpus.append({k.replace(".", "_"): _number(v) for k, v in zip(_SMI_FIELDS, values)})
    apps = _run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                 "--format=csv,noheader,nounits"]) or ""
    for line in apps.splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != 4 or _number(values[1]) == os.getpid():
            continue
        for g in gpus:
            if g.get("uuid") == values[0]:
                g.setdefault("other_processes", []).append(
                    {"pid": _number(values[1]), "name": values[2], "mib": _number(values[3])})
    for g in gpus:
        g.setdefault("other_processes", [])
    return gpus


def _pynvml_load() -> list[dict] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            procs = [{"pid": p.pid, "mib": (p.usedGpuMemory or 0) // 2**20}
                     for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h) if p.pid != os.getpid()]
            gpus.append({
                "index": i,
                "clocks_sm": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "clocks_max_sm": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                "clocks_mem": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                "utilization_gpu": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                "other_processes": procs,
            })
        return gpus
    except Exception:  # NVML present but not usable here: say nothing rather than fail the run
        return None


def _number(text: str):
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value
