"""The loaded-machine proof: are the lab's numbers trustworthy when the machine is not quiet?

The same small CPU grid (jagged_mean, eager, 3 implementations × 4 cases) is run twice through
``jaggedperf.bench``: first on the machine as quiet as it gets (the script waits up to ``QUIET_WAIT_S`` for
other processes to use under ``QUIET_CPUS`` CPUs; on a shared machine that may never happen, and the
summary says how busy it was), then with a busy loop on every CPU, started by this script and stopped at
its end. Then:

1. every cell that is stable in both runs must have medians that agree within the runs' reported
   intervals (each median inside the other run's p20–p80);
2. every cell the load disturbed (its loaded median outside the quiet run's p20–p80) must be marked
   ``unstable`` in the loaded run, not reported as a finding;
3. ``compare`` (bootstrap CI of the median ratio, 5% minimum effect) must report no regression.

Writes quiet.json, loaded.json, comparison.json and summary.md to OUT (default
benchmarks/results/cpu/stability); exits 1 when a check fails. Not run in CI (it loads the machine on
purpose); run it by hand:

    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/stability_proof.py [OUT] [LOOPS]

LOOPS: busy loops for the loaded run (default: one per CPU; ``cpus − 1`` leaves the cell a core of its own,
so that cells may stay stable under load and their medians must then agree with the quiet run's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jaggedperf
from jaggedperf import Case
from jaggedperf.lab import harness

IMPLEMENTATIONS = ["sum_padded", "segment_reduce", "unbind_mean"]
CASES = [Case(64, 32, L, s) for L in (64, 256) for s in (0.2, 0.7)]
SETTINGS = dict(modes=["eager"], device="cpu", threads=1, warmup=20, iters=200, attempts=3)
QUIET_CPUS = 0.5  # other processes' CPUs under which the machine counts as quiet
QUIET_WAIT_S = 600.0


def wait_for_quiet() -> tuple[float, float | None]:
    """Wait until other processes use under ``QUIET_CPUS`` CPUs over 2 s, at most ``QUIET_WAIT_S``.

    Returns:
        (seconds waited, other processes' CPUs last seen).
    """
    from jaggedperf.lab.measure.env import CpuLoad

    start = time.monotonic()
    while True:
        other = CpuLoad.start().other_cpus(2.0)
        waited = time.monotonic() - start
        if other is None or other < QUIET_CPUS or waited > QUIET_WAIT_S:
            return waited, other


def busy_loops(n: int) -> list[subprocess.Popen]:
    """``n`` processes that spin a CPU each until they are stopped."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def inside(x: float, low: float, high: float) -> bool:
    return low <= x <= high


def main(out: Path, loops: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    waited, seen = wait_for_quiet()
    quiet = jaggedperf.bench(IMPLEMENTATIONS, CASES, **SETTINGS)
    quiet.save(out / "quiet.json")
    procs = busy_loops(loops)
    try:
        time.sleep(1.0)  # let the loops get going before the first cell
        loaded = jaggedperf.bench(IMPLEMENTATIONS, CASES, **SETTINGS)
    finally:
        stop(procs)
    loaded.save(out / "loaded.json")
    comparison = loaded.compare(quiet)
    (out / "comparison.json").write_text(json.dumps(comparison.to_dict(), indent=1) + "\n")

    rows, failures = [], []
    by_key = {r.key: r for r in loaded.results}
    for q in quiet.results:
        lo = by_key[q.key]
        qw, lw = q.wall, lo.wall
        q_us = (qw.median_ms * 1e3, qw.p20_ms * 1e3, qw.p80_ms * 1e3)
        l_us = (lw.median_ms * 1e3, lw.p20_ms * 1e3, lw.p80_ms * 1e3)
        both_stable = q.status == "ok" and lo.status == "ok"
        agree = inside(q_us[0], l_us[1], l_us[2]) and inside(l_us[0], q_us[1], q_us[2])
        disturbed = not inside(l_us[0], q_us[1], q_us[2])
        if both_stable and not agree:
            failures.append(f"{q.implementation} {q.case.label}: stable in both runs but the medians disagree")
        if disturbed and lo.status != "unstable":
            failures.append(f"{q.implementation} {q.case.label}: disturbed by the load but not marked unstable")
        rows.append([q.case.label, q.implementation, f"{q_us[0]:.1f} [{q_us[1]:.1f}–{q_us[2]:.1f}]", q.status,
                     f"{l_us[0]:.1f} [{l_us[1]:.1f}–{l_us[2]:.1f}]", lo.status,
                     "yes" if disturbed else "no", "yes" if agree else "no",
                     (lo.reason or "").replace("|", "\\|")])
    if comparison.has_regression:
        failures.append(f"compare reports {len(comparison.regressions)} regression(s)")

    def load_line(res) -> str:
        load = res.environment.get("load") or {}
        per_cell = [r.stability.other_cpu for r in res.results if r.stability and r.stability.other_cpu is not None]
        spread = f"{min(per_cell):.2f}–{max(per_cell):.2f}" if per_cell else "?"
        return (f"load average {load.get('loadavg')}; other processes' CPUs at the start {load.get('other_cpus')}, "
                f"while each cell was timed {spread} (of {load.get('cpus')})")

    lines = [
        "# Loaded-machine proof", "",
        f"Grid: jagged_mean, eager, {', '.join(IMPLEMENTATIONS)} × {', '.join(c.label for c in CASES)}; "
        f"{SETTINGS['iters']} timed calls, up to {SETTINGS['attempts']} attempts, {SETTINGS['threads']} thread; "
        f"CPU ({os.cpu_count()} cores), torch {quiet.environment.get('torch')}.", "",
        f"- quiet run (after waiting {waited:.0f} s for other processes to use under {QUIET_CPUS} CPUs; last seen "
        f"{seen}): {load_line(quiet)}",
        f"- loaded run ({loops} busy loop{'s' if loops != 1 else ''} started by the script, stopped at its end): "
        f"{load_line(loaded)}",
        "",
        "Wall µs per call: median [p20–p80]. *Disturbed*: the loaded median is outside the quiet run's p20–p80. "
        "*Agree*: each median lies inside the other run's p20–p80.", "",
        "| case | implementation | quiet µs | quiet status | loaded µs | loaded status | disturbed | agree | "
        "why unstable (loaded) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    counts = comparison.counts()
    lines += ["", "compare (loaded against quiet; bootstrap 95% CI of the median ratio, 5% minimum effect): "
              + ", ".join(f"{n} {v}" for v, n in counts.items() if n), ""]
    for c in comparison.cells:
        if c.wall is not None:
            lines.append(f"- {c.implementation} {c.case.label}: B/A {c.wall.ratio:.3f} "
                         f"[{c.wall.low:.3f}–{c.wall.high:.3f}] → {c.verdict}" + (f" ({c.note})" if c.note else ""))
    lines += ["", "Checks: " + ("all hold." if not failures else "FAILED: " + "; ".join(failures)), ""]
    facts = harness.meta()
    lines.append(f"Command: `{facts.get('command')}` at commit `{facts.get('git_commit')}`.")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("benchmarks/results/cpu/stability"),
                  int(sys.argv[2]) if len(sys.argv) > 2 else (os.cpu_count() or 1)))
