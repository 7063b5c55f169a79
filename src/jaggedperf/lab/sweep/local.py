"""The local back end: one long-lived process per slot on this host.

Each worker is started with the spawn method and its slot's environment (``CUDA_VISIBLE_DEVICES``), so
that it sees its GPU as ``cuda``; spawn hands the parent's ``sys.path`` to the child, so plugins import
there as here. A worker makes its own process group, so that a kill takes Inductor's compile workers
with it, and exits by itself as soon as its parent ends (a watchdog thread), so a killed sweep leaves
no orphans.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

from jaggedperf.lab import runner
from jaggedperf.lab.sweep import worker
from jaggedperf.lab.sweep.slots import WorkerSlot

STOP_WAIT_S = 10.0  # how long an idle worker asked to stop may take to exit before it is killed


class LocalProcesses:
    """``Backend`` on this host: each worker a spawned process, talked to through a pipe."""

    def start(self, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...],
              log_path: str | None) -> LocalWorker:
        """Spawn a worker process for ``slot`` (see ``backend.Backend.start``).

        Returns:
            The parent's handle on it.
        """
        ctx = multiprocessing.get_context("spawn")
        parent_end, child_end = ctx.Pipe()
        process = ctx.Process(target=_main, name=f"jaggedperf-sweep-{slot.name}",
                              args=(child_end, slot, options, tuple(plugins), log_path))
        with _environ(dict(slot.env)):
            process.start()
        child_end.close()
        return LocalWorker(process, parent_end)

    def wait(self, handles: list[LocalWorker], timeout: float | None) -> None:
        """Wait on the handles' pipes and process sentinels (see ``backend.Backend.wait``)."""
        waitables = [o for h in handles for o in (h.conn, h.process.sentinel)]
        multiprocessing.connection.wait(waitables, timeout=timeout)


class LocalWorker:
    """``WorkerHandle`` of a local worker process."""

    def __init__(self, process: multiprocessing.process.BaseProcess, conn: multiprocessing.connection.Connection):
        self.process = process
        self.conn = conn
        self.leads_group = False  # it has made its own process group (it says so by being ready)

    def send(self, message: object) -> None:
        self.conn.send(message)

    def receive(self) -> list[tuple]:
        messages = []
        try:
            while self.conn.poll():
                messages.append(self.conn.recv())
        except (EOFError, OSError):  # the worker is gone; its death is handled by the caller
            pass
        if any(kind == "ready" for kind, _ in messages):
            self.leads_group = hasattr(os, "killpg")
        return messages

    def has_message(self) -> bool:
        return self.conn.poll()

    def alive(self) -> bool:
        return self.process.is_alive()

    def exit_code(self) -> int | None:
        return self.process.exitcode

    def lost(self) -> bool:
        return False  # a local process ends by itself or by a signal, never by losing its host

    def kill(self) -> None:
        """Kill the worker and, once it leads its own process group, the group: Inductor's compile
        workers go too, even when the worker itself has already exited."""
        if self.leads_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.kill()  # a no-op on a process already reaped
        self.process.join(10)
        self.conn.close()

    def stop(self) -> None:
        """Ask the (idle) worker to exit, then kill it and its group (a no-op for what has exited)."""
        with contextlib.suppress(OSError, ValueError):
            self.conn.send(worker.STOP)
        # Wait for it to exit without reaping it: until kill() reaps it, its pid still names its group.
        multiprocessing.connection.wait([self.process.sentinel], timeout=STOP_WAIT_S)
        self.kill()


@contextlib.contextmanager
def _environ(changes: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``changes`` while a worker is spawned (the child copies it at start)."""
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _main(conn, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...], log_path: str | None) -> None:
    """The worker process's entry point."""
    if log_path:
        redirect_output(log_path, slot)
    if hasattr(os, "setpgrp"):
        os.setpgrp()  # its own process group: a kill on timeout takes its children with it
    _exit_with_parent()
    worker.serve(conn, slot, options, plugins)


def _exit_with_parent() -> None:
    """Exit as soon as the parent process ends, whatever this worker is doing (no orphans)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def redirect_output(path: str, slot: WorkerSlot) -> None:
    """Append this process's stdout and stderr (file descriptors 1 and 2) to ``path``, with a first line
    naming the worker (also used by the Ray back end's actors).

    Args:
        path: the workers' log; its folder is made if missing.
        slot: the worker's slot, for that line.

    Raises:
        OSError: the log cannot be opened.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    os.write(2, f"--- {stamp} worker {slot.name} (pid {os.getpid()}) started\n".encode())
