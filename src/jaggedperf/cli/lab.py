"""repro | run | list: plan cells, run them with a progress line per cell, print the tables, write JSON/CSV.

repro and run run their cells in this process, or, with ``--timeout``, through the sweep's engine
(``sweep.run_isolated``): one worker process per GPU (one on the CPU), each cell under the timeout, case by case
(``lab.budget``: a cell cut at one case is not tried at the next). repro's defaults depend on the device
(``REPRO_DEFAULTS``): on the CPU fewer calls and a compile budget, under which only compiled cells run in a worker.
Everything before and after the running is shared."""

from __future__ import annotations

import argparse
import functools
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from jaggedperf.cli._args import (
    EXIT_INTERRUPTED,
    ByDevice,
    SEED_IMPLEMENTATIONS,
    add_case_arguments,
    add_dtype_argument,
    add_names_arguments,
    add_plugin_argument,
    add_run_arguments,
    add_table_arguments,
    cases_from_args,
    options_from_args,
    print_error,
    timeout_from_args,
    unwritable,
)
from jaggedperf.cli._names import Selection, select
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.plugins import PluginError

if TYPE_CHECKING:
    from jaggedperf.lab.result import RunRecord

# The modules that measure and render import torch: each handler imports them when it runs, so that building the
# parsers (``--help``) does not (``jaggedperf.cli``). ``lab.runner`` and the like still resolve, for the tests.
_LAZY = {"runner": "jaggedperf.lab.runner", "sweep": "jaggedperf.lab.sweep", "budget": "jaggedperf.lab.budget",
         "tables": "jaggedperf.lab.results.tables"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return importlib.import_module(_LAZY[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

OP = "jagged_mean"
# repro's modes: the seed's finding (its compiled mode slower than eager) and the remedy in the same torch mode.
REPRO_MODES = (modes_mod.EAGER, modes_mod.SEED_COMPILED_MODE, modes_mod.boundary_twin(modes_mod.SEED_COMPILED_MODE))
# unbind_mean's compiled cells compile one mean per sequence, B = 512 unrolled, for minutes (on the CPU 64 s in
# torch.compile, over 600 s through jaggedperf.compile, which compiles it again with unbacked lengths). repro caps a
# cell, compile included, so that the one command finishes, and marks a cut cell with the budget it passed.
# On a GPU the cap is sized for the seed's first row: torch.compile's unbind_mean compiled in 66-74 s at the first
# seed shape on the H200 (benchmarks/results/h200/seed-table-shape1.json; cut at 60 s in a later run): 240 s leaves
# it three times that (tests/test_cli_lab.py holds the budget to the committed figure). At the second shape its
# compile passed 250 s twice and 240 s once: there the table shows `cut > 240 s`, the bound measured.
REPRO_GPU_CELL_TIMEOUT_S = 240.0
# On the CPU, the seed's method (50 + 200 calls of 30 cells, compiles uncapped) took over 30 minutes: fewer calls, and
# a budget meant to cut only unbind_mean's compiles: the others' cold compiles took 3-10 s on a 2-core machine with
# other work on it, over 20 s only at a load of 7 (three test suites beside it).
REPRO_CPU_CELL_TIMEOUT_S = 30.0
REPRO_CPU_WARMUP, REPRO_CPU_ITERS, REPRO_CPU_ATTEMPTS = 3, 15, 2
REPRO_DEFAULTS = {"warmup": ByDevice(50, REPRO_CPU_WARMUP), "iters": ByDevice(200, REPRO_CPU_ITERS),
                  "attempts": ByDevice(3, REPRO_CPU_ATTEMPTS),
                  "timeout": ByDevice(REPRO_GPU_CELL_TIMEOUT_S, REPRO_CPU_CELL_TIMEOUT_S)}


def register(sub) -> None:
    p = sub.add_parser("repro", help="reproduce the pytorch/pytorch#160355 table (seed shapes, eager vs compiled) "
                                     "with the remedy beside it",
                       description="The seed's two shapes × its three implementations (plus jaggedperf's op) × "
                                   f"{', '.join(REPRO_MODES)}: the seed's finding and the boundary "
                                   "(jaggedperf.compile) in the same torch mode beside it, on the GPU when present. "
                                   "With --op, another op at the seed's shapes (every implementation by default).")
    add_names_arguments(p, impls_default="for jagged_mean the seed's three and jaggedperf; for another op, all",
                        modes_default=",".join(REPRO_MODES))
    add_plugin_argument(p)
    add_dtype_argument(p.add_argument_group("cases (the seed's two shapes)"))
    add_table_arguments(p)
    add_run_arguments(p, by_device=REPRO_DEFAULTS)
    p.set_defaults(handler=cmd_repro)

    p = sub.add_parser("run", help="run any cells: implementations × modes × cases",
                       epilog="e.g. jaggedperf run --B 512 --M 64 --seqlen 100:500:100 --sparsity 0.1,0.75 "
                              "--only sum_padded,jaggedperf --baseline sum_padded --metrics latency,speedup --csv")
    add_names_arguments(p, impls_default="all", modes_default="eager and the seed's compiled mode")
    p.set_defaults(modes=[modes_mod.EAGER, modes_mod.SEED_COMPILED_MODE])
    add_plugin_argument(p)
    add_case_arguments(p)
    add_table_arguments(p)
    add_run_arguments(p)
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("list", help="ops, implementations (plugins' too) and modes")
    add_names_arguments(p, impls_default="all", modes_default=None)
    add_plugin_argument(p)
    p.set_defaults(handler=cmd_list)


def default_implementations(op: str) -> list[str]:
    """repro's implementations of ``op``: for the seed's op, its three and ours; for any other op, all.

    Raises:
        KeyError: an unknown op.
    """
    from jaggedperf.impls.registry import implementation_names

    names = implementation_names(op)
    if op != OP:
        return names
    return [n for n in (*SEED_IMPLEMENTATIONS, "jaggedperf", "jaggedperf_njt") if n in names]


def cmd_repro(args: argparse.Namespace) -> int:
    return execute(args, lambda: cases_from_args(args, preset="seed"),
                   default_impls=default_implementations, default_modes=REPRO_MODES)


def cmd_run(args: argparse.Namespace) -> int:
    return execute(args, lambda: cases_from_args(args))


def _compiled_mode(modes: list[str]) -> str | None:
    """The mode the seed's table compares with eager: the seed's compiled mode when run, else the first
    torch.compile mode, else the first other non-eager mode."""
    others = [m for m in modes if m != modes_mod.EAGER]
    if modes_mod.SEED_COMPILED_MODE in others:
        return modes_mod.SEED_COMPILED_MODE
    return next((m for m in others if m in modes_mod.COMPILE_MODES), others[0] if others else None)


def _boundary_mode(modes: list[str], compiled_mode: str | None) -> str | None:
    """The ``jagged-compile:`` twin of ``compiled_mode`` when it was run too, else None."""
    twin = modes_mod.boundary_twin(compiled_mode) if compiled_mode else None
    return twin if twin in modes else None


def execute(args, make_cases, *, default_impls=None, default_modes=()) -> int:
    from jaggedperf.impls.registry import implementation_names
    from jaggedperf.lab import budget, runner, sweep
    from jaggedperf.lab.results.atomic import csv_text, write_csv, write_json

    default_impls = default_impls or implementation_names
    out, err = console(), Console(stderr=True)
    try:
        chosen = select(args, default_impls=default_impls, default_modes=default_modes)
        cells = runner.plan(chosen.op, make_cases(), chosen.impls, chosen.modes)
        by_device = {dest for dest, value in vars(args).items() if isinstance(value, ByDevice)}
        options = options_from_args(args)
        timeout_s = timeout_from_args(args, options.device.type)
        run = runner.run
        if timeout_s is not None:
            isolated = functools.partial(sweep.run_isolated, slots=sweep.worker_slots("all", args.device),
                                         settings=sweep.Settings(timeout_s=timeout_s, plugins=chosen.plugins),
                                         on_note=lambda note: err.print(f"[yellow]{escape(note)}[/yellow]",
                                                                        highlight=False))
            # repro's own CPU budget is a compile budget: only compiled cells need a worker that can be killed
            compile_budget = "timeout" in by_device and options.device.type == "cpu"
            run = functools.partial(budget.run_case_by_case, isolated=isolated,
                                    here=runner.run if compile_budget else None, isolate=_compiles)
    except (PluginError, KeyError, ValueError) as exc:
        print_error(err, exc)
        return 2
    csv_path = None if args.csv in (None, "-") else args.csv
    problem = unwritable(args.json, csv_path)
    if problem:
        print_error(err, problem)
        return 2
    if options.device.type == "cpu":
        err.print("[yellow]No CUDA GPU in use: running on the CPU. The seed's table was measured on a GPU; "
                  "CPU numbers show the method, not the GPU finding.[/yellow]")
        if by_device:
            err.print(escape(cpu_defaults_note(options, timeout_s, by_device)), style="yellow", highlight=False)
    elif "timeout" in by_device and timeout_s is not None:
        err.print(escape(gpu_budget_note(timeout_s)), highlight=False)
    done: list = []
    try:
        record = run_with_progress(cells, options, err, save_to=args.json, run=run, done=done)
    except sweep.SweepError as exc:
        print_error(err, str(exc))
        return 1
    except KeyboardInterrupt:
        err.print(interrupted_line(len(done), len(cells), args.json), markup=False, highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    if args.csv == "-":  # tritonbench's --csv: the rows in place of the tables
        out.file.write(csv_text(record.results))
    else:
        _print_tables(out, record, chosen)
    if args.json:
        write_json(args.json, record)  # already written after every cell; again for a run with no result callback
        err.print(f"wrote {args.json}")
    if csv_path:
        write_csv(csv_path, record.results)
        err.print(f"wrote {csv_path}")
    return 0


def _compiles(cell) -> bool:
    return modes_mod.is_compiled(cell.mode)


def cpu_defaults_note(options, timeout_s: float | None, shrunk: set[str]) -> str:
    """What a command whose defaults depend on the device (repro) shrank on the CPU, why, and how to undo it."""
    parts = []
    if {"warmup", "iters", "attempts"} & shrunk:
        parts.append(f"{options.warmup} warm-up and {options.iters} timed calls a cell, measured at most "
                     f"{options.stability.attempts} times (the seed's method, 50 and 200, and 3 attempts: --warmup 50 "
                     "--iters 200 --attempts 3)")
    if "timeout" in shrunk and timeout_s is not None:
        parts.append(f"each compiled cell under a {timeout_s:g} s budget, compile included: a compile that passes it is "
                     f"cut and shown as `cut > {timeout_s:g} s`, and not tried at the next shape (--timeout none waits "
                     "for it)")
    return "On the CPU, so that this finishes in minutes: " + "; ".join(parts) + "."


def gpu_budget_note(timeout_s: float) -> str:
    """What repro's default budget on a GPU means: the seed's method, every cell in a worker under the budget."""
    return (f"The seed's method (50 warm-up and 200 timed calls a cell); each cell in a worker under a {timeout_s:g} s "
            "budget, compile included, sized for the seed's unbind_mean, whose compiles take minutes: a compile that "
            f"passes it is shown as `cut > {timeout_s:g} s`, and not tried at the next shape (--timeout none waits for "
            "it).")


def interrupted_line(finished: int, total: int, json_path: str | None) -> str:
    """The one line a run ends with on Ctrl-C: what was kept, and how to go on."""
    kept = (f"kept in {json_path}" if json_path else "not kept (--json PATH keeps each cell as it finishes)")
    return (f"interrupted: {finished} of {total} cells finished, {kept}; run the same command again to measure "
            "them all, or `jaggedperf sweep --json R.jsonl` with the same flags, which resumes where it stopped")


def _print_tables(out: Console, record: RunRecord, chosen: Selection) -> None:
    from jaggedperf.lab.results import tables

    compiled_mode = _compiled_mode(chosen.modes)
    boundary_mode = _boundary_mode(chosen.modes, compiled_mode)
    if compiled_mode:
        show(out, tables.seed_table(record.results, compiled_mode, boundary_mode=boundary_mode))
    show(out, tables.cells_table(record.results, metrics=chosen.metrics))
    if chosen.baseline:
        show(out, tables.baseline_table(record.results, chosen.baseline))
    for line in tables.problems(record.results):
        out.print(f"• {line}", markup=False, highlight=False, style="red")
    advice = tables.unstable_advice(record.results)
    if advice:
        out.print(advice, markup=False, highlight=False, style="yellow")
    if compiled_mode:
        for line in tables.findings(record.results, compiled_mode, boundary_mode):
            out.print(f"• {line}", markup=False, highlight=False)
    _footer(out, record)


def show(out: Console, table: Table) -> None:
    """Print ``table`` within the console's width (``tables.fit_width``), saying what was shortened or left out."""
    from jaggedperf.lab.results import tables

    fitted = tables.fit_width(table, out.width)
    out.print(fitted.table)
    notes = ([tables.LEGEND] if fitted.shortened else []) + (
        [f"left out at {out.width} columns: {', '.join(fitted.left_out)} (a wider terminal, or --csv, has them)"]
        if fitted.left_out else [])
    for note in notes:
        out.print(note, markup=False, highlight=False, style="dim")


def console() -> Console:
    """stdout; at least 160 columns wide when it is not a terminal, so piped tables keep their columns."""
    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, 160))


def run_with_progress(cells, options, console: Console, save_to: str | None = None, run=None,
                      done: list | None = None) -> RunRecord:
    """``run`` (``runner.run``, ``sweep.run_isolated``, ``budget.run_case_by_case``) with a progress bar on a terminal
    and one line per finished cell everywhere (a log too: a run of minutes is never silent); with ``save_to``, the
    JSON is rewritten (atomically) after every cell; ``done`` (when given) gets each finished cell, for a caller
    interrupted."""
    from jaggedperf.lab import runner
    from jaggedperf.lab.results.atomic import write_json

    run = run or runner.run
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn()]
    start = time.monotonic()
    with Progress(*columns, console=console, transient=True, disable=len(cells) < 2) as progress:
        task = progress.add_task("cells", total=len(cells))
        finished = [0]

        def on_start(cell):
            progress.update(task, description=f"{cell.implementation} · {cell.mode} · {cell.case.label}")

        def on_result(result, record):
            progress.advance(task)
            finished[0] += 1
            progress.console.print(cell_line(result, finished[0], len(cells), time.monotonic() - start),
                                   markup=False, highlight=False, soft_wrap=True)
            if done is not None:
                done.append(result)
            if save_to:
                write_json(save_to, record)

        return run(cells, options, on_start=on_start, on_result=on_result)


def cell_line(result, finished: int, total: int, elapsed_s: float) -> str:
    """``[3/30 0:41] nanmean_padded · eager · B512-M64-L100-s0.1: 22.7 ms, first call 0.0 s``: one finished cell."""
    from jaggedperf.lab.results import tables

    minutes, seconds = divmod(int(elapsed_s), 60)
    what = tables.cell_summary(result)
    return f"[{finished}/{total} {minutes}:{seconds:02d}] {result.implementation} · {result.mode} · " \
           f"{result.case.label}: {what}"


def _footer(console: Console, record: RunRecord) -> None:
    from jaggedperf.lab.results.markdown import load_text

    env = record.environment
    where = env.get("gpu") or f"CPU ({env.get('cpu_count')} cores)"
    copy = f", copy bandwidth {record.copy_gbps:.0f} GB/s" if record.copy_gbps else ""
    console.print(f"{where}, torch {env.get('torch')}, triton {env.get('triton')}, CUDA {env.get('cuda')}{copy}; "
                  f"commit {str(env.get('git_commit'))[:12]}", markup=False, highlight=False)
    load = env.get("load")
    # the threads the cells ran with (each result records its own; a worker's differ from this process's)
    threads = sorted({r.threads for r in getattr(record, "results", ()) if r.threads is not None}) \
        or [env.get("threads", "?")]  # (the doctor's record has no results: its environment's count)
    console.print(f"{'/'.join(map(str, threads))} CPU thread(s) a cell; {load_text(load) if load else 'load not recorded'}",
                  markup=False, highlight=False)


def cmd_list(args: argparse.Namespace) -> int:
    from jaggedperf.cli import _catalogue
    from jaggedperf.lab.plugins import plugin_names

    out, err = console(), Console(stderr=True)
    # the catalogue where it says what the registry would (no torch to import: start-up in a second), else the registry
    builtin = _catalogue.answers_here(plugin_names(getattr(args, "plugin", None) or ()))
    try:
        known = {op.name: op.implementation_names() for op in _catalogue.CATALOGUE} if builtin else None
        chosen = select(args, default_modes=modes_mod.MODES, known=known)
    except (PluginError, KeyError, ValueError) as exc:
        print_error(err, exc)
        return 2
    ops = {op.name: op for op in (_catalogue.CATALOGUE if builtin else _catalogue.from_registry())}
    op = ops[chosen.op]
    table = Table(title=f"{op.name}: {op.description}")
    for col in ("implementation", "from", "takes", "pads", "description"):
        table.add_column(col, no_wrap=col == "implementation")
    listed = {impl.name: impl for impl in op.implementations}
    for name in chosen.impls:
        impl = listed[name]
        table.add_row(impl.name, impl.origin, impl.takes, "yes" if impl.pads else "", impl.description)
    out.print(table)
    for name, reason in op.unavailable:  # optional contenders that cannot run here (e.g. helion)
        out.print(f"not available here: {name}: {reason}", markup=False, highlight=False)
    modes = Table(title="modes")
    modes.add_column("mode", no_wrap=True)
    modes.add_column("what it does")
    for name in chosen.modes:
        modes.add_row(name, modes_mod.DESCRIPTIONS[name])
    out.print(modes)
    others = sorted(set(ops) - {op.name})
    if others:
        out.print(f"other ops (--op): {', '.join(others)}", markup=False, highlight=False)
    if chosen.plugins:
        out.print(f"plugins: {', '.join(chosen.plugins)}", markup=False, highlight=False)
    return 0
