"""doctor: measure why a compiled cell is slower (or faster) than its eager twin, and say which cause explains it."""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jaggedperf.cli._args import (
    EXIT_INTERRUPTED,
    SEED_IMPLEMENTATIONS,
    add_case_arguments,
    add_flush_argument,
    add_json_argument,
    add_names_arguments,
    add_plugin_argument,
    add_stability_arguments,
    add_timing_arguments,
    apply_stability_arguments,
    cases_from_args,
    device_from_args,
    positive_int,
    print_error,
    unwritable,
)
from jaggedperf.cli._names import select
from jaggedperf.cli._defaults import DOCTOR_COMPILE_BUDGET_S
from jaggedperf.cli.lab import _footer, console
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.plugins import PluginError

if TYPE_CHECKING:
    from jaggedperf.inputs import Case


def _imports() -> None:
    """Import what the handlers measure and render with (torch among it) into this module's globals, once: building
    the parsers (``--help``) must not import it (``jaggedperf.cli``); every handler calls this first."""
    global implementation_names, attribution, evidence, gather, saved, verdicts, environment, OK, TIMED, write_json
    global ResultsFileError, Options
    from jaggedperf.impls.registry import implementation_names
    from jaggedperf.lab.doctor import attribution, evidence, gather, saved, verdicts
    from jaggedperf.lab.measure.env import environment
    from jaggedperf.lab.result import OK, TIMED
    from jaggedperf.lab.results.atomic import write_json
    from jaggedperf.lab.results.store import ResultsFileError
    from jaggedperf.lab.runner import Options


OP = "jagged_mean"
CASE_FLAGS = ("B", "M", "seqlen", "sparsity")


def register(sub) -> None:
    p = sub.add_parser(
        "doctor", help="explain a compiled cell against eager: host overhead, input form, kernels, padding, "
                       "CUDA graphs, compile cost",
        description="For each implementation × case, time eager and the compiled mode, the same computation "
                    "compiled on plain (values, offsets) tensors, an NJT implementation through jaggedperf.compile "
                    "in the same torch mode, and (on CUDA) both under CUDA graphs; then split compiled − eager into "
                    "device time, NestedTensor input overhead, guard evaluation and other host work, and print a "
                    "verdict (which recommends jaggedperf.compile, with its measured numbers, where NJT host work is "
                    "the slowdown and it is faster). Without case flags: the seed's two shapes.")
    add_names_arguments(p, impls_default=f"for jagged_mean the seed's three: {','.join(SEED_IMPLEMENTATIONS)}; "
                                         "for another op, all",
                        modes_default=f"{modes_mod.SEED_COMPILED_MODE}; each a compiled mode, explained against eager")
    p.set_defaults(modes=[modes_mod.SEED_COMPILED_MODE])
    add_plugin_argument(p)
    add_case_arguments(p, preset_default="seed, when no case axis is given")
    g = p.add_argument_group("measurement")
    add_timing_arguments(g)
    g.add_argument("--profile-calls", type=positive_int, default=10, help="calls profiled for kernels (default: 10)")
    add_flush_argument(g, default=False, why="as in the wall loop, so that host = wall − device compares like with "
                                            "like")
    g.add_argument("--no-cudagraphs", action="store_true", help="skip the CUDA-graph comparison (saves two cells)")
    g.add_argument("--compile-budget", type=compile_budget, default=DOCTOR_COMPILE_BUDGET_S, metavar="S|none",
                   help="when a compiled cell takes longer than S seconds to compile, skip its extra compiles "
                        "(plain twin, boundary, CUDA-graph counterpart), and across cases: do not compile that "
                        "implementation in that mode again at a later case (recorded as not tried, with the time "
                        "and the case; its eager cell is still timed); none, inf or a negative S: no limit "
                        f"(default: {DOCTOR_COMPILE_BUDGET_S:g})")
    add_stability_arguments(g)
    g = p.add_argument_group("output")
    add_json_argument(g, "every piece of evidence, the diagnoses and the environment, rewritten as each cell finishes")
    p.add_argument("--from", dest="from_json", metavar="FILE",
                   help="measure nothing: diagnose again the evidence a doctor's --json saved in FILE (.json or "
                        ".json.gz), with today's verdicts; the names, case and measurement flags are not used")
    g.add_argument("--trace-dir", metavar="DIR", help="write a chrome trace per profiled callable into DIR (CUDA)")
    g.add_argument("--trace", dest="trace_dir", metavar="DIR", help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_doctor)


def compile_budget(text: str) -> float | None:
    """``--compile-budget``: seconds, or None for no limit (``none``, ``inf``, or a negative number, which meant
    no limit before ``none`` did)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or none, got {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"expected seconds or none, got {text!r}")
    return None if value < 0 or math.isinf(value) else value


def doctor_implementations(op: str) -> list[str]:
    """The doctor's implementations of ``op`` by default: the seed's three for jagged_mean; every one for another op.

    Raises:
        KeyError: an unknown op.
    """
    _imports()
    names = implementation_names(op)
    return list(SEED_IMPLEMENTATIONS) if op == OP else names


def doctor_cases(args: argparse.Namespace) -> list[Case]:
    """The case flags' cases (``cases_from_args``); with neither a preset nor any of B, M, seqlen, sparsity,
    the seed's two shapes (with --distribution/--dtype/--seed).

    Raises:
        ValueError: some of B, M, seqlen, sparsity given without a preset, but not all.
    """
    given = any(getattr(args, name) is not None for name in CASE_FLAGS)
    return cases_from_args(args, preset=None if given else "seed")


def doctor_options(args: argparse.Namespace) -> Options:
    _imports()
    device = device_from_args(args)
    opts = Options(warmup=args.warmup, iters=args.iters, byte_limit=args.byte_limit, flush_l2=args.flush_l2,
                   profile_calls=args.profile_calls, dynamic=True if args.dynamic else None, trace_dir=args.trace_dir)
    if device is not None:
        opts.device = device
    return apply_stability_arguments(args, opts)


def cmd_doctor(args: argparse.Namespace) -> int:
    _imports()
    out, err = console(), Console(stderr=True)
    if args.from_json:
        return rediagnose(args, out, err)
    try:
        chosen = select(args, default_impls=doctor_implementations,
                        allowed_modes=[*modes_mod.COMPILE_MODES, *modes_mod.BOUNDARY_MODES])
        cases = doctor_cases(args)
    except (PluginError, KeyError, ValueError) as exc:
        print_error(err, exc)
        return 2
    problem = unwritable(args.json)
    if problem:
        print_error(err, problem)
        return 2
    options = doctor_options(args)
    if options.device.type == "cpu":
        err.print("[yellow]No CUDA GPU in use: running on the CPU. Wall time only: device time, kernels and the "
                  "CUDA-graph comparison need CUDA.[/yellow]")
        if args.trace_dir:
            err.print("[yellow]--trace-dir: traces need CUDA (torch.profiler device activity); none written.[/yellow]")
            options.trace_dir = None
    if options.trace_dir:
        try:
            os.makedirs(options.trace_dir, exist_ok=True)
        except OSError as exc:
            print_error(err, f"cannot make the trace folder {options.trace_dir}: {exc.strerror or exc}")
            return 2
    started = time.perf_counter()
    done: list[evidence.Evidence] = []

    def keep(ev: evidence.Evidence) -> None:  # the finished cells survive a Ctrl-C or a crash in a later one
        done.append(ev)
        if args.json:
            write_json(args.json, verdicts.diagnose_run(evidence.EvidenceRun(environment(), None, done)))

    total = len(cases) * len(chosen.impls) * len(chosen.modes)
    try:
        runs = [gather_with_progress(chosen.op, cases, chosen.impls, mode, options, not args.no_cudagraphs,
                                     args.compile_budget, err, total=total, done=len(chosen.impls) * len(cases) * i,
                                     on_evidence=keep)
                for i, mode in enumerate(chosen.modes)]
    except (KeyError, ValueError) as exc:
        print_error(err, exc)
        return 2
    except KeyboardInterrupt:
        kept = (f"their evidence and verdicts kept in {args.json}" if args.json and done
                else "nothing kept" if not done else "not kept (--json PATH keeps each cell as it finishes)")
        err.print(f"interrupted: {len(done)} of {total} cells finished, {kept}; run the same command again "
                  "(fewer --impls or cases finish sooner)", markup=False, highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    record = verdicts.diagnose_run(evidence.EvidenceRun(runs[0].environment, runs[0].copy_gbps,
                                                        [ev for run in runs for ev in run.evidence]))
    print_record(out, record)
    err.print(f"doctor took {time.perf_counter() - started:.0f} s")
    if args.json:
        write_json(args.json, record)
        err.print(f"wrote {args.json}")
    if options.trace_dir:
        err.print(f"traces in {options.trace_dir}")
    return 0


def rediagnose(args: argparse.Namespace, out: Console, err: Console) -> int:
    """``doctor --from FILE``: the saved evidence diagnosed again, printed as a measuring run prints it."""
    problem = unwritable(args.json)
    if problem:
        print_error(err, problem)
        return 2
    try:
        run = saved.load_evidence(args.from_json)
    except ResultsFileError as exc:
        print_error(err, exc)
        return 2
    record = verdicts.diagnose_run(run)
    print_record(out, record)
    err.print(f"diagnosed again from {args.from_json} ({len(record.evidence)} cells, nothing measured)")
    if args.json:
        write_json(args.json, record)
        err.print(f"wrote {args.json}")
    return 0


def print_record(out: Console, record: verdicts.DoctorRecord) -> None:
    """Each cell's measurements, attribution, verdict and findings, then the verdicts table and the footer."""
    for ev, diagnosis in zip(record.evidence, record.diagnoses):
        if ev.not_tried is not None:  # no compiled call to explain: no tables, the verdict says why
            out.print(f"{ev.implementation} · {ev.mode} · {ev.case.label}", markup=False, highlight=False,
                      style="bold")
            out.print(f"verdict: {diagnosis.verdict}", markup=False, highlight=False, style="yellow")
            out.print()
            continue
        out.print(measurements_table(ev))
        out.print(attribution_table(ev, diagnosis))
        out.print(f"verdict: {diagnosis.verdict}", markup=False, highlight=False, style="bold")
        for line in diagnosis.findings:
            out.print(f"• {line}", markup=False, highlight=False)
        for line in ev.notes:
            out.print(f"  note: {line}", markup=False, highlight=False, style="dim")
        out.print()
    out.print(verdicts_table(record))
    _footer(out, record)


def gather_with_progress(op, cases, impls, mode, options, cudagraphs, compile_budget_s, console: Console, *,
                         total: int, done: int = 0, on_evidence=None) -> evidence.EvidenceRun:
    """``gather.gather_all`` for one mode with a progress bar over ``total`` cells, ``done`` of them before this
    mode's; ``on_evidence`` gets each cell's evidence as it is complete."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    # No auto-refresh: a refresh thread would compete with the timed calls for the GIL (and on a small CPU
    # for a core); the bar is redrawn when a stage starts, between measurements.
    with Progress(*columns, console=console, transient=True, disable=total < 2, auto_refresh=False) as progress:
        task = progress.add_task("cells", total=total, completed=done)
        current = {"cell": ""}

        def on_start(name, case):
            current["cell"] = f"{name} · {case.label}"
            progress.update(task, description=current["cell"], refresh=True)

        def on_stage(stage):
            progress.update(task, description=f"{current['cell']} · {stage}", refresh=True)

        def advance(ev):
            progress.advance(task)
            progress.refresh()
            if on_evidence:
                on_evidence(ev)

        return gather.gather_all(op, cases, impls, mode, options, cudagraphs=cudagraphs,
                                 compile_budget_s=compile_budget_s, on_start=on_start, on_stage=on_stage,
                                 on_evidence=advance)


# --- tables --------------------------------------------------------------------------------------


def _f(value: float | None, spec: str = ".1f") -> str:
    return "—" if value is None else format(value, spec)


def measurements_table(ev: evidence.Evidence) -> Table:
    """What was measured for the cell, one row per callable; a measure no row has (device time on the CPU) gets
    no column, nor host µs when it is the wall (wall only)."""
    wall_only = not ev.host.device_time
    names = ("callable", "input", "wall µs", "p20–p80 µs", "device µs", "host µs", "host timer µs", "kernels",
             "guards", "guard µs", "first call s", "status")
    rows = [("eager", ev.takes, ev.eager, None), (ev.mode, ev.takes, ev.compiled, ev.host.guards)]
    if ev.input_form.plain is not None:
        rows.append((f"{ev.mode} (plain twin)", "plain", ev.input_form.plain, ev.input_form.guards))
    if ev.cudagraphs.eager_graph is not None:
        rows.append(("graph (eager in a CUDA graph)", ev.takes, ev.cudagraphs.eager_graph, None))
    if ev.boundary.result is not None:
        rows.append((f"{ev.boundary.mode} (the boundary)", ev.takes, ev.boundary.result, None))
    if ev.cudagraphs.counterpart is not None:
        rows.append((ev.cudagraphs.counterpart_mode, ev.takes, ev.cudagraphs.counterpart, None))
    cells = []
    for label, form, r, guards in rows:
        ok = r.status in TIMED and r.wall is not None
        g_ok = guards is not None and guards.available
        spread = ok and r.wall.p20_ms is not None and r.wall.p80_ms is not None
        cells.append((r, [
            label, form,
            _f(r.wall.median_ms * 1e3 if ok else None),
            f"{r.wall.p20_ms * 1e3:.1f}–{r.wall.p80_ms * 1e3:.1f}" if spread else "—",
            _f(r.device_time.median_us if r.device_time else None),
            _f(evidence.host_us(r, wall_only=wall_only) if ok else None),
            _f(evidence.host_call_us(r) if ok else None),
            _f(r.kernels_per_call, ".0f"),
            _f(guards.guards if g_ok else None, "d"),
            _f(guards.check_us if g_ok else None),
            _f(r.compile_s, ".2f"),
            r.status if r.status == OK else f"{r.status}: {r.reason}",
        ]))
    keep = [i for i, name in enumerate(names) if name in ("callable", "status") or any(c[i] != "—" for _, c in cells)]
    if wall_only:  # host µs is the wall itself: one column of the two
        keep = [i for i in keep if names[i] != "host µs"]
    table = Table(title=f"{ev.implementation} · {ev.mode} vs eager · {ev.case.label}: what was measured "
                        f"(µs per call{', wall only' if wall_only else ''})")
    for i in keep:
        table.add_column(names[i], justify="left" if names[i] in ("callable", "input", "status") else "right")
    for r, c in cells:
        table.add_row(*(c[i] for i in keep),
                      style=None if r.status == OK else "yellow" if r.status in TIMED else "red")
    return table


def attribution_table(ev: evidence.Evidence, d: verdicts.Diagnosis) -> Table:
    table = Table(title=f"{ev.implementation} · {ev.case.label}: compiled − eager, part by part")
    for name in ("part", "µs per call", "share of Δ", "how it is measured"):
        table.add_column(name, justify="right" if name in ("µs per call", "share of Δ") else "left")
    if not d.available:
        table.add_row("—", "—", "—", d.reason or "", style="red")
        return table
    for p in d.contributions:
        table.add_row(p.label, f"{p.us:+.1f}", _f(p.share * 100 if p.share is not None else None, "+.0f") + "%",
                      p.method + (f" — {p.detail}" if p.detail else ""))
    table.add_section()
    table.add_row("Δ = compiled wall − eager wall", f"{d.delta_us:+.1f}", "100%",
                  f"{d.compiled_wall_us:.1f} − {d.eager_wall_us:.1f} (wall medians)", style="bold")
    table.add_row("Σ parts", f"{d.parts_sum_us:+.1f}", _f(d.parts_sum_us / d.delta_us * 100 if d.delta_us else None,
                                                         "+.0f") + "%", "the measured parts above")
    how = ("Δ − Σ parts: what the measured parts leave unexplained" if d.residual_measured
           else "zero by construction: no host timer in this evidence")
    table.add_row("residual (unattributed)", f"{d.residual_us:+.1f}",
                  _f(d.residual_us / d.delta_us * 100 if d.delta_us else None, "+.0f") + "%",
                  how + ("" if d.sums_ok else f" — past {attribution.SUM_TOLERANCE:.0%} of Δ"),
                  style=None if d.sums_ok else "red")
    return table


def verdicts_table(record: verdicts.DoctorRecord) -> Table:
    table = Table(title="verdicts")
    for name in ("case", "implementation", "mode", "verdict"):
        table.add_column(name)
    for ev, d in zip(record.evidence, record.diagnoses):
        table.add_row(d.case_label, d.implementation, d.mode, d.verdict,
                      style="yellow" if d.refused or ev.not_tried is not None else "red" if not d.available else None)
    return table
