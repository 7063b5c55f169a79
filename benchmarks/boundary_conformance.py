"""How often does jaggedperf.compile give another outcome than torch.compile on PyTorch's NJT OpInfo samples?

Runs ``jaggedperf.lab.conformance`` over the database (forward samples, backward samples, or both) on one backend
and writes the counts and every sample's outcome as JSON, with a Markdown summary beside it:

    python benchmarks/boundary_conformance.py --backend aot_eager_decomp_partition --json out.json

Exit status 1 when any sample differs.

Samples run in worker processes (``--jobs``, each taking every jobs-th sample), each reporting the way it is about
to run and every result as a line; a sample that kills its worker (torch itself segfaults on some: a zero-size
``split_with_sizes`` in eager mode's backward, in some runs and not others) is recorded with the way that crashed
and torch's crash where eager mode alone kills a fresh process in any of ``EAGER_ALONE_RUNS`` runs; a new worker
goes on after it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import torch

from jaggedperf.lab import conformance
from jaggedperf.lab.measure.env import source_commit


# Eager runs alone of a sample that killed a worker in another way: a zero-size split_with_sizes' backward crashed
# eager mode in 4 of 6 runs alone here, and raised or passed in the others.
EAGER_ALONE_RUNS = 6


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="aot_eager_decomp_partition")
    parser.add_argument("--grad", choices=("forward", "backward", "both"), default="both")
    parser.add_argument("--per-op", type=int, default=0, help="at most this many samples an op (0: all)")
    parser.add_argument("--ops", default="", help="a regular expression the op's full name must match")
    parser.add_argument("--kinds", default="", help="the database's op kinds to take, comma-separated (OpInfo, "
                        "ReductionOpInfo, UnaryUfuncInfo, BinaryUfuncInfo); all when empty")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes, each on an equal share of the CPUs")
    parser.add_argument("--json", type=Path, help="where every sample's record goes (a .md of the counts beside it)")
    parser.add_argument("--summary", type=Path, metavar="STEM",
                        help="also write STEM.json and STEM.md: the counts and the samples not identical, grouped by "
                        "op, outcome and reason (what is published; every sample's record is the --json file)")
    parser.add_argument("--summarize", type=Path, metavar="JSON",
                        help="write --summary from an earlier run's --json file instead of running")
    parser.add_argument("--worker", nargs=3, type=int, metavar=("FIRST", "STRIDE", "THREADS"),
                        help=argparse.SUPPRESS)  # run the samples FIRST, FIRST + STRIDE, ...; print lines
    parser.add_argument("--eager-alone", type=int, metavar="INDEX",
                        help=argparse.SUPPRESS)  # run sample INDEX eagerly, nothing else
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.worker:
        return _work(args, *args.worker)
    if args.eager_alone is not None:
        _, _, op, sample, _ = _sample_at(args, args.eager_alone)
        conformance.run_eager(op, sample)
        return 0
    if args.summarize is not None:
        if args.summary is None:
            parser.error("--summarize needs --summary")
        _write_summary(json.loads(args.summarize.read_text()), args.summary)
        return 0
    if args.json is None:
        parser.error("--json is required")
    commit = source_commit()  # the code this process runs: taken before the run, which a commit meanwhile would not change
    start = time.perf_counter()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = max(1, cpus // args.jobs)
    indexed: list = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for results in pool.map(lambda job: _supervise(argv, job, args.jobs, threads, args.backend),
                                range(args.jobs)):
            indexed.extend(results)
    report = conformance.Report([result for _, result in sorted(indexed, key=lambda pair: pair[0])])
    data = report.to_json()
    data["settings"] = {"backend": args.backend, "grad": args.grad, "per_op": args.per_op, "ops": args.ops,
                        "kinds": args.kinds, "jobs": args.jobs,
                        "torch": torch.__version__, "python": platform.python_version(),
                        "seconds": round(time.perf_counter() - start, 1),
                        "command": " ".join(["python", "benchmarks/boundary_conformance.py", *argv]),
                        "commit": commit}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=1))
    args.json.with_suffix(".md").write_text(markdown(data))
    if args.summary is not None:
        _write_summary(data, args.summary)
    sys.stdout.write(markdown(data))
    return 1 if report.differing() else 0


# Outcomes the summary lists sample by sample (grouped): everything but what matched and what eager mode refused.
_LISTED = tuple(k for k in conformance.OUTCOMES if k not in ("identical", "eager raises"))


def summary(data: dict) -> dict:
    """The published form of a run: its settings and counts, and the samples not identical (nor refused by eager
    mode) grouped by (outcome, op, reason, forward or backward) with how many samples each group holds."""
    groups: dict[tuple, int] = {}
    for r in data["results"]:
        if r["outcome"] in _LISTED:
            key = (r["outcome"], r["op"], r["detail"], "backward" if r["requires_grad"] else "forward")
            groups[key] = groups.get(key, 0) + 1
    rows = [{"outcome": k[0], "op": k[1], "detail": k[2], "pass": k[3], "samples": n}
            for k, n in sorted(groups.items(), key=lambda item: (_LISTED.index(item[0][0]), -item[1], item[0]))]
    return {"settings": data["settings"], "counts": data["counts"], "compared": data["compared"],
            "samples": len(data["results"]), "not_identical": rows}


def summary_markdown(data: dict) -> str:
    s = data["settings"]
    lines = [f"# jaggedperf.compile against torch.compile on PyTorch's NJT OpInfo samples ({s['backend']})", "",
             f"torch {s['torch']}, {s['grad']} passes, {data['samples']} samples, {data['compared']} compared, in "
             f"{s['seconds']} s; commit {s['commit']}; command: `{s['command']}`.", "",
             "| outcome | samples |", "|---|---:|"]
    lines += [f"| {kind} | {n} |" for kind, n in data["counts"].items()]
    lines += ["", "Not identical (eager mode's refusals left out), by op and reason:", "",
              "| outcome | op | pass | samples | reason |", "|---|---|---|---:|---|"]
    lines += [f"| {r['outcome']} | {r['op']} | {r['pass']} | {r['samples']} | {r['detail'].replace('|', '/')} |"
              for r in data["not_identical"]]
    return "\n".join(lines) + "\n"


def _write_summary(data: dict, stem: Path) -> None:
    published = summary(data)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(published, indent=1))
    stem.with_suffix(".md").write_text(summary_markdown(published))


def _selected(args: argparse.Namespace):
    """(index, requires_grad, op, sample, name) of every sample the arguments select, in a fixed order."""
    pattern = re.compile(args.ops) if args.ops else None
    kinds = {k.strip() for k in args.kinds.split(",") if k.strip()}
    index = 0
    for requires_grad in {"forward": (False,), "backward": (True,), "both": (False, True)}[args.grad]:
        seen: dict[str, int] = {}
        for op, sample, name in conformance.samples(requires_grad,
                                                    ops=(lambda n: bool(pattern.search(n))) if pattern else None):
            if kinds and type(op).__name__ not in kinds:
                continue
            if args.per_op and seen.get(op.full_name, 0) >= args.per_op:
                continue
            seen[op.full_name] = seen.get(op.full_name, 0) + 1
            yield index, requires_grad, op, sample, name
            index += 1


def _work(args: argparse.Namespace, first: int, stride: int, threads: int) -> int:
    """A worker: run the selected samples ``first``, ``first + stride``, ...; print ``way INDEX WAY`` before each
    way runs and ``result INDEX JSON`` after each sample, flushed, for ``_supervise``."""
    torch.set_num_threads(threads)
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)  # Dynamo logs every failed compile it is asked for; the report says them
    for index, _, op, sample, name in _selected(args):
        if index < first or (index - first) % stride:
            continue
        result = conformance.run_sample(op, sample, name, args.backend,
                                        phase=lambda way, i=index: print("way", i, way, flush=True))
        print("result", index, json.dumps(asdict(result)), flush=True)
    return 0


def _supervise(argv: list[str], job: int, jobs: int, threads: int, backend: str) -> list:
    """Run job ``job``'s samples in a worker process, starting a new one after any sample that kills it.

    Returns:
        (sample index, ``conformance.SampleResult``) for each of the job's samples.
    """
    results: list = []
    first = job
    while True:
        proc = subprocess.Popen([sys.executable, __file__, *argv, "--worker", str(first), str(jobs), str(threads)],
                                stdout=subprocess.PIPE, text=True)
        last: tuple[int, str] | None = None
        for line in proc.stdout:
            kind, index, rest = line.rstrip("\n").split(" ", 2)
            if kind == "way":
                last = (int(index), rest)
            elif kind == "result":
                results.append((int(index), conformance.SampleResult(**json.loads(rest))))
                last = None
        code = proc.wait()
        if last is None:
            if code != 0:
                raise RuntimeError(f"a conformance worker exited with {code} between samples")
            return results
        index, way = last
        op_name, sample_name, requires_grad = _describe_sample(argv, index)
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        results.append((index, conformance.crashed(op_name, sample_name, backend, requires_grad, way, how,
                                                   eager_crashes=_eager_alone_crashes(argv, index))))
        first = index + jobs


def _eager_alone_crashes(argv: list[str], index: int, runs: int = EAGER_ALONE_RUNS) -> bool:
    """Whether sample ``index`` run eagerly, alone in a fresh process, kills it in any of ``runs`` runs (torch's
    crashes on these samples come and go from run to run: one run alone is no proof that eager mode survives)."""
    for _ in range(runs):
        if subprocess.run([sys.executable, __file__, *argv, "--eager-alone", str(index)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            return True
    return False


def _describe_sample(argv: list[str], wanted: int) -> tuple[str, str, bool]:
    """(op, sample name, requires_grad) of the selected sample ``wanted``."""
    _, requires_grad, op, _, name = _sample_at(_parser().parse_args(argv), wanted)
    return op.full_name, name, requires_grad


def _sample_at(args: argparse.Namespace, wanted: int) -> tuple:
    """The selected sample ``wanted`` as ``_selected`` yields it."""
    return next(selected for selected in _selected(args) if selected[0] == wanted)


def markdown(data: dict) -> str:
    s = data["settings"]
    lines = [f"# jaggedperf.compile against torch.compile on PyTorch's NJT OpInfo samples ({s['backend']})", "",
             f"torch {s['torch']}, {s['grad']} samples, {data['compared']} compared in {s['seconds']} s; "
             f"commit {s['commit']}; command: `{s['command']}`", "", "| outcome | samples |", "|---|---:|"]
    lines += [f"| {kind} | {n} |" for kind, n in data["counts"].items()]
    differing = [r for r in data["results"] if r["outcome"] == conformance.DIFFERS]
    if differing:
        lines += ["", "Differing:", ""] + [f"- {r['op']} ({r['sample']}): {r['detail']}" for r in differing]
    return "\n".join(lines) + "\n"




if __name__ == "__main__":
    raise SystemExit(main())
