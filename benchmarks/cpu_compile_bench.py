"""Is a compiled function around our op on the CPU as fast as the eager op?

At each seed shape, with one CPU thread and with the default threads: the wall time per call of
``jaggedperf.jagged_mean(values, offsets, max_seqlen=...)`` eager, under ``torch.compile`` (default
mode) and under ``torch.compile(dynamic=True)``. The machine may be shared: the three callables are
timed in interleaved rounds (each round: ``--calls`` calls of each, one after the other, every call
timed on its own after ``--warmup`` untimed calls), and the report gives the median of every sample and
the median of the rounds' medians. Bar: compiled ≤ 1.2× eager. The compiled outputs must equal eager's
bitwise (both run the same opaque CPU kernel); a mismatch stops the run. Inductor's caches are off.

    PYTHONPATH=src python3 benchmarks/cpu_compile_bench.py --out DIR [--rounds 7 --calls 30 --warmup 20]

Writes DIR/cpu_compile_bench.json (every sample, the environment) and DIR/cpu_compile_bench.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import harness

CASES = (Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75))
BAR = 1.2
MODES = ("eager", "compile:default", "compile:dynamic")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=30, help="timed calls of each callable per round")
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # Inductor's caches are keyed on the traced graph, which names our operators but not their Python bodies:
    # a graph cached from another version of jaggedperf would be reused, so they are off
    torch._inductor.config.force_disable_caches = True
    default_threads = torch.get_num_threads()
    rows = []
    for threads in (1, default_threads):
        torch.set_num_threads(threads)
        for case in CASES:
            rows.append(measure(case, threads, args.rounds, args.calls, args.warmup))
    torch.set_num_threads(default_threads)
    facts = harness.meta()
    report = {"torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor(),
              "cpu_count": os.cpu_count(), "default_threads": default_threads, "load": os.getloadavg(),
              "commit": (facts.get("git_commit") or "unknown")[:7], "rounds": args.rounds, "calls": args.calls,
              "warmup": args.warmup, "bar": BAR, "rows": rows, "meta": facts}
    harness.write_summary(args.out, "cpu_compile_bench", report, markdown(report))
    return 0


def measure(case: Case, threads: int, rounds: int, calls: int, warmup: int) -> dict:
    """Time the three callables at one case and thread count, interleaved; every sample kept (ms)."""
    batch = make_batch(case, torch.device("cpu"))
    values, offsets, max_seqlen = batch.values, batch.offsets, batch.max_seqlen

    def eager(v, o):
        return jaggedperf.jagged_mean(v, o, max_seqlen=max_seqlen)

    torch._dynamo.reset()
    fns = {"eager": eager, "compile:default": torch.compile(eager), "compile:dynamic": torch.compile(eager, dynamic=True)}
    first_call_s = {}
    reference = eager(values, offsets)
    for name, fn in fns.items():
        start = time.perf_counter()
        out = fn(values, offsets)
        first_call_s[name] = time.perf_counter() - start
        if not torch.equal(out.view(torch.uint8), reference.view(torch.uint8)):
            raise RuntimeError(f"{name} differs from eager at {case.label}")
        for _ in range(warmup):
            fn(values, offsets)
    samples = {name: [] for name in fns}
    round_medians = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                fn(values, offsets)
                times.append((time.perf_counter() - start) * 1e3)
            samples[name] += times
            round_medians[name].append(statistics.median(times))
    medians = {name: statistics.median(s) for name, s in samples.items()}
    of_rounds = {name: statistics.median(r) for name, r in round_medians.items()}
    return {"case": case.label, "threads": threads, "median_ms": medians, "median_of_rounds_ms": of_rounds,
            "ratio": {name: medians[name] / medians["eager"] for name in fns},
            "ratio_of_rounds": {name: of_rounds[name] / of_rounds["eager"] for name in fns},
            "first_call_s": first_call_s, "samples_ms": samples}


def markdown(report: dict) -> str:
    """The report's table: median ms per mode and compiled / eager (all samples; median of rounds)."""
    lines = [f"CPU: torch {report['torch']}, {report['cpu_count']} CPUs, default threads {report['default_threads']}, "
             f"load {', '.join(f'{x:.2f}' for x in report['load'])}, commit {report['commit']}; "
             f"{report['rounds']} interleaved rounds × {report['calls']} calls after {report['warmup']} warm-up; "
             f"bar: compiled ≤ {report['bar']}× eager.", "",
             "| case | threads | eager ms | compile:default ms | ratio | compile:dynamic ms | ratio | "
             "ratio of round medians (default / dynamic) | first call s (default / dynamic) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in report["rows"]:
        m, r, rr, first = row["median_ms"], row["ratio"], row["ratio_of_rounds"], row["first_call_s"]
        lines.append(f"| {row['case']} | {row['threads']} | {m['eager']:.3f} | {m['compile:default']:.3f} | "
                     f"{r['compile:default']:.2f} | {m['compile:dynamic']:.3f} | {r['compile:dynamic']:.2f} | "
                     f"{rr['compile:default']:.2f} / {rr['compile:dynamic']:.2f} | "
                     f"{first['compile:default']:.1f} / {first['compile:dynamic']:.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
