"""The Python API, for notebooks and scripts: ``bench`` cells, ``measure`` any callable, ``load`` any results
file, and get ``Results`` back (rows, raw samples, ``to_pandas``, ``save``, ``compare``).

    import jaggedperf
    from jaggedperf import Case

    res = jaggedperf.bench(["sum_padded", "segment_reduce"], [Case(64, 32, 200, 0.5)], modes=["eager"])
    res.to_pandas()[["implementation", "mode", "wall_us", "wall_p20_us", "wall_p80_us", "status"]]

Everything is measured the lab's way (``runner``): checked against the op's float64 reference, then timed
with every per-call sample kept, measured again until stable, and marked ``unstable`` when it never is.
A callable given to ``bench`` takes what a registered implementation of the op takes (``takes="dense"``:
``(values, offsets, *op params)``; ``takes="njt"``: the NestedTensor) and is registered only for the call,
so no plugin is needed. ``measure`` times ``fn(*args)`` with no reference to check against.

Rows are one per cell; every per-call time is in µs; ``COLUMNS`` says what each column is. pandas is an
optional extra (``pip install 'jaggedperf[pandas]'``): ``rows()`` and ``sample_rows()`` need nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import torch

from jaggedperf.inputs import Case

CALLABLE_OP = "callable"  # the op name of a ``measure`` result: no registered op, no reference
UNUSED_CASE = Case(0, 1, 0, 0.0)  # the case of a ``measure`` result when none is given

# Every column of ``Results.rows`` / ``to_pandas``, in order, with what it holds.
COLUMNS: dict[str, str] = {
    "op": "the op (callable for measure())",
    "implementation": "the implementation's name",
    "mode": "eager, compile:<torch mode>, jagged-compile:<torch mode> or graph",
    "case": "the case's label, e.g. B512-M64-L100-s0.1",
    "B": "sequences in the batch",
    "M": "features per row",
    "seqlen": "maximum (nominal) sequence length",
    "sparsity": "fraction of the nominal length left out",
    "distribution": "how lengths are drawn",
    "dtype": "values dtype",
    "seed": "the lengths' and values' seed",
    "device": "cpu or cuda",
    "status": "ok, unstable (timed, never settled: no finding), wrong, skipped or error",
    "reason": "why the status is not ok",
    "threads": "torch's intra-op CPU threads while the cell ran",
    "n": "timed calls in the kept attempt",
    "wall_us": "wall per call, median (µs)",
    "wall_p20_us": "wall per call, 20th percentile (µs)",
    "wall_p80_us": "wall per call, 80th percentile (µs)",
    "wall_iqr_us": "wall per call, interquartile range p75 − p25 (µs)",
    "wall_min_us": "fastest timed call (µs)",
    "wall_max_us": "slowest timed call (µs)",
    "iqr_rel": "wall IQR / wall median of the kept attempt",
    "drift_rel": "(last third's median − first third's) / median of the kept attempt",
    "attempts": "wall measurements taken (1 + re-measurements)",
    "other_cpus": "CPUs other processes kept busy while the cell was timed",
    "device_us": "device time per call, median (µs); empty where not measured",
    "device_p20_us": "device time per call, 20th percentile (µs)",
    "device_p80_us": "device time per call, 80th percentile (µs)",
    "device_method": "graph (CUDA-graph replay) or profiler (sum of kernel times)",
    "host_us": "wall median − device median (µs)",
    "host_call_us": "host timer: median time until the call returns, no sync (µs; the doctor's)",
    "speedup_vs_eager": "eager wall median / this wall median, both ok (empty when a side is unstable)",
    "kernels_per_call": "device kernels launched per call",
    "gbps": "bytes the op must move / device median (GB/s)",
    "pct_of_copy": "gbps / the run's copy bandwidth (%)",
    "compile_s": "first call, compile included (s)",
    "rel_error": "‖out − ref‖ / ‖ref‖ against the float64 reference",
}
SAMPLE_COLUMNS: dict[str, str] = {
    "op": "as in COLUMNS", "implementation": "as in COLUMNS", "mode": "as in COLUMNS", "case": "as in COLUMNS",
    "kind": "wall or device", "i": "the call's index in measurement order", "us": "that call's time (µs)",
}


@dataclass
class Results:
    """Cells and the environment they ran in (a ``RunRecord``), with table views for notebooks."""

    record: Any  # jaggedperf.lab.result.RunRecord
    warnings: list[str] = field(default_factory=list)  # met while loading

    @property
    def results(self) -> list:
        """The cells' ``Result`` records."""
        return self.record.results

    @property
    def environment(self) -> dict:
        return self.record.environment

    def __len__(self) -> int:
        return len(self.record.results)

    def __iter__(self) -> Iterator:
        return iter(self.record.results)

    def __getitem__(self, i: int):
        return self.record.results[i]

    @property
    def unstable(self) -> list:
        """The cells whose timing never settled."""
        from jaggedperf.lab.result import UNSTABLE

        return [r for r in self.record.results if r.status == UNSTABLE]

    def rows(self) -> list[dict[str, Any]]:
        """One dict per cell with the keys of ``COLUMNS`` (per-call times in µs; None where not measured)."""
        return [_row(r) for r in self.record.results]

    def sample_rows(self) -> list[dict[str, Any]]:
        """One dict per timed call (keys of ``SAMPLE_COLUMNS``): every raw wall and device sample, in µs."""
        out = []
        for r in self.record.results:
            where = {"op": r.op, "implementation": r.implementation, "mode": r.mode, "case": r.case.label}
            walls = r.wall.samples_ms() if r.wall is not None else None
            devices = r.device_time.samples_us() if r.device_time is not None else None
            for kind, values, scale in (("wall", walls, 1e3), ("device", devices, 1.0)):
                if values is not None:
                    out += [{**where, "kind": kind, "i": i, "us": float(v) * scale} for i, v in enumerate(values)]
        return out

    def to_pandas(self):
        """``rows()`` as a pandas DataFrame, columns in ``COLUMNS`` order.

        Raises:
            ImportError: pandas is not installed (``pip install 'jaggedperf[pandas]'``).
        """
        return _pandas().DataFrame(self.rows(), columns=list(COLUMNS))

    def samples_to_pandas(self):
        """``sample_rows()`` as a long pandas DataFrame (one row per timed call).

        Raises:
            ImportError: pandas is not installed.
        """
        return _pandas().DataFrame(self.sample_rows(), columns=list(SAMPLE_COLUMNS))

    def save(self, path: str | os.PathLike) -> Path:
        """Write the results as a JSON document (``.jsonl``: JSON lines, a header then a line per cell), which
        ``load`` and every ``jaggedperf`` command read.

        Raises:
            OSError: the file cannot be written.
        """
        from jaggedperf.lab.results.atomic import write_json, write_text_atomic

        path = Path(path)
        if path.suffix == ".jsonl":
            lines = [json.dumps({"environment": self.environment, "copy_gbps": self.record.copy_gbps})]
            lines += [json.dumps(r.to_dict()) for r in self.results]
            write_text_atomic(path, "\n".join(lines) + "\n")
        else:
            write_json(path, self.record)
        return path

    def compare(self, baseline: "Results"):
        """This run judged against ``baseline`` cell by cell (``lab.results.compare.compare``: bootstrap
        interval of each median ratio from the raw samples, a minimum effect, unstable cells apart)."""
        from jaggedperf.lab.results.compare import compare

        return compare(baseline.record, self.record)


def bench(implementations: str | Callable | Iterable[str | Callable] | Mapping[str, Callable] | None,
          cases: Case | Iterable[Case], modes: str | Iterable[str] = ("eager",), *, op: str = "jagged_mean",
          takes: str = "dense", device: str | torch.device | None = None, threads: int | None = 1,
          warmup: int = 50, iters: int = 200, attempts: int = 3, max_iqr: float | None = None,
          max_drift: float | None = None, device_time: bool = True, dynamic: bool | None = None,
          on_result: Callable[[Any], None] | None = None) -> Results:
    """Check and time implementations × modes × cases of an op, in this process.

    Args:
        implementations: registered names of ``op``'s implementations, callables, a name → callable mapping,
            or None for every registered one. A callable is registered for this call only, under its
            ``__name__`` (or its key), taking what ``takes`` says.
        cases: one case or several.
        modes: mode names (``jaggedperf list``), one or several.
        op: the op.
        takes: what callables take: ``"dense"`` (values, offsets, *params) or ``"njt"`` (a NestedTensor).
        device: ``"cpu"``, ``"cuda"`` or a device (default: CUDA when present).
        threads: torch's intra-op threads for CPU cells (None: leave torch's setting).
        warmup, iters: calls before timing and timed calls per attempt.
        attempts, max_iqr, max_drift: the stability policy (``lab.measure.stats.Policy``; None: its default).
        device_time: measure device time and kernels (CUDA).
        dynamic: ``torch.compile(dynamic=...)``.
        on_result: called with each cell's ``Result`` as it finishes.

    Returns:
        The results, one per cell, with speedups vs eager where both are ok.

    Raises:
        KeyError: an unknown op or implementation name.
        ValueError: an unknown mode, a callable whose name is already registered, or a bad setting.
    """
    from jaggedperf.impls.registry import get_op
    from jaggedperf.lab import runner

    spec = get_op(op)
    named = _implementations(implementations, spec)
    cases = [cases] if isinstance(cases, Case) else list(cases)
    modes = [modes] if isinstance(modes, str) else list(modes)
    options = _options(device, threads, warmup, iters, attempts, max_iqr, max_drift, device_time, dynamic)
    with _registered(op, named, takes):
        cells = runner.plan(op, cases, [name for name, _ in named], modes)
        record = runner.run(cells, options, on_result=(lambda r, _: on_result(r)) if on_result else None)
    record.environment["command"] = _command("bench")
    return Results(record)


def measure(fn: Callable, *args, name: str | None = None, modes: str | Iterable[str] = ("eager",),
            case: Case | None = None, device: str | torch.device | None = None, threads: int | None = 1,
            warmup: int = 50, iters: int = 200, attempts: int = 3, max_iqr: float | None = None,
            max_drift: float | None = None, device_time: bool = True, dynamic: bool | None = None) -> Results:
    """Time any callable, ``fn(*args)``, the lab's way, in each mode; nothing to register, nothing checked.

    Args:
        fn: the callable.
        *args: its arguments (already on ``device``).
        name: the implementation name in the results (default ``fn.__name__``).
        modes: ``eager`` and/or compiled modes (``compile:<torch mode>``).
        case: what the arguments are, for the records (default: a placeholder, B0-M1-L0-s0).
        device, threads, warmup, iters, attempts, max_iqr, max_drift, device_time, dynamic: as for ``bench``.

    Returns:
        One result per mode, op ``callable``; a mode that fails is recorded (status error), never raised.

    Raises:
        ValueError: an unknown mode or a bad setting.
    """
    import time

    from jaggedperf.lab import modes as modes_mod
    from jaggedperf.lab import runner
    from jaggedperf.lab.measure import timing
    from jaggedperf.lab.measure.cell import time_call
    from jaggedperf.lab.measure.env import environment
    from jaggedperf.lab.result import ERROR, SKIPPED, Result, RunRecord

    modes = modes_mod.check_modes([modes] if isinstance(modes, str) else list(modes))
    options = _options(device, threads, warmup, iters, attempts, max_iqr, max_drift, device_time, dynamic)
    runner.set_threads(options)
    name = name or getattr(fn, "__name__", "fn")
    case = case or UNUSED_CASE
    record = RunRecord(environment(), [], timing.measure_copy_bandwidth(options.device))
    record.environment["command"] = _command("measure")
    for mode in modes:
        cell = runner.Cell(CALLABLE_OP, name, mode, case)
        result = Result(CALLABLE_OP, name, mode, case, options.device.type, threads=runner.set_threads(options))
        try:
            call = modes_mod.build(fn, tuple(args), mode, options.device, dynamic=options.dynamic)
            start = time.perf_counter()
            call()
            timing.synchronizer(options.device)()
            result.compile_s = time.perf_counter() - start
            time_call(call, cell, result, options, record.copy_gbps)
        except modes_mod.ModeUnavailable as exc:
            result.status, result.reason = SKIPPED, str(exc)
        except Exception as exc:  # a failing mode is a result, as in the lab
            result.status, result.reason = ERROR, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        record.results.append(result)
    runner.attach_speedups(record.results)
    return Results(record)


def load(path: str | os.PathLike) -> Results:
    """Any results file: a run's JSON document, a sweep's JSON lines, or a doctor's JSON (its cells' eager,
    compiled, plain-twin, boundary and CUDA-graph results); plain or gzip-compressed (``.json.gz``, ``.jsonl.gz``).

    Args:
        path: the file.

    Returns:
        The results, with the warnings met while reading (an unfinished last line, a repeated cell).

    Raises:
        jaggedperf.lab.results.store.ResultsFileError: the file cannot be read as results.
    """
    from jaggedperf.lab.result import Result, RunRecord
    from jaggedperf.lab.results.store import ResultsFileError, read_results, read_text

    path = Path(path)
    text = read_text(path)  # plain or gzip-compressed; a ResultsFileError names what is wrong
    head = text[:1 << 16]
    if '"cells"' in head and '"evidence"' in head:
        try:
            doc = json.loads(text)
            results = [Result.from_dict(d) for cell in doc["cells"] for d in _doctor_results(cell["evidence"])]
        except (ValueError, KeyError, TypeError) as exc:
            raise ResultsFileError(f"{path}: not a doctor results file ({exc})") from None
        return Results(RunRecord(doc.get("environment", {}), results, doc.get("copy_gbps")))
    record, warnings = read_results(path)
    return Results(record, warnings)


# --- helpers --------------------------------------------------------------------------------------


def _command(verb: str) -> str:
    """What ran, for the environment: the Python program and the API call (not a ``jaggedperf`` command line)."""
    import shlex
    import sys

    program = shlex.join(["python", *sys.argv]) if sys.argv and sys.argv[0] else "python (interactive)"
    return f"{program} → jaggedperf.{verb}()"


def _pandas():
    try:
        import pandas
    except ImportError as exc:
        raise ImportError("to_pandas needs pandas: pip install 'jaggedperf[pandas]' "
                          "(rows() and sample_rows() give the same data without it)") from exc
    return pandas


def _options(device, threads, warmup, iters, attempts, max_iqr, max_drift, device_time, dynamic):
    from jaggedperf.lab import runner
    from jaggedperf.lab.measure import stats

    policy = stats.Policy()
    opts = runner.Options(warmup=warmup, iters=iters, threads=threads, device_time=device_time, dynamic=dynamic,
                          stability=stats.Policy(policy.max_iqr_rel if max_iqr is None else max_iqr,
                                                 policy.max_drift_rel if max_drift is None else max_drift, attempts))
    if device is not None:
        opts.device = torch.device(device)
    if opts.device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda asked for, but no CUDA GPU is available")
    if iters < 1 or warmup < 0:
        raise ValueError(f"iters must be at least 1 and warmup at least 0; got iters={iters}, warmup={warmup}")
    return opts


def _implementations(implementations, spec) -> list[tuple[str, Callable | None]]:
    """(name, callable or None for a registered one) for each implementation asked for."""
    if implementations is None:
        return [(name, None) for name in spec.implementations]
    if isinstance(implementations, Mapping):
        items = list(implementations.items())
    else:
        seq = [implementations] if isinstance(implementations, str) or callable(implementations) else implementations
        items = [(x, None) if isinstance(x, str) else (getattr(x, "__name__", "fn"), x) for x in seq]
    out = []
    for name, fn in items:
        if fn is not None and name in spec.implementations:
            raise ValueError(f"a callable named {name!r} would replace {spec.name}'s registered implementation; "
                             "pass it as {'another_name': fn}")
        out.append((name, fn))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"implementation names repeat: {names}")
    return out


@contextlib.contextmanager
def _registered(op: str, named: Sequence[tuple[str, Callable | None]], takes: str):
    """Register the callables among ``named`` as implementations of ``op`` for the block, then remove them."""
    from jaggedperf.impls.registry import TAKES, Implementation, get_op

    if takes not in TAKES:
        raise ValueError(f"takes must be one of {TAKES}; got {takes!r}")
    impls = get_op(op).implementations
    added = [name for name, fn in named if fn is not None]
    for name, fn in named:
        if fn is not None:
            impls[name] = Implementation(op, name, fn, takes, "a callable given to jaggedperf.bench")
    try:
        yield
    finally:
        for name in added:
            impls.pop(name, None)


def _row(r) -> dict[str, Any]:
    w, d, st = r.wall, r.device_time, r.stability
    timed = w is not None

    def us(x):
        return None if x is None else x * 1e3

    return {
        "op": r.op, "implementation": r.implementation, "mode": r.mode, "case": r.case.label,
        "B": r.case.B, "M": r.case.M, "seqlen": r.case.seqlen, "sparsity": r.case.sparsity,
        "distribution": r.case.distribution, "dtype": r.case.dtype, "seed": r.case.seed,
        "device": r.device, "status": r.status, "reason": r.reason, "threads": r.threads,
        "n": w.n if timed else None,
        "wall_us": us(w.median_ms) if timed else None,
        "wall_p20_us": us(w.p20_ms) if timed else None,
        "wall_p80_us": us(w.p80_ms) if timed else None,
        "wall_iqr_us": us(w.iqr_ms) if timed else None,
        "wall_min_us": us(w.min_ms) if timed else None,
        "wall_max_us": us(w.max_ms) if timed else None,
        "iqr_rel": st.iqr_rel if st else None,
        "drift_rel": st.drift_rel if st else None,
        "attempts": st.attempts if st else None,
        "other_cpus": st.other_cpu if st else None,
        "device_us": d.median_us if d else None,
        "device_p20_us": d.p20_us if d else None,
        "device_p80_us": d.p80_us if d else None,
        "device_method": d.method if d else None,
        "host_us": r.host_us,
        "host_call_us": us(r.host_call.median_ms) if r.host_call is not None else None,
        "speedup_vs_eager": r.speedup_vs_eager,
        "kernels_per_call": r.kernels_per_call,
        "gbps": r.gbps,
        "pct_of_copy": r.pct_of_copy,
        "compile_s": r.compile_s,
        "rel_error": r.rel_error,
    }


def _doctor_results(evidence: dict) -> list[dict]:
    """The results a doctor's evidence holds: eager, compiled, the plain twin, the boundary, CUDA graphs."""
    out = [evidence["eager"], evidence["compiled"]]
    out.append((evidence.get("input_form") or {}).get("plain"))
    out.append((evidence.get("boundary") or {}).get("result"))
    graphs = evidence.get("cudagraphs") or {}
    out += [graphs.get("eager_graph"), graphs.get("counterpart")]
    return [d for d in out if d]
