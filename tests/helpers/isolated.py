"""Running crash-prone calls in a fresh interpreter, so that a crash fails a test instead of killing pytest."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jaggedperf

SRC = os.path.dirname(os.path.dirname(jaggedperf.__file__))  # the subprocess imports the code under test
TESTS = str(Path(__file__).resolve().parents[1])  # and the helpers package (``import helpers``)
HELPERS = Path(__file__).resolve().parent


def pythonpath(env: dict | None = None) -> str:
    """PYTHONPATH for a subprocess that imports the code under test and ``helpers``."""
    old = (env if env is not None else os.environ).get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (SRC, TESTS, old) if p)


def run_script(name: str, *, timeout: float, interpret: bool = False,
               first_on_path: str | None = None) -> subprocess.CompletedProcess:
    """Run ``helpers/NAME`` as a script (TRITON_INTERPRET unset unless ``interpret``; ``first_on_path`` before the
    code under test on PYTHONPATH, e.g. another Triton) and return what it did."""
    env = {k: v for k, v in os.environ.items() if interpret or k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (first_on_path, pythonpath(env)) if p)
    return subprocess.run([sys.executable, str(HELPERS / name)], env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_isolated(body: str, *, env: dict | None = None, timeout: float = 600) -> dict:
    """Run ``body`` (which sets ``result``, a JSON-able dict) in a fresh interpreter.

    Raises AssertionError with the tail of stderr (where a property prints each example before running it)
    when the subprocess dies."""
    code = "import json, torch, jaggedperf\nresult = {}\n" + textwrap.dedent(body) + "\nprint(json.dumps(result))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {}), "PYTHONPATH": pythonpath()})
    assert done.returncode == 0, f"the subprocess died (rc {done.returncode}): {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def hold_in_another_process(out):
    """A process that holds ``out``'s lock until killed (as a sweep would); returns it once it holds it."""
    code = ("import sys; from jaggedperf.lab.sweep.lock import hold; h = hold(sys.argv[1]); h.__enter__(); "
            "print('held', flush=True); sys.stdin.read()")
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def error_text(exc: BaseException) -> str:
    """An exception's message with its causes' (Dynamo's fullgraph wraps a user exception as the cause)."""
    parts = []
    while exc is not None:
        parts.append(f"{type(exc).__name__}: {exc}")
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)
