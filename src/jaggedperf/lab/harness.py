"""The benchmarks' harness: what every script under ``benchmarks/`` does the same way.

- ``device_time``: a callable's device time per call, the lab's method (CUDA-graph replay, L2 flushed before each
  replay; the profiler's kernel sum where the call cannot be captured, if asked), as a JSON-able dict;
- ``within``: a budget of seconds that a long script checks before it starts a cell (so that a cut run still
  writes every finished cell);
- ``write_summary``: a benchmark's published summary, ``NAME.json`` and ``NAME.md`` side by side, each naming the
  exact command and the commit it ran at (``meta``), so that a table can be run again from its summary alone.

The GPU tests that judge the same numbers (``tests/gpu``) call the same functions, so a bar means the same in a
test and in its benchmark.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from jaggedperf.lab.measure import env, timing


def device_time(fn: Callable[[], object], device: torch.device, *, rep_ms: int = 40,
                profiler_fallback: bool = True, samples: bool = False) -> dict:
    """Median, p20 and p80 µs of one call's device work, and the method that measured it.

    CUDA-graph replay of ``fn`` (L2 flushed before each replay); where ``fn`` cannot be captured, the sum of its
    kernels under torch.profiler (10 calls, L2 flushed), or ``RuntimeError`` without ``profiler_fallback``.
    ``samples``: keep every replay's µs too. The caller warms ``fn`` first (its first call compiles).
    """
    graph = timing.capture_graph(fn, device)
    if graph is not None:
        t = timing.replay_device_time(graph.replay, rep_ms=rep_ms)
        del graph
    elif profiler_fallback:
        t = timing.profiler_device_time(timing.profile_kernels(fn, device, calls=10), True)
    else:
        raise RuntimeError("the call could not be captured in a CUDA graph")
    out = {"median_us": t.median_us, "p20_us": t.p20_us, "p80_us": t.p80_us, "method": t.method,
           "l2_flushed": t.l2_flushed}
    if samples and t.samples_us() is not None:
        out["samples_us"] = [round(float(x), 3) for x in t.samples_us()]
    return out


class Budget:
    """Seconds a script may still start work in (None: no limit)."""

    def __init__(self, seconds: float | None):
        self.seconds, self.start = seconds, time.time()

    def left(self) -> bool:
        return self.seconds is None or time.time() - self.start <= self.seconds

    def elapsed(self) -> float:
        return time.time() - self.start


def within(seconds: float | None) -> Budget:
    """A budget that starts now."""
    return Budget(seconds)


def command(argv: list[str] | None = None) -> str:
    """The exact command that ran this script, as a user would type it from the repository root."""
    argv = sys.argv if argv is None else argv
    return shlex.join(["python", *argv])


def meta(argv: list[str] | None = None) -> dict:
    """What a summary records: versions, GPU, machine load, the commit and the exact command."""
    facts = env.environment(argv)
    facts["command"] = command(argv)
    return facts


def write_summary(out: str | Path, name: str, data: dict, markdown: str) -> tuple[Path, Path]:
    """``out/NAME.json`` (``data`` with ``meta`` added where missing) and ``out/NAME.md`` (``markdown`` and a last
    line naming the command and commit); both rewritten whole, so a run cut short keeps its last complete write."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data.setdefault("meta", meta())
    facts = data["meta"]
    footer = f"\nCommand: `{facts.get('command')}` at commit `{facts.get('git_commit')}`.\n"
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=1, default=str))
    md_path.write_text(markdown.rstrip("\n") + "\n" + footer)
    return json_path, md_path
