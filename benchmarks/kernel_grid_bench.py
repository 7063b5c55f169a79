#!/usr/bin/env python3
"""The kernel grid on the GPU: our jagged sum/mean against every peer on every shape of the lab's
``kernels`` preset (``jaggedperf.lab.grid.KERNEL_CLASSES``), judged against the kernel bars.

Per shape (cases interleaved across classes, so that a spent budget still leaves every class measured; the row is
``jaggedperf.lab.reduce_row.measure_case``, the kernel bars' own, ``tests/gpu/test_kernel_bars_gpu.py``):

- correctness of every contender against float64 first (``reduce_row``'s reference and relative error);
  an incorrect contender is not timed (ours) or not counted as a peer (the others);
- determinism: three repeats of ours, with and without ``max_seqlen``, bitwise equal (NaN-aware: the bits);
- device time by CUDA-graph replay with L2 flushed (``lab.harness.device_time``),
  every sample kept: ours with ``max_seqlen``, ours without, ``torch.segment_reduce``, Inductor's compiled
  padded sum (``_jagged_to_padded_dense_forward`` then ``sum``; only where the padded tensor would fit under
  ``--padded-max-bytes``, and while the compile budget lasts: a skip records why);
- the bandwidth floor: the bytes that must move / the copy bandwidth measured in this run.

Then at the seed shapes (jagged_mean, the seed's op): forward + backward through autograd against
``segment_reduce``'s, and our forward alone, by the seed's wall method (``lab.measure.timing.wall_samples``: 50 + 200,
sync after each), three interleaved rounds; and a fresh process (empty Triton and native caches) timing its
first calls while the native module builds in the background.

Run on the GPU machine (about 7 minutes; prints progress; writes as it goes):

    PYTHONPATH=src python3 benchmarks/kernel_grid_bench.py --out $OUT/kernel_grid

writes ``kernel_grid.json`` (meta, raw samples, medians, quantiles, bars), ``kernel_grid.md`` (the table,
bars 1-5 per shape, worst shape per class) and ``kernel_grid_heatmap.png`` (ours / best peer). ``--quick``:
one shape per class; ``--cpu-smoke``: tiny shapes on the CPU (plumbing only, numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import reduce_row
from jaggedperf.lab.measure import timing
from jaggedperf.lab.grid import kernel_classes

T0 = time.time()
DEVICE = torch.device("cuda")
PEERS = reduce_row.PEERS
SMOKE_CLASSES = {  # --cpu-smoke: one tiny case per class
    "narrow": [Case(300, 4, 16, 0.5)], "odd_width": [Case(16, 24, 40, 0.2)],
    "powerlaw_small": [Case(64, 8, 100, 0.0, "heavy")], "giant": [Case(1, 8, 3000, 0.0, "fixed")],
    "empty": [Case(400, 8, 16, 0.9, "empty", "bfloat16")], "seed": [Case(32, 16, 40, 0.1)],
}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def fresh_child(path: str) -> None:
    """In a process with empty caches: the first calls' costs while the native module builds."""
    import jaggedperf
    from jaggedperf import ops
    from jaggedperf.ops import launch
    from jaggedperf.lab.grid import SEED_CASES
    from jaggedperf.ops.launch import native

    sync = timing.synchronizer(DEVICE)
    batch = make_batch(SEED_CASES[0], DEVICE)
    values, offsets, hint = batch.values, batch.offsets, batch.max_seqlen
    leaf = values.detach().clone().requires_grad_()
    grad = torch.randn(batch.B, batch.M, device=DEVICE)
    rec: dict = {"device": str(DEVICE)}

    def forward_backward() -> None:
        jaggedperf.jagged_mean(leaf, offsets, max_seqlen=hint).backward(grad)

    def step() -> tuple[float, float]:  # one fwd + bwd from a cleared gradient, synced: (its start, its wall µs)
        leaf.grad = None
        t = time.perf_counter()
        forward_backward()
        sync()
        return t, (time.perf_counter() - t) * 1e6

    for name, fn in (("forward", lambda: jaggedperf.jagged_mean(values, offsets, max_seqlen=hint)),
                     ("forward_backward", forward_backward)):
        t = time.perf_counter()
        fn()
        sync()
        rec[f"first_{name}_ms"] = (time.perf_counter() - t) * 1e3
    timeline = []
    start = time.perf_counter()
    limit_s = 25 if DEVICE.type == "cuda" else 2  # the native build takes 10-20 s
    while time.perf_counter() - start < limit_s and len(timeline) < 200_000:
        t, us = step()
        at, status = t - start, native.state()["status"]
        timeline.append((at, us, status))
        if status not in ("building", "not loaded") and "settled_at_s" not in rec:
            rec["settled_at_s"], rec["settled_status"] = at, status  # ready, or off/failed: the path stays so
        if at > rec.get("settled_at_s", 1e9) + 2:  # two seconds of calls after it settled
            break
    by_status: dict = {}
    for _, us, status in timeline:
        by_status.setdefault(status, []).append(us)
    rec["fb_wall_us_by_native_status"] = {s: {"median_us": float(np.median(v)), "calls": len(v)}
                                          for s, v in by_status.items()}
    # The same calls on the Python tier that served them while the module built, with the native path standing
    # aside and no build running: what the build's company cost those calls, apart from the path they took.
    python_tier = ops.launch_path()["tier"]
    launch.force_tier(python_tier)
    try:
        walls, start = [], time.perf_counter()
        while time.perf_counter() - start < 2 and len(walls) < 20_000:
            walls.append(step()[1])
    finally:
        launch.force_tier(None)
    rec["fb_wall_us_python_tier_after_build"] = {"tier": python_tier, "median_us": float(np.median(walls)),
                                                 "calls": len(walls)}
    rec["native"] = {k: v for k, v in native.state().items()
                     if k in ("status", "reason", "build_seconds", "served", "served_backward")}
    Path(path).write_text(json.dumps(rec, indent=1))


def fresh_probe(script: str, timeout_s: int, cpu: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, JAGGEDPERF_CACHE=f"{tmp}/jp", TRITON_CACHE_DIR=f"{tmp}/triton",
                   TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor")
        out = f"{tmp}/fresh.json"
        t = time.time()
        proc = subprocess.run([sys.executable, script, "--fresh-child", out, *(["--cpu-smoke"] if cpu else [])], env=env, capture_output=True,
                              text=True, timeout=timeout_s)
        if proc.returncode != 0:
            return {"error": f"rc {proc.returncode}: {proc.stderr[-2000:]}"}
        rec = json.loads(Path(out).read_text())
        rec["process_s"] = time.time() - t
        return rec


# --- output ----------------------------------------------------------------------------------------------


def _us(x) -> str:
    return f"{x['median_us']:.1f}" if isinstance(x, dict) else "—"


def _mark(v) -> str:
    return {True: "✓", False: "✗", None: "·"}[v]


def markdown(results: dict) -> str:
    meta = results["meta"]
    lines = [f"# The kernel grid ({meta.get('gpu')}, commit {str(meta.get('git_commit'))[:10]})", "",
             f"`{meta.get('command')}`; torch {meta.get('torch')}, triton {meta.get('triton')}; copy bandwidth "
             f"{results.get('copy_gbps', 0):.0f} GB/s; op jagged_{meta.get('op')}; device µs by CUDA-graph replay, "
             "L2 flushed (median); floor = must-move bytes / copy bandwidth.", "",
             "Bars: 1 ours ≤ 0.9× best peer (or ≤ 1.05× floor where a peer is at it), h = with max_seqlen, "
             "p = without; 2 ≥ 64 MB: ≤ 1.15× floor, power-law < 100 MB: ≤ 2× floor; 3 without ≤ 1.15× with; "
             "5 bitwise-deterministic. ✓ holds, ✗ fails, · does not apply.", "",
             "| class | case | MB | floor | ours h | ours p | segment_reduce | Inductor padded | h / best | "
             "h / floor | 1h | 1p | 2h | 2p | 3 | 5 |", "|" + "---|" * 16]
    for r in results["rows"]:
        if "error" in r:
            lines.append(f"| {r['class']} | {r['case']} | | | error: {r['error'][:80]} |" + " |" * 11)
            continue
        b, best = r["bars"], r.get("best_peer_us")
        h = r["ours_hinted"]["median_us"] if isinstance(r.get("ours_hinted"), dict) else None
        ind = r.get("inductor_padded")
        lines.append(
            f"| {r['class']} | {r['case']} | {r['must_move_bytes'] / 1e6:.1f} | {r['floor_us']:.1f} | "
            f"{_us(r.get('ours_hinted'))} | {_us(r.get('ours_plain'))} | {_us(r.get('segment_reduce'))} | "
            f"{_us(ind) if isinstance(ind, dict) else ('skip' if ind else '—')} | "
            f"{(h / best if h and best else float('nan')):.2f} | {(h / r['floor_us'] if h else float('nan')):.2f} | "
            + " | ".join(_mark(b[k]) for k in ("1_ours_hinted", "1_ours_plain", "2_ours_hinted", "2_ours_plain", "3", "5"))
            + " |")
    lines += ["", "## Bars over the grid", "", "| bar | holds | fails | n/a |", "|---|---:|---:|---:|"]
    keys = ["1_ours_hinted", "1_ours_plain", "2_ours_hinted", "2_ours_plain", "3", "5"]
    ok_rows = [r for r in results["rows"] if "bars" in r]
    for k in keys:
        vals = [r["bars"][k] for r in ok_rows]
        lines.append(f"| {k} | {vals.count(True)} | {vals.count(False)} | {vals.count(None)} |")
    lines += ["", "## Worst shape of each class (ours with max_seqlen / best peer)", "",
              "| class | case | ours h | ours p | best peer | floor | h / best |", "|---|---|---:|---:|---:|---:|---:|"]
    for cls in dict.fromkeys(r["class"] for r in ok_rows):
        scored = [(r["ours_hinted"]["median_us"] / r["best_peer_us"], r) for r in ok_rows if r["class"] == cls
                  and isinstance(r.get("ours_hinted"), dict) and r.get("best_peer_us")]
        if scored:
            ratio, r = max(scored, key=lambda x: x[0])
            lines.append(f"| {cls} | {r['case']} | {_us(r['ours_hinted'])} | {_us(r.get('ours_plain'))} | "
                         f"{r['best_peer_us']:.1f} | {r['floor_us']:.1f} | {ratio:.2f} |")
    lines += ["", "## Training at the seed shapes (jagged_mean, wall µs per call, seed's method; bar 4)", "",
              "| case | ours fwd | ours fwd+bwd | segment_reduce fwd+bwd | fwd+bwd / fwd (≤ 3) | / segment_reduce (≤ 0.5) | bar 4 |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for t in results["training"]:
        if "error" in t:
            lines.append(f"| {t['case']} | error: {t['error'][:100]} | | | | | |")
            continue
        lines.append(f"| {t['case']} | {_us(t['ours_forward'])} | {_us(t['ours_forward_backward'])} | "
                     f"{_us(t['segment_reduce_forward_backward'])} | {t['fb_over_forward']:.2f} | "
                     f"{t['fb_over_segment_reduce']:.2f} | {_mark(t['bar4'])} |")
    fresh = results.get("fresh") or {}
    lines += ["", "## A fresh process (empty Triton and native caches)", "", f"```\n{json.dumps(fresh, indent=1)}\n```"]
    if results.get("skipped"):
        lines += ["", "## Not measured", ""] + [f"- {s}" for s in results["skipped"]]
    if results.get("errors"):
        lines += ["", "## Errors", ""] + [f"- {k}: {v.splitlines()[0]}" for k, v in results["errors"].items()]
    return "\n".join(lines) + "\n"


def heatmap(results: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no heatmap: {exc}"
    rows = [r for r in results["rows"] if "bars" in r]
    cols = [("ours h / best", "ours_hinted", "best"), ("ours p / best", "ours_plain", "best"),
            ("ours h / floor", "ours_hinted", "floor"), ("ours p / floor", "ours_plain", "floor")]
    data = np.full((len(rows), len(cols)), np.nan)
    for i, r in enumerate(rows):
        for j, (_, key, den) in enumerate(cols):
            d = r["best_peer_us"] if den == "best" else r["floor_us"]
            if isinstance(r.get(key), dict) and d:
                data[i, j] = r[key]["median_us"] / d
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(rows) + 1.6))
    im = ax.imshow(np.log2(data), cmap="RdYlGn_r", vmin=-2, vmax=2, aspect="auto")
    ax.set_xticks(range(len(cols)), [c[0] for c in cols], fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{r['class']}: {r['case']}" for r in rows], fontsize=6)
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(data[i, j]):
                ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label="log2 ratio (green: ours faster)")
    ax.set_title(f"jagged_{results['meta'].get('op')}: ours vs best peer and floor ({results['meta'].get('gpu')})",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return None


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results["meta"]["elapsed_s"] = time.time() - T0
    (out / "kernel_grid.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "kernel_grid.md").write_text(markdown(results))


# --- main ------------------------------------------------------------------------------------------------


def interleave(classes: dict[str, list[Case]]) -> list[tuple[str, Case]]:
    """The cases round-robin across classes: a budget that runs out still leaves every class measured."""
    queues = {k: list(v) for k, v in classes.items()}
    order = []
    while any(queues.values()):
        for k, q in queues.items():
            if q:
                order.append((k, q.pop(0)))
    return order


def main() -> int:
    global DEVICE
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="kernel_grid", help="directory of the JSON, Markdown and PNG")
    p.add_argument("--op", choices=("sum", "mean"), default="sum", help="the reduction of the grid")
    p.add_argument("--classes", nargs="+", help="only these classes of the preset")
    p.add_argument("--quick", action="store_true", help="one shape per class")
    p.add_argument("--budget-s", type=float, default=380, help="start no shape after this many seconds")
    p.add_argument("--inductor-s", type=float, default=170, help="total Inductor compile time allowed")
    p.add_argument("--max-bytes", type=float, default=4e9, help="skip shapes whose values pass this many bytes")
    p.add_argument("--padded-max-bytes", type=float, default=8e9, help="Inductor's padded tensor at most this")
    p.add_argument("--no-fresh", action="store_true", help="skip the fresh-process probe")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU: the script's plumbing only")
    p.add_argument("--fresh-child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.cpu_smoke:
        DEVICE = torch.device("cpu")
    elif not torch.cuda.is_available():
        print("no CUDA device (use --cpu-smoke to check the plumbing)", file=sys.stderr)
        return 1
    if args.fresh_child:
        fresh_child(args.fresh_child)
        return 0
    out = Path(args.out)
    from jaggedperf.lab.measure.env import environment

    results: dict = {"meta": {**environment(sys.argv), "op": args.op, "args": vars(args)}, "rows": [],
                     "training": [], "fresh": None, "skipped": [], "errors": {}}
    results["meta"]["command"] = " ".join([os.path.basename(sys.executable), *sys.argv])
    results["meta"]["gpu"] = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu"
    classes = SMOKE_CLASSES if args.cpu_smoke else kernel_classes()
    if args.classes:
        classes = {k: v for k, v in classes.items() if k in args.classes}
    if args.quick:
        classes = {k: v[:1] for k, v in classes.items()}

    if not args.no_fresh:  # first: nothing of this process is warm yet
        log("fresh process: first calls while the native module builds")
        try:
            results["fresh"] = fresh_probe(__file__, 150, cpu=DEVICE.type != "cuda")
        except Exception as exc:  # noqa: BLE001
            results["errors"]["fresh"] = f"{type(exc).__name__}: {exc}"
        log(f"  {json.dumps(results['fresh'])[:400]}")
    if DEVICE.type == "cuda":
        from jaggedperf import ops

        results["meta"]["native_launch"] = {k: v for k, v in ops.prepare_native_launch().items()
                                            if k in ("status", "reason", "build_seconds")}
        results["copy_gbps"] = timing.copy_bandwidth_gbps(DEVICE)
    else:
        results["copy_gbps"] = 4300.0
    log(f"copy bandwidth {results['copy_gbps']:.0f} GB/s; native {results['meta'].get('native_launch')}")

    seeds = [c for c in classes.get("seed", []) if c.dtype == "float32"]
    for case in seeds:
        log(f"training walls {case.label}")
        try:
            t = reduce_row.training_walls(case, rounds=3 if DEVICE.type == "cuda" else 1,
                                          iters=200 if DEVICE.type == "cuda" else 10, device=DEVICE)
            results["training"].append(t)
            log(f"  fwd {t['ours_forward']['median_us']:.1f} us, fwd+bwd {t['ours_forward_backward']['median_us']:.1f}"
                f", segment_reduce fwd+bwd {t['segment_reduce_forward_backward']['median_us']:.1f}; bar 4 {t['bar4']}")
        except Exception as exc:  # noqa: BLE001
            results["training"].append({"case": case.label, "error": f"{type(exc).__name__}: {exc}"})
            results["errors"][f"training {case.label}"] = traceback.format_exc()
    write(results, out)

    inductor_left = [args.inductor_s]
    order = interleave(classes)
    for i, (cls, case) in enumerate(order):
        if time.time() - T0 > args.budget_s:
            results["skipped"].append(f"{cls} {case.label}: time budget (--budget-s {args.budget_s:g}) spent")
            continue
        if case.values_nbytes() > args.max_bytes:
            results["skipped"].append(f"{cls} {case.label}: {case.values_nbytes() / 1e9:.1f} GB > --max-bytes")
            continue
        try:
            row = reduce_row.measure_case(cls, case, results["copy_gbps"], op=args.op,
                                          padded_max_bytes=args.padded_max_bytes, inductor_left=inductor_left,
                                          device=DEVICE)
        except Exception as exc:  # noqa: BLE001
            row = {"class": cls, "case": case.label, "error": f"{type(exc).__name__}: {exc}"}
            results["errors"][f"{cls} {case.label}"] = traceback.format_exc()
        results["rows"].append(row)
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
        if "bars" in row:
            log(f"{i + 1}/{len(order)} {cls} {case.label}: ours {_us(row.get('ours_hinted'))} / "
                f"{_us(row.get('ours_plain'))} us, segment_reduce {_us(row.get('segment_reduce'))}, Inductor "
                f"{_us(row.get('inductor_padded'))}, floor {row['floor_us']:.1f}; bars "
                + " ".join(f"{k}={_mark(v)}" for k, v in row["bars"].items()))
        else:
            log(f"{i + 1}/{len(order)} {cls} {case.label}: {row.get('error')}")
        write(results, out)
    problem = heatmap(results, out / "kernel_grid_heatmap.png")
    if problem:
        results["errors"]["heatmap"] = problem
    write(results, out)
    log(f"wrote {out}/kernel_grid.json, kernel_grid.md, kernel_grid_heatmap.png")
    print((out / "kernel_grid.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
