"""Argument groups shared by the subcommands that take cases (run, doctor, sweep)."""

from __future__ import annotations

import argparse
import itertools
import re

import torch

from jaggedperf.inputs import DEFAULT_SEED, DISTRIBUTIONS, Case, canonical_dtype
from jaggedperf.lab import stats
from jaggedperf.lab.grid import SEED_CASES  # noqa: F401  (the seed's shapes, for repro)
from jaggedperf.lab.results.atomic import check_writable
from jaggedperf.lab.runner import DEFAULT_BYTE_LIMIT, Options

SEED_IMPLEMENTATIONS = ("unbind_mean", "nanmean_padded", "sum_padded")

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


def add_case_arguments(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    g = p.add_argument_group("cases (lists give every combination)")
    g.add_argument("--B", type=int, nargs="+", required=required, help="batch sizes")
    g.add_argument("--M", type=int, nargs="+", required=required, help="feature widths")
    g.add_argument("--seqlen", type=int, nargs="+", required=required, help="maximum (nominal) sequence lengths")
    g.add_argument("--sparsity", type=float, nargs="+", required=required, help="sparsities in [0, 1]")
    g.add_argument("--distribution", nargs="+", default=["tritonbench"], choices=DISTRIBUTIONS)
    g.add_argument("--dtype", nargs="+", default=["float32"], type=canonical_dtype_arg,
                   help="float32 | bfloat16 | float16 (fp32/bf16/fp16 accepted)")
    g.add_argument("--seed", type=int, default=DEFAULT_SEED)


def canonical_dtype_arg(text: str) -> str:
    try:
        return canonical_dtype(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cases_from_args(args: argparse.Namespace) -> list[Case]:
    grid = itertools.product(args.B, args.M, args.seqlen, args.sparsity, args.distribution, args.dtype)
    return [Case(B, M, L, s, dist, dtype, args.seed) for B, M, L, s, dist, dtype in grid]


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def seconds_or_none(text: str) -> float | None:
    """``none`` (no limit) or a positive number of seconds."""
    return None if text.strip().lower() == "none" else positive_seconds(text)


class _DeviceDefault:
    """Unset --timeout on a command whose default depends on the device (repro's, on a GPU). Not a string:
    argparse would pass a string default through the option's type."""

    def __repr__(self) -> str:
        return "device-default"


DEVICE_DEFAULT = _DeviceDefault()


def add_run_arguments(p: argparse.ArgumentParser, *, gpu_timeout_s: float | None = None) -> None:
    """The measurement, isolation and output arguments of repro and run.

    Args:
        gpu_timeout_s: the default cell timeout when the cells run on a GPU (None: no timeout anywhere).
    """
    add_measurement_arguments(p)
    default = (f"{gpu_timeout_s:g} s on a GPU, where a cell runs in a worker process; on the CPU no timeout, "
               "every cell in this process" if gpu_timeout_s is not None
               else "no timeout, every cell in this process")
    p.add_argument_group("isolation").add_argument(
        "--timeout", type=seconds_or_none, metavar="S|none",
        default=DEVICE_DEFAULT if gpu_timeout_s is not None else None,
        help="run the cells in worker processes (one per GPU, or one on the CPU), as sweep does, and give a "
             "cell S seconds, compile included: past them its worker is killed, the cell recorded as timed out "
             f"and the run goes on; none: no timeout (default: {default})")
    p.set_defaults(gpu_timeout_s=gpu_timeout_s)
    g = p.add_argument_group("output")
    g.add_argument("--json", metavar="PATH", help="write every raw number and the environment as JSON")
    g.add_argument("--csv", metavar="PATH", help="write one row per cell as CSV")


def timeout_from_args(args: argparse.Namespace, device_type: str) -> float | None:
    """The cell timeout in seconds that ``--timeout`` asked for on ``device_type``, or None for no timeout."""
    if args.timeout is DEVICE_DEFAULT:
        return args.gpu_timeout_s if device_type == "cuda" else None
    return args.timeout


def add_measurement_arguments(p: argparse.ArgumentParser) -> None:
    """How each cell is measured (read back by ``options_from_args``)."""
    g = p.add_argument_group("measurement")
    g.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when a GPU is present, else cpu")
    g.add_argument("--warmup", type=non_negative_int, default=50, help="warm-up calls before timing (seed: 50)")
    g.add_argument("--iters", type=positive_int, default=200, help="timed calls (seed: 200)")
    g.add_argument("--byte-limit", type=byte_size, default=DEFAULT_BYTE_LIMIT,
                   help="skip a cell whose largest tensor passes this (default 8GB)")
    g.add_argument("--no-flush-l2", action="store_true", help="do not flush L2 between device-timed calls")
    g.add_argument("--no-device-time", action="store_true", help="wall time only (no graph replay, no profiler)")
    g.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True)")
    add_stability_arguments(g)


def positive_fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a positive fraction (e.g. 0.1 for 10%), got {text!r}")
    return value


def add_stability_arguments(g) -> None:
    """CPU threads and when a cell is measured again, then marked unstable (read by ``apply_stability_arguments``)."""
    g.add_argument("--threads", type=positive_int, default=1, metavar="N",
                   help="torch's CPU threads for CPU cells, recorded in every result (default 1)")
    policy = stats.Policy()
    g.add_argument("--max-iqr", type=positive_fraction, default=policy.max_iqr_rel, metavar="F",
                   help=f"a cell whose wall IQR passes F of its median is measured again (default {policy.max_iqr_rel:g})")
    g.add_argument("--max-drift", type=positive_fraction, default=policy.max_drift_rel, metavar="F",
                   help="... or whose first and last thirds' medians differ by more than F of the median "
                        f"(default {policy.max_drift_rel:g})")
    g.add_argument("--attempts", type=positive_int, default=policy.attempts, metavar="N",
                   help=f"measurements of a cell at most before it is marked unstable (default {policy.attempts})")


def apply_stability_arguments(args: argparse.Namespace, opts: Options) -> Options:
    """``opts`` with the threads and stability policy of ``add_stability_arguments``' flags."""
    opts.threads = args.threads
    opts.stability = stats.Policy(args.max_iqr, args.max_drift, args.attempts)
    return opts


def print_error(err, problem) -> None:
    """``jaggedperf: error: …`` on the stderr console ``err``: an exception's first argument (a KeyError's
    without the quotes str() adds), or a text as it is."""
    text = problem.args[0] if isinstance(problem, BaseException) and problem.args else problem
    err.print(f"jaggedperf: error: {text}", markup=False, highlight=False, soft_wrap=True)  # one line, for logs and grep


def unwritable(*paths) -> str | None:
    """Why one of the output ``paths`` (None: not asked for) cannot be written, or None; checked before a
    command measures anything, so that its results are not lost at the end (``atomic.check_writable``)."""
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
    device = torch.device(args.device) if args.device else None
    if device is not None and device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("jaggedperf: error: --device cuda, but no CUDA GPU is available")
    return device


def options_from_args(args: argparse.Namespace) -> Options:
    device = device_from_args(args)
    opts = Options(warmup=args.warmup, iters=args.iters, byte_limit=args.byte_limit,
                   flush_l2=not args.no_flush_l2, device_time=not args.no_device_time,
                   dynamic=True if args.dynamic else None)
    if device is not None:
        opts.device = device
    return apply_stability_arguments(args, opts)
