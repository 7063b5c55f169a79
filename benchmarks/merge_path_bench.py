#!/usr/bin/env python3
"""Without max_seqlen, how close does the jagged sum come to the best peer, to the same call with max_seqlen and to
its floors, on every length distribution? (the merge path and the routing of calls without max_seqlen)

Per shape (fp32 and bf16, jagged_sum unless noted), every contender in the same run, each checked against float64
first (``jaggedperf.lab.reduce_row``; a wrong one is recorded, not timed) and timed by ``harness.device_time``
(CUDA-graph replay, L2 flushed):

- ours without max_seqlen (as routed: ``plan.plan_reduce``; the path it took is recorded), ours with it, the merge
  path forced and the balanced chunks forced (``ops.testing``), ``torch.segment_reduce``, Inductor's padded sum given
  the true max (where the padded tensor fits and the compile budget lasts); bitwise repeats of ours;
- on shapes >= 16 MB: jagged_mean without max_seqlen too (sum and mean within 5%);
- the floors: bytes that must move / the copy bandwidth, and the practical floor, an empty kernel's replay + an
  elementwise kernel reading and writing the same bytes (two empty kernels in one graph: the two-launch floor);
- the backward (expand) without and with max_seqlen and by the chunks on the shapes of ``BACKWARD``;
- with ``--variants``: the merge path's config neighbours (half and twice the programs an SM, the other window, twice
  the warps) on ``VARIANT_SHAPES``.

Run on the GPU machine (about 4 minutes; ``--budget-s`` starts no shape past it, the likeliest losses first):

    PYTHONPATH=src python3 benchmarks/merge_path_bench.py --out $OUT/merge --variants

writes ``merge-path.json`` (medians and quantiles per contender, the bars, the command and commit) and
``merge-path.md`` under --out (``jaggedperf.lab.harness.write_summary``), rewritten after every shape.
``--gap``: only the shapes where a routing rule between the merge path and the chunks is not yet pinned (``GAP``;
``--out`` another directory). ``--cpu-smoke``: tiny shapes on the CPU (plumbing only, numbers meaningless).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import traceback

import torch

import jaggedperf
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import harness, reduce_row
from jaggedperf.lab.measure import timing

DEVICE = torch.device("cuda")
# the bars: without max_seqlen <= 1.1× the best peer and <= 1.15× the call with it; >= 16 MB <= 1.3× the practical
# floor, sum and mean within 5%; the backward without <= 1.1× with; bitwise repeats
BAR1, BAR1_HINT, BAR2, BAR2_SPREAD, BAR3 = 1.1, 1.15, 1.3, 0.05, 1.1

SHAPES = [  # (class, a Case or ("bimodal", B, M, dtype)); the likeliest losses first
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
# where a host-only routing rule between the merge path and the chunks is not pinned by the shapes above: mean lengths
# between 10.6 (the merge path faster) and 27 rows (the chunks faster) at B = 4096, and B between 4096 and 10^4
GAP = [
    ("gap", Case(4096, 64, 32, 0.0)),
    ("gap", Case(4096, 64, 48, 0.0)),
    ("gap", Case(4096, 8, 64, 0.0)),
    ("gap", Case(8192, 64, 100, 0.1)),
    ("gap", Case(8192, 128, 1000, 0.0, "heavy", "bfloat16")),
    ("gap", Case(2048, 64, 32, 0.0, "heavy")),
]
SMOKE = [("narrow", Case(40, 4, 16, 0.5)), ("ones", Case(300, 8, 1, 0.0, "fixed")),
         ("bimodal", ("bimodal", 60, 8, "float32"))]
BACKWARD = {"B10000-M4-L16-s0.5", "B1000000-M8-L1-s0-fixed", "B4096-M64-L400-s0-heavy", "B1-M64-L2000000-s0-fixed",
            "B100000-M64-L64-s0.9-empty", "B512-M64-L100-s0.1", "B1024-M256-L1000-s0.5", "bimodal-B100000-M8-fp32",
            "B40-M4-L16-s0.5"}
VARIANT_SHAPES = {"B100000-M8-L16-s0.5", "B1000000-M8-L1-s0-fixed", "B4096-M64-L400-s0-heavy",
                  "B1-M64-L2000000-s0-fixed", "B100000-M64-L64-s0.9-empty", "B2048-M24-L256-s0.2",
                  "B512-M64-L100-s0.1", "B10000-M4-L16-s0.5", "B1024-M256-L1000-s0.5", "B1000000-M16-L32-s0.95-empty",
                  "B300-M8-L1-s0-fixed"}
PATHS = {"merge": "merge", "reduce": "chunks", "segments": "whole segments", "segments_loop": "whole segments"}


def bimodal_lengths(B: int, seed: int = 1337) -> torch.Tensor:
    """98% of the segments 1-4 rows, 2% 10^4-3·10^4 rows."""
    gen = torch.Generator().manual_seed(seed)
    short = torch.randint(1, 5, (B,), generator=gen)
    low, high = (10_000, 30_001) if B >= 1000 else (20, 40)  # (--cpu-smoke's batches are tiny)
    long = torch.randint(low, high, (B,), generator=gen)
    return torch.where(torch.rand(B, generator=gen) < 0.02, long, short)


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


def stat(value) -> dict | None:
    """A timing's median and quantiles (no samples), flagged unstable where p20-p80 passes 10% of the median."""
    if not isinstance(value, dict):
        return None
    spread = (value["p80_us"] - value["p20_us"]) / value["median_us"] if value["median_us"] else 0.0
    return {k: round(value[k], 3) for k in ("median_us", "p20_us", "p80_us")} | {"unstable": spread > 0.1}


def timed(row: dict, name: str, fn, ref, tol: float, rep: int, repeat_check: bool = False) -> None:
    """``fn`` checked against ``ref`` (not timed when wrong), its repeats bitwise, then its device time."""
    try:
        out = fn()
        err = reduce_row.rel_error(out, ref)
        row[f"{name}_rel_error"], row[f"{name}_correct"] = err, err <= tol
        if err > tol:
            row[name] = f"not timed: relative error {err:.2e} > {tol:g}"
            return
        if repeat_check:
            row[f"{name}_deterministic"] = all(reduce_row.bitwise_equal(out, fn()) for _ in range(3))
        del out
        row[name] = stat(reduce_row.device_time(fn, rep, DEVICE))
    except Exception as exc:  # noqa: BLE001 - a contender that fails is recorded, the run goes on
        row[name] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"


def chunks_call(values, offsets, mean: bool):
    """The balanced chunks at their production sizing (``plan.plan_sized_chunks``), forced."""
    from jaggedperf.ops import testing
    from jaggedperf.ops.reduce import plan

    def call():
        planned = plan.plan_sized_chunks(values, offsets, mean, False)
        testing.run_direct(planned.launches)
        return planned.out

    return call


def chunk_rows(values) -> int:
    """The rows per chunk the chunks' backward plans (``chunking`` of the expand)."""
    from jaggedperf.ops import testing
    from jaggedperf.ops.launch.plan import chunking

    cfg = testing.reduce_config(values.shape[1], values.dtype, values.device)
    return chunking(values.shape[0], -(-values.shape[1] // cfg.block_m), testing.sm_count(values.device) *
                    cfg.programs_per_sm, cfg.block_l, cfg.min_chunk_rows)[0]


def copy_time(nbytes: int, rep: int) -> dict:
    """An elementwise kernel reading nbytes / 2 and writing as many (a graph's memcpy node runs on the copy engine,
    not a floor for a kernel)."""
    src = torch.randn(max(nbytes // 8, 4), device=DEVICE)
    dst = torch.empty_like(src)
    return reduce_row.device_time(lambda: torch.neg(src, out=dst), rep, DEVICE)


def routed_path(values, offsets, max_seqlen=None) -> str:
    """The path ``plan_reduce`` takes for the call (its first launch's kernel)."""
    from jaggedperf.ops.reduce import plan

    planned = plan.plan_reduce(values, offsets, mean=False, empty_zero=False, max_seqlen=max_seqlen)
    return PATHS.get(planned.launches[0].key[0], planned.launches[0].key[0])


def measure(cls: str, spec, gbps: float, floors: dict, inductor_left: list, variants: bool) -> dict:
    from jaggedperf.ops import testing

    label, values, offsets, hint = build(spec)
    must = reduce_row.must_move_bytes(values, offsets)
    rep = 25 if must > 500e6 else 40
    tol = reduce_row.tolerance(values.dtype)
    ref = reduce_row.reference(values, offsets, mean=False)
    row = {"class": cls, "case": label, "dtype": str(values.dtype).removeprefix("torch."), "B": offsets.numel() - 1,
           "M": values.shape[1], "N": values.shape[0], "max_seqlen": hint, "MB": round(must / 1e6, 1),
           "floor_us": round(reduce_row.floor_us(must, gbps), 2), "plain_path": routed_path(values, offsets),
           "hinted_path": routed_path(values, offsets, hint)}
    row["copy"] = stat(copy_time(must, rep))
    row["practical_floor_us"] = round(row["copy"]["median_us"] + floors["empty_kernel_us"], 2)
    timed(row, "ours_plain", lambda: jaggedperf.jagged_sum(values, offsets), ref, tol, rep, repeat_check=True)
    timed(row, "ours_hinted", lambda: jaggedperf.jagged_sum(values, offsets, max_seqlen=hint), ref, tol, rep,
          repeat_check=True)
    timed(row, "merge_plain", lambda: testing.launch_reduce(values, offsets, merge=True), ref, tol, rep)
    timed(row, "chunks_plain", chunks_call(values, offsets, False), ref, tol, rep)
    off64 = offsets.long()
    timed(row, "segment_reduce", lambda: torch.segment_reduce(values, "sum", offsets=off64, axis=0), ref, tol, rep)
    padded = offsets.numel() * max(hint, 1) * values.shape[1] * values.element_size()
    if padded > 6e9 or inductor_left[0] <= 0:
        row["inductor_padded"] = "skipped: " + ("too large" if padded > 6e9 else "compile budget spent")
    else:
        torch._dynamo.reset()
        compiled = torch.compile(reduce_row.padded_fn("sum", max(hint, 1)), dynamic=False)
        clock = harness.within(None)
        timed(row, "inductor_padded", lambda: compiled(values, offsets), ref, tol, rep)
        inductor_left[0] -= clock.elapsed()
    if must >= 16e6:
        mref = reduce_row.reference(values, offsets, mean=True)
        timed(row, "ours_plain_mean", lambda: jaggedperf.jagged_mean(values, offsets), mref, tol, rep)
        del mref
    if label in BACKWARD:
        grad = torch.randn(offsets.numel() - 1, values.shape[1], device=DEVICE).to(values.dtype)
        n = values.shape[0]
        eref = grad.double().repeat_interleave(offsets.diff(), dim=0, output_size=n)
        timed(row, "expand_plain", lambda: testing.launch_expand(grad, offsets, n), eref, tol, rep)
        timed(row, "expand_hinted", lambda: testing.launch_expand(grad, offsets, n, max_seqlen=hint), eref, tol, rep)
        rows = chunk_rows(values)
        timed(row, "expand_chunks", lambda: testing.launch_expand(grad, offsets, n, rows_per_chunk=rows), eref, tol,
              rep)
    if variants and label in VARIANT_SHAPES:
        base = testing.merge_config(values.shape[1], values.dtype)
        window = 128 if base.window != 128 else 64
        for name, cfg in (("half_programs", dataclasses.replace(base, programs_per_sm=max(base.programs_per_sm // 2,
                                                                                            1))),
                          ("double_programs", dataclasses.replace(base, programs_per_sm=2 * base.programs_per_sm)),
                          (f"window{window}", dataclasses.replace(base, window=window)),
                          ("warps2", dataclasses.replace(base, num_warps=2 * base.num_warps))):
            timed(row, f"merge_{name}", lambda cfg=cfg: testing.launch_reduce(values, offsets, merge=cfg), ref, tol,
                  rep)
    row["bars"] = judge(row)
    return row


def judge(row: dict) -> dict:
    """The bars of one shape: True / False, or None where a bar does not apply or a number is missing."""
    med = {k: row[k]["median_us"] if isinstance(row.get(k), dict) else None for k in row}
    peers = {p: med[p] for p in reduce_row.PEERS if med.get(p) is not None and row.get(f"{p}_correct")}
    row["best_peer"] = min(peers, key=peers.get) if peers else None
    p, h, mean = med.get("ours_plain"), med.get("ours_hinted"), med.get("ours_plain_mean")
    big = row["MB"] >= 16
    ep, eh = med.get("expand_plain"), med.get("expand_hinted")
    return {"1_peer": None if p is None or not peers else p <= BAR1 * min(peers.values()),
            "1_hinted": None if p is None or h is None else p <= BAR1_HINT * h,
            "2_floor": None if p is None or not big else p <= BAR2 * row["practical_floor_us"],
            "2_sum_mean": None if p is None or mean is None or not big else abs(mean - p) <= BAR2_SPREAD * p,
            "3_backward": None if ep is None or eh is None else ep <= BAR3 * eh,
            "4_deterministic": bool(row.get("ours_plain_deterministic") and row.get("ours_hinted_deterministic"))}


def _fmt(value) -> str:
    if not isinstance(value, dict):
        return "—"
    return f"{value['median_us']:.1f}{'*' if value['unstable'] else ''}"


def _mark(ok) -> str:
    return "·" if ok is None else "✓" if ok else "✗"


def markdown(data: dict) -> str:
    meta, rows = data["meta"], data["rows"]
    lines = ["# The jagged sum without max_seqlen: the merge path, the routing, the peers and the floors", "",
             f"{meta.get('gpu')}, torch {meta.get('torch')}, triton {meta.get('triton')}; copy "
             f"{data['copy_gbps']:.0f} GB/s; an empty kernel's graph replay {data['empty_kernel_us']:.2f} µs, two in "
             f"one graph {data['two_empty_kernels_us']:.2f} µs. jagged_sum, device µs by CUDA-graph replay with L2 "
             "flushed (median; * marks p20-p80 wider than 10% of it); floor = bytes / copy bandwidth; practical "
             "floor = an empty kernel's replay + an elementwise kernel reading and writing the same bytes.", "",
             "Bars: 1 without max_seqlen ≤ 1.1× the best peer and ≤ 1.15× the same call with max_seqlen; 2 (≥ 16 MB) "
             "≤ 1.3× the practical floor, sum and mean within 5%; 3 the backward without ≤ 1.1× with; 4 bitwise "
             "repeats.", "",
             "| class | case | MB | floor | practical | ours without (path) | merge | chunks | ours with (path) | "
             "segment_reduce | Inductor padded | mean without | bwd without / with / chunks | 1 peer | 1 with | "
             "2 floor | 2 sum≈mean | 3 | 4 |", "|" + "---|" * 20]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['class']} | {r['case']} | error: {r['error'][:80]} |" + " |" * 17)
            continue
        b = r["bars"]
        back = "—" if not isinstance(r.get("expand_plain"), dict) else \
            f"{_fmt(r['expand_plain'])} / {_fmt(r.get('expand_hinted'))} / {_fmt(r.get('expand_chunks'))}"
        lines.append(
            f"| {r['class']} | {r['case']} | {r['MB']} | {r['floor_us']:.1f} | {r['practical_floor_us']:.1f} | "
            f"{_fmt(r.get('ours_plain'))} ({r['plain_path']}) | {_fmt(r.get('merge_plain'))} | "
            f"{_fmt(r.get('chunks_plain'))} | {_fmt(r.get('ours_hinted'))} ({r['hinted_path']}) | "
            f"{_fmt(r.get('segment_reduce'))} | {_fmt(r.get('inductor_padded'))} | {_fmt(r.get('ours_plain_mean'))} | "
            f"{back} | " + " | ".join(_mark(b[k]) for k in ("1_peer", "1_hinted", "2_floor", "2_sum_mean",
                                                          "3_backward", "4_deterministic")) + " |")
    varied = [r for r in rows if any(k.startswith("merge_") and k != "merge_plain" for k in r)]
    if varied:
        lines += ["", "## The merge path's config neighbours (device µs)", "",
                  "| case | production | half the programs | twice the programs | other window | twice the warps |",
                  "|---|---|---|---|---|---|"]
        for r in varied:
            window = r.get("merge_window128") or r.get("merge_window64")
            lines.append(f"| {r['case']} | {_fmt(r.get('merge_plain'))} | {_fmt(r.get('merge_half_programs'))} | "
                         f"{_fmt(r.get('merge_double_programs'))} | {_fmt(window)} | {_fmt(r.get('merge_warps2'))} |")
    counts: dict = {}
    for r in rows:
        for bar, ok in r.get("bars", {}).items():
            held, failed = counts.get(bar, (0, 0))
            counts[bar] = (held + (ok is True), failed + (ok is False))
    lines += ["", "## Bars over the shapes", "", "| bar | holds | fails |", "|---|---:|---:|"]
    lines += [f"| {bar} | {held} | {failed} |" for bar, (held, failed) in counts.items()]
    if data["skipped"]:
        lines += ["", "Not measured (the time budget): " + ", ".join(data["skipped"]) + "."]
    return "\n".join(lines)


def main() -> int:
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory of merge-path.json and merge-path.md")
    ap.add_argument("--inductor-s", type=float, default=70.0, help="total Inductor compile time allowed")
    ap.add_argument("--only", default="", help="comma-separated case labels (default: all)")
    ap.add_argument("--budget-s", type=float, default=250.0, help="start no shape after this many seconds")
    ap.add_argument("--variants", action="store_true", help="the merge path's config neighbours too")
    ap.add_argument("--gap", action="store_true", help="only the shapes of GAP (the routing rule's unmeasured gaps)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on the CPU (plumbing only)")
    args = ap.parse_args()
    shapes = GAP if args.gap else SHAPES
    if args.cpu_smoke:
        DEVICE, shapes = torch.device("cpu"), SMOKE
    elif not torch.cuda.is_available():
        print("no CUDA device (use --cpu-smoke to check the plumbing)", file=sys.stderr)
        return 1
    budget = harness.within(args.budget_s)
    data = {"meta": harness.meta(), "rows": [], "skipped": [], "errors": {}}
    data["meta"]["gpu"] = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu"
    if DEVICE.type == "cuda":
        jaggedperf.ops.prepare_native_launch()
    data["copy_gbps"] = timing.copy_bandwidth_gbps(DEVICE) if DEVICE.type == "cuda" else 1.0
    empty = torch.empty(1, device=DEVICE)

    def two_kernels():
        empty.add_(0)
        empty.add_(0)

    data["empty_kernel_us"] = reduce_row.device_time(lambda: empty.add_(0), 40, DEVICE)["median_us"]
    data["two_empty_kernels_us"] = reduce_row.device_time(two_kernels, 40, DEVICE)["median_us"]
    print(f"copy {data['copy_gbps']:.0f} GB/s, empty kernel {data['empty_kernel_us']:.2f} µs", flush=True)
    inductor_left = [args.inductor_s]
    only = set(filter(None, args.only.split(",")))
    for cls, spec in shapes:
        label = spec.label if isinstance(spec, Case) else f"bimodal-B{spec[1]}-M{spec[2]}"
        if only and not any(label.startswith(o) or o == label for o in only):
            continue
        if not budget.left():
            data["skipped"].append(label)
            continue
        try:
            row = measure(cls, spec, data["copy_gbps"], data, inductor_left, args.variants)
        except Exception as exc:  # noqa: BLE001 - a shape that fails is recorded, the run goes on
            row = {"class": cls, "case": label, "error": f"{type(exc).__name__}: {exc}"}
            data["errors"][label] = traceback.format_exc()
        data["rows"].append(row)
        print(f"[{budget.elapsed():6.1f}s] {cls} {label}: " +
              ", ".join(f"{k} {_fmt(row.get(k))}" for k in ("ours_plain", "merge_plain", "chunks_plain",
                                                            "ours_hinted", "segment_reduce", "inductor_padded")),
              flush=True)
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
        harness.write_summary(args.out, "merge-path", data, markdown(data))
    harness.write_summary(args.out, "merge-path", data, markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
