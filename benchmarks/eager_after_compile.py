"""Does what the doctor runs before an eager cell move that cell's wall? One process, the doctor's stages in order.

The doctor and ``repro`` time the same eager cell with the same ``runner.measure_cell``, in other processes and after
other work: the doctor measures each implementation after the one before it compiled (the seed's ``unbind_mean``
first, a 40-60 s max-autotune compile). This script times one eager cell (``--impl``, the host timer off and on, and
the seed's plain loop: 50 warm-up calls, 200 timed, a sync after each, five times) fresh, then after each stage the
doctor goes through with another implementation (``--before``): its eager cell measured, its compiled cell measured
with the call kept, that call let go, Dynamo reset with a garbage collection. Every row keeps the host probe beside it
(``timing.host_speed_us``: the host's speed level, which moves a host-bound call on its own).

    python benchmarks/eager_after_compile.py --out benchmarks/results/h100/eager-after-compile

writes ``.json`` (every row) and ``.md`` under that stem.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from jaggedperf.impls.registry import get_implementation
from jaggedperf.inputs import Case
from jaggedperf.lab import runner
from jaggedperf.lab.measure import timing
from jaggedperf.lab.measure.cell import Options
from jaggedperf.lab.measure.env import source_commit

OP = "jagged_mean"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", default="nanmean_padded", help="the eager cell timed after each stage")
    parser.add_argument("--before", default="unbind_mean", help="the implementation the doctor measures first")
    parser.add_argument("--mode", default="compile:max-autotune-no-cudagraphs")
    parser.add_argument("--case", default="512,64,100,0.1", help="B,M,seqlen,sparsity")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--out", required=True, type=Path, help="the output stem (.json and .md are written)")
    args = parser.parse_args(argv)
    b, m, seqlen, sparsity = args.case.split(",")
    case = Case(int(b), int(m), int(seqlen), float(sparsity))
    options = Options(device=torch.device(args.device), device_time=False, iters=args.iters)
    batch, reference = runner.prepare_case(OP, case, options)
    rows: list[dict] = []

    def measure(stage: str, impl: str, mode: str = "eager", host_timer: bool = False) -> runner.Measured:
        measured = runner.measure_cell(runner.Cell(OP, impl, mode, case), batch, reference,
                                       replace(options, host_timer=host_timer), None)
        r = measured.result
        rows.append({"stage": stage, "impl": impl, "mode": mode, "host_timer": host_timer, "status": r.status,
                     "wall_us": _us(r.wall, "median_ms"), "p20_us": _us(r.wall, "p20_ms"),
                     "p80_us": _us(r.wall, "p80_ms"), "host_call_us": _us(r.host_call, "median_ms"),
                     "host_probe_us": r.extra.get("host_speed_us")})
        return measured

    def eager_cell(stage: str) -> None:
        for host_timer in (False, True):
            measure(stage, args.impl, host_timer=host_timer).release(options.device)
        rows.append({"stage": stage, "impl": args.impl, "mode": "eager", "plain_loop_medians_us": _loop(args.impl,
                     batch, options.device), "host_probe_us": [timing.host_speed_us()],
                     "python_objects": len(gc.get_objects())})

    start = time.perf_counter()
    eager_cell("fresh")
    measure(f"{args.before} eager", args.before, host_timer=True).release(options.device)
    eager_cell(f"after {args.before} eager")
    kept = measure(f"{args.before} compiled", args.before, args.mode, host_timer=True)
    eager_cell(f"after {args.before} compiled, its call kept")
    kept.release(options.device)
    del kept
    eager_cell("after that call let go")
    torch._dynamo.reset()
    gc.collect()
    eager_cell("after a Dynamo reset and a garbage collection")
    env = {"device": torch.cuda.get_device_name() if options.device.type == "cuda" else "cpu",
           "torch": torch.__version__, "commit": source_commit(), "seconds": round(time.perf_counter() - start, 1),
           "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = {"environment": env, "case": args.case, "rows": rows}
    args.out.with_name(args.out.name + ".json").write_text(json.dumps(data, indent=1))
    args.out.with_name(args.out.name + ".md").write_text(markdown(data))
    return 0


def _us(stats, field: str) -> float | None:
    return None if stats is None else round(getattr(stats, field) * 1e3, 1)


def _loop(impl: str, batch, device: torch.device) -> list[float]:
    """The seed's loop written out here, not the lab's ``timing.wall_samples`` (a cross-check of the lab's timing that
    shares none of its code; a sync after every warm-up call too), five times: each time's median µs a call."""
    implementation = get_implementation(OP, impl)
    args = implementation.prepare(batch)
    sync = timing.synchronizer(device)
    medians = []
    for _ in range(5):
        for _ in range(50):
            implementation.fn(*args)
            sync()
        calls = []
        for _ in range(200):
            t0 = time.perf_counter()
            implementation.fn(*args)
            sync()
            calls.append(time.perf_counter() - t0)
        medians.append(round(sorted(calls)[100] * 1e6, 1))
    return medians


def markdown(data: dict) -> str:
    env = data["environment"]
    lines = [f"# An eager cell after the doctor's stages ({env['device']}, torch {env['torch']})", "",
             f"Case {data['case']}, commit {env['commit']}, {env['seconds']:.0f} s; command: `{env['command']}`", "",
             "| stage | cell | host timer | status | wall µs (p20–p80) | host call µs | plain loop µs (5 times) | "
             "host probe µs |", "|---|---|---|---|---:|---:|---|---|"]
    for r in data["rows"]:
        probe = ", ".join(f"{p:.2f}" for p in r["host_probe_us"] or [])
        if "plain_loop_medians_us" in r:
            lines.append(f"| {r['stage']} | {r['impl']} {r['mode']} | — | — | — | — | "
                         f"{', '.join(f'{x:.0f}' for x in r['plain_loop_medians_us'])} | {probe} |")
            continue
        wall = "—" if r["wall_us"] is None else f"{r['wall_us']:.1f} ({r['p20_us']:.1f}–{r['p80_us']:.1f})"
        host = "—" if r["host_call_us"] is None else f"{r['host_call_us']:.1f}"
        lines.append(f"| {r['stage']} | {r['impl']} {r['mode']} | {'on' if r['host_timer'] else 'off'} | "
                     f"{r['status']} | {wall} | {host} | — | {probe} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
