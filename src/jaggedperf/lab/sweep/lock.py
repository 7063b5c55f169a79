"""One sweep per results file: a sweep holds an exclusive ``flock`` on ``<out>.lock`` from before it plans
until it ends, so that a second sweep on the same file (which would plan, and measure, the same cells
again) is refused, with the holder's pid, instead of running.

The lock is the kernel's: it goes when the holder's process ends, however it ends (a crash or a kill
included), so a stale lock file never blocks a later sweep. The holder writes its pid and host into the
file for the refusal's message, and removes the file when it is done, while still holding it (a sweep that
opened the old file meanwhile sees that the path no longer names what it locked, and tries again).

Within one process the lock is re-entrant per file: the CLI takes it before planning and ``run_sweep``
takes it again without blocking itself. The file descriptor is not inherited by the workers (Python opens
files non-inheritable), so a worker that outlives its parent for a moment does not hold it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
from pathlib import Path
from typing import Iterator

_HELD: set[str] = set()  # the results files this process holds the lock of (resolved paths)


class SweepLocked(Exception):
    """Another process's sweep is writing to the results file."""


def lock_path(out: str | os.PathLike) -> Path:
    """The lock file of results file ``out``: ``<out>.lock`` beside it.

    Args:
        out: the results file.

    Returns:
        Its lock file's path.
    """
    return Path(f"{os.fspath(out)}.lock")


@contextlib.contextmanager
def hold(out: str | os.PathLike) -> Iterator[None]:
    """Hold the lock of results file ``out`` for the ``with`` block (see the module's notes).

    Args:
        out: the results file (it need not exist; its folder is made if missing).

    Raises:
        SweepLocked: another process holds it; the message names its pid and host, and the lock file.
        OSError: the lock file cannot be made.
    """
    key = str(Path(out).resolve())
    if key in _HELD:
        yield
        return
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, out)
    _HELD.add(key)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {platform.node()}\n".encode())
        yield
    finally:
        _HELD.discard(key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # still locked: no other process holds what is removed
        os.close(fd)


def _acquire(path: Path, out: str | os.PathLike) -> int:
    """An open descriptor of ``path`` with the exclusive lock on it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "pid unknown"
            os.close(fd)
            raise SweepLocked(f"another sweep ({holder}) is writing to {os.fspath(out)} (it holds {path}); "
                              "wait for it to end, or give another --json") from None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            return fd
        os.close(fd)  # the holder removed the file between our open and our lock: lock the new one
