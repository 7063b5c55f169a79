#!/usr/bin/env python3
"""Issue #38's question on the GPU: does the merge-path reduction without max_seqlen reach the best peer, the same
call with max_seqlen, and the practical floor, on every length distribution?

Per shape (fp32 and bf16, jagged_sum unless noted), every contender in the same run:

- correctness against float64 first (``ops_bench``'s reference and relative error); bitwise repeats (3, NaN-aware);
- device time by CUDA-graph replay with L2 flushed (``lab.timing``): ours without max_seqlen (the merge path), ours
  with it (the whole-segments kernel where it applies, else the merge path too), the previous no-max_seqlen kernels
  (the balanced chunks, through ``ops.testing``), ``torch.segment_reduce``, Inductor's padded sum given the true
  max (where the padded tensor fits and the compile budget lasts);
- on shapes >= 16 MB: jagged_mean without max_seqlen too (bar 2: sum and mean within 5%);
- the floors: bytes that must move / the copy bandwidth, and the practical floor, an empty kernel's replay + the
  replay of a copy of the same bytes;
- the backward (expand) with and without max_seqlen on the shapes of ``BACKWARD``;
- config variants of the merge path on ``VARIANT_SHAPES`` (half and twice the programs an SM, the other window,
  twice the warps), and the registers a lane of every merge kernel the run compiled.

Run on the GPU machine (about 4 minutes):

    PYTHONPATH=src python3 benchmarks/merge_probe.py --out $OUT/merge

writes ``merge_probe.json`` (meta, every sample, medians, quantiles) and ``merge_probe.md`` (the tables).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_grid_bench as grid  # noqa: E402  (device_time, sample_stats, bitwise_equal, padded_fn)
import ops_bench  # noqa: E402

from jaggedperf.inputs import Case, make_batch  # noqa: E402
from jaggedperf.lab import timing  # noqa: E402

DEVICE = torch.device("cuda")
T0 = time.time()


def bimodal_lengths(B: int, seed: int = 1337) -> torch.Tensor:
    """98% of the segments 1-4 rows, 2% 10^4-3·10^4 rows (the issue's bimodal class)."""
    gen = torch.Generator().manual_seed(seed)
    short = torch.randint(1, 5, (B,), generator=gen)
    low, high = (10_000, 30_001) if B >= 1000 else (20, 40)  # (--cpu-smoke's batches are tiny)
    long = torch.randint(low, high, (B,), generator=gen)
    return torch.where(torch.rand(B, generator=gen) < 0.02, long, short)


# (class, label, how to build: a Case, or ("bimodal", B, M, dtype))
SHAPES = [  # the likeliest losses first: a spent budget leaves them measured
    ("seed", Case(512, 64, 100, 0.1)),
    ("narrow", Case(10_000, 4, 16, 0.5)),
    ("ones", Case(1_000_000, 8, 1, 0.0, "fixed")),
    ("bimodal", ("bimodal", 100_000, 8, "float32")),
    ("empty", Case(100_000, 64, 64, 0.9, "empty")),
    ("giant", Case(1, 64, 2_000_000, 0.0, "fixed")),
    ("powerlaw", Case(4096, 64, 400, 0.0, "heavy")),
    ("odd_width", Case(2048, 24, 256, 0.2)),
    ("powerlaw_large", Case(20000, 128, 2000, 0.0, "heavy")),
    ("narrow", Case(100_000, 8, 16, 0.5)),
    ("bars", Case(1024, 256, 1000, 0.5)),
    ("empty", Case(1_000_000, 16, 32, 0.95, "empty")),
    ("powerlaw", Case(16384, 20, 1000, 0.0, "heavy")),
    ("odd_width", Case(2048, 1000, 256, 0.2)),
    ("ones", Case(1_000_000, 8, 1, 0.0, "fixed", "bfloat16")),
    ("seed", Case(512, 64, 100, 0.1, dtype="bfloat16")),
    ("odd_width", Case(2048, 20, 256, 0.2)),
    ("odd_width", Case(2048, 48, 256, 0.2, dtype="bfloat16")),
    ("bimodal", ("bimodal", 100_000, 8, "bfloat16")),
    ("giant", Case(1, 64, 2_000_000, 0.0, "fixed", "bfloat16")),
    ("powerlaw", Case(4096, 128, 1000, 0.0, "heavy", "bfloat16")),
    ("narrow", Case(100_000, 32, 16, 0.5, dtype="bfloat16")),
    ("empty", Case(65536, 256, 512, 0.95, "empty", "bfloat16")),
    ("powerlaw_large", Case(4096, 128, 32768, 0.0, "heavy")),
    ("bars", Case(65536, 16, 64, 0.5)),
]
BACKWARD = {"B10000-M4-L16-s0.5", "B1000000-M8-L1-s0-fixed", "B4096-M64-L400-s0-heavy", "B1-M64-L2000000-s0-fixed",
            "B100000-M64-L64-s0.9-empty", "B512-M64-L100-s0.1", "B1024-M256-L1000-s0.5", "bimodal-B100000-M8-fp32"}
VARIANT_SHAPES = {"B100000-M8-L16-s0.5", "B1000000-M8-L1-s0-fixed", "B4096-M64-L400-s0-heavy",
                  "B1-M64-L2000000-s0-fixed", "B100000-M64-L64-s0.9-empty", "B2048-M24-L256-s0.2",
                  "B512-M64-L100-s0.1", "B10000-M4-L16-s0.5", "B1024-M256-L1000-s0.5", "B1000000-M16-L32-s0.95-empty"}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def build(spec):
    if isinstance(spec, Case):
        batch = make_batch(spec, DEVICE)
        return spec.label, batch.values, batch.offsets, batch.max_seqlen
    _, B, M, dtype = spec
    lengths = bimodal_lengths(B)
    offsets = torch.zeros(B + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    values = torch.randn(int(offsets[-1]), M, generator=torch.Generator().manual_seed(1337)).to(DEVICE)
    values = values.to(getattr(torch, dtype))
    return f"bimodal-B{B}-M{M}-{'fp32' if dtype == 'float32' else 'bf16'}", values, offsets.to(DEVICE), \
        int(lengths.max())


def timed(row: dict, name: str, fn, ref=None, tol=None, rep: int = 40, repeat_check: bool = False) -> None:
    try:
        out = fn()
        if ref is not None:
            err = ops_bench._rel_error(out, ref)
            row[f"{name}_rel_error"] = err
            row[f"{name}_correct"] = err <= tol
            if err > tol:
                row[name] = f"not timed: relative error {err:.2e} > {tol:g}"
                return
        if repeat_check:
            row[f"{name}_deterministic"] = all(grid.bitwise_equal(out, fn()) for _ in range(3))
        del out
        row[name] = {k: v for k, v in grid.device_time(fn, rep).items()}
    except Exception as exc:  # noqa: BLE001
        row[name] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"


def old_chunks(values, offsets, mean):
    # the previous no-max_seqlen kernels: the balanced chunks, as plan_reduce routed them before the merge path
    from jaggedperf.ops import testing
    from jaggedperf.ops.launch.plan import chunking
    from jaggedperf.ops.reduce import plan as rplan

    cfg = testing.reduce_config(values.shape[1], values.dtype, values.device, rplan.few_segments(offsets.shape[0] - 1))
    programs = testing.sm_count(values.device) * cfg.programs_per_sm
    rows, chunks = chunking(values.shape[0], -(-values.shape[1] // cfg.block_m), programs, cfg.block_l,
                            cfg.min_chunk_rows)

    def call():
        planned = rplan.plan_chunks(values, offsets, mean, False, cfg, rows, chunks, 0)
        testing.run_direct(planned.launches)
        return planned.out

    return call


def old_rows(values, offsets) -> int:
    # the rows per chunk the previous backward planned (plan_expand's chunking)
    from jaggedperf.ops import testing
    from jaggedperf.ops.launch.plan import chunking

    cfg = testing.reduce_config(values.shape[1], values.dtype, values.device)
    return chunking(values.shape[0], -(-values.shape[1] // cfg.block_m), testing.sm_count(values.device) *
                    cfg.programs_per_sm, cfg.block_l, cfg.min_chunk_rows)[0]


def merge_variant(values, offsets, cfg):
    from jaggedperf.ops import testing

    def call():
        return testing.launch_reduce(values, offsets, merge=cfg)

    return call


def copy_floor(nbytes: int, rep: int) -> dict:
    # a kernel that reads nbytes / 2 and writes as many (an elementwise kernel: a graph's memcpy node runs on the copy
    # engine, ~2.6 TB/s on the H200, not a floor for a kernel)
    src = torch.randn(max(nbytes // 8, 4), device=DEVICE)
    dst = torch.empty_like(src)
    return grid.device_time(lambda: torch.neg(src, out=dst), rep)


def compiled_registers() -> list[dict]:
    """Registers a lane of every compiled merge-path kernel in this process (Triton's JIT caches), and the programs an
    SM that leaves."""
    from jaggedperf.ops.reduce import merge

    found = []
    for fn in (merge._merge_reduce_kernel, merge._merge_combine_kernel, merge._merge_expand_kernel):
        for binder in getattr(fn, "device_caches", {}).values():
            cache = binder[0] if isinstance(binder, tuple) else {}
            for compiled in cache.values():
                try:
                    warps = compiled.metadata.num_warps
                    regs = compiled.n_regs
                    constants = {str(k): v for k, v in getattr(compiled.src, "constants", {}).items()}
                    found.append({"kernel": fn.fn.__name__, "constants": constants, "num_warps": warps,
                                  "registers": regs, "spills": compiled.n_spills,
                                  "programs_per_sm": min(65536 // (-(-regs // 8) * 8 * 32 * warps), 64 // warps)})
                except Exception as exc:  # noqa: BLE001
                    found.append({"kernel": fn.fn.__name__, "error": str(exc)[:200]})
    return found


def main() -> int:
    import jaggedperf
    from jaggedperf.ops import testing

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--inductor-s", type=float, default=70.0)
    ap.add_argument("--only", default="", help="comma-separated case labels (default: all)")
    ap.add_argument("--budget-s", type=float, default=250.0)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (plumbing only)")
    args = ap.parse_args()
    global DEVICE, SHAPES
    if args.cpu_smoke:
        DEVICE = grid.DEVICE = torch.device("cpu")
        SHAPES = [("narrow", Case(40, 4, 16, 0.5)), ("ones", Case(300, 8, 1, 0.0, "fixed")),
                  ("bimodal", ("bimodal", 60, 8, "float32"))]
        BACKWARD.add("B40-M4-L16-s0.5")
        VARIANT_SHAPES.add("B300-M8-L1-s0-fixed")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    jaggedperf.ops.prepare_native_launch()
    gbps = timing.copy_bandwidth_gbps(DEVICE) if DEVICE.type == "cuda" else 1.0
    empty = torch.empty(1, device=DEVICE)
    empty_kernel = grid.device_time(lambda: empty.add_(0), 40)

    def two_kernels():
        empty.add_(0)
        empty.add_(0)

    two_empty = grid.device_time(two_kernels, 40)
    meta = {"torch": torch.__version__, "triton": __import__("triton").__version__,
            "gpu": torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu", "copy_gbps": gbps,
            "empty_kernel_us": empty_kernel["median_us"],
            "two_empty_kernels_us": two_empty["median_us"],
            "command": " ".join(sys.argv)}
    log(f"copy {gbps:.0f} GB/s, empty kernel {empty_kernel['median_us']:.2f} µs")
    rows = []
    inductor_left = [args.inductor_s]
    only = set(filter(None, args.only.split(",")))
    for cls, spec in SHAPES:
        if time.time() - T0 > args.budget_s:
            log("budget spent")
            break
        label, values, offsets, hint = build(spec)
        if only and label not in only:
            continue
        must = ops_bench._nbytes_must(values, offsets)
        rep = 25 if must > 500e6 else 40
        tol = ops_bench._tolerance(values.dtype)
        ref = ops_bench._reference(values, offsets, mean=False)
        row = {"class": cls, "case": label, "dtype": str(values.dtype).removeprefix("torch."), "B": offsets.numel() - 1,
               "M": values.shape[1], "N": values.shape[0], "max_seqlen": hint, "must_move_bytes": must,
               "floor_us": ops_bench._floor_us(must, gbps)}
        copy = copy_floor(must, rep)
        row["copy"] = copy
        row["practical_floor_us"] = copy["median_us"] + empty_kernel["median_us"]
        timed(row, "ours_plain", lambda: jaggedperf.jagged_sum(values, offsets), ref, tol, rep, repeat_check=True)
        timed(row, "ours_hinted", lambda: jaggedperf.jagged_sum(values, offsets, max_seqlen=hint), ref, tol, rep,
              repeat_check=True)
        timed(row, "chunks_plain", old_chunks(values, offsets, False), ref, tol, rep)
        off64 = offsets.long()
        timed(row, "segment_reduce", lambda: torch.segment_reduce(values, "sum", offsets=off64, axis=0), ref, tol, rep)
        padded = offsets.numel() * max(hint, 1) * values.shape[1] * values.element_size()
        if padded > 6e9 or inductor_left[0] <= 0:
            row["inductor_padded"] = "skipped: " + ("too large" if padded > 6e9 else "compile budget spent")
        else:
            torch._dynamo.reset()
            compiled = torch.compile(grid.padded_fn("sum", max(hint, 1)), dynamic=False)
            t = time.time()
            timed(row, "inductor_padded", lambda: compiled(values, offsets), ref, tol, rep)
            inductor_left[0] -= time.time() - t
        if must >= 16e6:
            mref = ops_bench._reference(values, offsets, mean=True)
            timed(row, "ours_plain_mean", lambda: jaggedperf.jagged_mean(values, offsets), mref, tol, rep)
            del mref
        if label in BACKWARD:
            grad = torch.randn(offsets.numel() - 1, values.shape[1], device=DEVICE).to(values.dtype)
            n = values.shape[0]
            eref = grad.double().repeat_interleave(offsets.diff(), dim=0, output_size=n)
            timed(row, "expand_plain", lambda: testing.launch_expand(grad, offsets, n), eref, tol, rep)
            timed(row, "expand_hinted", lambda: testing.launch_expand(grad, offsets, n, max_seqlen=hint), eref, tol,
                  rep)
            timed(row, "expand_chunks", lambda: testing.launch_expand(grad, offsets, n, rows_per_chunk=old_rows(
                values, offsets)), eref, tol, rep)
            del grad, eref
        if label in VARIANT_SHAPES:
            base = testing.merge_config(values.shape[1], values.dtype)
            half = max(base.programs_per_sm // 2, 1)
            for name, cfg in (("half_programs", dataclasses.replace(base, programs_per_sm=half)),
                              ("double_programs", dataclasses.replace(base, programs_per_sm=2 * base.programs_per_sm)),
                              ("window128" if base.window != 128 else "window64",
                               dataclasses.replace(base, window=128 if base.window != 128 else 64)),
                              ("warps2", dataclasses.replace(base, num_warps=2 * base.num_warps))):
                timed(row, f"merge_{name}", merge_variant(values, offsets, cfg), ref, tol, rep)
        rows.append(row)
        med = {k: (row[k]["median_us"] if isinstance(row.get(k), dict) else row.get(k)) for k in
               ("ours_plain", "ours_hinted", "chunks_plain", "segment_reduce", "inductor_padded")}
        log(f"{cls} {label}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in
                                           med.items()) + f", practical floor {row['practical_floor_us']:.1f}")
        del values, offsets, ref, off64
        torch.cuda.empty_cache()
        (out_dir / "merge_probe.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    meta["compiled"] = compiled_registers()
    (out_dir / "merge_probe.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
