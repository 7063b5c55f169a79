#!/usr/bin/env python3
"""GPU benchmark of the jagged family (issue 20): jagged_softmax and jagged_layer_norm, ours against the floor
and against torch.

Per op × shape × dtype, after a correctness check of every contender against float64 (a wrong one is
recorded, not timed):

- device time (µs, median with p20/p80, L2 flushed) by CUDA-graph replay where the call can be captured,
  else the sum of its kernels from torch.profiler (the column ``method`` says which);
- the floor: the op's must-move bytes (read values + offsets, write the output) / the copy bandwidth measured
  in the same run, and each contender's ratio to it;
- contenders: ours (max_seqlen known; unknown), every torch eager contender the lab registers (unbind, padded
  round trip, the NJT op), our Helion kernels (``helion``, where helion installs: ``impls/helion_contenders``;
  fixed configs unless $JAGGEDPERF_HELION_AUTOTUNE), and Inductor's compiled padded program (``torch.compile`` of
  the padded round trip on plain tensors, mode max-autotune-no-cudagraphs, dynamic=False);
- our backward against its floor (read y or x, and the gradient; write the values' gradient);
- with ``--ops jagged_mean,jagged_sum``: the reductions too (forward only: ours, torch's, helion's).

Shapes: the seed's (512, 64, 100, 0.1) and (512, 64, 500, 0.75) in fp32 and bf16, and three of >= 64 MB in
fp32 (many mid-length sequences, many short ones, a few very long ones: the looping passes).

Run:  PYTHONPATH=src python3 benchmarks/family_bench.py --out $OUT/family
Writes family_bench.json (every number, versions, errors) and family_bench.md (one table per op) under --out.
Each cell records its own error and the run goes on; the files are rewritten after every cell. About 30-60 s a cell
on an H200 (Inductor's max-autotune compile of each shape): `--budget-s` starts no cell past it.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import traceback
from pathlib import Path

import torch

import jaggedperf
from jaggedperf.impls.registry import get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import runner, timing

OPS = ("jagged_softmax", "jagged_layer_norm")  # the default; --ops adds jagged_mean / jagged_sum (forward only)
ROWWISE = OPS
NOT_TORCH = ("jaggedperf", "inductor", "helion")  # contenders that are not torch eager
SEED = [Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75)]
LARGE = [Case(1024, 256, 1000, 0.5), Case(65536, 64, 64, 0.2), Case(8, 4096, 4000, 0.0, "fixed")]
DEVICE = torch.device("cuda")
EPS = 1e-5  # the lab's layer norm eps (impls.jagged_layer_norm.EPS)
SLOW_US = 50_000  # a contender slower than this a call is recorded by one call's wall, not timed (it is no peer)


def cells(large_dtypes: tuple[str, ...] = ("float32",)):
    """The seed shapes in fp32 and bf16, then the large ones in ``large_dtypes`` (the bars' cells: fp32)."""
    for case in SEED:
        for dtype in ("float32", "bfloat16"):
            yield Case(case.B, case.M, case.seqlen, case.sparsity, case.distribution, dtype=dtype)
    for case in LARGE:
        for dtype in large_dtypes:
            yield Case(case.B, case.M, case.seqlen, case.sparsity, case.distribution, dtype=dtype)


def device_time(fn) -> dict:
    """Median/p20/p80 µs of one call: CUDA-graph replay when it captures, else the profiler's kernel sum."""
    graph = timing.capture_graph(fn, DEVICE)
    if graph is not None:
        t = timing.replay_device_time(graph.replay)
    else:
        t = timing.profiler_device_time(timing.profile_kernels(fn, DEVICE, calls=10), True)
    return {"median_us": t.median_us, "p20_us": t.p20_us, "p80_us": t.p80_us, "method": t.method}


def padded_compiled(op: str):
    # Inductor's program for the padded round trip on plain tensors (no NJT at the boundary)
    from jaggedperf.impls import jagged_layer_norm, jagged_softmax
    from jaggedperf.impls.rowwise import padded_round_trip

    dense_op, padding = ((jagged_softmax._masked_softmax, float("-inf")) if op == "jagged_softmax" else
                         (jagged_layer_norm._masked_layer_norm, 0.0))
    return torch.compile(lambda v, o, n: padded_round_trip(v, o, n, dense_op, padding),
                         mode="max-autotune-no-cudagraphs", dynamic=False)


def bench_case(op: str, case: Case, copy_gbps: float) -> dict:
    # each case compiles Inductor's padded program anew (dynamic=False): without a reset the shared code object
    # passes Dynamo's recompile limit after 8 shapes and then runs eager under the compiled name
    torch._dynamo.reset()
    spec = get_op(op)
    batch = spec.make_batch(case, DEVICE)
    reference = spec.reference(batch)
    # the backward's output gradient, drawn before any capture from a private generator: a capture that fails
    # mid-way (a contender that syncs) leaves torch 2.11's default CUDA generator registered with the dead graph,
    # and its next draw raises "Offset increment outside graph capture" (run 54)
    grad = torch.randn(batch.values.shape, generator=torch.Generator(DEVICE).manual_seed(0), device=DEVICE,
                       dtype=torch.float32).to(batch.values.dtype)
    floor_us = spec.must_move_bytes(batch) / (copy_gbps * 1e3)
    row = {"op": op, "case": case.label, "dtype": case.dtype, "values_mb": batch.values.numel() *
           batch.values.element_size() / 1e6, "floor_us": floor_us, "contenders": {}}
    calls = {name: (lambda impl=impl: impl.fn(*impl.prepare(batch))) for name, impl in spec.implementations.items()
             if DEVICE.type in impl.devices}
    ours = getattr(jaggedperf, op)
    calls["jaggedperf_no_max_seqlen"] = lambda: ours(batch.values, batch.offsets)
    if op in ROWWISE:
        compiled = padded_compiled(op)
        calls["inductor_padded"] = lambda: compiled(batch.values, batch.offsets, batch.padded_len)
    for name, call in calls.items():
        entry = row["contenders"][name] = {}
        try:
            ok, rel, reason = runner.check_output(call(), reference, case.dtype)
            entry.update(ok=ok, rel_error=rel, reason=reason)
            # one call by the seed's method (the correctness call warmed it); a slow one once more, its faster call
            # kept: the first cells of a process may still build a fast tier (run 61: ours at the first cell was
            # taken for slow and went untimed)
            one_call_us = timing.wall_samples(call, DEVICE, warmup=0, iters=1)[0] * 1e3 if ok else None
            if ok and one_call_us > SLOW_US:
                one_call_us = min(one_call_us, timing.wall_samples(call, DEVICE, warmup=0, iters=1)[0] * 1e3)
            if ok and one_call_us > SLOW_US:  # e.g. unbind over 65536 sequences: seconds to capture or profile
                entry["untimed_one_call_us"] = one_call_us
            elif ok:
                entry.update(device_time(call))
                entry["x_floor"] = entry["median_us"] / floor_us
        except Exception as exc:  # noqa: BLE001 - one contender's failure never loses the rest
            entry["error"] = f"{type(exc).__name__}: {exc}"
            torch.cuda.synchronize()
    torch_eager = [c["median_us"] for n, c in row["contenders"].items()
                   if "median_us" in c and not n.startswith(NOT_TORCH)]
    row["best_torch_eager_us"] = min(torch_eager) if torch_eager else None
    helion, mine = row["contenders"].get("helion", {}), row["contenders"].get("jaggedperf", {})
    if "median_us" in helion and "median_us" in mine:
        row["helion_over_ours"] = helion["median_us"] / mine["median_us"]
    if op in ROWWISE:
        row["backward"] = bench_backward(ours, batch, grad, copy_gbps)
    return row


def bench_backward(ours, batch, grad: torch.Tensor, copy_gbps: float) -> dict:
    values = batch.values.detach().requires_grad_(True)
    out = ours(values, batch.offsets, max_seqlen=batch.max_seqlen)
    floor_us = 3 * out.numel() * out.element_size() / (copy_gbps * 1e3)  # read y (or x) and grad, write dx

    def backward():
        torch.autograd.grad(out, values, grad, retain_graph=True)

    t = device_time(backward)
    return {**t, "floor_us": floor_us, "x_floor": t["median_us"] / floor_us}


def markdown(results: dict) -> str:
    lines = [f"# jagged family on {results['meta']['gpu']}", "",
             f"copy bandwidth {results['copy_gbps']:.0f} GB/s; device µs (median, L2 flushed); ×floor = time / "
             "(must-move bytes / copy bandwidth)", ""]
    for op in results["ops"]:
        rows = [r for r in results["rows"] if r["op"] == op]
        if not rows:
            continue
        names = sorted({n for r in rows for n in r["contenders"]})
        lines += [f"## {op}", "", "| case | dtype | MB | floor µs | " + " | ".join(names) +
                  " | helion / ours | backward (×floor) |", "|---|---|---:|---:|" + "---:|" * len(names) + "---:|---:|"]
        for r in rows:
            cellsx = []
            for n in names:
                c = r["contenders"].get(n, {})
                cellsx.append(f"{c['median_us']:.1f} ({c['x_floor']:.2f}×)" if "median_us" in c else
                              f"{c['untimed_one_call_us'] / 1e3:.0f} ms (one call)" if "untimed_one_call_us" in c else
                              ("wrong" if c.get("ok") is False else "error" if "error" in c else "—"))
            b = r.get("backward")
            back = "—" if b is None else f"{b['median_us']:.1f} ({b['x_floor']:.2f}×)" if "median_us" in b else "error"
            ratio = f"{r['helion_over_ours']:.2f}" if "helion_over_ours" in r else "—"
            lines.append(f"| {r['case']} | {r['dtype']} | {r['values_mb']:.0f} | {r['floor_us']:.1f} | "
                         + " | ".join(cellsx) + f" | {ratio} | {back} |")
        lines.append("")
    if results["meta"].get("helion_unavailable"):
        lines += [f"helion not measured: {results['meta']['helion_unavailable']}", ""]
    if results.get("not_run"):
        lines += ["not run (past the budget): " + ", ".join(results["not_run"]), ""]
    if results["errors"]:
        lines += ["## errors", ""] + [f"- {k}: {v.splitlines()[0]}" for k, v in results["errors"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for family_bench.json and family_bench.md")
    parser.add_argument("--quick", action="store_true", help="the seed shapes only")
    parser.add_argument("--only", default=None, help="comma-separated case labels (as in the table) to run alone")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no new cell after this many seconds (the rest listed as not run)")
    parser.add_argument("--large-dtypes", default="float32",
                        help="comma-separated dtypes of the large shapes (float32,bfloat16; labels gain the dtype)")
    parser.add_argument("--ops", default=",".join(OPS),
                        help="comma-separated; jagged_softmax, jagged_layer_norm (default), jagged_mean, jagged_sum")
    args = parser.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    results = {"meta": {"torch": torch.__version__, "triton": __import__("triton").__version__,
                        "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(), "python":
                        platform.python_version()}, "copy_gbps": timing.copy_bandwidth_gbps(DEVICE), "rows": [],
               "errors": {}, "ops": ops}
    helion_reason = get_op(ops[0]).unavailable.get("helion")
    if helion_reason:
        results["meta"]["helion_unavailable"] = helion_reason
    else:
        from jaggedperf.impls.helion_contenders import load_helion
        try:
            results["meta"].update(load_helion(DEVICE))
        except Exception as exc:  # noqa: BLE001 - installed but not importable: its cells record it too
            results["meta"]["helion_unavailable"] = f"{type(exc).__name__}: {exc}"
    jaggedperf.ops.prepare_native_launch()
    # shape by shape across the ops (every op's seed cells before any large one), the files rewritten after each
    # cell: a run cut short by its budget or a signal keeps every finished cell
    only = set(args.only.split(",")) if args.only else None
    large_dtypes = tuple(args.large_dtypes.split(","))
    todo = [(op, case) for case in cells(large_dtypes) if not args.quick or (case.B, case.M) == (512, 64)
            if only is None or case.label in only for op in ops]
    results["not_run"] = []
    for op, case in todo:
        if args.budget_s is not None and time.time() - start > args.budget_s:
            results["not_run"].append(f"{op} {case.label} {case.dtype}")
            continue
        try:
            results["rows"].append(bench_case(op, case, results["copy_gbps"]))
        except Exception:  # noqa: BLE001
            results["errors"][f"{op} {case.label} {case.dtype}"] = traceback.format_exc()
        torch.cuda.empty_cache()
        write(results, out, start)
    write(results, out, start)
    return 0


def write(results: dict, out: Path, start: float) -> None:
    results["seconds"] = time.time() - start
    (out / "family_bench.json").write_text(json.dumps(results, indent=1))
    (out / "family_bench.md").write_text(markdown(results))


if __name__ == "__main__":
    raise SystemExit(main())
