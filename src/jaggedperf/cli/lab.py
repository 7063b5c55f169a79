"""repro | run | list: plan cells, run them with a progress bar, print the tables, write JSON/CSV.

repro and run run their cells in this process, or, with ``--timeout``, through the sweep's engine
(``sweep.run_isolated``): one worker process per GPU (one on the CPU), each cell under the timeout.
Everything before and after the running is shared."""

from __future__ import annotations

import argparse
import functools
import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from jaggedperf.cli._args import (
    SEED_CASES,
    SEED_IMPLEMENTATIONS,
    add_case_arguments,
    add_run_arguments,
    cases_from_args,
    comma_list,
    options_from_args,
    print_error,
    timeout_from_args,
    unwritable,
)
from jaggedperf.impls.registry import get_op, implementation_names
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab import runner, sweep
from jaggedperf.lab.plugins import PluginError, import_plugins, plugin_names
from jaggedperf.lab.result import RunRecord
from jaggedperf.lab.results import tables
from jaggedperf.lab.results.atomic import write_csv, write_json
from jaggedperf.lab.results.markdown import load_text

OP = "jagged_mean"
# repro's modes: the seed's finding (its compiled mode slower than eager) and the remedy in the same torch mode.
REPRO_MODES = (modes_mod.EAGER, modes_mod.SEED_COMPILED_MODE, modes_mod.boundary_twin(modes_mod.SEED_COMPILED_MODE))
# On a GPU, max-autotune compiles unbind_mean's B unrolled means for minutes: repro caps a cell (compile
# included) so that the one command finishes, and records the cell as timed out with its limit.
REPRO_GPU_CELL_TIMEOUT_S = 60.0


def register(sub) -> None:
    p = sub.add_parser("repro", help="reproduce the pytorch/pytorch#160355 table (seed shapes, eager vs compiled) "
                                     "with the remedy beside it",
                       description="The seed's two shapes × its three implementations (plus jaggedperf's op) × "
                                   f"{', '.join(REPRO_MODES)}: the seed's finding and the boundary "
                                   "(jaggedperf.compile) in the same torch mode beside it, on the GPU when present. "
                                   "With --op, another op at the seed's shapes (every implementation by default).")
    p.add_argument("--op", default=OP, help="the op (default jagged_mean)")
    p.add_argument("--impls", type=comma_list,
                   help="implementations (default: for jagged_mean the seed's three + jaggedperf; else all)")
    p.add_argument("--modes", type=comma_list, help=f"modes (default: {','.join(REPRO_MODES)})")
    p.add_argument("--dtype", default="float32", help="values dtype (float32 | bfloat16 | float16)")
    add_run_arguments(p, gpu_timeout_s=REPRO_GPU_CELL_TIMEOUT_S)
    p.set_defaults(handler=cmd_repro)

    p = sub.add_parser("run", help="run any cells: implementations × modes × cases")
    p.add_argument("--op", default=OP, help="the op (default jagged_mean)")
    p.add_argument("--impls", type=comma_list, help="implementations, comma-separated (default: all)")
    p.add_argument("--modes", type=comma_list, default=[modes_mod.EAGER, modes_mod.SEED_COMPILED_MODE],
                   help="modes, comma-separated (default: eager and the seed's compiled mode)")
    add_case_arguments(p, required=True)
    add_run_arguments(p)
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("list", help="implementations and modes")
    p.add_argument("--op", default=OP)
    p.set_defaults(handler=cmd_list)


def default_implementations(op: str) -> list[str]:
    """repro's implementations of ``op``: for the seed's op, its three and ours; for any other op, all.

    Raises:
        KeyError: an unknown op.
    """
    names = implementation_names(op)
    if op != OP:
        return names
    return [n for n in (*SEED_IMPLEMENTATIONS, "jaggedperf", "jaggedperf_njt") if n in names]


def cmd_repro(args: argparse.Namespace) -> int:
    from jaggedperf.inputs import Case

    try:
        impls = args.impls or default_implementations(args.op)
    except KeyError as exc:
        print_error(Console(stderr=True), exc)
        return 2
    modes = args.modes or list(REPRO_MODES)
    cases = [Case(c.B, c.M, c.seqlen, c.sparsity, dtype=args.dtype) for c in SEED_CASES]
    return execute(args, args.op, cases, impls, modes, compiled_mode=_compiled_mode(modes))


def cmd_run(args: argparse.Namespace) -> int:
    impls = args.impls or implementation_names(args.op)
    return execute(args, args.op, cases_from_args(args), impls, args.modes, compiled_mode=_compiled_mode(args.modes))


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


def execute(args, op, cases, impls, modes, *, compiled_mode) -> int:
    out, err = console(), Console(stderr=True)
    try:
        plugins = plugin_names()  # $JAGGEDPERF_PLUGINS, as sweep
        import_plugins(plugins)
        cells = runner.plan(op, cases, impls, modes)
        options = options_from_args(args)
        timeout_s = timeout_from_args(args, options.device.type)
        run = runner.run
        if timeout_s is not None:
            run = functools.partial(sweep.run_isolated, slots=sweep.worker_slots("all", args.device),
                                    settings=sweep.Settings(timeout_s=timeout_s, plugins=tuple(plugins)),
                                    on_note=lambda note: err.print(f"[yellow]{escape(note)}[/yellow]", highlight=False))
    except (PluginError, KeyError, ValueError) as exc:
        print_error(err, exc)
        return 2
    problem = unwritable(args.json, args.csv)
    if problem:
        print_error(err, problem)
        return 2
    if options.device.type == "cpu":
        err.print("[yellow]No CUDA GPU in use: running on the CPU. The seed's table was measured on a GPU; "
                  "CPU numbers show the method, not the GPU finding.[/yellow]")
    try:
        record = run_with_progress(cells, options, err, save_to=args.json, run=run)
    except sweep.SweepError as exc:
        print_error(err, str(exc))
        return 1
    boundary_mode = _boundary_mode(modes, compiled_mode)
    if compiled_mode:
        out.print(tables.seed_table(record.results, compiled_mode, boundary_mode=boundary_mode))
    out.print(tables.cells_table(record.results))
    for line in tables.problems(record.results):
        out.print(f"• {line}", markup=False, highlight=False, style="red")
    if compiled_mode:
        for line in tables.findings(record.results, compiled_mode, boundary_mode):
            out.print(f"• {line}", markup=False, highlight=False)
    _footer(out, record)
    if args.json:
        write_json(args.json, record)  # already written after every cell; again for a run with no result callback
        err.print(f"wrote {args.json}")
    if args.csv:
        write_csv(args.csv, record.results)
        err.print(f"wrote {args.csv}")
    return 0


def console() -> Console:
    """stdout; at least 160 columns wide when it is not a terminal, so piped tables keep their columns."""
    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, 160))


def run_with_progress(cells, options, console: Console, save_to: str | None = None, run=runner.run) -> RunRecord:
    """``run`` (``runner.run`` or ``sweep.run_isolated``) with a progress bar; with ``save_to``, the JSON is rewritten
    (atomically) after every cell."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=True, disable=len(cells) < 2) as progress:
        task = progress.add_task("cells", total=len(cells))

        def on_start(cell):
            progress.update(task, description=f"{cell.implementation} · {cell.mode} · {cell.case.label}")

        def on_result(_, record):
            progress.advance(task)
            if save_to:
                write_json(save_to, record)

        return run(cells, options, on_start=on_start, on_result=on_result)


def _footer(console: Console, record: RunRecord) -> None:
    env = record.environment
    where = env.get("gpu") or f"CPU ({env.get('cpu_count')} cores)"
    copy = f", copy bandwidth {record.copy_gbps:.0f} GB/s" if record.copy_gbps else ""
    console.print(f"{where}, torch {env.get('torch')}, triton {env.get('triton')}, CUDA {env.get('cuda')}{copy}; "
                  f"commit {str(env.get('git_commit'))[:12]}", markup=False, highlight=False)
    load = env.get("load")
    console.print(f"{env.get('threads', '?')} CPU thread(s); {load_text(load) if load else 'load not recorded'}",
                  markup=False, highlight=False)


def cmd_list(args: argparse.Namespace) -> int:
    out = console()
    try:
        op = get_op(args.op)
    except KeyError as exc:
        print(f"jaggedperf: error: {exc.args[0]}", file=sys.stderr)
        return 2
    table = Table(title=f"{op.name}: {op.description}")
    for col in ("implementation", "takes", "pads", "description"):
        table.add_column(col)
    for impl in op.implementations.values():
        table.add_row(impl.name, impl.takes, "yes" if impl.pads else "", impl.description)
    out.print(table)
    modes = Table(title="modes")
    modes.add_column("mode")
    modes.add_column("what it does")
    for name in modes_mod.MODES:
        modes.add_row(name, modes_mod.DESCRIPTIONS[name])
    out.print(modes)
    return 0
