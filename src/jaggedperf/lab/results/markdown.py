"""A run as a Markdown report: environment (with how quiet the machine was), statuses, the seed's table per
case for each compiled mode, ours against the best torch contender, every cell, the unstable cells, the
failures and the plots.

Every per-call time is in µs, the spread as quantiles (p20–p80), never ± std. Unstable cells keep their
figures in the tables but give no speedup and no finding; they are listed in a section of their own.
Plot paths are written as given: pass them relative to where the report will live.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Iterable

from jaggedperf.inputs import Case
from jaggedperf.lab.result import OK, STATUSES, TIMED, UNSTABLE, Result, RunRecord
from jaggedperf.lab.results import variants
from jaggedperf.lab.budget import timed_out
from jaggedperf.lab.results.tables import shown_speedup, status_text
from jaggedperf.lab.results.views import (
    EAGER,
    OURS,
    case_rank,
    environment_line,
    impl_rank,
    mode_rank,
    ordered,
    ours_vs_best,
    result_rank,
    speedups,
    status_counts,
    wall_ms,
)

ENVIRONMENT_ORDER = ("gpu", "torch", "triton", "cuda", "driver", "python", "platform", "hostname", "cpu_count",
                     "threads", "load", "git_commit", "command", "date")
NONE = "—"


def render_report(record: RunRecord, plots: dict[str, str | os.PathLike] | None = None) -> str:
    """The Markdown report of ``record``.

    Args:
        record: the run.
        plots: caption → image path, written as given (pass paths relative to where the report will live).

    Returns:
        The report's text, ending in one newline.
    """
    results = sorted(record.results, key=result_rank)
    ops = ordered((r.op for r in results), str)
    out: list[str] = [f"# jaggedperf results{': ' + ', '.join(ops) if ops else ''}", ""]
    out += [f"{len(results)} cells on {environment_line(record.environment)}.", ""]
    out += _environment(record)
    out += _statuses(results)
    out += _by_place(record)
    out += _seed_tables(results)
    out += _ours_vs_best(results)
    out += _all_cells(results)
    out += _unstable(results)
    out += _failures(results)
    out += _plots(plots or {})
    return "\n".join(out).rstrip("\n") + "\n"


# --- sections -------------------------------------------------------------------------------------


def _environment(record: RunRecord) -> list[str]:
    env = record.environment
    keys = [k for k in ENVIRONMENT_ORDER if k in env] + sorted(k for k in env if k not in ENVIRONMENT_ORDER and k != "more")
    rows = [[k, load_text(env[k]) if k == "load" else _code_if(k, env[k])] for k in keys]
    rows.append(["copy bandwidth", f"{record.copy_gbps:.0f} GB/s" if record.copy_gbps is not None else "not measured"])
    out = ["## Environment", ""] + _table(["", ""], rows)
    more = env.get("more") or []
    if more:
        out += ["Later runs appended to the same file (a resumed sweep), where they differ from the first:", ""]
        for i, later in enumerate(more, 1):
            diff = {k: v for k, v in later.items() if env.get(k) != v} if isinstance(later, dict) else {}
            text = ", ".join(f"{k} = {_code_if(k, v)}" for k, v in diff.items()) or "same as the first"
            out.append(f"{i}. {_escape(text)}")
        out.append("")
    return out


def _statuses(results: list[Result]) -> list[str]:
    total = status_counts(results)
    out = ["## Status", ""]
    cut = sum(1 for r in results if timed_out(r))  # errors that are cells past their --timeout
    out += [" · ".join(f"{total[s]} {s}" for s in STATUSES) + f" of {len(results)} cells"
            + (f" ({cut} of the errors timed out)." if cut else "."), ""]
    by_mode: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_mode[r.mode].append(r)
    rows = []
    for mode in ordered(by_mode, mode_rank):
        counts = status_counts(by_mode[mode])
        rows.append([mode] + [str(counts[s]) for s in STATUSES])
    return out + _table(["mode", *STATUSES], rows)


def _by_place(record: RunRecord) -> list[str]:
    """Where the results come from several GPUs, hosts or torch versions: their cells side by side."""
    groups = variants.split(record)
    if len(groups) < 2:
        return []
    out = ["## By GPU, host and torch", "", "Each cell under each place it ran (a sweep sends a case's cells to one "
           "worker, so a speedup compares cells of one place). Wall median in µs with p20–p80.", ""]
    return out + variants.render_markdown(variants.side_by_side(groups))


def _seed_tables(results: list[Result]) -> list[str]:
    """Per compiled mode, per case: implementation, eager ms, compiled ms, speedup (the seed's table)."""
    modes = ordered((r.mode for r in results if r.mode != EAGER), mode_rank)
    if not modes:
        return []
    speedup = speedups(results)
    cell = {r.key: r for r in results}
    out = ["## Speedup vs eager", "", "Wall median per call in µs; speedup = eager / compiled (below 1, in bold: slower "
           "than eager; none where a side is unstable).", ""]
    for mode in modes:
        out += [f"### {mode}", ""]
        for op, case in _cases(r for r in results if r.mode == mode):
            impls = ordered((r.implementation for r in results if r.op == op and r.case == case and r.mode == mode), impl_rank)
            rows = []
            for impl in impls:
                eager, compiled = cell.get((op, impl, EAGER, case)), cell[(op, impl, mode, case)]
                rows.append([impl, _us_or_status(eager), _us_or_status(compiled), _speedup(speedup.get(compiled.key))])
            out += [f"#### {_case_title(op, case, results)}", ""]
            out += _table(["implementation", "eager µs", f"{mode} µs", "speedup"], rows)
    return out


def _ours_vs_best(results: list[Result]) -> list[str]:
    versus = ours_vs_best(results)
    if not any(r.implementation == OURS for r in results):
        return []
    rows = []
    for r in results:
        if r.implementation != OURS:
            continue
        if r.key in versus:
            ratio, best = versus[r.key]
            rows.append([r.case.label, r.mode, _us(wall_ms(r) * 1e3), f"{best.implementation} ({best.mode})",
                         _us(best.value * 1e3), _speedup(ratio)])
        else:
            rows.append([r.case.label, r.mode, _us_or_status(r), NONE, NONE, NONE])
    out = [f"## {OURS} vs the best torch contender", ""]
    out += [f"Best torch = the fastest ok cell of any other implementation in any mode; ratio = best torch / {OURS}, "
            f"wall median (below 1, in bold: {OURS} is slower). Unstable cells take no part.", ""]
    return out + _table(["case", f"{OURS} mode", f"{OURS} µs", "best torch", "best torch µs", "ratio"], rows)


def _all_cells(results: list[Result]) -> list[str]:
    rows = []
    eager = {(r.op, r.implementation, r.case): r for r in results if r.mode == EAGER}
    for r in results:
        ok = r.status in TIMED
        speedup, settled = shown_speedup(r, eager.get((r.op, r.implementation, r.case)))
        rows.append([
            r.case.label, r.implementation, r.mode, r.status if r.status == OK else f"**{status_text(r)}**",
            _us(r.wall.median_ms * 1e3) if ok and r.wall else NONE,
            _range_us(r.wall.p20_ms, r.wall.p80_ms, 1e3) if ok and r.wall else NONE,
            _us(r.device_time.median_us) if ok and r.device_time else NONE,
            _us(r.host_us) if ok else NONE,
            f"{r.kernels_per_call:g}" if ok and r.kernels_per_call is not None else NONE,
            f"{r.gbps:.0f}" if ok and r.gbps is not None else NONE,
            f"{r.pct_of_copy:.1f}" if ok and r.pct_of_copy is not None else NONE,
            NONE if speedup is None else f"{speedup:.2f}×" + ("" if settled else f" ({UNSTABLE})"),
            f"{r.compile_s:.1f}" if r.compile_s is not None else NONE,
        ])
    header = ["case", "implementation", "mode", "status", "wall µs (median)", "wall µs (p20–p80)", "device µs",
              "host µs", "kernels/call", "GB/s", "% copy", "speedup", "compile s"]
    multi_op = len({r.op for r in results}) > 1
    if multi_op:
        header.insert(0, "op")
        rows = [[r.op, *row] for r, row in zip(results, rows)]
    return ["## All cells", ""] + _table(header, rows)


def _unstable(results: list[Result]) -> list[str]:
    shaky = [r for r in results if r.status == UNSTABLE]
    out = ["## Unstable cells", ""]
    if not shaky:
        judged = [r.stability for r in results if r.status == OK and r.stability is not None]
        if not judged:
            return out + ["No cell was judged (these results predate the stability check).", ""]
        st = judged[0]
        unjudged = sum(1 for x in judged if not x.judged)
        note = f" ({unjudged} had too few calls to judge)" if unjudged else ""
        return out + [f"None: every timed cell settled (IQR ≤ {st.max_iqr_rel:.0%} of the median, drift ≤ "
                      f"{st.max_drift_rel:.0%}){note}.", ""]
    out += ["Measured again and again, these cells never settled: their figures (and a speedup with an unstable side) are "
            "shown marked, and give no finding. IQR and drift are relative to the median; other CPUs = CPUs other processes kept busy while "
            "the cell was timed.", ""]
    rows = []
    for r in shaky:
        st = r.stability
        rows.append([r.case.label, r.implementation, r.mode, _us(r.wall.median_ms * 1e3),
                     _range_us(r.wall.p20_ms, r.wall.p80_ms, 1e3), f"{st.iqr_rel:.0%}",
                     NONE if st.drift_rel is None else f"{st.drift_rel:+.0%}", str(st.attempts),
                     NONE if st.other_cpu is None else f"{st.other_cpu:.2f}", r.reason or NONE])
    return out + _table(["case", "implementation", "mode", "wall µs (median)", "wall µs (p20–p80)", "IQR", "drift",
                         "attempts", "other CPUs", "why"], rows)


def load_text(load: Any) -> str:
    """An environment's ``load`` entry in words: load average, other processes' CPU use, GPU clocks."""
    if not isinstance(load, dict):
        return str(load)
    parts = []
    if load.get("loadavg"):
        parts.append("load average " + "/".join(f"{x:g}" for x in load["loadavg"]))
    if load.get("other_cpus") is not None:
        parts.append(f"other processes kept {load['other_cpus']:.2f} of {load.get('cpus') or '?'} CPUs busy")
    for g in load.get("gpus") or []:
        text = f"GPU {g.get('index', '?')}: SM {g.get('clocks_sm', '?')}/{g.get('clocks_max_sm', '?')} MHz"
        if g.get("utilization_gpu") is not None:
            text += f", {g['utilization_gpu']}% busy"
        others = g.get("other_processes") or []
        text += f", {len(others)} other process{'es' if len(others) != 1 else ''}"
        parts.append(text)
    return "; ".join(parts) or NONE


def _failures(results: list[Result]) -> list[str]:
    bad = [r for r in results if r.status not in TIMED]
    out = ["## Failures", ""]
    if not bad:
        if any(r.status == UNSTABLE for r in results):
            return out + ["None failed, was wrong or was skipped (the unstable cells are listed above).", ""]
        return out + ["None: every cell is ok.", ""]
    rows = []
    for r in sorted(bad, key=lambda r: (STATUSES.index(r.status) if r.status in STATUSES else 9, result_rank(r))):
        reason = r.reason or NONE
        if r.rel_error is not None and r.status != OK and "rel" not in reason:
            reason = f"{reason} (rel. error {r.rel_error:.3g})"
        rows.append([status_text(r), r.case.label, r.implementation, r.mode, reason])
    return out + _table(["status", "case", "implementation", "mode", "reason"], rows)


def _plots(plots: dict[str, str | os.PathLike]) -> list[str]:
    if not plots:
        return []
    out = ["## Plots", ""]
    for caption, path in plots.items():
        link = os.fspath(path).replace(os.sep, "/")
        if any(c in link for c in " ()<>"):
            link = f"<{link}>"
        out += [f"### {_escape(caption)}", "", f"![{_escape(caption)}]({link})", ""]
    return out


# --- helpers --------------------------------------------------------------------------------------


def _cases(results: Iterable[Result]) -> list[tuple[str, Case]]:
    return sorted({(r.op, r.case) for r in results}, key=lambda oc: (oc[0], case_rank(oc[1])))


def _case_title(op: str, case: Case, results: list[Result]) -> str:
    multi_op = len({r.op for r in results}) > 1
    return f"{op} {case.label}" if multi_op else case.label


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_escape(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_escape(str(c)) for c in row) + " |" for row in rows]
    return lines + [""]


def _escape(text: str) -> str:
    """Safe inside a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code_if(key: str, value: Any) -> str:
    return f"`{value}`" if key in ("command", "git_commit") and value else str(value)


def _us(x: float | None) -> str:
    """µs with one decimal below 1000, whole µs above (the unit is in the column's name)."""
    if x is None:
        return NONE
    return f"{x:.1f}" if abs(x) < 1000 else f"{x:.0f}"


def _us_or_status(r: Result | None) -> str:
    if r is None:
        return NONE
    w = wall_ms(r)
    if w is not None:
        return _us(w * 1e3)
    if r.status == UNSTABLE and r.wall is not None:
        return f"{_us(r.wall.median_ms * 1e3)} (unstable)"
    return status_text(r)


def _range_us(low: float | None, high: float | None, scale: float = 1.0) -> str:
    """``p20–p80`` in µs from two quantiles in another unit (``scale`` µs per unit); — when unknown."""
    if low is None or high is None:
        return NONE
    return f"{_us(low * scale)}–{_us(high * scale)}"


def _speedup(x: float | None) -> str:
    if x is None:
        return NONE
    return f"**{x:.2f}×**" if x < 1 else f"{x:.2f}×"
