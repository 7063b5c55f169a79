"""Running crash-prone calls in a fresh interpreter, so that a crash fails a test instead of killing pytest."""

import json
import os
import subprocess
import sys
import textwrap

import jaggedperf

SRC = os.path.dirname(os.path.dirname(jaggedperf.__file__))  # the subprocess imports the code under test
TESTS = os.path.dirname(os.path.abspath(__file__))  # and the helpers beside this file


def run_isolated(body: str, *, env: dict | None = None, timeout: float = 600) -> dict:
    """Run ``body`` (which sets ``result``, a JSON-able dict) in a fresh interpreter.

    Raises AssertionError with the tail of stderr (where a property prints each example before running it)
    when the subprocess dies."""
    code = "import json, torch, jaggedperf\nresult = {}\n" + textwrap.dedent(body) + "\nprint(json.dumps(result))\n"
    path = os.pathsep.join(p for p in (SRC, TESTS, os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {}), "PYTHONPATH": path})
    assert done.returncode == 0, f"the subprocess died (rc {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def error_text(exc: BaseException) -> str:
    """An exception's message with its causes' (Dynamo's fullgraph wraps a user exception as the cause)."""
    parts = []
    while exc is not None:
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)
