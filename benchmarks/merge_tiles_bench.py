#!/usr/bin/env python3
"""Without max_seqlen, where does the merge path lose to the balanced chunks, for the sum and the mean, and which of
its tile configs closes the gap? (the merge path's tiles against the chunks on even and skewed lengths)

Per shape (the ops benchmark's bar shapes, where the chunks led, then the classes where the merge path leads), every
contender in the same run, fp32 unless named:

- correctness first: each contender's output against float64 (``reduce_row.rel_error`` within the dtype's
  tolerance); a wrong one is recorded, not timed;
- device time by CUDA-graph replay with L2 flushed (``harness.device_time``): the merge path at its production config
  (sum and mean), the balanced chunks at theirs (``plan.plan_sized_chunks``: the path without max_seqlen before the
  merge path; sum and mean), and the mean on the merge path at the bucket's variants (``VARIANTS``: tile elements,
  warps, window, programs an SM; ``config.merge_tiles``);
- the merge path's mean split by kernel (torch.profiler, L2 flushed): the reduction and the combine;
- the floor: bytes that must move / the copy bandwidth measured in the same run.

Run on the GPU machine from the repository root:
    PYTHONPATH=src python3 benchmarks/merge_tiles_bench.py --out $OUT/tiles
``--cpu-smoke``: tiny shapes through the interpreter (TRITON_INTERPRET=1), one call each: the script's plumbing only.
Writes ``OUT/merge-tiles.{json,md}`` (rewritten after each shape).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import harness, reduce_row
from jaggedperf.lab.measure import timing
from jaggedperf.ops import testing
from jaggedperf.ops.config import merge_config, merge_expand_config, merge_tiles
from jaggedperf.ops.reduce import plan

SHAPES = [  # (where the chunks led in the ops benchmark, or where the merge path leads, the case)
    ("chunks led", Case(512, 64, 100, 0.1)),
    ("chunks led", Case(512, 64, 500, 0.75)),
    ("chunks led", Case(1024, 256, 1000, 0.5)),
    ("chunks led", Case(4096, 512, 512, 0.2)),
    ("chunks led", Case(4096, 512, 512, 0.2, dtype="bfloat16")),
    ("chunks led", Case(256, 64, 20000, 0.5)),
    ("chunks led", Case(4096, 128, 32768, 0.0, "heavy")),
    ("chunks led", Case(8, 4096, 4000, 0.0, "fixed")),
    ("chunks led", Case(65536, 16, 64, 0.2)),
    ("chunks led", Case(32768, 64, 32, 0.2)),
    ("merge led", Case(10_000, 4, 16, 0.5)),
    ("merge led", Case(1_000_000, 8, 1, 0.0, "fixed")),
    ("merge led", Case(100_000, 64, 64, 0.9, "empty")),
    ("merge led", Case(4096, 64, 400, 0.0, "heavy")),
    ("merge led", Case(2048, 24, 256, 0.2)),
    ("merge led", Case(2048, 1000, 256, 0.2)),
]
# --wide: the fp32 rows of more than 64 columns again, the five above and five the variants were not chosen on, with
# the candidates from the first run (and their neighbours at the programs an SM their registers leave), sum and mean
WIDE_CHECK = [("seen", case) for _, case in SHAPES if case.M > 64 and case.dtype == "float32"] + [
    ("unseen", Case(8192, 128, 64, 0.5)),
    ("unseen", Case(4096, 256, 128, 0.5)),
    ("unseen", Case(20000, 128, 2000, 0.0, "heavy")),
    ("unseen", Case(1024, 192, 300, 0.3)),
    ("unseen", Case(100_000, 128, 32, 0.9, "empty")),
]
WIDE_CANDIDATES = [(4096, 8, 64, 6), (4096, 8, 64, 2), (4096, 8, 64, 4), (2048, 4, 64, 6), (2048, 4, 64, 4),
                   # two warps, 8 or 16 loads of a tile in flight a lane: what made the bf16 wide rows 1.3-2x faster
                   (2048, 2, 64, 4), (2048, 2, 64, 6), (4096, 2, 64, 2), (4096, 2, 64, 4)]
# --wide --dtype bfloat16: the same shapes in bf16, production's tile (4096/2/64/4: 254-255 registers at 2 warps, 4
# programs an SM on Triton 3.6) beside the tiles it was chosen over (benchmarks/results/h100/merge-tiles-wide-bf16.md)
WIDE_CANDIDATES_BF16 = [(4096, 4, 64, 3), (4096, 4, 64, 2), (2048, 4, 64, 2), (2048, 2, 64, 4), (8192, 4, 64, 2),
                        (8192, 8, 64, 1)]
# --odd: odd M (masked columns, scalar accesses) in the one-warp tiles, whose grid aims at ``config.ODD_M_PROGRAMS``
# (206-255 registers a lane on Triton 3.6: 8-9 resident); each shape's tile at other aims beside it (12 is the aim
# before that rule)
ODD_CHECK = [("odd", Case(10_000, 5, 16, 0.5)), ("odd", Case(65536, 7, 64, 0.2)), ("odd", Case(2048, 15, 256, 0.2)),
             ("odd", Case(1_000_000, 3, 1, 0.0, "fixed")), ("odd", Case(100_000, 9, 64, 0.9, "empty")),
             ("odd", Case(512, 1, 100, 0.1)), ("odd", Case(4096, 17, 400, 0.0, "heavy", dtype="bfloat16")),
             ("odd", Case(32768, 33, 32, 0.2, dtype="bfloat16")), ("odd", Case(2048, 45, 256, 0.2, dtype="bfloat16")),
             ("odd", Case(65536, 7, 64, 0.2, dtype="bfloat16"))]
ODD_AIMS = (6, 10, 12, 16)
SMOKE = [("chunks led", Case(6, 256, 40, 0.2)), ("merge led", Case(40, 4, 16, 0.5)),
         ("chunks led", Case(5, 24, 40, 0.2, dtype="bfloat16"))]
# (tile elements, warps, window, programs an SM) beside production's, by the bucket of the row width
VARIANTS = {
    "narrow": [(1024, 1, 128, 16), (2048, 2, 128, 12), (1024, 1, 64, 12)],
    "mid": [(1024, 1, 64, 12), (1024, 1, 64, 16), (2048, 2, 64, 8), (2048, 2, 64, 12)],
    "wide": [(4096, 8, 64, 3), (4096, 8, 64, 6), (2048, 4, 64, 6), (4096, 4, 64, 2), (8192, 8, 64, 3)],
}


def bucket(n_cols: int) -> str:
    block_m = merge_config(n_cols, torch.float32).block_m
    return "narrow" if block_m <= 16 else "mid" if block_m <= 64 else "wide"


def _tile(cfg) -> tuple[int, int, int]:
    """A config's (tile elements, warps, window): a ``merge_tiles`` entry less its programs an SM."""
    return cfg.block_l * cfg.block_m, cfg.num_warps, cfg.window


def odd_variants(n_cols: int, dtype: torch.dtype) -> list[tuple[int, int, int, int]]:
    """The production tile of odd ``n_cols`` columns at ``ODD_AIMS`` programs an SM (production's aim left out)."""
    cfg = merge_config(n_cols, dtype)
    return [(*_tile(cfg), aim) for aim in ODD_AIMS if aim != cfg.programs_per_sm]


def contenders(values, offsets, wide: bool = False, odd: bool = False) -> list[tuple[str, bool, object]]:
    """(name, mean?, callable) of a shape's contenders; ``wide``: ``WIDE_CANDIDATES``' sum and mean (bf16 values:
    ``WIDE_CANDIDATES_BF16``'); ``odd``: ``odd_variants``' sum and mean."""
    out = [("merge sum", False, testing.forced_call(plan.plan_merge, values, offsets, False, False)),
           ("merge mean", True, testing.forced_call(plan.plan_merge, values, offsets, True, False)),
           ("chunks sum", False, testing.forced_call(plan.plan_sized_chunks, values, offsets, False, False)),
           ("chunks mean", True, testing.forced_call(plan.plan_sized_chunks, values, offsets, True, False))]
    candidates = WIDE_CANDIDATES_BF16 if values.element_size() == 2 else WIDE_CANDIDATES
    variants = (odd_variants(values.shape[1], values.dtype) if odd else candidates if wide
                else VARIANTS[bucket(values.shape[1])])
    for tiles in variants:
        cfg = merge_tiles(values.shape[1], *tiles)
        for mean in (False, True) if wide or odd else (True,):
            out.append((f"merge {'mean' if mean else 'sum'} {'/'.join(map(str, tiles))}", mean,
                        testing.forced_call(plan.plan_merge, values, offsets, mean, False, cfg)))
    return out


def measure(label: str, values, offsets, copy_gbps: float | None, smoke: bool, wide: bool = False,
            odd: bool = False) -> dict:
    must = reduce_row.must_move_bytes(values, offsets)
    row: dict = {"case": label, "dtype": str(values.dtype).removeprefix("torch."), "MB": round(must / 1e6, 1),
                 "floor_us": round(must / copy_gbps / 1e3, 2) if copy_gbps else None, "times": {}, "errors": {}}
    refs = {mean: reduce_row.reference(values, offsets, mean=mean) for mean in (False, True)}
    tol = reduce_row.tolerance(values.dtype)
    for name, mean, fn in contenders(values, offsets, wide, odd):
        err = reduce_row.rel_error(fn(), refs[mean])
        if not err <= tol:
            row["errors"][name] = err
            continue
        if smoke:
            row["times"][name] = {"median_us": 0.0, "p20_us": 0.0, "p80_us": 0.0}
            continue
        t = harness.device_time(fn, values.device, rep_ms=30)
        row["times"][name] = {k: round(t[k], 2) for k in ("median_us", "p20_us", "p80_us")}
    if odd:
        row["backward"] = odd_backward(values, offsets, smoke)
    if not smoke:
        prof = timing.profile_kernels(testing.forced_call(plan.plan_merge, values, offsets, True, False), values.device)
        row["merge_mean_kernels"] = {k.name[:60]: round(k.us_per_call, 2) for k in prof.kernels}
    return row


def odd_backward(values, offsets, smoke: bool) -> dict:
    """The mean's backward on the merge grid at odd M: production's aim (``ODD_M_PROGRAMS``) and the 12 programs an SM
    it had before, each checked against float64 (``expand_reference``), then device time; a wrong one "wrong"."""
    n_rows, n_cols = values.shape
    grad = torch.randn(offsets.numel() - 1, n_cols, device=values.device, dtype=values.dtype)
    ref = reduce_row.expand_reference(grad, offsets, n_rows, mean=True)
    cfg = merge_expand_config(n_cols, values.dtype)
    out = {}
    for aim in (cfg.programs_per_sm, 12):
        tiles = merge_tiles(n_cols, *_tile(cfg), aim)
        fn = testing.forced_call(plan.expand_merge, grad, offsets, n_rows, True, tiles)
        name = f"expand aim {aim}" + (" (production)" if aim == cfg.programs_per_sm else "")
        if not reduce_row.rel_error(fn(), ref) <= reduce_row.tolerance(values.dtype):
            out[name] = "wrong"
        elif smoke:
            out[name] = {"median_us": 0.0, "p20_us": 0.0, "p80_us": 0.0}
        else:
            t = harness.device_time(fn, values.device, rep_ms=30)
            out[name] = {k: round(t[k], 2) for k in ("median_us", "p20_us", "p80_us")}
    return out


def _us(t: dict | None) -> str:
    if t is None:
        return "—"
    star = "*" if t["median_us"] and (t["p80_us"] - t["p20_us"]) > 0.1 * t["median_us"] else ""
    return f"{t['median_us']:.1f}{star}"


def render(rows: list[dict]) -> str:
    fixed = ["merge sum", "merge mean", "chunks sum", "chunks mean"]
    head = ["class", "case", "dtype", "MB", "floor", *fixed, "best variant", "every variant",
            "merge mean by kernel"]
    lines = ["# The merge path's tiles against the balanced chunks, without max_seqlen", "",
             "Device µs by CUDA-graph replay with L2 flushed (median; * where p20–p80 passes 10% of it); floor = bytes "
             "that must move / the copy bandwidth of the same run. A variant `mean E/W/w/P`: the merge path's mean with "
             "tiles of E elements, W warps, a window of w segments, P programs an SM (production: `merge mean`, "
             "`config.MERGE_TILES`). `wrong`: failed its check against float64, not timed.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        variants = {n.removeprefix("merge "): t for n, t in r["times"].items()
                    if n.startswith(("merge mean ", "merge sum ")) and n not in fixed}
        best = min(variants.items(), key=lambda kv: kv[1]["median_us"], default=None)
        cells = [("wrong" if n in r["errors"] else _us(r["times"].get(n))) for n in fixed]
        kernels = "; ".join(f"{k.split('_kernel')[0].lstrip('_')} {v}" for k, v in r.get("merge_mean_kernels", {}).items())
        lines.append("| " + " | ".join([
            r["class"], r["case"], r["dtype"], str(r["MB"]), str(r["floor_us"]), *cells,
            f"{best[0]}: {_us(best[1])}" if best else "—",
            "; ".join(f"{n} {_us(t)}" for n, t in variants.items()) + "".join(
                f"; {n.removeprefix('merge ')} wrong" for n in r["errors"] if n.startswith("merge ")),
            kernels or "—"]) + " |")
    backward = [r for r in rows if r.get("backward")]
    if backward:
        lines += ["", "The mean's backward on the merge grid (device µs, the same method):", "",
                  "| case | dtype | " + " | ".join(backward[0]["backward"]) + " |",
                  "|---|---|" + "---:|" * len(backward[0]["backward"])]
        lines += [f"| {r['case']} | {r['dtype']} | " + " | ".join(
            t if isinstance(t, str) else _us(t) for t in r["backward"].values()) + " |" for r in backward]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes under TRITON_INTERPRET=1")
    parser.add_argument("--wide", action="store_true", help="WIDE_CHECK's shapes, WIDE_CANDIDATES' sum and mean")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), help="--wide's shapes in this dtype")
    parser.add_argument("--odd", action="store_true", help="ODD_CHECK's shapes, production's tile at ODD_AIMS")
    args = parser.parse_args()
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    copy_gbps = None if args.cpu_smoke else timing.copy_bandwidth_gbps(device)
    rows: list[dict] = []
    data = {"meta": harness.meta(), "copy_gbps": copy_gbps, "rows": rows}
    shapes = (SMOKE if args.cpu_smoke else WIDE_CHECK if args.wide else ODD_CHECK if args.odd else SHAPES)
    if args.wide and args.dtype:
        shapes = [(cls, dataclasses.replace(case, dtype=args.dtype)) for cls, case in shapes]
    summary = (("merge-tiles-wide" + ("-bf16" if args.dtype == "bfloat16" else "")) if args.wide
               else "merge-tiles-odd" if args.odd else "merge-tiles")
    for cls, case in shapes:
        batch = make_batch(case, device)
        try:
            rows.append({"class": cls, **measure(case.label, batch.values, batch.offsets, copy_gbps, args.cpu_smoke,
                                                      args.wide, args.odd)})
        except Exception as exc:  # noqa: BLE001 - a shape that fails is recorded, the run goes on
            rows.append({"class": cls, "case": case.label, "dtype": case.dtype, "MB": None, "floor_us": None,
                         "times": {}, "errors": {"shape": f"{type(exc).__name__}: {str(exc)[:300]}"}})
        del batch
        for path in harness.write_summary(args.out, summary, data, render(rows)):
            print(path, file=sys.stderr)
        print(rows[-1]["case"], {k: v["median_us"] for k, v in rows[-1]["times"].items()}, rows[-1]["errors"],
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
