"""Whole results files, written atomically (a reader sees the old file or the new one): a run's JSON
document, its CSV, any text (reports); and the check, before a run, that its output can be written.

A sweep's JSON lines are appended instead, one durable line at a time (``store``). Files written here get
the mode a plain ``open(path, "w")`` would give them, as the appended ones do.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable

from jaggedperf.inputs import Case
from jaggedperf.lab.result import DeviceTime, Result, RunRecord, Stability, WallStats


def check_writable(path: str | os.PathLike) -> None:
    """Raise if ``path`` could not be written by ``write_text_atomic`` or appended to, before any work is done
    for it (a run that can only fail to save its results should not start).

    Nothing is left behind: an existing file is opened for appending and closed unchanged; in an existing
    folder a temporary file is made and removed; a missing folder (which the writers would make) is not made,
    its nearest existing ancestor must be a folder this process may write into.

    Args:
        path: the output file.

    Raises:
        OSError: with ``filename`` and ``strerror``: a directory, a path through a file, a folder that cannot
            be written, a read-only file.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    if path.exists():
        with open(path, "ab"):
            return
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a folder on its path is a file", str(folder))
    if folder != path.parent:  # the writer would make the missing folders here
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "cannot make its folder (permission denied)", str(folder))
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=folder)
    os.close(fd)
    os.unlink(tmp)


def write_json(path: str | os.PathLike, record: RunRecord) -> None:
    """Write ``record`` as one JSON document, atomically: a reader sees the old file or the new one.

    Args:
        path: the file to write.
        record: the run.

    Raises:
        OSError: the file cannot be written.
    """
    write_text_atomic(path, json.dumps(record.to_dict(), indent=1) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    The file gets the mode a plain ``open(path, "w")`` would give it: the mode of the file it replaces, or
    ``0o666 & ~umask`` for a new one (as the sweep's JSON lines, which are opened for appending).

    Args:
        path: the file to write (its folder is made if missing).
        text: the whole content.

    Raises:
        OSError: the file cannot be written; no temporary file is left behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes it 0600; a plain open() would follow the umask (or keep the old mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def _mode_for(path: Path) -> int:
    """The permission bits ``open(path, "w")`` would leave ``path`` with: its own if it exists, else the umask's."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """This process's umask. Read from /proc where it is there: setting and restoring it (the only portable way)
    would change it for a moment for every thread of the process."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def csv_row(result: Result) -> dict[str, Any]:
    """One result as flat columns: scalar fields as they are, ``case``/``wall``/``device_time``/``host_call``/
    ``stability`` expanded into ``case.B``, ``wall.median_ms``, ``device_time.median_us``, ... (samples stay
    encoded, lists in ``stability`` as JSON), kernel names joined by ``;``
    and each ``extra`` entry as ``extra.<name>`` (JSON when it is not a scalar)."""
    row: dict[str, Any] = {}
    for f in fields(Result):
        v = getattr(result, f.name)
        if f.name == "case":
            row["case_label"] = result.case.label
            row.update({f"case.{k}": x for k, x in result.case.to_dict().items()})
        elif f.name == "wall":
            row.update(_expand("wall", WallStats, v))
        elif f.name == "device_time":
            row.update(_expand("device_time", DeviceTime, v))
        elif f.name == "host_call":
            row.update(_expand("host_call", WallStats, v))
        elif f.name == "stability":
            row.update({k: json.dumps(x) if isinstance(x, (list, dict)) else x
                        for k, x in _expand("stability", Stability, v).items()})
        elif f.name == "kernel_names":
            row["kernel_names"] = ";".join(v)
        elif f.name == "extra":
            for k, x in v.items():
                row[f"extra.{k}"] = x if x is None or isinstance(x, (str, int, float, bool)) else json.dumps(x)
        else:
            row[f.name] = v
    return row


def csv_columns(results: Iterable[Result]) -> list[str]:
    """Column names for ``results``: the fixed ones in field order, then every ``extra.*`` seen, sorted."""
    results = list(results)
    fixed = list(csv_row(Result("", "", "", Case(0, 1, 0, 0.0), "")).keys())
    extra = sorted({k for r in results for k in csv_row(r) if k.startswith("extra.")})
    return fixed + extra


def write_csv(path: str | os.PathLike, results: Iterable[Result]) -> None:
    """Write ``results`` as CSV (one row per cell, the columns of ``csv_columns``), atomically.

    Args:
        path: the file to write.
        results: the results, in row order.

    Raises:
        OSError: the file cannot be written.
    """
    write_text_atomic(path, csv_text(results))


def csv_text(results: Iterable[Result]) -> str:
    """``results`` as CSV text: a header of ``csv_columns``, then one row per cell (``csv_row``)."""
    results = list(results)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=csv_columns(results), restval="", lineterminator="\n")
    writer.writeheader()
    for r in results:
        writer.writerow({k: ("" if v is None else v) for k, v in csv_row(r).items()})
    return buf.getvalue()


def _expand(prefix: str, cls, v) -> dict[str, Any]:
    return {f"{prefix}.{f.name}": (getattr(v, f.name) if v is not None else None) for f in fields(cls)}


def fsync_dir(directory: Path) -> None:
    """Flush ``directory``'s entries (a file made or renamed in it) to disk, where the platform allows."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # not possible on every platform; the data itself is already on disk
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
