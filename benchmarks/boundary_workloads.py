"""Is jaggedperf.compile faster than torch.compile on NJT code as users write it, forward and in a training step?

For each workload of ``jaggedperf.lab.njt_workloads`` at each case (the seed's shapes by default): eager mode,
``torch.compile`` and ``jaggedperf.compile`` (the same ``mode``), checked against eager mode (outputs, and the
gradients of a training step), the graphs each compiles over four batches of other lengths, then wall per call
(the seed's method: a sync after each call) in interleaved rounds with the host probe beside each round
(``jaggedperf.lab.rounds``): the forward under ``torch.no_grad()`` and a training step (forward, then backward
of a fixed output gradient). Ratios are the median of within-round ratios; every round's walls are kept.

    python benchmarks/boundary_workloads.py --device cuda --out benchmarks/results/h200/boundary-workloads

writes ``.json`` (every round) and ``.md`` (the table) under that stem.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import njt_workloads, rounds

SEED_CASES = (Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75))
WAYS = ("eager", "torch.compile", "jaggedperf.compile")


@dataclass
class Cell:
    workload: str
    case: str
    kind: str  # "forward" or "step"
    medians_us: dict[str, float]
    p20_us: dict[str, float]
    p80_us: dict[str, float]
    ratio_jp_tc: float  # median within-round jaggedperf.compile / torch.compile
    ratio_jp_tc_p20: float
    ratio_jp_tc_p80: float
    ratio_tc_eager: float
    rounds: int
    quiet_rounds: int
    walls_us: dict[str, list[float]]
    probes_us: list[float]


@dataclass
class Check:
    workload: str
    case: str
    graphs: dict[str, int]  # Dynamo's graphs over the first call and three batches of other lengths (training too)
    fell_back: str | None
    errors: dict[str, str]
    max_rel_error: dict[str, float]


def _rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a = a.values() if a.is_nested else a
    b = b.values() if b.is_nested else b
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _ways(fn, mode: str) -> dict[str, Callable]:
    kwargs = {} if mode == "default" else {"mode": mode}
    return {"eager": fn, "torch.compile": torch.compile(fn, dynamic=True, **kwargs),
            "jaggedperf.compile": jaggedperf.compile(fn, **kwargs)}


def _step(call: Callable, built: njt_workloads.Built) -> Callable[[], object]:
    def step():
        out = call(built.x)
        out.backward(built.grad)
        for leaf in built.leaves:
            leaf.grad = None

    return step


def _forward(call: Callable, built: njt_workloads.Built) -> Callable[[], object]:
    def forward():
        with torch.no_grad():
            return call(built.x)

    return forward


def _other_batches(call: Callable, workload: njt_workloads.Workload, case: Case, device, dtype) -> None:
    for seed in range(1, 4):  # three more batches of the case: other lengths, other B-row lengths, same shape class
        other = make_batch(Case(case.B, case.M, case.seqlen, case.sparsity, seed=seed), device)
        with torch.no_grad():
            call(workload.build(other, dtype).x)


def check(workload, case: Case, device, dtype, mode: str) -> tuple[Check, dict[str, Callable], njt_workloads.Built]:
    """Each way's outputs (and a training step's gradients) against eager mode's; the graphs over other batches."""
    torch._dynamo.reset()
    built = workload.build(make_batch(case, device), dtype)
    ways = _ways(built.fn, mode)
    errors, rel, graphs = {}, {}, {}
    with torch.no_grad():
        reference = built.fn(built.x)
    grads_ref = None
    if built.grad is not None:
        _run_backward(built.fn, built)
        grads_ref = [leaf.grad.clone() for leaf in built.leaves]
        for leaf in built.leaves:
            leaf.grad = None
    for name, call in ways.items():
        try:
            graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            with torch.no_grad():
                out = call(built.x)
            rel[name] = _rel_error(out, reference)
            if grads_ref is not None:
                _run_backward(call, built)
                for leaf, ref in zip(built.leaves, grads_ref):
                    rel[name] = max(rel[name], _rel_error(leaf.grad, ref))
                    leaf.grad = None
            if name != "eager":
                _other_batches(call, workload, case, device, dtype)
                graphs[name] = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before
        except Exception as err:  # noqa: BLE001 (recorded: the cell is not timed)
            errors[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    jp = ways["jaggedperf.compile"]
    fell_back = getattr(getattr(jp, "boundary", jp), "last_fallback", None)
    return Check(workload.name, _case_name(case), graphs, fell_back, errors, rel), ways, built


def _run_backward(call, built) -> None:
    call(built.x).backward(built.grad)


def time_cell(workload, case, kind: str, ways: dict[str, Callable], built, device, n_rounds: int) -> Cell:
    make = _forward if kind == "forward" else _step
    fns = {name: make(call, built) for name, call in ways.items()}
    for fn in fns.values():  # compiled (and the backward graph) before the first round
        for _ in range(3):
            fn()
    result = rounds.run(fns, device, rounds=n_rounds)
    walls = {name: result.walls(name) for name in fns}
    ratios = sorted(result.ratios("jaggedperf.compile", "torch.compile"))
    return Cell(workload.name, _case_name(case), kind,
                {n: statistics.median(w) for n, w in walls.items()},
                {n: _q(w, 0.2) for n, w in walls.items()}, {n: _q(w, 0.8) for n, w in walls.items()},
                statistics.median(ratios), _q(ratios, 0.2), _q(ratios, 0.8),
                statistics.median(result.ratios("torch.compile", "eager")), len(result.rounds), len(result.quiet),
                walls, [r.probe_us for r in result.rounds])


def _q(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def _case_name(case: Case) -> str:
    return f"B{case.B}-M{case.M}-L{case.seqlen}-s{case.sparsity}"


def markdown(data: dict) -> str:
    env = data["environment"]
    lines = [f"# jaggedperf.compile against torch.compile on NJT workloads ({env['device']}, torch {env['torch']})",
             "", f"mode `{data['mode']}`, dtype {data['dtype']}, {data['rounds']} interleaved rounds a cell (the seed's "
             f"method each: 50 warm-up calls, 200 timed, a sync after each); commit {env['commit']}; command: "
             f"`{env['command']}`", "",
             "| workload | case | kind | eager µs | torch.compile µs | jaggedperf.compile µs | jp / tc (p20–p80) |"
             " graphs tc / jp ¹ |", "|---|---|---|---:|---:|---:|---:|---|"]
    checks = {(c["workload"], c["case"]): c for c in data["checks"]}
    for c in data["cells"]:
        m = c["medians_us"]
        g = checks[(c["workload"], c["case"])]["graphs"]
        lines.append(f"| {c['workload']} | {c['case']} | {c['kind']} | {m['eager']:.1f} | {m['torch.compile']:.1f} | "
                     f"{m['jaggedperf.compile']:.1f} | **{c['ratio_jp_tc']:.2f}** ({c['ratio_jp_tc_p20']:.2f}–"
                     f"{c['ratio_jp_tc_p80']:.2f}) | {g.get('torch.compile', '—')} / {g.get('jaggedperf.compile', '—')} |")
    lines += ["", "¹ Dynamo's graphs over four batches (one checked, forward and backward, then three of other lengths);"
              " jaggedperf.compile's count includes a graph it does not compile (one that only rebuilds unused NJTs)."]
    bad = [c for c in data["checks"] if c["errors"] or c["fell_back"]]
    if bad:
        lines += ["", "Not timed or fell back:", ""]
        lines += [f"- {c['workload']} {c['case']}: {c['errors'] or ''} {c['fell_back'] or ''}" for c in bad]
    lines += ["", "Largest relative error against eager mode (outputs and training-step gradients): "
              + ", ".join(f"{c['workload']} {max(c['max_rel_error'].values(), default=0):.1e}" for c in data["checks"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--mode", default="default")
    parser.add_argument("--dtype", default=None, help="default: float16 on CUDA (attention's SDPA), float32 on CPU")
    parser.add_argument("--workloads", default=",".join(w.name for w in njt_workloads.WORKLOADS))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cases", default="seed", help="'seed' or B,M,seqlen,sparsity[;...]")
    parser.add_argument("--out", required=True, type=Path, help="the output stem (.json and .md are written)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device.type == "cuda" else torch.float32)
    cases = SEED_CASES if args.cases == "seed" else tuple(
        Case(int(b), int(m), int(s), float(p)) for b, m, s, p in (c.split(",") for c in args.cases.split(";")))
    start = time.perf_counter()
    checks, cells = [], []
    for name in args.workloads.split(","):
        workload = njt_workloads.get(name)
        if workload.needs_cuda and device.type != "cuda":
            continue
        for case in cases:
            result, ways, built = check(workload, case, device, dtype, args.mode)
            checks.append(result)
            if result.errors:
                continue
            for kind in ("forward", "step") if built.grad is not None else ("forward",):
                cells.append(time_cell(workload, case, kind, ways, built, device, args.rounds))
                data = _write(args, dtype, device, start, checks, cells)  # after each cell: a cut run keeps its cells
    sys.stdout.write(markdown(_write(args, dtype, device, start, checks, cells)))
    return 0


def _write(args, dtype, device, start: float, checks: list, cells: list) -> dict:
    data = {"mode": args.mode, "dtype": str(dtype).removeprefix("torch."), "rounds": args.rounds,
            "environment": _environment(device, time.perf_counter() - start),
            "checks": [asdict(c) for c in checks], "cells": [asdict(c) for c in cells]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1))
    args.out.with_suffix(".md").write_text(markdown(data))
    return data


def _environment(device, seconds: float) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"]).returncode:
            commit += "-dirty"
    except OSError:
        commit = "unknown"
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "python": platform.python_version(), "commit": commit,
            "command": " ".join(["python"] + sys.argv), "seconds": round(seconds, 1),
            "cpu_threads": torch.get_num_threads()}


if __name__ == "__main__":
    raise SystemExit(main())
