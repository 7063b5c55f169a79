"""What the scheduler needs of a back end: start a worker on a slot, exchange messages with it, wait
for it, end it. Local processes (``local``) are one back end; a Ray actor or a Slurm array task per
slot would be another module implementing ``Backend`` and ``WorkerHandle`` (``ray_backend`` is one).

Whatever runs it, a worker runs ``worker.serve`` and the messages are the same:

- worker → parent: ``("ready", info)`` once set up (``info``: a dict of facts for the results file's
  header, ``copy_gbps`` and ``gpu_facts`` among them), or ``("failed", why)`` before it exits;
  ``("result", Result)`` per cell; ``("unusable", why)`` when its device no longer works, before it exits;
- parent → worker: a unit (a list of cells, run in order), or ``worker.STOP``.

The scheduler's invariants a back end may rely on: it calls ``send`` only on a ready, idle worker; it
calls ``kill`` or ``stop`` once per handle and forgets the handle afterwards.
"""

from __future__ import annotations

from typing import Protocol

from jaggedperf.lab import runner
from jaggedperf.lab.sweep.slots import WorkerSlot


class WorkerHandle(Protocol):
    """The parent's end of one started worker."""

    def send(self, message: object) -> None:
        """Send a unit or ``worker.STOP``."""

    def receive(self) -> list[tuple]:
        """Every message that has arrived, without waiting ([] once the worker is gone)."""

    def has_message(self) -> bool:
        """Whether a message is waiting to be received."""

    def alive(self) -> bool:
        """Whether the worker is still running."""

    def exit_code(self) -> int | None:
        """The worker's exit code once it has ended (negative: the signal that ended it), else None."""

    def lost(self) -> bool:
        """Whether the ended worker was lost with its machine (a node that left the cluster), not ended by
        its cell: the scheduler then requeues its cells in flight instead of recording the first as died.
        Optional: a handle without it is never lost."""

    def kill(self) -> None:
        """End the worker and anything it started, now, and release the handle's resources."""

    def stop(self) -> None:
        """Ask an idle worker to exit; kill it if it does not, and release the handle's resources."""


class Backend(Protocol):
    """Starts workers and waits on them."""

    def start(self, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...],
              log_path: str | None) -> WorkerHandle:
        """Start a worker on ``slot`` that imports ``plugins`` and runs cells with ``options`` (its device
        set from the slot); its output goes to ``log_path`` (None: the parent's)."""

    def wait(self, handles: list[WorkerHandle], timeout: float | None) -> None:
        """Return once a message or a death is waiting on one of ``handles``, or after ``timeout`` seconds
        (None: no limit)."""
