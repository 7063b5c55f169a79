#!/usr/bin/env python3
"""How close are jagged_sum / jagged_mean to the bandwidth floor, and what does an eager call cost? (the ops benchmark)
One run on the GPU answers

1. copy bandwidth (large device-to-device copy, bytes read + written, triton.testing.do_bench);
2. per bar shape: correctness vs float64 first, then device time by CUDA-graph replay with L2
   flushed (median, p20, p80), the floor (must-move bytes / copy bandwidth) and the ratio to it;
   fp32 for every shape, bf16 too for the two largest; backward (jagged_expand) vs its floor;
3. a small grid of alternative configs per shape (through ``jaggedperf.ops.testing.override``), best reported;
4. host overhead: wall per call (50 warm-up, 200 calls, sync after each; median) for the fast path,
   the normal JIT path, the operator through torch.ops, and torch.segment_reduce;
5. which launch path was active, torch/triton/CUDA/GPU versions.

Run:  PYTHONPATH=src python3 benchmarks/ops_bench.py --out $OUT/ops.json --markdown $OUT/ops.md
      python3 benchmarks/ops_bench.py --from benchmarks/results/h200/ops.json --markdown ops.md   (tables only)
Each section records its own error and the run goes on; the JSON holds every raw number; a short
table is printed last. Budget: < 6 minutes (the config grid stops itself at --grid-seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback

import torch

from jaggedperf.lab.reduce_row import floor_us, must_move_bytes, reference, rel_error, tolerance

T0 = time.time()
DEVICE = "cuda"  # "cpu" only with --cpu-smoke (checks this script's plumbing on a machine without a GPU)
RESULTS: dict = {"meta": {}, "errors": {}, "copy": None, "null_kernel": None, "forward": [], "backward": [], "grid": [],
                 "grid_best": [], "host": [], "launch_path": None}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def section(name):
    """Run the decorated function now; record (not raise) its error under RESULTS['errors'][name]."""

    def run(fn):
        log(f"section {name}")
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one failure never loses the rest
            RESULTS["errors"][name] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
            log(f"  {name} failed: {type(exc).__name__}: {exc}")
        return fn

    return run


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="ops_bench.json")
    parser.add_argument("--grid-seconds", type=float, default=160.0, help="time box of the config grid")
    parser.add_argument("--grid-dtype", choices=["fp32", "bf16"], default="fp32",
                        help="config grid over every shape in fp32, or over the two largest in bf16")
    parser.add_argument("--quick", action="store_true", help="fewer shapes and configs (smoke run)")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU: exercises the script only")
    parser.add_argument("--markdown", help="also write the tables as Markdown here (ops.md)")
    parser.add_argument("--title", default="jaggedperf ops on the H200", help="the Markdown's title")
    parser.add_argument("--from", dest="from_json", help="no run: the Markdown of this ops_bench JSON (--markdown)")
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            run = json.load(f)
        with open(args.markdown or "/dev/stdout", "w") as f:
            f.write(render(run, args.title))
        return 0
    global DEVICE
    if args.cpu_smoke:
        DEVICE, args.quick = "cpu", True

    meta = RESULTS["meta"]
    meta["command"] = " ".join([sys.executable, *sys.argv])
    meta["python"] = platform.python_version()
    meta["torch"] = torch.__version__
    meta["cuda_available"] = torch.cuda.is_available()
    try:
        import triton

        meta["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        meta["triton"] = f"unavailable: {exc}"
    meta["cuda"] = torch.version.cuda
    meta["git_commit"] = _cmd(["git", "rev-parse", "HEAD"])
    meta["driver"] = _cmd(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                           "--format=csv,noheader"])
    if not torch.cuda.is_available() and DEVICE == "cuda":
        log("no CUDA device: nothing to measure")
        _write(args.out)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(render(RESULTS, args.title))
        return 1
    if DEVICE == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
        meta["sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    log(f"torch {meta['torch']} triton {meta['triton']} cuda {meta['cuda']} gpu {meta.get('gpu')}")

    import jaggedperf
    from jaggedperf.inputs import Case, make_batch
    from jaggedperf.lab.grid import SEED_CASES
    from jaggedperf.ops import testing

    shapes = [
        *SEED_CASES,
        Case(1024, 256, 1000, 0.5),
        Case(4096, 512, 512, 0.2),
        Case(256, 64, 20000, 0.5),
        Case(4096, 128, 32768, 0.0, "heavy"),
        Case(8, 4096, 4000, 0.0, "fixed"),
        Case(65536, 16, 64, 0.2),
        Case(32768, 64, 32, 0.2),  # not a bar: many short rows 64 wide, the looping kernel's other regime
    ]
    if args.quick:
        shapes = shapes[:2] + shapes[5:6]
    if args.cpu_smoke:
        shapes = [Case(16, 8, 20, 0.1), Case(8, 3, 30, 0.5, "heavy"), Case(4, 5, 12, 0.0, "fixed")]
    batches: dict = {}

    longest: dict = {}

    def get(case, dtype=torch.float32):
        key = (case, dtype)
        if key not in batches:
            b = make_batch(case, DEVICE)
            batches[key] = (b.values.to(dtype).contiguous(), b.offsets)
            longest[case] = b.max_seqlen
        return batches[key]

    # ---- 1. copy bandwidth ------------------------------------------------------------------
    @section("copy")
    def _copy():
        n = 1 << 28 if DEVICE == "cuda" else 1 << 20  # 1 GiB of fp32
        x = torch.randn(n, device=DEVICE)
        y = torch.empty_like(x)
        ms = _bench(lambda: y.copy_(x), warmup=25, rep=200)  # noqa: F821 - run before the del
        nbytes = 2 * x.numel() * x.element_size()
        RESULTS["copy"] = {"bytes": nbytes, "median_us": ms[0] * 1e3, "p20_us": ms[1] * 1e3, "p80_us": ms[2] * 1e3,
                           "gbps": nbytes / (ms[0] * 1e-3) / 1e9}
        del x, y
        _empty_cache()
        log(f"  copy bandwidth {RESULTS['copy']['gbps']:.0f} GB/s")

    copy_gbps = (RESULTS["copy"] or {}).get("gbps") or 4300.0

    # ---- 1b. what the measurement costs with no work: one one-element kernel, same method -------------
    @section("null kernel")
    def _null():
        one = torch.zeros(1, device=DEVICE)
        RESULTS["null_kernel"] = _graph_time(lambda: one.add_(1.0))
        log(f"  one-element kernel: {RESULTS['null_kernel']['median_us']:.1f} us")

    # ---- 2. forward and backward per shape ----------------------------------------------------
    by_bytes = sorted(shapes, key=lambda c: _nbytes(get(c)))
    largest_two = set(by_bytes[-2:])

    for case in shapes:
        for dtype in ([torch.float32, torch.bfloat16] if case in largest_two else [torch.float32]):
            @section(f"forward {case.label} {_dt(dtype)}")
            def _fwd(case=case, dtype=dtype):
                values, offsets = get(case, dtype)
                row = _shape_row(case, values, offsets, copy_gbps)
                row["rel_error_mean"] = rel_error(jaggedperf.jagged_mean(values, offsets),
                                                   reference(values, offsets, mean=True))
                row["rel_error_sum"] = rel_error(jaggedperf.jagged_sum(values, offsets),
                                                  reference(values, offsets, mean=False))
                tol = tolerance(dtype)
                row["correct"] = row["rel_error_mean"] <= tol and row["rel_error_sum"] <= tol
                row["config"] = testing.reduce_config(values.shape[1], dtype, values.device).to_dict()
                hint = longest[case]
                row["max_seqlen"] = hint
                row["rel_error_hinted"] = rel_error(jaggedperf.jagged_mean(values, offsets, max_seqlen=hint),
                                                     reference(values, offsets, mean=True))
                row["correct"] = row["correct"] and row["rel_error_hinted"] <= tol
                if row["correct"]:
                    row["device"] = _graph_time(lambda: jaggedperf.jagged_mean(values, offsets))
                    row["ratio_to_floor"] = row["device"]["median_us"] / row["floor_us"]
                    row["device_hinted"] = _graph_time(lambda: jaggedperf.jagged_mean(values, offsets, max_seqlen=hint))
                    row["ratio_to_floor_hinted"] = row["device_hinted"]["median_us"] / row["floor_us"]
                    # the kernels alone (profiler durations, L2 flushed): the graph replay's time less its launch
                    row["kernels"] = _kernel_time(lambda: jaggedperf.jagged_mean(values, offsets))
                    row["kernels_hinted"] = _kernel_time(lambda: jaggedperf.jagged_mean(values, offsets, max_seqlen=hint))
                    # the practical floor at this size: a dense column sum reading the same bytes
                    row["dense_sum_device"] = _graph_time(lambda: values.sum(0))
                    try:
                        off64 = offsets.long()
                        row["segment_reduce_device"] = _graph_time(
                            lambda: torch.segment_reduce(values, "mean", offsets=off64, axis=0))
                    except Exception as exc:  # noqa: BLE001
                        row["segment_reduce_device"] = f"{type(exc).__name__}: {exc}"
                RESULTS["forward"].append(row)
                log(f"  {row['case']} {row['dtype']}: rel err {row['rel_error_mean']:.2e}, "
                    f"{_us(row.get('device'))} us, floor {row['floor_us']:.1f} us")

        @section(f"backward {case.label}")
        def _bwd(case=case):
            values, offsets = get(case)
            B, M = offsets.numel() - 1, values.shape[1]
            grad = torch.randn(B, M, device=DEVICE)
            n_rows = values.shape[0]
            out = torch.ops.jaggedperf.jagged_expand(grad, offsets, n_rows, True)
            lengths = offsets.diff()
            ref = (grad.double() / lengths.clamp_min(1).unsqueeze(1).double()).repeat_interleave(
                lengths, dim=0, output_size=n_rows)
            must = B * M * 4 + offsets.numel() * offsets.element_size() + n_rows * M * 4
            row = {"case": case.label, "dtype": "fp32", "must_move_bytes": must,
                   "floor_us": floor_us(must, copy_gbps),
                   "rel_error": rel_error(out, ref)}
            hint = longest[case]
            hinted = torch.ops.jaggedperf.jagged_expand(grad, offsets, n_rows, True, hint)
            row["rel_error_hinted"] = rel_error(hinted, ref)
            del ref
            expand = lambda: torch.ops.jaggedperf.jagged_expand(grad, offsets, n_rows, True)  # noqa: E731
            expand_hinted = lambda: torch.ops.jaggedperf.jagged_expand(grad, offsets, n_rows, True, hint)  # noqa: E731
            row["device"] = _graph_time(expand)
            row["ratio_to_floor"] = row["device"]["median_us"] / row["floor_us"]
            row["kernels"] = _kernel_time(expand)
            # with max_seqlen (what autograd passes when the forward had it): whole segments where they fit
            row["device_hinted"] = _graph_time(expand_hinted)
            row["kernels_hinted"] = _kernel_time(expand_hinted)
            RESULTS["backward"].append(row)
            log(f"  backward {case.label}: {row['device']['median_us']:.1f} us, with max_seqlen "
                f"{row['device_hinted']['median_us']:.1f} us, floor {row['floor_us']:.1f} us")

    # ---- 2b. whole-segments kernel: configs around segments_config, where max_seqlen selects it --------
    @section("segments grid")
    def _segments_grid():
        import dataclasses


        RESULTS["segments_grid"] = []
        for case in shapes:
            values, offsets = get(case)
            B, M = offsets.numel() - 1, values.shape[1]
            base = testing.segments_config(M, longest[case], B, values.device)
            if base is None:
                continue
            floor = floor_us(must_move_bytes(values, offsets), copy_gbps)
            ref = reference(values, offsets, mean=True)
            # the default's tile with 1/2/4 warps, one program per group and looping programs (2, 8, 16 per SM)
            # (8 tiles per segment were slower everywhere; half-width column blocks no better)
            sms = testing.sm_count(values.device)
            variants = {dataclasses.replace(base, num_warps=w, programs=p) for w in (1, 2, 4)
                        for p in (0, 2 * sms, 8 * sms, 16 * sms) if p == 0 or p < -(-B // base.group)}
            for cfg in sorted(variants, key=lambda c: dataclasses.astuple(c)):
                row = {"case": case.label, "config": cfg.to_dict(), "bucket": cfg == base, "floor_us": floor}
                try:
                    run = lambda cfg=cfg: testing.launch_reduce(values, offsets, mean=True, segments=cfg)  # noqa: E731
                    row["rel_error"] = rel_error(run(), ref)
                    row["device"] = _graph_time(run, rep=30)
                    row["ratio_to_floor"] = row["device"]["median_us"] / floor
                except Exception as exc:  # noqa: BLE001
                    row["error"] = f"{type(exc).__name__}: {exc}"
                RESULTS["segments_grid"].append(row)
            ok = [r for r in RESULTS["segments_grid"] if r["case"] == case.label and "device" in r
                  and r["rel_error"] <= tolerance(values.dtype)]
            if ok:
                best = min(ok, key=lambda r: r["device"]["median_us"])
                log(f"  segments {case.label}: bucket {base} ; best {best['device']['median_us']:.1f} us "
                    f"({best['config']}), floor {floor:.1f} us")

    # ---- 3. config grid ------------------------------------------------------------------------
    @section("grid")
    def _grid():
        deadline = time.time() + args.grid_seconds
        order = sorted(shapes, key=lambda c: _nbytes(get(c)))  # cheap shapes first
        grid_dtype = torch.bfloat16 if args.grid_dtype == "bf16" else torch.float32
        if grid_dtype == torch.bfloat16:
            order = [c for c in order if c in largest_two]
        RESULTS["grid_dtype"] = args.grid_dtype
        for case in order:
            if time.time() > deadline:
                RESULTS["grid_truncated"] = True
                break
            values, offsets = get(case, grid_dtype)
            base = testing.reduce_config(values.shape[1], values.dtype, values.device)
            floor = floor_us(must_move_bytes(values, offsets), copy_gbps)
            ref = reference(values, offsets, mean=True)
            tried: dict = {}

            def measure(fields, case=case, values=values, offsets=offsets, floor=floor, tried=tried, ref=ref):
                cfg = {**base.to_dict(), **fields}
                if cfg["min_chunk_rows"] % cfg["block_l"]:
                    cfg["min_chunk_rows"] = cfg["block_l"] * max(1, cfg["min_chunk_rows"] // cfg["block_l"])
                key = tuple(sorted(cfg.items()))
                if key in tried or time.time() > deadline:
                    return tried.get(key)
                try:
                    hint = longest[case]
                    with testing.override(testing.ReduceConfig(**cfg)):
                        out = jaggedperf.jagged_mean(values, offsets)
                        err = max(rel_error(out, ref),
                                  rel_error(jaggedperf.jagged_mean(values, offsets, max_seqlen=hint), ref))
                        t = _graph_time(lambda: jaggedperf.jagged_mean(values, offsets), rep=30)
                        th = _graph_time(lambda: jaggedperf.jagged_mean(values, offsets, max_seqlen=hint), rep=30)
                    row = {"case": case.label, "dtype": _dt(values.dtype), "config": cfg, "rel_error": err,
                           "device": t, "device_hinted": th, "ratio_to_floor": t["median_us"] / floor,
                           "ok": err <= tolerance(values.dtype)}
                except Exception as exc:  # noqa: BLE001
                    row = {"case": case.label, "config": cfg, "error": f"{type(exc).__name__}: {exc}", "ok": False}
                tried[key] = row
                RESULTS["grid"].append(row)
                return row

            measure({})
            axes = {
                "programs_per_sm": [2, 4, 8, 16, 32],
                "block_l": [8, 16, 32, 64, 128],
                "num_warps": [1, 2, 4, 8],
                "block_m": sorted({max(1, base.block_m // 2), base.block_m, min(512, base.block_m * 2)}),
                "min_chunk_rows": [1, 4, 16],  # in tiles (× block_l)
            }
            if args.quick:
                axes = {k: v[:2] for k, v in axes.items()}
            best_fields: dict = {}
            for axis, choices in axes.items():  # one coordinate at a time around the bucket choice
                scored = []
                for choice in choices:
                    fields = {axis: choice}
                    if axis == "min_chunk_rows":
                        fields = {axis: choice * base.block_l}
                    if axis == "block_l":
                        fields["min_chunk_rows"] = 4 * choice
                    if axis == "block_m" and choice * base.block_l > 16384:
                        continue
                    row = measure(fields)
                    if row and row.get("ok"):
                        scored.append((row["device"]["median_us"], fields))
                if scored:
                    best_fields.update(min(scored, key=lambda x: x[0])[1])
            combined = measure(best_fields) if best_fields else None
            rows = [r for r in tried.values() if r and r.get("ok")]
            if rows:
                best_hinted = min(rows, key=lambda r: r["device_hinted"]["median_us"])
                RESULTS.setdefault("grid_best_hinted", []).append(
                    {"case": case.label, "best": best_hinted["config"],
                     "best_us": best_hinted["device_hinted"]["median_us"], "floor_us": floor})
                best = min(rows, key=lambda r: r["device"]["median_us"])
                RESULTS["grid_best"].append({"case": case.label, "dtype": _dt(values.dtype), "bucket": base.to_dict(),
                                             "best": best["config"], "best_us": best["device"]["median_us"],
                                             "bucket_us": (tried.get(tuple(sorted(base.to_dict().items()))) or {})
                                             .get("device", {}).get("median_us"),
                                             "combined": combined and combined.get("config"),
                                             "floor_us": floor, "tried": len(tried)})
                log(f"  grid {case.label}: best {best['device']['median_us']:.1f} us of {len(tried)} "
                    f"({best['config']})")

    # ---- 4. host overhead ----------------------------------------------------------------------
    for case in shapes[:2]:
        @section(f"host {case.label}")
        def _host(case=case):
            values, offsets = get(case)
            off64 = offsets.long()
            hint = longest[case]
            nt = torch.nested.nested_tensor_from_jagged(values, offsets, max_seqlen=hint)
            calls = {
                "fast_path": lambda: jaggedperf.jagged_mean(values, offsets),
                "fast_path_hinted": lambda: jaggedperf.jagged_mean(values, offsets, max_seqlen=hint),
                "op_torch_ops": lambda: torch.ops.jaggedperf.jagged_mean(values, offsets, False),
                "nested_tensor": lambda: jaggedperf.jagged_mean(nt),
                "segment_reduce": lambda: torch.segment_reduce(values, "mean", offsets=off64, axis=0),
            }
            row = {"case": case.label, "wall_us": {}, "launch_path": jaggedperf.ops.launch_path()}
            for name, fn in calls.items():
                row["wall_us"][name] = _wall(fn)
            for tier in reversed(testing.TIERS):
                testing.force_tier(tier)
                try:
                    row["wall_us"][f"tier_{tier}"] = _wall(lambda: jaggedperf.jagged_mean(values, offsets))
                except Exception as exc:  # noqa: BLE001
                    row["wall_us"][f"tier_{tier}"] = f"{type(exc).__name__}: {exc}"
                finally:
                    testing.force_tier(None)
            row["device_us"] = _graph_time(lambda: jaggedperf.jagged_mean(values, offsets))["median_us"]
            RESULTS["host"].append(row)
            log(f"  host {case.label}: " + ", ".join(
                f"{k} {v['median_us']:.1f}" for k, v in row["wall_us"].items() if isinstance(v, dict)))

    # ---- 5. launch path ------------------------------------------------------------------------
    RESULTS["launch_path"] = jaggedperf.ops.launch_path()
    log(f"launch path: {RESULTS['launch_path']}")
    _write(args.out)
    _table()
    return 0


# ============================================================================================
# helpers
# ============================================================================================


def _cmd(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        return f"unavailable: {exc}"


def _dt(dtype):
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def _nbytes(vo):
    values, offsets = vo
    return values.numel() * values.element_size()


def _shape_row(case, values, offsets, copy_gbps):
    must = must_move_bytes(values, offsets)
    return {"case": case.label, "dtype": _dt(values.dtype), "B": offsets.numel() - 1, "M": values.shape[1],
            "total_len": values.shape[0], "must_move_bytes": must, "copy_gbps": copy_gbps,
            "floor_us": floor_us(must, copy_gbps)}


def _bench(fn, warmup=10, rep=100):
    """[median, p20, p80] in ms: triton's do_bench on the GPU (L2 flushed before each call)."""
    if DEVICE == "cpu":
        times = sorted(_timed(fn) for _ in range(20))
        return [times[10] * 1e3, times[4] * 1e3, times[16] * 1e3]
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5, 0.2, 0.8])


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _empty_cache():
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def _graph_time(fn, rep=100):
    """Device time of fn (µs): the lab's CUDA-graph replay under do_bench (L2 flushed before each replay)."""
    from jaggedperf.lab import harness

    for _ in range(3):  # compile, verify the fast path, settle
        fn()
    _sync()
    if DEVICE == "cpu":
        ms = _bench(fn)
        return {"median_us": ms[0] * 1e3, "p20_us": ms[1] * 1e3, "p80_us": ms[2] * 1e3, "method": "cpu-wall",
                "l2_flushed": False}
    return harness.device_time(fn, torch.device(DEVICE), rep_ms=rep, profiler_fallback=False)


def _kernel_time(fn, calls=30):
    """Sum of the call's kernel durations (µs) under torch.profiler, L2 flushed before each call; None on the CPU."""
    from jaggedperf.lab.measure import timing

    if DEVICE == "cpu":
        return None
    prof = timing.profile_kernels(fn, torch.device(DEVICE), calls=calls, flush=True)
    t = timing.profiler_device_time(prof, flush=True)
    return {"median_us": t.median_us, "p20_us": t.p20_us, "p80_us": t.p80_us, "kernels_per_call": prof.kernels_per_call,
            "method": t.method, "l2_flushed": t.l2_flushed}


def _wall(fn, warmup=50, calls=200):
    """The seed's method (the lab's wall_stats: warm-up, then timed calls with a sync after each); µs."""
    from jaggedperf.lab.measure import timing

    w = timing.wall_stats(fn, torch.device(DEVICE), warmup=warmup, iters=calls)
    return {"median_us": w.median_ms * 1e3, "mean_us": w.mean_ms * 1e3, "min_us": w.min_ms * 1e3,
            "max_us": w.max_ms * 1e3, "n": w.n}


def _us(device):
    return f"{device['median_us']:.1f}" if isinstance(device, dict) else "-"


# --- the Markdown tables (ops.md) ------------------------------------------------------------------


def _md_us(d) -> str:
    return f"{d['median_us']:.1f}" if isinstance(d, dict) else "—"


def _spread(d) -> str:
    return f"{d['median_us']:.1f} ({d['p20_us']:.1f}–{d['p80_us']:.1f})" if isinstance(d, dict) else "—"


def _ratio(d, floor) -> str:
    return f"{d['median_us'] / floor:.2f}" if isinstance(d, dict) and floor else "—"


def render(run: dict, title: str) -> str:
    meta = run["meta"]
    copy = (run.get("copy") or {}).get("gbps")
    lines = [f"# {title}", "",
             f"Command: `{meta.get('command')}`.",
             f"torch {meta.get('torch')}, triton {meta.get('triton')}, {meta.get('gpu')}, copy bandwidth "
             f"{copy:.0f} GB/s (read + write).",
             "Device time: CUDA-graph replay, L2 flushed before each replay, median (p20–p80), µs. Floor = bytes that "
             "must move (values + offsets read once, output written once) / that copy bandwidth. Every row was "
             "first checked against float64 (relative error ≤ 1e-5 fp32, ≤ 1e-2 bf16).",
             *([f"A one-element kernel under the same method takes {run['null_kernel']['median_us']:.1f} µs "
                "(what the measurement costs with no work)."] if isinstance(run.get("null_kernel"), dict) else []),
             "",
             "`no max_seqlen`: the balanced two-launch path (what `torch.compile` runs when no max_seqlen is passed). `max_seqlen given`: the "
             "eager call with the batch's max_seqlen (the whole-segments kernel where `segments_config` picks it: "
             "the seed shapes, and at 65536×16 and 32768×64 its looping form; elsewhere the same path as the first column). `dense sum`: "
             "`values.sum(0)`, a dense reduction that reads the same bytes: what a read of this size costs here.",
             *(["", "`kernels`: the same call's kernel durations summed (torch.profiler, L2 flushed before each call, "
                "median): the device time without the replay's own launch."]
               if any("kernels" in r for r in run.get("forward", [])) else []),
             "",
             "| case | dtype | floor | no max_seqlen | × floor | kernels | max_seqlen given | × floor | kernels | "
             "dense sum | segment_reduce |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in run.get("forward", []):
        lines.append(
            f"| {r['case']} | {r['dtype']} | {r['floor_us']:.1f} | {_spread(r.get('device'))} | "
            f"{_ratio(r.get('device'), r['floor_us'])} | {_md_us(r.get('kernels'))} | {_md_us(r.get('device_hinted'))} | "
            f"{_ratio(r.get('device_hinted'), r['floor_us'])} | {_md_us(r.get('kernels_hinted'))} | "
            f"{_md_us(r.get('dense_sum_device'))} | {_md_us(r.get('segment_reduce_device'))} |")
    if run.get("backward"):
        lines += ["", "Backward (`jagged_expand`, mean, fp32): floor = grad read + offsets + grad_values written. Graph "
                  "replay and kernel sums as above; `max_seqlen`: what autograd passes when the forward had it.", "",
                  "| case | floor | graph | × floor | kernels | × floor | max_seqlen: graph | kernels | × floor |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for b in run["backward"]:
            f = b["floor_us"]
            lines.append(f"| {b['case']} | {f:.1f} | {_md_us(b.get('device'))} | {_ratio(b.get('device'), f)} | "
                         f"{_md_us(b.get('kernels'))} | {_ratio(b.get('kernels'), f)} | {_md_us(b.get('device_hinted'))} | "
                         f"{_md_us(b.get('kernels_hinted'))} | {_ratio(b.get('kernels_hinted'), f)} |")
    seg = [r for r in run.get("segments_grid", []) if isinstance(r.get("device"), dict)]
    if seg:
        lines += ["", "Whole-segments kernel, configs tried (fp32):", "",
                  "| case | group | block_l | block_m | warps | looping programs | µs | × floor | default |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in seg:
            c = r["config"]
            lines.append(f"| {r['case']} | {c['group']} | {c['block_l']} | {c['block_m']} | {c['num_warps']} | "
                         f"{c.get('programs') or '—'} | "
                         f"{r['device']['median_us']:.1f} | {r['ratio_to_floor']:.2f} | {'yes' if r.get('bucket') else ''} |")
    if run.get("grid_best"):
        lines += ["", f"Config grid ({run.get('grid_dtype', 'fp32')}; one field at a time around the bucket):", "",
                  "| case | dtype | bucket µs | best µs | best config |", "|---|---|---:|---:|---|"]
        for g in run["grid_best"]:
            keys = ("block_l", "block_m", "num_warps", "programs_per_sm", "min_chunk_rows")
            best = ", ".join(f"{k}={g['best'][k]}" for k in keys)
            bucket_us = f"{g['bucket_us']:.1f}" if g.get("bucket_us") else "—"
            lines.append(f"| {g['case']} | {g.get('dtype', 'fp32')} | {bucket_us} | {g['best_us']:.1f} | {best} |")
    if run.get("host"):
        lines += ["", "Wall per call (seed method: 50 warm-up, 200 calls, sync after each; median µs; L2 warm):", "",
                  "| case | jagged_mean | jagged_mean(max_seqlen=…) | jagged_mean(nt) | torch.ops.jaggedperf.jagged_mean | "
                  "torch.segment_reduce | device µs |", "|---|---:|---:|---:|---:|---:|---:|"]
        for h in run["host"]:
            w = h["wall_us"]
            lines.append(f"| {h['case']} | {_md_us(w.get('fast_path'))} | {_md_us(w.get('fast_path_hinted'))} | "
                         f"{_md_us(w.get('nested_tensor'))} | {_md_us(w.get('op_torch_ops'))} | {_md_us(w.get('segment_reduce'))} | "
                         f"{h.get('device_us', 0):.1f} |")
    path = run.get("launch_path") or {}
    lines += ["", f"Eager launch path: {path.get('tier')} (verified: {path.get('verified_tier')}; dropped: "
              f"{', '.join(path.get('dropped') or []) or 'none'}).", ""]
    if run.get("errors"):
        lines += [f"Sections that failed: {', '.join(run['errors'])}.", ""]
    return "\n".join(lines)


def _write(path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    RESULTS["meta"]["elapsed_s"] = time.time() - T0
    with open(path, "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)
    log(f"wrote {path}")


def _table():
    print()
    print(f"torch {RESULTS['meta'].get('torch')}  triton {RESULTS['meta'].get('triton')}  "
          f"gpu {RESULTS['meta'].get('gpu')}  copy {((RESULTS['copy'] or {}).get('gbps') or 0):.0f} GB/s  "
          f"launch tier {(RESULTS['launch_path'] or {}).get('tier')} (verified {(RESULTS['launch_path'] or {}).get('verified_tier')})")
    print(f"{'case':34} {'dt':4} {'ok':3} {'dev us':>8} {'p20-p80':>13} {'floor':>7} {'x floor':>7} {'hinted':>8} "
          f"{'densesum':>8} {'segred':>8} {'bwd us':>8} {'bwd x':>6} {'grid best':>9}")
    bwd = {r["case"]: r for r in RESULTS["backward"]}
    best = {(r["case"], r.get("dtype", "fp32")): r for r in RESULTS["grid_best"]}
    for r in RESULTS["forward"]:
        d = r.get("device") if isinstance(r.get("device"), dict) else None
        sr = r.get("segment_reduce_device")
        b = bwd.get(r["case"]) if r["dtype"] == "fp32" else None
        g = best.get((r["case"], r["dtype"]))
        spread = f"{d['p20_us']:.1f}-{d['p80_us']:.1f}" if d else "-"
        print(f"{r['case']:34} {r['dtype']:4} {'y' if r.get('correct') else 'NO':3} "
              f"{(d['median_us'] if d else float('nan')):8.1f} "
              f"{spread:>13} "
              f"{r['floor_us']:7.1f} {r.get('ratio_to_floor', float('nan')):7.2f} "
              f"{_us(r.get('device_hinted')):>8} {_us(r.get('dense_sum_device')):>8} "
              f"{(sr['median_us'] if isinstance(sr, dict) else float('nan')):8.1f} "
              f"{(b['device']['median_us'] if b and isinstance(b.get('device'), dict) else float('nan')):8.1f} "
              f"{(b['ratio_to_floor'] if b and 'ratio_to_floor' in b else float('nan')):6.2f} "
              f"{(g['best_us'] if g else float('nan')):9.1f}")
    for h in RESULTS["host"]:
        walls = ", ".join(f"{k} {v['median_us']:.1f}" for k, v in h["wall_us"].items() if isinstance(v, dict))
        print(f"host wall us (median) {h['case']}: {walls}; device {h.get('device_us', float('nan')):.1f}")
    if RESULTS["errors"]:
        print(f"ERRORS in {len(RESULTS['errors'])} sections: {', '.join(RESULTS['errors'])}")


if __name__ == "__main__":
    sys.exit(main())
