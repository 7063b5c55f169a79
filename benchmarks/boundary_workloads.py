"""Is jaggedperf.compile faster than torch.compile on NJT code as users write it, forward and in a training step?

For each workload of ``jaggedperf.lab.njt_workloads`` at each case (the seed's shapes by default): eager mode,
``torch.compile`` and ``jaggedperf.compile`` (the same ``mode``), checked against eager mode (outputs, and the
gradients of a training step), the graphs each compiles over four batches of other lengths, then wall per call
(the seed's method: a sync after each call) in interleaved rounds with the host probe beside each round
(``jaggedperf.lab.measure.rounds``): the forward under ``torch.no_grad()`` and a training step (forward, then backward
of a fixed output gradient). Ratios are the median of within-round ratios; every round's walls are kept.

    python benchmarks/boundary_workloads.py --device cuda --out benchmarks/results/h200/boundary-workloads

writes ``.json`` (every round) and ``.md`` (the table) under that stem; ``--parts`` adds where a training step's time
goes (the floor, + the arguments crossed, + the output rebuilt, the whole call). Runs under several torch versions (each
in its own environment) become one table, each cell's ratio from its own run:

    python benchmarks/boundary_workloads.py --compare A.json B.json ... --out DIR/summary
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import statistics
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import njt_workloads
from jaggedperf.lab.njt_workloads import check, time_cell
from jaggedperf.lab.measure.env import source_commit

SEED_CASES = (Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75))


def markdown(data: dict) -> str:
    env = data["environment"]
    lines = [f"# jaggedperf.compile against torch.compile on NJT workloads ({env['device']}, torch {env['torch']})",
             "", f"mode `{data['mode']}`, dtype {data['dtype']}, {data['rounds']} interleaved rounds a cell (the seed's "
             f"method each: 50 warm-up calls, 200 timed, a sync after each); commit {env['commit']}; command: "
             f"`{env['command']}`", "",
             "| workload | case | kind | eager µs | torch.compile µs | jaggedperf.compile µs | jp / tc (p20–p80) |"
             " floor / tc ² | limit / tc ³ | step ≤ 0.8× tc ⁴ | graphs tc / jp ¹ |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    checks = {(c["workload"], c["case"]): c for c in data["checks"]}
    for c in data["cells"]:
        m = c["medians_us"]
        g = checks[(c["workload"], c["case"])]["graphs"]
        lines.append(f"| {c['workload']} | {c['case']} | {c['kind']} | {m['eager']:.1f} | {m['torch.compile']:.1f} | "
                     f"{m['jaggedperf.compile']:.1f} | **{c['ratio_jp_tc']:.2f}** ({c['ratio_jp_tc_p20']:.2f}–"
                     f"{c['ratio_jp_tc_p80']:.2f}) | {_ratio(c['ratio_floor_tc'])} | "
                     f"{_limit(c)} | {step_verdict(c)} | {g.get('torch.compile', '—')} / "
                     f"{g.get('jaggedperf.compile', '—')} |")
    lines += ["", "¹ Dynamo's graphs over four batches (one checked, forward and backward, then three of other lengths);"
              " jaggedperf.compile's count includes a graph it does not compile (one that only rebuilds unused NJTs).",
              "² The boundary's floor: its compiled region called on the NJT's parts split beforehand, the region's "
              "records taken as they come (no NJT crossing either way), in the same rounds; — where the calls went "
              "to torch.compile (a fallback or a pass-through).", f"³ {LIMIT_NOTE}", f"⁴ {VERDICT_NOTE}"]
    lines += _parts_table(data["cells"])
    bad = [c for c in data["checks"] if c["errors"] or c["fell_back"]]
    if bad:
        lines += ["", "Not timed or fell back:", ""]
        lines += [f"- {c['workload']} {c['case']}: {c['errors'] or ''} {c['fell_back'] or ''}" for c in bad]
    lines += ["", "Largest relative error (outputs and training-step gradients) against eager mode, or against the "
              "workload's float64 reference where torch's own is wrong: " + ", ".join(_errors(c) for c in data["checks"])]
    return "\n".join(lines) + "\n"


def _errors(check: dict) -> str:
    """A check's largest error over the ways held to its reference, and torch's own where it is wrong."""
    wrong = njt_workloads.get(check["workload"]).torch_wrong
    held = njt_workloads.Check(**check).held()
    said = f"{check['workload']} {max(held.values(), default=0):.1e}"
    if wrong:
        torch_own = max((e for w, e in check["max_rel_error"].items() if w not in held), default=0)
        said += f" (eager mode and torch.compile {torch_own:.1e}: {wrong})"
    return said


LIMIT_NOTE = ("A training step's limit where the input NJT trains: the floor with the copy accumulating an NJT "
              "gradient always makes (a clone of its values, made within the floor's step, where its plain leaf takes "
              "its gradient as it is) plus the autograd engine's own cost of an NJT crossing autograd (a node with an "
              "NJT in and out, `clone`, stepped less called under no_grad: the NJT output's metadata, its root "
              "gradient, the NJT gradient checked on its edge and accumulated; less the same of a plain node), in the "
              "same rounds: no step on that NJT, torch.compile's included, takes less. Marked (apart): a run before "
              "that definition, the copy timed apart and added (it left out what the copy does to the step around "
              "it). Marked (crossing): earlier, without the copy, on a floor whose values crossed through `Unwrap` "
              "(NJT autograd costs counted twice). Marked (leaf): earlier still, the NJT leaf's backward alone (no NJT "
              "output).")
VERDICT_NOTE = ("The bar, a training step ≤ 0.8× torch.compile's: holds; at the limit (the floor or the limit "
                "is above 0.8×, and jaggedperf.compile not above it beyond the run's spread: the bootstrap interval "
                "of its median over the limit's, in brackets, reaches 1; out of any boundary's reach); fails.")


def step_verdict(cell: dict) -> str:
    """The training-step bar's outcome for one cell (``VERDICT_NOTE``, ``njt_workloads.step_verdict``); "" for a
    forward."""
    verdict = njt_workloads.step_verdict(njt_workloads.Cell(**cell))
    if verdict is None:
        return ""
    over = verdict.over_limit
    spread = "" if over is None else f"; jp / limit {over.ratio:.2f} [{over.low:.2f}–{over.high:.2f}]"
    if verdict.outcome == "holds":
        return "holds"
    if verdict.outcome == "at the limit":
        return f"at the limit ({verdict.limit_tc:.2f}×{spread})"
    return f"**fails**{f' ({spread[2:]})' if spread else ''}"


PARTS = ("floor", *njt_workloads.CROSSING_STEPS, "jaggedperf.compile")


def _parts_table(cells: list[dict]) -> list[str]:
    """Where the boundary's training steps go (``--parts``: ``njt_workloads.crossing_steps``), µs a step, each the
    median over the rounds of that round's wall (the increments: of the within-round differences); none where no cell
    timed them."""
    timed = [c for c in cells if PARTS[1] in c["walls_us"]]
    if not timed:
        return []
    lines = ["", "Where a training step's time goes (µs, medians over the rounds; in brackets the median within-round "
             "increment over the column before): the floor; + the arguments crossed (`flatten`: `Unwrap`, the NJT "
             "gradient accumulated into the NJT); + the output rebuilt (`join_output`: `Join`, the NJT gradient at the "
             "root); the whole call (+ the wrapper's checks and lookup); the limit ³; torch.compile.", "",
             "| workload | case | floor | + Unwrap | + Join | jaggedperf.compile | limit | torch.compile |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for c in timed:
        w = c["walls_us"]
        cols = [f"{statistics.median(w[PARTS[0]]):.1f}"] + [
            f"{statistics.median(w[b]):.1f} ({statistics.median([y - x for x, y in zip(w[a], w[b])]):+.1f})"
            for a, b in zip(PARTS, PARTS[1:])]
        limit = njt_workloads.limit_walls(w)
        lines.append(f"| {c['workload']} | {c['case']} | {' | '.join(cols)} | "
                     f"{'—' if limit is None else f'{statistics.median(limit):.1f}'} | "
                     f"{statistics.median(w['torch.compile']):.1f} |")
    return lines


def _ratio(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}"


def _limit(cell: dict) -> str:
    """The cell's limit (``LIMIT_NOTE``), marked where its run measured an earlier definition (leaf, crossing,
    apart)."""
    text = _ratio(cell.get("ratio_limit_tc"))
    kind = njt_workloads.limit_kind(cell["walls_us"])
    if cell.get("ratio_limit_tc") is not None and kind in ("leaf", "crossing", "apart"):
        text += f" ({kind})"
    return text


def compare(paths: list[Path], out: Path) -> str:
    """One table over runs of this script (e.g. one per torch version): per cell, torch.compile's and
    jaggedperf.compile's wall, their within-round ratio with its spread, and the boundary's floor; writes ``out``'s
    .md and .json (the runs' cells, their environments and commands)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    cells = {}  # a cell measured in several runs of one torch version: the later run's (``paths`` in order)
    for run in runs:
        for c in run["cells"]:
            cells[(run["environment"]["torch"], c["workload"], c["case"], c["kind"])] = c
    lines = ["# jaggedperf.compile against torch.compile on NJT workloads, by torch version", "",
             "Each row from its own run (the file and command below; a cell that several runs measured, from the "
             "last of them): wall per call in µs by the seed's method, median "
             "of interleaved rounds; `jp / tc` the median within-round ratio (p20–p80); `floor / tc` the boundary's "
             "compiled region called on pre-split parts (no crossing), the least its calls could take; — where the "
             "calls went to torch.compile (a fallback or a pass-through).", "",
             "| torch | workload | case | kind | torch.compile | jaggedperf.compile | jp / tc (p20–p80) | floor / tc | "
             "limit / tc | step ≤ 0.8× tc | quiet rounds |", "|---|---|---|---|---:|---:|---:|---:|---:|---|---:|"]
    for (version, *_), c in cells.items():
        m = c["medians_us"]
        lines.append(f"| {version} | {c['workload']} | {c['case']} | {c['kind']} | {m['torch.compile']:.1f} | "
                     f"{m['jaggedperf.compile']:.1f} | **{c['ratio_jp_tc']:.2f}** ({c['ratio_jp_tc_p20']:.2f}–"
                     f"{c['ratio_jp_tc_p80']:.2f}) | {_ratio(c['ratio_floor_tc'])} | "
                     f"{_limit(c)} | {step_verdict(c)} | {c['quiet_rounds']} of "
                     f"{len(c['walls_us']['eager'])} |")
    lines += ["", f"`limit / tc`: {LIMIT_NOTE}", f"`step ≤ 0.8× tc`: {VERDICT_NOTE}"]
    lines += ["", "Fell back to torch.compile:", ""]
    lines += [f"- torch {run['environment']['torch']}, {c['workload']} {c['case']}: {c['fell_back']}"
              for run in runs for c in run["checks"] if c["fell_back"]] or ["- none"]
    lines += ["", "Runs:", ""]
    lines += [f"- `{Path(p).name}`: torch {run['environment']['torch']}, commit {run['environment']['commit']}, "
              f"{run['environment']['cpu_threads']} CPU thread(s), {run['environment']['seconds']:.0f} s: "
              f"`{run['environment']['command']}`" for p, run in zip(paths, runs)]
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    _beside(out, ".md").write_text(text)
    _beside(out, ".json").write_text(json.dumps({"runs": {Path(p).name: run for p, run in zip(paths, runs)}},
                                                indent=1))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", nargs="+", type=Path, help="results of earlier runs: write one table of them")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--mode", default="default")
    parser.add_argument("--dtype", default=None, help="default: float16 on CUDA (attention's SDPA), float32 on CPU")
    parser.add_argument("--workloads", default=",".join(w.name for w in njt_workloads.WORKLOADS))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cases", default="seed", help="'seed' or B,M,seqlen,sparsity[;...]")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch on the CPU (the lab's default: "
                        "host-bound calls timed, not a contest of thread pools on a shared machine)")
    parser.add_argument("--parts", action="store_true", help="a training step whose input NJT trains also times the "
                        "boundary's step built up from its floor (crossed in, then out), to say where its time goes")
    parser.add_argument("--out", required=True, type=Path, help="the output stem (.json and .md are written)")
    args = parser.parse_args(argv)
    if args.compare:
        sys.stdout.write(compare(args.compare, args.out))
        return 0
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
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
                cells.append(time_cell(workload, case, kind, ways, built, device, args.rounds, parts=args.parts))
                _write(args, dtype, device, start, checks, cells)  # after each cell: a cut run keeps its cells
    sys.stdout.write(markdown(_write(args, dtype, device, start, checks, cells)))
    return 0


def _write(args, dtype, device, start: float, checks: list, cells: list) -> dict:
    data = {"mode": args.mode, "dtype": str(dtype).removeprefix("torch."), "rounds": args.rounds,
            "environment": _environment(device, time.perf_counter() - start),
            "checks": [asdict(c) for c in checks], "cells": [asdict(c) for c in cells]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _beside(args.out, ".json").write_text(json.dumps(data, indent=1))
    _beside(args.out, ".md").write_text(markdown(data))
    return data


def _beside(stem: Path, suffix: str) -> Path:
    """``stem`` + ``suffix``: a stem may hold dots of its own (``small-torch-2.13``), which ``with_suffix`` replaces."""
    return stem.with_name(stem.name + suffix)


def _environment(device, seconds: float) -> dict:
    commit = source_commit()
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "python": platform.python_version(), "commit": commit,
            "command": " ".join(["python"] + sys.argv), "seconds": round(seconds, 1),
            "cpu_threads": torch.get_num_threads()}


if __name__ == "__main__":
    raise SystemExit(main())
