#!/usr/bin/env python3
"""The row-wise families' tile (``ops/tiles.tile_config``) against smaller ones: device time of softmax and layer
norm, forward and backward, on the family benchmark's shapes, one tile at a time (issue 20).

Why: compiled offline for sm_90, the production tile (8192 elements, 8 warps) takes 115-255 registers a thread, one or
two programs an SM (benchmarks/NOTES.md, session 11); a 2048-element tile at 4 warps takes 64-128. The smaller tile
reads segments of 2049-8192 elements twice instead of once, so it can win only where the latency of few programs
an SM is the loss. Each tile's output is checked first: the forward against float64 (``spec.reference``), the
backward against the production tile's backward (same kernel, another tile: fp32 rounding apart).

Tiles: ``production`` (the plan's own choice: each kernel's budget, ``tiles.WIDE`` or ``tiles.LEAN``; at fewer
segments than SMs the layer norm's split, whose tile is ``parts_tile``'s) and ELEMENTS/WARPS candidates (``--tiles``)
for the one-program kernels, BLOCK_M = next_pow2(M) up to 256, BLOCK_L = ELEMENTS // BLOCK_M capped at
next_pow2(max_seqlen), as ``tile_config`` does. Run 54 measured it when every kernel's production tile was 8192 / 8.

Run:  PYTHONPATH=src python3 benchmarks/tile_probe.py --out $OUT/tile_probe.json        (~1-2 minutes on an H200)
Writes the JSON (every sample's median/p20/p80) and prints one Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from family_bench import DEVICE, EPS, cells, device_time  # noqa: E402

from jaggedperf.impls.registry import get_op  # noqa: E402
from jaggedperf.lab import timing  # noqa: E402
from jaggedperf.lab.correctness import check_output  # noqa: E402
from jaggedperf.ops import testing  # noqa: E402

CANDIDATES = "4096/8,4096/4,2048/4,1024/4"


def tile_of(n_cols: int, max_seqlen: int, elements: int, warps: int) -> testing.TileConfig:
    block_m = min(testing.next_pow2(n_cols), 256)
    block_l = min(max(elements // block_m, 1), testing.next_pow2(max_seqlen))
    return testing.TileConfig(block_l, block_m, warps)


def planners(op: str, batch, grad: torch.Tensor, cfg):
    """(forward, backward) closures of ``op`` at tile ``cfg`` (None: production), each planning, launching and
    returning its output (the backward of the output's gradient ``grad``)."""
    values, offsets, n = batch.values, batch.offsets, batch.max_seqlen
    if op == "jagged_softmax":
        out = testing.plan_softmax(values, offsets, max_seqlen=n)
        testing.run_direct(out.launches)
        fwd = lambda: testing.plan_softmax(values, offsets, max_seqlen=n, cfg=cfg)  # noqa: E731
        bwd = lambda: testing.plan_softmax_backward(out.out, grad, offsets, max_seqlen=n, cfg=cfg)  # noqa: E731
    else:
        fwd = lambda: testing.plan_layer_norm(values, offsets, EPS, max_seqlen=n, cfg=cfg)  # noqa: E731
        bwd = lambda: testing.plan_layer_norm_backward(values, grad, offsets, EPS, max_seqlen=n, cfg=cfg)  # noqa: E731

    def run(planner):
        planned = planner()
        testing.run_direct(planned.launches)
        return planned.out

    return (lambda: run(fwd)), (lambda: run(bwd))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file")
    parser.add_argument("--tiles", default=CANDIDATES, help="comma-separated ELEMENTS/WARPS candidates")
    args = parser.parse_args()
    candidates = [tuple(int(x) for x in t.split("/")) for t in args.tiles.split(",") if t]
    copy_gbps = timing.copy_bandwidth_gbps(DEVICE)
    rows, start = [], time.time()
    for case in cells():
        for op in ("jagged_softmax", "jagged_layer_norm"):
            spec = get_op(op)
            batch = spec.make_batch(case, DEVICE)
            reference = spec.reference(batch)
            grad = torch.randn_like(batch.values)
            floor_us = spec.must_move_bytes(batch) / (copy_gbps * 1e3)
            backward_floor_us = 3 * grad.numel() * grad.element_size() / (copy_gbps * 1e3)  # read 2, write 1
            row = {"op": op, "case": case.label, "dtype": case.dtype, "floor_us": floor_us,
                   "backward_floor_us": backward_floor_us, "tiles": {}}
            expected_bwd = planners(op, batch, grad, None)[1]().double().cpu()
            tiles = {"production": None} | {f"{e}/{w}": tile_of(batch.values.shape[1], batch.max_seqlen, e, w)
                                             for e, w in candidates}
            for name, cfg in tiles.items():
                fwd, bwd = planners(op, batch, grad, cfg)
                entry = row["tiles"][name] = {"cfg": None if cfg is None else list(vars(cfg).values())}
                ok_f = check_output(fwd(), reference, case.dtype)
                ok_b = check_output(bwd(), expected_bwd, case.dtype)
                entry.update(forward_ok=ok_f[0], forward_error=ok_f[2], backward_ok=ok_b[0], backward_error=ok_b[2])
                if ok_f[0]:
                    entry["forward"] = device_time(fwd)
                if ok_b[0]:
                    entry["backward"] = device_time(bwd)
            rows.append(row)
            Path(args.out).write_text(json.dumps({"copy_gbps": copy_gbps, "rows": rows,
                                                  "seconds": time.time() - start}, indent=1))
            del batch, reference, grad
            torch.cuda.empty_cache()
    names = list(rows[0]["tiles"])
    print("forward / backward device µs, median (L2 flushed)\n")
    print("| op | case | dtype | floors µs | " + " | ".join(names) + " |")
    print("|---|---|---|---:|" + "---:|" * len(names))
    for r in rows:
        cells_ = []
        for n in names:
            t = r["tiles"][n]
            f = f"{t['forward']['median_us']:.1f}" if "forward" in t else "wrong"
            b = f"{t['backward']['median_us']:.1f}" if "backward" in t else "wrong"
            cells_.append(f"{f} / {b}")
        print(f"| {r['op']} | {r['case']} | {r['dtype']} | {r['floor_us']:.1f} / {r['backward_floor_us']:.1f} | "
              + " | ".join(cells_) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
