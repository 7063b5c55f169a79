#!/usr/bin/env python3
"""The summary of a ``merge_probe.py`` run: issue #38's bars per shape, as JSON (medians and quantiles, no samples) and
Markdown.

    python3 benchmarks/merge_report.py PROBE.json --out benchmarks/results/h200/merge-path --commit SHA

The probe times the production config of the day it ran and variants of it; where the config now routed for a shape
(``config.merge_config``) is one of those variants, its time is the routed one (the ``routed`` column names it), and
where the routed config was not measured for a shape the production config of the run stands in (marked).
The with-max_seqlen call is the one ``plan.plan_reduce`` routes now: the merge path itself where
``plan.merge_beats_whole`` says so or the whole-segments kernels do not apply (then it is the without-max_seqlen
time), else the whole-segments kernels the probe timed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from jaggedperf.ops.config import SEGMENT_TILE_ELEMENTS, whole_segments  # noqa: E402
from jaggedperf.ops.reduce.plan import merge_beats_whole  # noqa: E402

H200_SMS = 132

# the config routed now for a shape, where the probe measured it as a variant of its run's production config
ROUTED_VARIANT = {  # fp32 rows of 17-64 columns: 8 programs an SM; of <= 16: a 128-segment window; wider: window 64
    "mid": "merge_half_programs", "narrow": "merge_window128", "wide": "merge_window64"}
# whether that variant is exactly today's config (wide rows: measured at 4 programs an SM, routed at 3)
ROUTED_EXACT = {"mid": True, "narrow": True, "wide": False}
BAR1, BAR1_HINT, BAR2, BAR2_SPREAD, BAR3 = 1.1, 1.15, 1.3, 0.05, 1.1


def bucket(row: dict) -> str | None:
    if row["dtype"] != "float32":
        return None  # the 2-byte configs are the run's own
    width = row["M"]
    return "narrow" if width <= 16 else "mid" if width <= 64 else "wide"


def stat(row: dict, key: str) -> dict | None:
    value = row.get(key)
    if not isinstance(value, dict):
        return None
    spread = (value["p80_us"] - value["p20_us"]) / value["median_us"]
    return {k: round(value[k], 3) for k in ("median_us", "p20_us", "p80_us")} | {"unstable": spread > 0.1}


def summarise(row: dict) -> dict:
    variant = ROUTED_VARIANT.get(bucket(row) or "")
    plain_key = variant if variant and isinstance(row.get(variant), dict) else "ours_plain"
    plain = stat(row, plain_key)
    # the with-max_seqlen routing of today
    whole = whole_segments(row["M"], row["max_seqlen"], row["B"], H200_SMS, SEGMENT_TILE_ELEMENTS) is not None
    to_merge = merge_beats_whole(row["N"], row["B"], row["max_seqlen"]) or not whole
    hinted = plain if to_merge else stat(row, "ours_hinted")
    back_merge = merge_beats_whole(row["N"], row["B"], row["max_seqlen"], backward=True) or not whole
    expand_plain = stat(row, "expand_plain")
    expand_hinted = expand_plain if back_merge else stat(row, "expand_hinted")
    peers = {p: stat(row, p) for p in ("segment_reduce", "inductor_padded") if row.get(f"{p}_correct")}
    peers = {k: v for k, v in peers.items() if v}
    best = min(peers.values(), key=lambda v: v["median_us"]) if peers else None
    mb = row["must_move_bytes"] / 1e6
    out = {"class": row["class"], "case": row["case"], "dtype": row["dtype"], "B": row["B"], "M": row["M"],
           "N": row["N"], "max_seqlen": row["max_seqlen"], "MB": round(mb, 1), "floor_us": round(row["floor_us"], 2),
           "practical_floor_us": round(row["practical_floor_us"], 2), "ours_plain": plain,
           "routed": plain_key,
           "routed_measured": not variant or (plain_key != "ours_plain" and ROUTED_EXACT[bucket(row)]),
           "ours_hinted": hinted, "hinted_path": "merge" if to_merge else "whole segments",
           "chunks_plain": stat(row, "chunks_plain"), "peers": peers,
           "best_peer": min(peers, key=lambda k: peers[k]["median_us"]) if peers else None,
           "mean_plain": stat(row, "ours_plain_mean"), "expand_plain": expand_plain, "expand_hinted": expand_hinted,
           "expand_chunks": stat(row, "expand_chunks"),
           "deterministic": bool(row.get("ours_plain_deterministic") and row.get("ours_hinted_deterministic")),
           "variants": {k: stat(row, k) for k in row if k.startswith("merge_") and isinstance(row[k], dict)}}
    p = plain["median_us"] if plain else None
    bars = {}
    bars["1_peer"] = None if p is None or best is None else p <= BAR1 * best["median_us"]
    bars["1_hinted"] = None if p is None or hinted is None else p <= BAR1_HINT * hinted["median_us"]
    bars["2_floor"] = None if p is None or mb < 16 else p <= BAR2 * row["practical_floor_us"]
    mean = out["mean_plain"]
    # sum and mean within 5%: the run's own production config for both (the variants timed the sum only)
    base = stat(row, "ours_plain")
    bars["2_sum_mean"] = None if mb < 16 or mean is None or base is None else \
        abs(mean["median_us"] - base["median_us"]) <= BAR2_SPREAD * base["median_us"]
    bars["3_backward"] = None if expand_plain is None or expand_hinted is None else \
        expand_plain["median_us"] <= BAR3 * expand_hinted["median_us"]
    bars["4_deterministic"] = out["deterministic"]
    out["bars"] = bars
    return out


def fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, dict):
        return f"{value['median_us']:.1f}{'*' if value['unstable'] else ''}"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def mark(ok) -> str:
    return "·" if ok is None else "✓" if ok else "✗"


def markdown(meta: dict, rows: list[dict], commit: str, command: str) -> str:
    lines = [f"# The merge-path reduction on the H200 (issue #38)", "",
             f"Command: `{command}`; commit `{commit}`; summary: `python3 benchmarks/merge_report.py` of its JSON. "
             f"torch {meta['torch']}, triton {meta['triton']}, {meta['gpu']}; copy {meta['copy_gbps']:.0f} GB/s; "
             f"an empty kernel's graph replay {meta['empty_kernel_us']:.2f} µs, two in one graph "
             f"{meta['two_empty_kernels_us']:.2f} µs. jagged_sum, device µs by CUDA-graph replay with L2 flushed "
             "(median; * marks p20-p80 wider than 10% of it); floor = bytes / copy bandwidth; practical floor = "
             "an empty kernel's replay + an elementwise kernel reading and writing the same bytes.", "",
             "Bars: 1 without max_seqlen ≤ 1.1× the best peer and ≤ 1.15× the same call with max_seqlen; 2 (≥ 16 MB) "
             "≤ 1.3× the practical floor, sum and mean within 5%; 3 the backward without ≤ 1.1× with; 4 bitwise "
             "repeats. `routed`: the measured variant that is today's config for the shape (`ours_plain`: the run's "
             "production config; †: today's config was not measured exactly there, the named one stands in). The "
             "backward ran the run's production config (fp32 rows of 17-64 columns at 16 programs an SM, today 8).",
             "",
             "| class | case | MB | floor | practical | ours without | routed | ours with (path) | previous without "
             "(chunks) | segment_reduce | Inductor padded | mean without | bwd without / with | 1 peer | 1 with | "
             "2 floor | 2 sum≈mean | 3 | 4 |",
             "|" + "---|" * 20]
    for r in rows:
        routed = r["routed"] + ("" if r["routed_measured"] else "†")
        back = "—" if r["expand_plain"] is None else f"{fmt(r['expand_plain'])} / {fmt(r['expand_hinted'])}"
        b = r["bars"]
        lines.append(
            f"| {r['class']} | {r['case']} | {r['MB']} | {r['floor_us']:.1f} | {r['practical_floor_us']:.1f} | "
            f"{fmt(r['ours_plain'])} | {routed} | {fmt(r['ours_hinted'])} ({r['hinted_path']}) | "
            f"{fmt(r['chunks_plain'])} | {fmt(r['peers'].get('segment_reduce'))} | "
            f"{fmt(r['peers'].get('inductor_padded'))} | {fmt(r['mean_plain'])} | {back} | {mark(b['1_peer'])} | "
            f"{mark(b['1_hinted'])} | {mark(b['2_floor'])} | {mark(b['2_sum_mean'])} | {mark(b['3_backward'])} | "
            f"{mark(b['4_deterministic'])} |")
    lines += ["", "## Variants of the merge path (the run's production config and its neighbours, device µs)", "",
              "| case | production | half the programs | twice the programs | other window | twice the warps |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        v = r["variants"]
        if not v:
            continue
        window = v.get("merge_window128") or v.get("merge_window64")
        lines.append(f"| {r['case']} | {fmt(stat_of(r))} | {fmt(v.get('merge_half_programs'))} | "
                     f"{fmt(v.get('merge_double_programs'))} | {fmt(window)} | {fmt(v.get('merge_warps2'))} |")
    counts = {}
    for r in rows:
        for bar, ok in r["bars"].items():
            held, failed = counts.get(bar, (0, 0))
            counts[bar] = (held + (ok is True), failed + (ok is False))
    lines += ["", "## Bars over the shapes", "", "| bar | holds | fails |", "|---|---:|---:|"]
    lines += [f"| {bar} | {held} | {failed} |" for bar, (held, failed) in counts.items()]
    return "\n".join(lines) + "\n"


def stat_of(row: dict):
    return row.get("_production")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("probe")
    ap.add_argument("--out", required=True, help="path stem: writes STEM.json and STEM.md")
    ap.add_argument("--commit", required=True)
    args = ap.parse_args()
    data = json.loads(Path(args.probe).read_text())
    rows = []
    for raw in data["rows"]:
        row = summarise(raw)
        row["_production"] = stat(raw, "ours_plain")
        rows.append(row)
    meta = {k: v for k, v in data["meta"].items() if k != "compiled"}
    meta["compiled"] = [{k: v for k, v in c.items() if k != "constants"} | {
        "constants": {str(k): v for k, v in c.get("constants", {}).items()}} for c in data["meta"].get("compiled", [])]
    command = "PYTHONPATH=src python3 benchmarks/merge_probe.py --out $OUT/merge --budget-s 172 --inductor-s 45"
    stem = Path(args.out)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "command": command, "commit": args.commit,
                                                     "rows": rows}, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(meta, rows, args.commit, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
