"""The worker's side of a sweep, whatever back end started it: set up on its slot, say ready, run the
units it is sent with ``runner.CellRunner`` and send each result back (messages: see ``backend``).

A worker whose cell failed checks that its device still works; a sticky CUDA error (an illegal memory
access in a kernel, say) would fail every later cell in that process, so the worker says so and exits,
and the parent replaces it."""

from __future__ import annotations

import os
import platform
import traceback
from dataclasses import replace
from typing import Protocol

import torch

from jaggedperf.lab import runner
from jaggedperf.lab.measure import timing
from jaggedperf.lab.measure.env import gpu_facts
from jaggedperf.lab.plugins import import_plugins
from jaggedperf.lab.result import ERROR, Result
from jaggedperf.lab.sweep.slots import WorkerSlot

STOP = None  # the message that tells an idle worker to exit


class Channel(Protocol):
    """The worker's end of its link to the parent (a ``multiprocessing`` connection is one)."""

    def send(self, message: object) -> None: ...

    def recv(self) -> object:
        """The next message; raises ``EOFError`` once the parent is gone."""


def serve(channel: Channel, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...]) -> None:
    """Set up on ``slot`` and run the units the parent sends until it sends ``STOP`` or is gone.

    Args:
        channel: the link to the parent.
        slot: where this worker runs (its CPU cores, its device as it sees it).
        options: how each cell is measured; the device is replaced by the slot's.
        plugins: modules imported before anything runs.

    Raises:
        SystemExit: set-up failed (after ``("failed", why)`` was sent), exit code 1.
    """
    try:
        if slot.cpus:
            os.sched_setaffinity(0, slot.cpus)
            torch.set_num_threads(len(slot.cpus))
        import_plugins(plugins)
        device = torch.device(slot.device)
        options = replace(options, device=device)
        copy_gbps = timing.measure_copy_bandwidth(device)
        info = {"device": slot.device, "copy_gbps": copy_gbps, "host": platform.node(), "torch": torch.__version__,
                "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                "threads": torch.get_num_threads(),
                "gpus_visible": torch.cuda.device_count() if device.type == "cuda" else 0,
                "gpu_uuid": str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else None,
                "gpu_facts": gpu_facts(device) if device.type == "cuda" else None}
    except BaseException as exc:
        channel.send(("failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"))
        raise SystemExit(1)
    channel.send(("ready", info))
    run_one = runner.CellRunner(options, copy_gbps)
    while True:
        try:
            unit = channel.recv()
        except EOFError:  # the parent is gone
            return
        if unit is STOP:
            return
        for cell in unit:
            try:
                result = run_one(cell)
                channel.send(("result", result))
            except Exception as exc:  # the runner records a cell's own failures; this is anything else
                result = Result(cell.op, cell.implementation, cell.mode, cell.case, device.type, status=ERROR,
                                reason=f"worker: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
                result.extra["traceback"] = traceback.format_exc(limit=8)
                channel.send(("result", result))
            if result.status == ERROR:
                problem = _device_unusable(device)
                if problem:
                    channel.send(("unusable", problem))
                    return


def _device_unusable(device: torch.device) -> str | None:
    """Why ``device`` can no longer run anything in this process (a sticky CUDA error), or None."""
    if device.type != "cuda":
        return None
    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).cpu()
        torch.cuda.synchronize(device)
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return None
