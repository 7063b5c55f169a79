"""Where a sweep's workers run: one slot per GPU of this host (each seeing only its GPU, pinned to its
own share of the cores), or one CPU slot."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

import torch


@dataclass(frozen=True)
class WorkerSlot:
    """Where one worker runs: ``name`` as the parent sees it (``cuda:1``, ``cpu``), ``device`` as the
    worker sees it (``cuda`` or ``cpu``), the environment variables it starts with, and the CPU cores
    it is pinned to (none: not pinned)."""

    name: str
    device: str
    env: tuple[tuple[str, str], ...] = ()
    cpus: tuple[int, ...] = ()


def worker_slots(gpus: int | str | None = "all", device: str | None = None, *, device_count: int | None = None,
                 visible: str | None = None, cpus: Iterable[int] | None = None) -> list[WorkerSlot]:
    """The slots of a sweep on this host.

    One slot per GPU used, each seeing only its GPU through ``CUDA_VISIBLE_DEVICES`` and pinned to its
    own share of the cores, so that one worker's host work (a float64 reference, a compile) does not
    disturb another's wall times; one CPU slot, not pinned, when there is no GPU or ``device`` is
    ``"cpu"`` (more than one CPU worker would share the cores and skew the times).

    Args:
        gpus: how many GPUs to use, or ``"all"`` (None: all).
        device: ``"cuda"``, ``"cpu"``, or None for the best present.
        device_count: GPUs on the host (default ``torch.cuda.device_count()``).
        visible: the parent's ``CUDA_VISIBLE_DEVICES`` (default: this process's).
        cpus: the cores to share out (default: this process's CPU affinity).

    Returns:
        The slots, in GPU order.

    Raises:
        ValueError: a GPU count this host cannot give, or GPUs asked for with ``device="cpu"``.
    """
    if device_count is None:
        device_count = torch.cuda.device_count()
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cpus is None:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
    count = None if gpus in (None, "all") else int(gpus)
    if device == "cpu":
        if count is not None:
            raise ValueError(f"--gpus {count} with --device cpu: a CPU sweep has one worker")
        return [WorkerSlot("cpu", "cpu")]
    if device_count == 0:
        if device is None and count is None:
            return [WorkerSlot("cpu", "cpu")]
        raise ValueError(f"{'--gpus ' + str(count) if count else '--device cuda'}: no CUDA GPU is available")
    count = device_count if count is None else count
    if not 1 <= count <= device_count:
        raise ValueError(f"--gpus {count}: this host has {device_count} GPU{'s' if device_count > 1 else ''}")
    ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(device_count)]
    cores = sorted(cpus)
    share = len(cores) // count  # contiguous blocks (0 when there are fewer cores than workers: no pinning)
    return [WorkerSlot(f"cuda:{i}", "cuda", (("CUDA_VISIBLE_DEVICES", ids[i]),), tuple(cores[i * share:(i + 1) * share]))
            for i in range(count)]
