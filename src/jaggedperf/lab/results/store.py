"""Results files: read either form into a ``RunRecord``, and append to a sweep's JSON lines durably.

Two forms are read:

- a JSON document, ``RunRecord.to_dict()``: ``{"environment": {...}, "copy_gbps": ..., "results": [...]}``;
- JSON lines (sweeps, appended as cells finish). Each line is one JSON object, either an environment
  header ``{"environment": {...}, "copy_gbps": ...}`` or one ``Result.to_dict()`` (a line holding a whole
  document, with ``"results"``, is read as a header plus its results). A resumed sweep appends a new
  header: the first environment wins and the later ones that differ from it are kept, in order, in
  ``environment["more"]``. A cell written twice keeps its later line (with a warning, unless the later
  line is a retry: ``extra["retry"]``, written by ``sweep --retry-failed``).

A process killed while appending loses at most the line in flight: each line is written with one
``write`` and then flushed and fsync'ed. Such an unfinished last line (no newline, not JSON) is skipped
with a warning when reading; the next append cuts it off first so that the file stays one object per line.

Every problem with a file's content raises ``ResultsFileError`` naming the file (and the line for JSON
lines). A result's fields are read by ``typed.from_data`` (by their annotated types), the reader the doctor's saved
evidence and ``Result.from_dict`` use too: one rule for what a results file may hold. Nothing here prints: warnings
are returned to the caller. Whole files (a JSON document, CSV, a report) are written atomically by ``atomic``.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Any

from jaggedperf.lab.result import STATUSES, Result, RunRecord
from jaggedperf.lab.results.atomic import fsync_dir
from jaggedperf.lab.results.typed import IncompatibleData, from_data

RETRY = "retry"  # extra[RETRY] on a result: it re-ran a failed cell of the file (what failed, from the scheduler)
RESULT_KEYS = ("op", "implementation", "mode", "case", "device")  # a result line needs at least these
HEADER_KEYS = {"environment", "copy_gbps"}  # an environment header line (write_environment_header) holds these
CASE_KEYS = ("B", "M", "seqlen", "sparsity")  # a case needs at least these (the rest have defaults)
_MARKERS = ('{"environment"', '{"op"')  # how the lines this module writes begin


class ResultsFileError(Exception):
    """A results file that cannot be read: missing, not JSON, or not shaped like results.

    The message is one line that names the file (``path:line: ...`` where a line is known).
    """


# --- reading --------------------------------------------------------------------------------------


def load_results(path: str | os.PathLike) -> RunRecord:
    """The ``RunRecord`` in ``path`` (a JSON document or JSON lines), without its warnings.

    Args:
        path: the results file.

    Returns:
        The record (see ``read_results``).

    Raises:
        ResultsFileError: the file cannot be read as results.
    """
    return read_results(path)[0]


def read_results(path: str | os.PathLike) -> tuple[RunRecord, list[str]]:
    """The ``RunRecord`` in ``path`` and the warnings met while reading it.

    Args:
        path: a JSON document (``write_json``) or JSON lines (a sweep's: environment headers and one
            result per line).

    Returns:
        ``(record, warnings)``; warnings name an unfinished last line, repeated cells (the later line
        wins) or an empty file.

    Raises:
        ResultsFileError: the file is missing, unreadable, not JSON, or holds something that is not a
            result (one line: the file, the line and what is wrong).
    """
    path = Path(path)
    text = _read_text(path)
    if not text.strip():
        return RunRecord({}, [], None), [f"{path}: empty file, no results"]
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        first = next(line.strip() for line in text.splitlines() if line.strip())
        if first.startswith(_MARKERS) or isinstance(_try_json(first), dict):
            return _read_lines(path, text)
        raise _error(path, err.lineno, f"not JSON ({err.msg}, column {err.colno})") from None
    if not isinstance(doc, dict):
        raise _error(path, None, f"expected a JSON object (a run record) or JSON lines, got a {_kind(doc)}")
    if "results" in doc:
        return _record_from_document(path, doc), []
    # One JSON object that is not a document: a JSON-lines file of a single line (a header or a result), or a JSON
    # file of another kind (a benchmark's summary, pretty-printed), which must not read as a run of no cells.
    if "\n" not in text.strip() and (set(doc) <= HEADER_KEYS or any(k in doc for k in RESULT_KEYS)):
        return _read_lines(path, text)
    raise _error(path, None, f"not a results file: one JSON object without a \"results\" list (its keys: "
                             f"{', '.join(list(doc)[:8])}{', …' if len(doc) > 8 else ''}); a results file holds a run's "
                             "\"results\" or one result per line (a benchmark's summary is read with json.load, through "
                             "gzip.open where it ends in .gz)")


def finished_keys(path: str | os.PathLike) -> tuple[set[tuple], list[str]]:
    """Keys (``Result.key``) of the cells already in ``path``, whatever their status, for a resumed sweep.

    Args:
        path: the results file; a missing file has none.

    Returns:
        ``(keys, warnings)``; an unfinished last line is not a finished cell and is reported in ``warnings``.

    Raises:
        ResultsFileError: anything else wrong with the file.
    """
    path = Path(path)
    if not path.exists():
        return set(), []
    record, warnings = read_results(path)
    return {r.key for r in record.results}, warnings


GZIP_MAGIC = b"\x1f\x8b"


def read_text(path: str | os.PathLike) -> str:
    """A results file's text, plain or gzip-compressed (the committed ``*.jsonl.gz``/``*.json.gz``: recognised
    by their first bytes, whatever the name).

    Raises:
        ResultsFileError: missing, a directory, unreadable, not gzip data past its magic, or not UTF-8 text.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ResultsFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ResultsFileError(f"{path}: is a directory, not a results file") from None
    except OSError as err:
        raise ResultsFileError(f"{path}: cannot read ({err.strerror or err})") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise ResultsFileError(f"{path}: gzip-compressed, but cannot be decompressed ({err})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ResultsFileError(f"{path}: not a text file (byte {err.start} is not UTF-8)") from None


_read_text = read_text


def _read_lines(path: Path, text: str) -> tuple[RunRecord, list[str]]:
    lines = text.split("\n")
    unterminated = not text.endswith("\n")  # the last line is still being (or was never fully) written
    last = max(i for i, line in enumerate(lines) if line.strip())
    warnings: list[str] = []
    environment: dict[str, Any] | None = None
    copy_gbps: float | None = None
    more: list[dict] = []
    results: dict[tuple, Result] = {}  # by key, in first-seen order; a later line for a cell replaces it
    seen_at: dict[tuple, int] = {}

    def add_header(lineno: int, env: Any, gbps: Any) -> None:
        nonlocal environment, copy_gbps
        if not isinstance(env, dict):
            raise _error(path, lineno, f'"environment" must be an object, got a {_kind(env)}')
        gbps = _number_or_none(path, lineno, "copy_gbps", gbps)
        if environment is None:
            environment, copy_gbps = dict(env), gbps
            return
        if copy_gbps is None:
            copy_gbps = gbps
        later = dict(env)
        if gbps is not None and gbps != copy_gbps:
            later["copy_gbps"] = gbps
        if later != {k: v for k, v in environment.items() if k != "more"} and later not in more:
            more.append(later)

    def add_result(lineno: int, d: dict, where: str) -> None:
        result = _result_from_dict(path, lineno, d, where)
        if result.key in results and RETRY not in result.extra:  # a retry (sweep --retry-failed) is meant to repeat
            warnings.append(
                f"{path}:{lineno}: repeats the cell of line {seen_at[result.key]} "
                f"({result.implementation} {result.mode} {result.case.label}); the later line is kept"
            )
        results[result.key] = result
        seen_at[result.key] = lineno

    for i, line in enumerate(lines):
        if not line.strip():
            continue
        lineno = i + 1
        try:
            d = json.loads(line)
        except json.JSONDecodeError as err:
            if i == last and unterminated:
                warnings.append(f"{path}:{lineno}: unfinished last line (a run stopped while writing it?); skipped")
                break
            raise _error(path, lineno, f"not JSON ({err.msg}, column {err.colno})") from None
        if not isinstance(d, dict):
            raise _error(path, lineno, f"expected a JSON object, got a {_kind(d)}")
        if "results" in d:  # a whole document on one line
            rs = d["results"]
            if not isinstance(rs, list):
                raise _error(path, lineno, f'"results" must be a list, got a {_kind(rs)}')
            add_header(lineno, d.get("environment", {}), d.get("copy_gbps"))
            for j, r in enumerate(rs):
                add_result(lineno, r, f"results[{j}]: ")
        elif "environment" in d and "op" not in d:
            add_header(lineno, d["environment"], d.get("copy_gbps"))
        else:
            add_result(lineno, d, "")

    env = environment if environment is not None else {}
    if more:
        env["more"] = list(env.get("more", [])) + more
    return RunRecord(env, list(results.values()), copy_gbps), warnings


def _record_from_document(path: Path, doc: dict) -> RunRecord:
    env = doc.get("environment", {})
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise _error(path, None, f'"environment" must be an object, got a {_kind(env)}')
    rs = doc["results"]
    if not isinstance(rs, list):
        raise _error(path, None, f'"results" must be a list, got a {_kind(rs)}')
    results = [_result_from_dict(path, None, r, f"results[{j}]: ") for j, r in enumerate(rs)]
    return RunRecord(env, results, _number_or_none(path, None, "copy_gbps", doc.get("copy_gbps")))


def _result_from_dict(path: Path, lineno: int | None, d: Any, where: str) -> Result:
    if not isinstance(d, dict):
        raise _error(path, lineno, f"{where}expected a result object, got a {_kind(d)}")
    missing = [k for k in RESULT_KEYS if k not in d]
    if missing:
        what = "neither an environment header nor a result: " if not where and "environment" not in d else where
        raise _error(path, lineno, f"{what}missing key{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
    case = d["case"]
    if not isinstance(case, dict):
        raise _error(path, lineno, f'{where}"case" must be an object, got a {_kind(case)}')
    missing = [k for k in CASE_KEYS if k not in case]
    if missing:
        raise _error(path, lineno, f"{where}case is missing {', '.join(map(repr, missing))}")
    status = d.get("status", "ok")
    if status not in STATUSES:
        raise _error(path, lineno, f"{where}unknown status {status!r} (expected one of {', '.join(STATUSES)})")
    try:
        return from_data(Result, d)  # every field by its annotated type, nested dataclasses by theirs
    except IncompatibleData as err:
        raise _error(path, lineno, f"{where}{err}") from None


def _number_or_none(path: Path, lineno: int | None, name: str, v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _error(path, lineno, f'"{name}" must be a number or null, got {v!r}')
    return float(v)


def _error(path: Path, lineno: int | None, msg: str) -> ResultsFileError:
    where = f"{path}:{lineno}" if lineno is not None else f"{path}"
    return ResultsFileError(_one_line(f"{where}: {msg}"))


def _one_line(x: Any) -> str:
    return " ".join(str(x).split())


def _kind(v: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(v), "number")


def _try_json(s: str) -> Any:
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return None


# --- appending (sweeps) ---------------------------------------------------------------------------


def write_environment_header(path: str | os.PathLike, environment: dict[str, Any], copy_gbps: float | None) -> None:
    """Append an environment header line to the JSON-lines file ``path`` (created if missing).

    Args:
        path: the results file.
        environment: the run's environment (``env.environment``).
        copy_gbps: the run's copy bandwidth, or None.

    Raises:
        ResultsFileError: as ``append_result``.
        OSError: the file cannot be written.
    """
    _append_line(Path(path), {"environment": environment, "copy_gbps": copy_gbps})


def append_result(path: str | os.PathLike, result: Result) -> None:
    """Append ``result`` as one JSON line to ``path`` (created if missing), flushed and fsync'ed.

    If the file ends in an unfinished line (a writer killed mid-line), that line is cut off first; if it
    is in fact a complete JSON object missing only its newline, the newline is added instead. One writer
    at a time.

    Args:
        path: the results file.
        result: the cell's result.

    Raises:
        ResultsFileError: the file is not JSON lines (a pretty-printed document, say) or ends in a line
            this module did not begin; the file is left as it was.
        OSError: the file cannot be written.
    """
    _append_line(Path(path), result.to_dict())


def _append_line(path: Path, obj: dict) -> None:
    line = (json.dumps(obj) + "\n").encode("utf-8")  # serialise first: a failure here leaves the file as it was
    path.parent.mkdir(parents=True, exist_ok=True)
    created = not path.exists()
    if not created:
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:  # plain lines after gzip data would make the file unreadable
                raise ResultsFileError(f"{path}: gzip-compressed; results are appended to a plain JSON-lines file "
                                       "(decompress it, or write to another --json)")
    with open(path, "ab") as f:
        _end_on_a_line_boundary(path, f)
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    if created:
        fsync_dir(path.parent)


def _end_on_a_line_boundary(path: Path, f) -> None:
    """Before appending to ``f`` (``path`` open for appending, binary): make sure the file is JSON lines and
    ends with a newline. An unfinished last line that this module began (a writer killed mid-line) is cut
    off; a complete object missing only its newline gets one. Anything else is left alone and refused."""
    size = f.seek(0, os.SEEK_END)
    if size == 0:
        return
    with open(path, "rb") as r:
        first = r.readline(1 << 20)
        if first.endswith(b"\n") and not isinstance(_try_json(first.decode("utf-8", "replace")), dict):
            raise ResultsFileError(f"{path}:1: not a JSON-lines results file (one JSON object per line); "
                                   "not appending to it")
        r.seek(size - 1)
        if r.read(1) == b"\n":
            return
        # Find the start of the unfinished line, reading backwards in blocks.
        start, pos, block = 0, size, 1 << 16
        while pos > 0:
            step = min(block, pos)
            pos -= step
            r.seek(pos)
            chunk = r.read(step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                start = pos + nl + 1
                break
        r.seek(start)
        tail = r.read()
    if isinstance(_try_json(tail.decode("utf-8", "replace")), dict):
        f.write(b"\n")
    elif tail.startswith(tuple(m.encode() for m in _MARKERS)):
        f.truncate(start)
        f.seek(start)
    else:
        lineno = 1 + sum(chunk.count(b"\n") for chunk in _blocks(path, start))
        raise ResultsFileError(f"{path}:{lineno}: last line is not JSON and not one this program began; "
                               "fix or remove it before appending")


def _blocks(path: Path, end: int, size: int = 1 << 20):
    with open(path, "rb") as r:
        pos = 0
        while pos < end:
            chunk = r.read(min(size, end - pos))
            if not chunk:
                return
            pos += len(chunk)
            yield chunk
