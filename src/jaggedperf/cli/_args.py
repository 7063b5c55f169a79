"""The flags every subcommand shares, defined once so that the same thing has the same flag everywhere.

The grammar (``tests/test_cli_grammar.py`` walks every parser and holds it):
- one dest, one spelling, one type and one help stem in every command; a command states its own default
  in the help's "(default …)" tail; old spellings stay accepted as hidden aliases (``--out``, ``--trace``);
- every list takes values separated by commas or spaces (``--impls a,b``, ``--B 64 128``), and every case
  axis takes ranges ``START:STOP[:STEP]`` (``lab/grid.py`` parses them);
- outputs: ``--json PATH`` (a results file), ``--csv [PATH]`` (one row per cell; without PATH, to
  stdout), ``-o/--output FILE`` (a document), ``--plots-dir`` / ``--trace-dir DIR`` (folders);
- tritonbench's flags where they mean the same: ``--op``, ``--only`` (= ``--impls``), ``--baseline``,
  ``--metrics``, ``--csv``.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from jaggedperf.cli._defaults import DEFAULT_BYTE_LIMIT, DEFAULT_SEED, DISTRIBUTIONS, METRICS
from jaggedperf.cli._names import choice
from jaggedperf.lab.measure import stats
from jaggedperf.lab.plugins import PLUGINS_ENV

if TYPE_CHECKING:  # imported where used: building the parsers imports no torch (``_defaults``)
    import torch

    from jaggedperf.inputs import Case
    from jaggedperf.lab.runner import Options

SEED_IMPLEMENTATIONS = ("unbind_mean", "nanmean_padded", "sum_padded")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def byte_size(text: str) -> int:
    """'8GB', '512MiB', '1e9' -> bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r} (e.g. 8GB, 512MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def comma_list(text: str) -> list[str]:
    """'a, b,c' -> ['a', 'b', 'c']; an empty list is refused (``--modes ""`` would run nothing, and an empty
    ``--impls`` would silently mean every implementation)."""
    names = [part for part in (p.strip() for p in text.split(",")) if part]
    if not names:
        raise argparse.ArgumentTypeError(f"expected one or more comma-separated names, got {text!r}")
    return names


def positive_int(text: str) -> int:
    """A count that must be at least 1 (``--iters``: no timings, no wall time)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """A count that may be 0 (``--warmup``)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


class ListAction(argparse.Action):
    """A list flag: one or more values (``nargs="+"``), each parsed by ``type`` into a list (so commas split
    it too), flattened. Given twice, the last one counts, as for any other flag."""

    def __init__(self, option_strings, dest, nargs="+", **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, [v for parsed in values for v in parsed])


def _each(parse):
    """An argparse ``type`` for a ``ListAction``: the comma-separated items of one value, each by ``parse``."""

    def parse_arg(text: str) -> list:
        try:
            return [parse(item) for item in comma_list(text)]
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse_arg.__name__ = getattr(parse, "__name__", "value")
    return parse_arg


def axis(parse):
    """An argparse ``type`` for a case axis: numbers and ranges, by ``grid.int_values``/``float_values``."""

    def parse_arg(text: str) -> list:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse_arg.__name__ = "axis value"  # argparse names the type in its messages
    return parse_arg


def _int_values(text: str) -> list:
    from jaggedperf.lab import grid

    return grid.int_values(text)


def _float_values(text: str) -> list:
    from jaggedperf.lab import grid

    return grid.float_values(text)


def _canonical_dtype(text: str) -> str:
    from jaggedperf.inputs import canonical_dtype

    return canonical_dtype(text)


class _Presets:
    """``grid.PRESETS``' names, read when a flag is parsed (a preset added to it is taken), not when the parser is built."""

    def __iter__(self):
        from jaggedperf.lab import grid

        return iter(grid.PRESETS)


# One type object per kind of value: the grammar test compares types by identity.
INT_AXIS, FLOAT_AXIS = axis(_int_values), axis(_float_values)
DTYPES = _each(_canonical_dtype)
DISTRIBUTION_NAMES = _each(choice("distribution", DISTRIBUTIONS))
METRIC_NAMES = _each(choice("metric", METRICS))
PRESET = choice("preset", _Presets())
NAMES = comma_list


def add_list(g, flag: str, *aliases: str, type=NAMES, help: str, default=None, metavar: str | None = None,
             required: bool = False, hidden: tuple[str, ...] = ()) -> None:
    """A list flag (``ListAction``), with ``hidden`` spellings that are accepted and not shown."""
    g.add_argument(flag, *aliases, action=ListAction, type=type, default=default, help=help, metavar=metavar,
                   required=required)
    if hidden:
        dest = flag.lstrip("-").replace("-", "_")
        g.add_argument(*hidden, dest=dest, action=ListAction, type=type, default=default, help=argparse.SUPPRESS)


def add_names_arguments(p, *, impls_default: str, modes_default: str | None, op: bool = True) -> None:
    """--op, --impls/--only and --modes (--mode hidden), with this command's defaults in the help;
    ``modes_default`` None: the command takes no modes."""
    if op:
        p.add_argument("--op", default="jagged_mean", metavar="OP", help="the op (default: jagged_mean)")
    add_list(p, "--impls", "--only", metavar="IMPL", help=f"implementations (default: {impls_default})")
    if modes_default is not None:
        add_list(p, "--modes", metavar="MODE", hidden=("--mode",), help=f"modes (default: {modes_default})")


def add_plugin_argument(p) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (in every worker too), e.g. to register implementations; "
                        f"repeatable (also ${PLUGINS_ENV}, comma-separated)")


def add_table_arguments(p) -> None:
    """What run and repro show: tritonbench's --baseline and --metrics."""
    g = p.add_argument_group("tables")
    g.add_argument("--baseline", metavar="IMPL",
                   help="also show each implementation's speedup against IMPL in the same mode and case "
                        "(default: none; the speedup column is always against the same implementation's eager)")
    add_list(g, "--metrics", type=METRIC_NAMES, metavar="METRIC",
             help=f"the measures shown in the table of every cell: {', '.join(METRICS)} "
                  "(default: all but accuracy; the case, implementation, mode and status are always shown)")


def add_case_arguments(p, *, preset: bool = True, preset_default: str | None = None) -> None:
    """The case axes; every combination of their values is a case (``cases_from_args``). An axis not given
    takes the preset's values, or its default."""
    g = p.add_argument_group("cases (every combination; values or ranges START:STOP[:STEP], by commas or spaces)")
    if preset:
        g.add_argument("--preset", type=PRESET,
                       help="seed: the two shapes of pytorch/pytorch#160355; tritonbench: its default jagged "
                            f"sweep; an axis given replaces the preset's (default: {preset_default or 'none'})")
    add_list(g, "--B", type=INT_AXIS, help="batch sizes")
    add_list(g, "--M", type=INT_AXIS, help="feature widths")
    add_list(g, "--seqlen", type=INT_AXIS, help="maximum (nominal) sequence lengths")
    add_list(g, "--sparsity", type=FLOAT_AXIS, help="sparsities in [0, 1]")
    add_dtype_argument(g)
    add_list(g, "--distribution", type=DISTRIBUTION_NAMES,
             help=f"length distributions: {' | '.join(DISTRIBUTIONS)} (default: tritonbench)")
    add_list(g, "--seed", type=INT_AXIS, help=f"generator seeds (default: {DEFAULT_SEED})")


def add_dtype_argument(g) -> None:
    add_list(g, "--dtype", type=DTYPES, help="values dtypes: float32 | bfloat16 | float16 (fp32/bf16/fp16 accepted; "
                                              "default: float32)")


def canonical_dtype_arg(text: str) -> str:
    try:
        return _canonical_dtype(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cases_from_args(args: argparse.Namespace, preset: str | None = None) -> list[Case]:
    """The cases of ``add_case_arguments``' flags: the preset's (``--preset``, else ``preset``) with each axis
    given replacing its values; without a preset, B, M, seqlen and sparsity must be given.

    Raises:
        ValueError: an axis missing, or a value out of range.
    """
    from jaggedperf.lab import grid

    axes = {name: getattr(args, name, None) for name in grid.AXES}
    return grid.expand(getattr(args, "preset", None) or preset, **axes)


def _positive_float(text: str, what: str) -> float:
    """``text`` as a float > 0 (nan refused too), else an argparse error: expected ``what``, got ``text``."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    return _positive_float(text, "a positive number of seconds")


def seconds_or_none(text: str) -> float | None:
    """``none`` (no limit) or a positive number of seconds."""
    return None if text.strip().lower() == "none" else positive_seconds(text)


class ByDevice:
    """A flag's default that depends on where the cells run (repro's: the seed's method on a GPU, a shorter one on the
    CPU, where the seed's 200 calls of 30 cells and minutes-long compiles would take half an hour). Not a string:
    argparse would pass a string default through the option's type. ``resolve_device_defaults`` replaces it."""

    def __init__(self, gpu, cpu):
        self.gpu, self.cpu = gpu, cpu

    def on(self, device_type: str):
        return self.gpu if device_type == "cuda" else self.cpu

    def __repr__(self) -> str:
        return f"{self.gpu!r} on a GPU, {self.cpu!r} on the CPU"


def add_run_arguments(p: argparse.ArgumentParser, *, by_device: dict[str, ByDevice] | None = None) -> None:
    """The measurement, isolation and output arguments of repro and run.

    Args:
        by_device: defaults that depend on the device, by dest (``warmup``, ``iters``, ``timeout``: seconds, or None
            for no timeout); the rest as ``add_timing_arguments``. A timeout runs the cells in worker processes.
    """
    by_device = by_device or {}
    add_measurement_arguments(p, by_device=by_device)
    timeout = by_device.get("timeout")
    default = ("no timeout, every cell in this process" if timeout is None else
               f"{_seconds_text(timeout.gpu)} on a GPU, {_seconds_text(timeout.cpu)} on the CPU, each cell in a worker "
               "process")
    add_timeout_argument(p.add_argument_group("isolation"), default=timeout,
                         more="given, the cells run in worker processes (one per GPU, or one on the CPU), as sweep's do",
                         default_text=default)
    g = p.add_argument_group("output")
    add_json_argument(g, "write every raw number and the environment, rewritten as each cell finishes")
    g.add_argument("--csv", nargs="?", const="-", metavar="PATH",
                   help="results as CSV, one row per cell; without PATH (or -), to stdout in place of the tables")


def _seconds_text(value) -> str:
    return "no timeout" if value is None else f"{value:g} s"


def resolve_device_defaults(args: argparse.Namespace, device_type: str) -> list[str]:
    """Replace every ``ByDevice`` default in ``args`` by its value on ``device_type``; the dests that took a CPU value
    other than the GPU's (what a run on the CPU should say it shrank)."""
    changed = []
    for dest, value in vars(args).items():
        if isinstance(value, ByDevice):
            setattr(args, dest, value.on(device_type))
            if device_type != "cuda" and value.cpu != value.gpu:
                changed.append(dest)
    return changed


def add_timeout_argument(g, *, default, default_text: str, more: str = "") -> None:
    g.add_argument("--timeout", type=seconds_or_none, metavar="S|none", default=default,
                   help="seconds a cell may take, compile included, before its worker is killed and the cell "
                        f"recorded as timed out (the run goes on); none: no limit{'; ' + more if more else ''} "
                        f"(default: {default_text})")


def add_json_argument(g, what: str, *, required: bool = False, hidden: tuple[str, ...] = (),
                      metavar: str = "PATH") -> None:
    """``--json PATH``: the results file a command writes (``what`` it holds), with old ``hidden`` spellings; a
    ``required`` one is shown required in the usage line even with its old spellings (one of them must be given)."""
    if required and hidden:
        g = g.add_mutually_exclusive_group(required=True)
    g.add_argument("--json", metavar=metavar, required=required and not hidden, help=f"JSON output: {what}")
    if hidden:
        g.add_argument(*hidden, dest="json", metavar=metavar, help=argparse.SUPPRESS)


def add_flush_argument(g, *, default: bool, why: str) -> None:
    g.add_argument("--flush-l2", action=argparse.BooleanOptionalAction, default=default,
                   help=f"flush L2 between device-timed calls (default: {'flush' if default else 'no flush'}, {why})")


def timeout_from_args(args: argparse.Namespace, device_type: str) -> float | None:
    """The cell timeout in seconds that ``--timeout`` asked for on ``device_type``, or None for no timeout."""
    return args.timeout.on(device_type) if isinstance(args.timeout, ByDevice) else args.timeout


def add_measurement_arguments(p: argparse.ArgumentParser, *, by_device: dict | None = None) -> None:
    """How each cell is measured (read back by ``options_from_args``); ``by_device`` as ``add_timing_arguments``."""
    g = p.add_argument_group("measurement")
    add_timing_arguments(g, by_device=by_device)
    add_flush_argument(g, default=True, why="the device time of a cold cache, as do_bench")
    g.add_argument("--no-device-time", action="store_true", help="wall time only (no graph replay, no profiler)")
    add_stability_arguments(g, by_device=by_device)


def add_timing_arguments(g, *, by_device: dict | None = None) -> None:
    """Device, warm-up, timed calls and byte limit: what every measuring command (run, repro, doctor, sweep)
    takes alike. ``by_device``: ``ByDevice`` defaults for ``warmup`` and ``iters`` (the seed's, 50 and 200, on a GPU)."""
    by_device = by_device or {}
    g.add_argument("--device", choices=["cuda", "cpu"], help="where the cells run (default: cuda when a GPU is "
                                                               "present, else cpu)")
    warmup, iters = by_device.get("warmup"), by_device.get("iters")
    g.add_argument("--warmup", type=non_negative_int, default=warmup or 50,
                   help="warm-up calls before timing (default: 50, the seed's" +
                        (f", on a GPU; {warmup.cpu} on the CPU)" if warmup else ")"))
    g.add_argument("--iters", type=positive_int, default=iters or 200,
                   help="timed calls (default: 200, the seed's" + (f", on a GPU; {iters.cpu} on the CPU)" if iters else ")"))
    g.add_argument("--byte-limit", type=byte_size, default=DEFAULT_BYTE_LIMIT,
                   help="skip a cell whose largest tensor passes this (default: 8GB)")
    g.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True)")


def positive_fraction(text: str) -> float:
    return _positive_float(text, "a positive fraction (e.g. 0.1 for 10%)")


CPU_LOAD_RULES = ("effect", "share", "ignore")  # how a busy machine counts (--cpu-load; stats.Policy.load_effect)


def add_stability_arguments(g, *, by_device: dict | None = None) -> None:
    """CPU threads and when a cell is measured again, then marked unstable (read by ``apply_stability_arguments``);
    ``by_device``: a ``ByDevice`` default for ``attempts``."""
    attempts = (by_device or {}).get("attempts")
    g.add_argument("--threads", type=positive_int, default=1, metavar="N",
                   help="torch's CPU threads for CPU cells, recorded in every result (default: 1)")
    policy = stats.Policy()
    g.add_argument("--max-iqr", type=positive_fraction, default=policy.max_iqr_rel, metavar="F",
                   help=f"a cell whose wall IQR passes F of its median is measured again (default: {policy.max_iqr_rel:g})")
    g.add_argument("--max-drift", type=positive_fraction, default=policy.max_drift_rel, metavar="F",
                   help="... or whose first and last thirds' medians differ by more than F of the median "
                        f"(default: {policy.max_drift_rel:g})")
    g.add_argument("--attempts", type=positive_int, default=attempts or policy.attempts, metavar="N",
                   help=f"measurements of a cell at most before it is marked unstable (default: {policy.attempts}"
                        + (f", on a GPU; {attempts.cpu} on the CPU)" if attempts else ")"))
    g.add_argument("--cpu-load", choices=CPU_LOAD_RULES, default="effect",
                   help="when other processes keep the CPUs busy while a cell is timed: effect: the cell is measured "
                        "again, then marked unstable, only where a fixed host probe ran more than --max-iqr slower than "
                        "its fastest (the load slowed this core); share: wherever the load passed half the spare CPUs; "
                        "ignore: recorded, never judged (default: effect)")


def apply_stability_arguments(args: argparse.Namespace, opts: Options) -> Options:
    """``opts`` with the threads and stability policy of ``add_stability_arguments``' flags."""
    opts.threads = args.threads
    rule = getattr(args, "cpu_load", "effect")
    opts.stability = stats.Policy(args.max_iqr, args.max_drift, args.attempts,
                                  cpu_slack=None if rule == "ignore" else stats.CPU_SLACK, load_effect=rule == "effect")
    return opts


def print_error(err, problem) -> None:
    """``jaggedperf: error: …`` on the stderr console ``err``: an exception's first argument (a KeyError's
    without the quotes str() adds), or a text as it is."""
    text = problem.args[0] if isinstance(problem, BaseException) and problem.args else problem
    err.print(f"jaggedperf: error: {text}", markup=False, highlight=False, soft_wrap=True)  # one line, for logs and grep


def unwritable(*paths) -> str | None:
    """Why one of the output ``paths`` (None: not asked for) cannot be written, or None; checked before a
    command measures anything, so that its results are not lost at the end (``atomic.check_writable``)."""
    from jaggedperf.lab.results.atomic import check_writable

    for path in paths:
        if path is None:
            continue
        try:
            check_writable(path)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename and str(exc.filename) != str(path) else ""
            return f"cannot write {path}: {where}{exc.strerror or exc}"
    return None


def device_from_args(args: argparse.Namespace) -> torch.device | None:
    """``--device`` as a torch.device (None: the best present); exits when it asks for CUDA and there is none."""
    import torch

    device = torch.device(args.device) if args.device else None
    if device is not None and device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("jaggedperf: error: --device cuda, but no CUDA GPU is available")
    return device


def options_from_args(args: argparse.Namespace) -> Options:
    """The measurement flags as ``Options``, every ``ByDevice`` default resolved for the device the cells run on."""
    from jaggedperf.lab.runner import Options, default_device

    device = device_from_args(args)
    resolve_device_defaults(args, (device or default_device()).type)
    opts = Options(warmup=args.warmup, iters=args.iters, byte_limit=args.byte_limit,
                   flush_l2=args.flush_l2, device_time=not args.no_device_time,
                   dynamic=True if args.dynamic else None)
    if device is not None:
        opts.device = device
    return apply_stability_arguments(args, opts)


def __getattr__(name: str):
    # SEED_CASES (the seed's shapes, for repro and the tests) from its owner, when asked for
    if name == "SEED_CASES":
        from jaggedperf.lab.grid import SEED_CASES

        return SEED_CASES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
