"""sweep: a grid of cells on every GPU of the host, each cell under a timeout, appended to a JSON-lines
file as it finishes; the same command again resumes where a crash or kill stopped."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from jaggedperf.cli._args import (
    EXIT_INTERRUPTED,
    add_case_arguments,
    add_json_argument,
    add_measurement_arguments,
    add_names_arguments,
    add_plugin_argument,
    add_timeout_argument,
    cases_from_args,
    options_from_args,
    print_error,
    unwritable,
)
from jaggedperf.cli._defaults import SWEEP_TIMEOUT_S
from jaggedperf.cli._names import select
from jaggedperf.cli.lab import console
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.plugins import PluginError

if TYPE_CHECKING:
    from jaggedperf.lab import sweep


class ResultsFileError(Exception):
    """Stands for ``jaggedperf.lab.results.store.ResultsFileError`` until ``_imports`` binds it."""


def _imports() -> None:
    """Import what the handler runs and reports with (torch among it) into this module's globals, once: building the
    parsers (``--help``) must not import it (``jaggedperf.cli``); the handler calls this first."""
    global sweep, SKIPPED, ResultsFileError, problems, status_counts, timed_out, unstable_advice
    from jaggedperf.lab import sweep
    from jaggedperf.lab.budget import timed_out
    from jaggedperf.lab.result import SKIPPED
    from jaggedperf.lab.results.store import ResultsFileError
    from jaggedperf.lab.results.tables import problems, unstable_advice
    from jaggedperf.lab.results.views import status_counts

SHOWN_PROBLEMS = 10


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a grid of cells on every GPU, each under a timeout; resumable",
        description="Every implementation × mode × case of a grid, one worker process per GPU (one on the CPU), "
                    "each cell under --timeout. Results are appended to --json as they finish; the same command "
                    "again runs only the cells not yet there (--retry-failed: and those that failed), with the "
                    "settings --json was measured with. One sweep at a time per --json (--out: the same).",
        epilog="Axis values are numbers or inclusive ranges START:STOP[:STEP], several per flag "
               "(e.g. --seqlen 100:1000:100 5000 --sparsity 0.1:0.9:0.1). With --preset, an axis given "
               "explicitly replaces the preset's.")
    add_json_argument(p, "the results (JSON lines), appended to as each cell finishes; required",
                      required=True, hidden=("--out",), metavar="RESULTS.jsonl")
    add_names_arguments(p, impls_default="all", modes_default="eager and the seed's compiled mode")
    p.set_defaults(modes=[modes_mod.EAGER, modes_mod.SEED_COMPILED_MODE])
    p.add_argument("--plan", action="store_true", help="print how many cells would run, and run nothing")
    p.add_argument("--retry-failed", action="store_true",
                   help="run again the cells of this grid whose latest result in --json is an error (raised, timed "
                        "out, worker died); their new results are appended, and read back in place of the old")
    p.add_argument("--accept-settings", action="store_true",
                   help="resume even though --json was measured with other settings (--iters, --warmup, --dynamic, "
                        "--no-flush-l2, --byte-limit, device, ...); without it such a resume is refused")
    add_case_arguments(p)
    g = p.add_argument_group("workers")
    g.add_argument("--gpus", type=_gpus, default="all", metavar="N|all", help="GPUs to use, one worker each (default all)")
    add_timeout_argument(g, default=SWEEP_TIMEOUT_S, default_text=f"{SWEEP_TIMEOUT_S:g}")
    add_plugin_argument(g)
    _add_elsewhere_arguments(g)
    add_measurement_arguments(p)
    p.set_defaults(handler=cmd_sweep)


def _gpus(text: str) -> int | str:
    if text == "all":
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected a positive number or 'all', got {text!r}")


def cmd_sweep(args: argparse.Namespace) -> int:
    _imports()
    out, err = console(), Console(stderr=True)
    if args.json is None:
        print_error(err, "give --json RESULTS.jsonl: the file the results are appended to")
        return 2
    try:
        chosen = select(args)
        plugins, impls = list(chosen.plugins), chosen.impls
        cases = cases_from_args(args)
        options = options_from_args(args)
        slots = sweep.worker_slots(args.gpus, args.device)
    except (PluginError, KeyError, ValueError) as exc:
        print_error(err, exc)
        return 2
    if args.ray is not None or args.torch:
        return _elsewhere(args, cases, impls, options, plugins, out, err)
    return _plan_and_run(args, cases, impls, options, slots, plugins, out, err)


def _plan_and_run(args, cases, impls, options, slots, plugins, out: Console, err: Console, backend=None) -> int:
    log_path = Path(args.json).with_name(Path(args.json).stem + ".workers.log")
    if args.plan:  # reads only: no lock, no check that the file could be written
        return _plan(args, cases, impls, options, slots, out, err)
    problem = unwritable(args.json, log_path)  # before any worker starts: a sweep that cannot save must not run
    if problem:
        print_error(err, problem)
        return 2
    try:
        with sweep.hold_lock(args.json):  # from before planning: a second sweep would plan the same cells
            plan = _plan(args, cases, impls, options, slots, out, err)
            if not isinstance(plan, sweep.SweepPlan):
                return plan
            return _run(args, plan, slots, options, plugins, log_path, out, err, backend)
    except sweep.SweepLocked as exc:
        print_error(err, exc)
        return 2


def _plan(args, cases, impls, options, slots, out: Console, err: Console) -> sweep.SweepPlan | int:
    """The plan, with its line printed; with --plan, the exit code instead (0, or 2 for a bad request)."""
    try:
        plan = sweep.plan_sweep(args.json, args.op, cases, impls, args.modes, byte_limit=options.byte_limit,
                                device=slots[0].device, settings=options.settings(device=slots[0].device),
                                accept_settings=args.accept_settings, retry_failed=args.retry_failed)
    except (KeyError, ValueError, ResultsFileError) as exc:  # SettingsChanged is a ValueError
        print_error(err, exc)
        return 2
    for warning in plan.warnings:
        err.print(f"jaggedperf: warning: {warning}", markup=False, highlight=False)
    if plan.settings_changes:
        err.print(f"jaggedperf: warning: {plan.out} was measured with other settings (accepted): "
                  f"{'; '.join(plan.settings_changes)}", markup=False, highlight=False)
    out.print(_plan_line(plan, len(cases), slots), markup=False, highlight=False)
    return 0 if args.plan else plan


def _run(args, plan, slots, options, plugins, log_path: Path, out: Console, err: Console, backend=None) -> int:
    if slots[0].device == "cpu" and backend is None:
        err.print("[yellow]No CUDA GPU in use: the sweep runs on the CPU, one worker.[/yellow]")
    timeout_s = math.inf if args.timeout is None else args.timeout  # --timeout none: no limit
    settings = sweep.Settings(timeout_s=timeout_s, plugins=tuple(plugins), log_path=str(log_path))
    try:
        outcome = run_with_progress(plan, slots, options, settings, err, backend)
    except KeyboardInterrupt:
        err.print(f"interrupted: the finished cells are in {escape(args.json)}; run the same command to resume")
        return EXIT_INTERRUPTED
    except sweep.SweepError as exc:
        print_error(err, f"{exc} (the workers' output is in {log_path}); the finished cells are in {args.json}: "
                         "run the same command to resume")
        return 1
    except (ResultsFileError, OSError) as exc:  # the results file changed under the sweep, or a full disk
        print_error(err, f"cannot append to {args.json}: {exc}")
        return 2
    _summary(out, plan, outcome, log_path)
    return 0


def _plan_line(plan: sweep.SweepPlan, n_cases: int, slots: list[sweep.WorkerSlot]) -> str:
    parts = [f"{len(plan.cells)} cells ({n_cases} cases)"]
    if plan.done:
        parts.append(f"{plan.done} already in {plan.out}")
    if plan.retried:
        parts.append(f"{len(plan.retried)} failed there, to retry")
    if plan.too_large:
        parts.append(f"{len(plan.too_large)} skipped before dispatch (values over the byte limit)")
    parts.append(f"{plan.to_run} to run on {len(slots)} worker{'s' if len(slots) > 1 else ''} "
                 f"({', '.join(s.name for s in slots)})")
    return "plan: " + "; ".join(parts)


def run_with_progress(plan, slots, options, settings, console: Console, backend=None) -> sweep.SweepOutcome:
    """``sweep.run_sweep`` with a bar (completed / total, ETA) and one line per worker: its cell in flight."""
    overall = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TimeRemainingColumn(), console=console)
    task = overall.add_task("cells", total=plan.to_run)
    workers = Progress(TextColumn("  {task.description}"), TimeElapsedColumn(), console=console)
    rows = {s.name: workers.add_task(f"{s.name}: starting", total=None) for s in slots}

    def on_start(worker, cell):
        what = f"{cell.implementation} · {cell.mode} · {cell.case.label}" if cell is not None else "waiting"
        workers.reset(rows[worker], description=f"{worker}: {what}")

    def on_result(_worker, _result):
        overall.advance(task)

    def on_note(message: str):
        console.print(f"[yellow]{escape(message)}[/yellow]", highlight=False)

    with Live(Group(overall, workers), console=console, transient=True, refresh_per_second=4):
        return sweep.run_sweep(plan, slots, options, settings, on_start=on_start, on_result=on_result, on_note=on_note,
                               backend=backend)


def _summary(out: Console, plan: sweep.SweepPlan, outcome: sweep.SweepOutcome, log_path: Path) -> None:
    results = outcome.results
    if results:
        counts = status_counts(results)
        cut = sum(1 for r in results if timed_out(r))  # errors that passed --timeout ("timed out": docs/columns.md)
        out.print(f"sweep: {len(results)} cells written ({', '.join(f'{n} {s}' for s, n in counts.items())}"
                  + (f"; {cut} of the errors timed out)" if cut else ")")
                  + (f", {len(plan.too_large)} of them skipped before dispatch" if plan.too_large else ""),
                  markup=False, highlight=False)
    else:
        out.print(f"nothing to run: every cell of this grid is in {plan.out}", markup=False, highlight=False)
    lines = problems([r for r in results if r.status != SKIPPED])
    for line in lines[:SHOWN_PROBLEMS]:
        out.print(f"• {line}", markup=False, highlight=False, style="red")
    if len(lines) > SHOWN_PROBLEMS:
        out.print(f"• ... and {len(lines) - SHOWN_PROBLEMS} more", markup=False, highlight=False, style="red")
    advice = unstable_advice(results)
    if advice:
        out.print(advice, markup=False, highlight=False, style="yellow")
    out.print(f"results: {plan.out} ({plan.done + len(results)} of {len(plan.cells)} cells of this grid)",
              markup=False, highlight=False)
    if log_path.exists() and log_path.stat().st_size:
        out.print(f"worker output: {log_path}", markup=False, highlight=False)
    report = plan.out.with_name(plan.out.stem + "-report.md")
    out.print(f"plot:   jaggedperf plot {plan.out}\nreport: jaggedperf report {plan.out} -o {report}",
              markup=False, highlight=False)


# --- elsewhere: a Ray cluster (--ray), other torch versions (--torch) -------------------------------


def _add_elsewhere_arguments(g) -> None:
    g.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run the workers as Ray actors, one per GPU of the cluster (one per node on CPU-only "
                        "clusters); ADDRESS joins that cluster (default: $RAY_ADDRESS, else a local one). Needs "
                        "pip install 'jaggedperf[ray]'")
    g.add_argument("--ray-workers", type=int, default=None, metavar="N",
                   help="with --ray: this many workers (default: every GPU, or one per CPU node)")
    g.add_argument("--torch", default=None, metavar="VERSIONS",
                   help="run the same sweep under each torch version, e.g. 2.11,2.13.0, each in its own cached "
                        "environment (uv or venv + pip); results to OUT.torch-VERSION.jsonl, side by side in "
                        "OUT.torch-versions.md")


def _elsewhere(args, cases, impls, options, plugins, out: Console, err: Console) -> int:
    """--ray: the ordinary sweep with the Ray back end; --torch: the sweep once per torch version."""
    if args.ray is not None and args.torch:
        print_error(err, "--ray and --torch: one at a time")
        return 2
    if args.torch:
        return _torch_versions(args, cases, impls, options, plugins, out, err)
    from jaggedperf.lab.sweep import ray_backend

    try:
        with ray_backend.connect(args.ray or None) as cluster:
            slots = ray_backend.ray_slots(cluster, args.device, args.ray_workers)
            err.print(f"Ray cluster {cluster.address}: {cluster.nodes} node(s), {cluster.gpus} GPU(s); "
                      f"{len(slots)} worker(s)", markup=False, highlight=False)
            cpus = cluster.cpus_per_node if args.ray_workers is None else 1.0
            return _plan_and_run(args, cases, impls, options, slots, plugins, out, err,
                                 ray_backend.RayActors(cpus_per_worker=cpus))
    except (ray_backend.RayUnavailable, ConnectionError, ValueError) as exc:
        print_error(err, exc)
        return 2


def _torch_versions(args, cases, impls, options, plugins, out: Console, err: Console) -> int:
    from jaggedperf.lab.results.variants import write_versions_report
    from jaggedperf.lab.sweep import envs

    try:
        versions = envs.parse_versions(args.torch)
    except ValueError as exc:
        print_error(err, exc)
        return 2
    if args.plan:  # the plan of each version's file, read here (planning needs no other torch); nothing runs
        slots = sweep.worker_slots(args.gpus, args.device)
        for version in versions:
            one = argparse.Namespace(**{**vars(args), "json": str(envs.version_out(Path(args.json), version))})
            code = _plan(one, cases, impls, options, slots, out, err)
            if code:
                return code
        return 0
    root = Path(__file__).resolve().parents[3]
    files, code = [], 0
    for version in versions:
        target = envs.version_out(Path(args.json), version)
        try:
            err.print(f"torch {version}: preparing its environment", markup=False, highlight=False)
            env = envs.ensure_env(version, root=root)
        except (envs.EnvError, sweep.SweepLocked, OSError) as exc:
            print_error(err, f"torch {version}: {exc}")
            code = max(code, 1)
            continue
        job = envs.SweepJob(target, args.op, cases, impls, args.modes, options,
                            sweep.Settings(timeout_s=math.inf if args.timeout is None else args.timeout,
                                           plugins=tuple(plugins),
                                           log_path=str(target.with_name(target.stem + ".workers.log"))),
                            args.gpus, args.device, args.retry_failed, args.accept_settings)
        err.print(f"torch {env.torch}: sweeping into {target} ({env.path})", markup=False, highlight=False)
        outcome = envs.run_job(env, job, log=target.with_name(target.stem + ".env.log"))
        if outcome.error:
            print_error(err, f"torch {env.torch}: {outcome.error}")
            code = max(code, outcome.returncode or 1)
        out.print(f"torch {env.torch}: {outcome.written} cells written to {target}", markup=False, highlight=False)
        if target.exists():
            files.append(target)
    if files:
        report = Path(args.json).with_name(Path(args.json).stem + ".torch-versions.md")
        write_versions_report(files, report)
        out.print(f"side by side: {report}", markup=False, highlight=False)
    return code
