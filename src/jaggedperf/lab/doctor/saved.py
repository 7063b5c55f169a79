"""A doctor's ``--json`` read back as typed evidence, to be diagnosed again by today's ``verdicts``.

The file is ``DoctorRecord.to_dict()``: ``{"environment", "copy_gbps", "cells": [{"evidence", "diagnosis"}]}``,
plain or gzip-compressed. Only the evidence is read (the recorded diagnoses are what the code of the day
said; ``verdicts.diagnose_run`` says it again). The evidence is rebuilt by its field types
(``results.typed``): files written before a field existed load with its default.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from jaggedperf.lab.doctor.evidence import Evidence, EvidenceRun
from jaggedperf.lab.results.store import ResultsFileError
from jaggedperf.lab.results.typed import IncompatibleData, from_data

_GZIP_MAGIC = b"\x1f\x8b"


def load_evidence(path: str | os.PathLike) -> EvidenceRun:
    """The evidence of every cell of a doctor's JSON (``jaggedperf doctor --json``), in the file's order.

    Args:
        path: the file, plain or gzip-compressed (``.json.gz``).

    Returns:
        The run: its environment, copy bandwidth and evidence.

    Raises:
        ResultsFileError: the file is missing, not JSON, not a doctor's, or its evidence does not fit today's
            ``Evidence`` (one line naming the file and where in it).
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ResultsFileError(f"{path}: no such file") from None
    except OSError as err:
        raise ResultsFileError(f"{path}: cannot read ({err.strerror or err})") from None
    try:
        text = (gzip.decompress(raw) if raw[:2] == _GZIP_MAGIC else raw).decode("utf-8")
        doc = json.loads(text)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultsFileError(f"{path}: not a doctor's JSON ({err})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        raise ResultsFileError(f"{path}: not a doctor's JSON (no \"cells\": write one with jaggedperf doctor --json)")
    try:
        evidence = [from_data(Evidence, _evidence_of(cell, i), f"cells[{i}].evidence")
                    for i, cell in enumerate(doc["cells"])]
        copy_gbps = from_data(float | None, doc.get("copy_gbps"), "copy_gbps")
        environment = from_data(dict, doc.get("environment", {}), "environment")
    except IncompatibleData as exc:
        raise ResultsFileError(f"{path}: {exc}") from None
    return EvidenceRun(environment, copy_gbps, evidence)


def _evidence_of(cell, i: int) -> dict:
    if not isinstance(cell, dict) or "evidence" not in cell:
        raise IncompatibleData(f"cells[{i}]: a cell without evidence")
    return cell["evidence"]
