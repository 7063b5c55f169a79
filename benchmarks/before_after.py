#!/usr/bin/env python3
"""Did a change move behaviour or speed? Two trees' ops benchmark and seed repro, side by side on one machine.

A tree is a directory with ``src/jaggedperf`` and ``benchmarks/ops_bench.py`` (``git archive COMMIT src
benchmarks/ops_bench.py | tar -x -C DIR``): each runs its own code and its own benchmark, so a change to the
harness is judged with the kernels. In one run, on one machine:

1. the ops benchmark (``benchmarks/ops_bench.py --grid-seconds 0``: correctness against float64, then device time
   by CUDA-graph replay with L2 flushed, forward with and without max_seqlen, the backward, the eager call's host
   wall) of each tree, ``--ops-rounds`` rounds in alternating order (before, after; after, before; ...);
2. ``jaggedperf repro`` of each tree at the seed's shapes (eager and the seed's compiled mode; ``unbind_mean``,
   whose compile takes minutes and is torch's own code, left out unless named), each tree with its own Inductor cache
   so both compile cold.

Judged: an ops row *moved* where the after/before ratio of the rounds' medians passes ``--min-change`` and the two
trees' p20-p80 ranges over all rounds do not overlap; the repro cells by ``jaggedperf compare``'s rule (bootstrap
interval of the median ratio from the raw samples, a minimum effect, unstable cells apart). Writes ``OUT/raw/`` (each
run's JSON and log) and the summary ``OUT/before-after.{json,md}``.

Run:  python3 benchmarks/before_after.py --before DIR [--after .] --out OUT
      python3 benchmarks/before_after.py --from OUT --out OUT   (the summary again from OUT/raw, no run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from jaggedperf.lab import harness
from jaggedperf.lab.api import load
from jaggedperf.lab.measure import stats

REPRO_IMPLS = ("nanmean_padded", "sum_padded", "segment_reduce", "jaggedperf", "jaggedperf_njt")
REPRO_MODES = ("eager", "compile:max-autotune-no-cudagraphs")
TREES = ("before", "after")


@dataclass(frozen=True)
class OpsRow:
    """One (table, case, dtype, measure) of the ops benchmark in both trees: medians over rounds, in µs."""

    table: str  # forward | backward | host
    case: str
    dtype: str
    measure: str  # e.g. "no max_seqlen", "max_seqlen given", "fast_path wall"
    before_us: float
    after_us: float
    before_range: tuple[float, float]  # the lowest p20 and the highest p80 over the rounds
    after_range: tuple[float, float]
    correct: bool  # both trees' rows checked correct against float64 in every round (True where not checked)

    @property
    def ratio(self) -> float:
        return self.after_us / self.before_us

    def moved(self, min_change: float) -> bool:
        return stats.moved(self.before_us, self.after_us, self.before_range, self.after_range, min_change)


def _run(cmd: list[str], tree: Path, log: Path, cache: Path) -> float:
    """``cmd`` in ``tree`` with its own package first on the path; stdout and stderr to ``log``; seconds taken."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), TORCHINDUCTOR_CACHE_DIR=str(cache),
               TRITON_CACHE_DIR=str(cache / "triton"))
    start = time.time()
    with log.open("w") as out:
        code = subprocess.call(cmd, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        out_tail = log.read_text()[-2000:]
        raise RuntimeError(f"{' '.join(cmd)} in {tree} exited {code}:\n{out_tail}")
    return time.time() - start


def run(trees: dict[str, Path], raw: Path, ops_rounds: int, repro_impls: list[str], cpu_smoke: bool = False
        ) -> dict[str, float]:
    """Every benchmark of both trees into ``raw``; the seconds each step took. ``cpu_smoke``: tiny CPU runs that
    exercise this script only."""
    raw.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as caches:
        cache = {name: Path(caches) / name for name in TREES}
        for i in range(ops_rounds):
            for name in (TREES if i % 2 == 0 else TREES[::-1]):
                out = raw / f"ops-{name}-{i}.json"
                cmd = [sys.executable, "benchmarks/ops_bench.py", "--grid-seconds", "0", "--out", str(out)]
                cmd += ["--cpu-smoke"] if cpu_smoke else []
                seconds[out.stem] = _run(cmd, trees[name], raw / f"ops-{name}-{i}.log", cache[name])
        for name in TREES:
            out = raw / f"repro-{name}.json"
            cmd = [sys.executable, "-m", "jaggedperf", "repro", "--impls", *repro_impls, "--modes", *REPRO_MODES,
                   "--json", str(out)]
            cmd += ["--device", "cpu", "--warmup", "1", "--iters", "5", "--modes", "eager"] if cpu_smoke else []
            seconds[out.stem] = _run(cmd, trees[name], raw / f"repro-{name}.log", cache[name])
    return seconds


def _ops_measures(data: dict) -> dict[tuple[str, str, str, str], tuple[float, float, float, bool]]:
    """(table, case, dtype, measure) -> (median, p20, p80, correct) of one ops benchmark JSON."""
    rows = {}
    for table, fields in (("forward", (("device", "no max_seqlen"), ("device_hinted", "max_seqlen given"))),
                          ("backward", (("device", "no max_seqlen"), ("device_hinted", "max_seqlen given")))):
        for row in data.get(table, []):
            for key, measure in fields:
                t = row.get(key)
                if t and t.get("median_us") is not None:
                    rows[(table, row["case"], row["dtype"], measure)] = (
                        t["median_us"], t["p20_us"], t["p80_us"], bool(row.get("correct", True)))
    for row in data.get("host", []):
        for path, t in row.get("wall_us", {}).items():
            if path in ("fast_path", "fast_path_hinted", "op_torch_ops", "segment_reduce"):
                rows[("host", row["case"], "fp32", f"{path} wall")] = (t["median_us"], t["min_us"], t["max_us"], True)
    return rows


def ops_rows(raw: Path) -> list[OpsRow]:
    """Both trees' ops rounds in ``raw`` as rows (medians of the rounds' medians)."""
    rounds = {name: [_ops_measures(json.loads(p.read_text())) for p in sorted(raw.glob(f"ops-{name}-*.json"))]
              for name in TREES}
    keys = set.intersection(*(set(r) for name in TREES for r in rounds[name]))
    rows = []
    for key in sorted(keys):
        by = {name: [r[key] for r in rounds[name]] for name in TREES}
        rows.append(OpsRow(
            *key,
            before_us=statistics.median(m for m, *_ in by["before"]),
            after_us=statistics.median(m for m, *_ in by["after"]),
            before_range=(min(lo for _, lo, _, _ in by["before"]), max(hi for _, _, hi, _ in by["before"])),
            after_range=(min(lo for _, lo, _, _ in by["after"]), max(hi for _, _, hi, _ in by["after"])),
            correct=all(ok for name in TREES for *_, ok in by[name])))
    return rows


def summarise(raw: Path, min_change: float, seconds: dict[str, float] | None,
              labels: dict[str, str | None] | None = None) -> tuple[dict, str]:
    """The summary's data and Markdown from the runs in ``raw``; ``labels``: each tree's commit where its runs
    could not read it (a tree without git)."""
    rows = ops_rows(raw)
    repro = {name: load(raw / f"repro-{name}.json") for name in TREES}
    cmp = repro["after"].compare(repro["before"])  # a: before (the baseline), b: after; ratios after / before
    commits = {name: (labels or {}).get(name) or repro[name].environment.get("git_commit") for name in TREES}
    moved = [r for r in rows if r.moved(min_change)]
    data = {"commits": commits, "min_change": min_change, "seconds": seconds,
            "ops": [dict(asdict(r), ratio=r.ratio, moved=r.moved(min_change)) for r in rows],
            "repro": [{"implementation": c.implementation, "mode": c.mode, "case": c.case.label,
                       "status_before": c.status_a, "status_after": c.status_b, "verdict": c.verdict,
                       "wall_before_ms": c.wall.a if c.wall else None, "wall_after_ms": c.wall.b if c.wall else None,
                       "ratio_low": c.wall.low if c.wall else None, "ratio_high": c.wall.high if c.wall else None}
                      for c in cmp.cells]}
    lines = [f"# Before and after: `{commits['before']}` → `{commits['after']}`", "",
             "Each tree's own ops benchmark and `jaggedperf repro`, side by side in one run on one machine "
             "(`benchmarks/before_after.py`). Ops: device µs by CUDA-graph replay, L2 flushed, median of the rounds' "
             "medians (the rounds' lowest p20 – highest p80); host: wall per eager call (min–max). *moved*: the "
             f"ratio passes {min_change:.0%} and the ranges do not overlap.", "",
             f"**Ops: {len(rows)} rows, {len(moved)} moved, "
             f"{sum(not r.correct for r in rows)} not correct against float64.**", "",
             "| table | case | dtype | measure | before | after | after / before | |",
             "|---|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r.table} | {r.case} | {r.dtype} | {r.measure} | {r.before_us:.1f} "
                     f"({r.before_range[0]:.1f}–{r.before_range[1]:.1f}) | {r.after_us:.1f} "
                     f"({r.after_range[0]:.1f}–{r.after_range[1]:.1f}) | {r.ratio:.2f} | "
                     f"{'moved' if r.moved(min_change) else ''}{'' if r.correct else ' WRONG'} |")
    lines += ["", f"**Repro: {len(cmp.cells)} cells** (verdicts: "
              + ", ".join(f"{v} {sum(c.verdict == v for c in cmp.cells)}"
                          for v in sorted({c.verdict for c in cmp.cells})) + ").",
              "", "| case | implementation | mode | before ms | after ms | after / before (95% interval) | verdict |",
              "|---|---|---|---:|---:|---:|---|"]
    for c in cmp.cells:
        w = c.wall
        ratio = f"{w.ratio:.2f} ({w.low:.2f}–{w.high:.2f})" if w and w.low is not None else (
            f"{w.ratio:.2f}" if w else "—")
        lines.append(f"| {c.case.label} | {c.implementation} | {c.mode} | {w.a if w else float('nan'):.3f} | "
                     f"{w.b if w else float('nan'):.3f} | {ratio} | {c.verdict} ({c.status_a} / {c.status_b}) |")
    return data, "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the tree before the change")
    parser.add_argument("--before-commit", help="the before tree's commit, where it has no git")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1], help="(default: this one)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops-rounds", type=int, default=2, help="ops benchmark runs a tree, order alternating")
    parser.add_argument("--repro-impls", nargs="+", default=list(REPRO_IMPLS))
    parser.add_argument("--min-change", type=float, default=stats.MIN_CHANGE)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny CPU runs: exercises this script only")
    parser.add_argument("--from", dest="from_runs", action="store_true", help="no run: summarise OUT/raw")
    args = parser.parse_args()
    raw = args.out / "raw"
    seconds = None
    if not args.from_runs:
        if args.before is None:
            parser.error("--before is required unless --from")
        seconds = run({"before": args.before.resolve(), "after": args.after.resolve()}, raw, args.ops_rounds,
                      args.repro_impls, args.cpu_smoke)
    data, markdown = summarise(raw, args.min_change, seconds, {"before": args.before_commit})
    for path in harness.write_summary(args.out, "before-after", data, markdown):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
