"""Plan -> cells -> results. A cell is implementation × mode × case; each is checked against the
float64 reference, then timed (``measure.cell``: ``Cell``, ``Options`` and the timing itself live there and are
this module's names too). One cell's failure (exception, out of memory, failed compile) is recorded in its result
and never stops the rest."""

from __future__ import annotations

import contextlib
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from jaggedperf.impls.registry import Batch, Implementation, get_implementation, get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.measure import timing
from jaggedperf.lab.measure.cell import DEFAULT_BYTE_LIMIT, Cell, Options, default_device, time_call  # noqa: F401
from jaggedperf.lab.measure.correctness import check_output
from jaggedperf.lab.measure.env import environment
from jaggedperf.lab.fingerprint import input_fingerprints
from jaggedperf.lab.input_size import input_status, input_too_large
from jaggedperf.lab.result import ERROR, OK, SKIPPED, TIMED, WRONG, Result, RunRecord
from jaggedperf.checks import check_offsets


def plan(op: str, cases: Iterable[Case], implementations: Iterable[str], modes: Iterable[str]) -> list[Cell]:
    """Every implementation × mode × case, grouped by case (each case's batch is made once).

    Args:
        op: a registered op.
        cases: the cases, in order.
        implementations: names of ``op``'s implementations.
        modes: mode names (``modes.MODES``).

    Returns:
        The cells, case by case; within a case, implementation by implementation, then mode.

    Raises:
        KeyError: an unknown op or implementation (the message lists the valid ones).
        ValueError: an unknown mode.
    """
    get_op(op)
    implementations = list(implementations)
    for name in implementations:
        get_implementation(op, name)
    modes = modes_mod.check_modes(list(modes))
    return [Cell(op, impl, mode, case) for case in cases for impl in implementations for mode in modes]


def run(
    cells: list[Cell],
    options: Options,
    *,
    on_start: Callable[[Cell], None] | None = None,
    on_result: Callable[[Result, RunRecord], None] | None = None,
) -> RunRecord:
    """Run every cell in this process; one cell's failure is recorded in its result, never raised.

    Args:
        cells: from ``plan``.
        options: how each cell is measured.
        on_start: called with each cell before it runs.
        on_result: called with (result, record) after each cell; the record grows, so a caller can save
            it after each cell (a killed run then keeps every finished result).

    Returns:
        The record: the environment (with what the implementations' setup hooks returned), the copy
        bandwidth, and one result per cell in plan order, speedups filled in.
    """
    set_threads(options)  # before the environment, which records the thread count
    record = RunRecord({**environment(), "settings": options.settings()}, [],
                       timing.measure_copy_bandwidth(options.device))
    run_one = CellRunner(options, record.copy_gbps)
    for cell in cells:
        if on_start:
            on_start(cell)
        record.results.append(run_one(cell))
        record.environment.update(run_one.setup_state)
        attach_speedups(record.results)
        result = record.results[-1]
        if on_result:
            on_result(result, record)
    return record


class CellRunner:
    """Runs one cell at a time, keeping the current case's batch and reference: cells grouped by case
    (as ``plan`` orders them) make each batch once. With ``options.cold_compile`` each compiled cell runs
    with the compile caches off (``modes.cold_compile``: restored after the cell; an eager cell never imports
    Inductor for it). Before
    an implementation's first cell, calls its setup hook (once per hook: the runner has one device);
    what the hooks returned is in ``setup_state``, for the run's environment.

    The batch is shared by the case's cells, so an implementation that changes its inputs in place would
    corrupt every later contender's input (and have an innocent one recorded wrong). After each cell that
    ran, the batch's tensors are fingerprinted on the device (``fingerprint.input_fingerprints``) and compared with
    the fingerprints taken when the batch was made: a cell that changed them is an error saying so, and the
    batch (and reference) is made again, from the case's seed, for the next cell."""

    def __init__(self, options: Options, copy_gbps: float | None) -> None:
        self.options = options
        self.copy_gbps = copy_gbps
        # (case, batch or why there is none, reference, the batch's fingerprints when made)
        self._case: tuple[Case, Batch | Exception, torch.Tensor | None, dict[str, int]] | None = None
        self._setups: dict[Callable, Exception | None] = {}  # hook -> how it failed (None: it ran)
        self.setup_state: dict = {}

    def __call__(self, cell: Cell) -> Result:
        """Check and time ``cell`` (see ``run_cell``); its failures are in the result, never raised."""
        failed = self._setup(get_implementation(cell.op, cell.implementation))
        if failed is not None:
            return Result(cell.op, cell.implementation, cell.mode, cell.case, self.options.device.type,
                          status=ERROR, reason=f"setup: {type(failed).__name__}: {_first_line(failed)}")
        if self._case is None or self._case[0] != cell.case:
            self._case = None  # free the previous batch before making the next
            batch, reference = prepare_case(cell.op, cell.case, self.options)
            self._case = (cell.case, batch, reference, {} if isinstance(batch, Exception) else _fingerprints(cell.op, batch))
        _, batch, reference, made = self._case
        if isinstance(batch, Exception):
            return input_result(cell, self.options.device, batch)
        cold = self.options.cold_compile and modes_mod.is_compiled(cell.mode)
        with modes_mod.cold_compile() if cold else contextlib.nullcontext():
            result = run_cell(cell, batch, reference, self.options, self.copy_gbps)
        if result.status != SKIPPED:  # it ran: did it leave its inputs as it found them?
            self._check_inputs(cell, batch, made, result)
        return result

    def _check_inputs(self, cell: Cell, batch: Batch, made: dict[str, int] | str, result: Result) -> None:
        """Make ``result`` an error when ``cell`` changed the batch, and drop the batch so the next cell gets a
        fresh one. A fingerprint that cannot be taken (a broken device, no memory left) is noted in the result's
        ``extra["input_check"]``, and the batch is dropped all the same."""
        now = _fingerprints(cell.op, batch) if isinstance(made, dict) else made
        if isinstance(now, str):
            self._case = None
            result.extra["input_check"] = now
            return
        changed = [name for name in made if now.get(name) != made[name]]
        if not changed:
            return
        self._case = None  # made again, from the seed, for the next cell of this case
        result.extra["before_input_check"] = {"status": result.status, "reason": result.reason}
        result.status = ERROR
        result.reason = (f"changed its inputs in place ({', '.join(changed)}); an implementation must leave the "
                         "batch as it found it (the batch is made again for the next cells)")

    def _setup(self, impl: Implementation) -> Exception | None:
        """Run ``impl``'s setup hook the first time it is met; how it failed, or None."""
        hook = impl.setup
        if hook is None or self.options.device.type not in impl.devices:  # its cells are skipped: nothing to ready
            return None
        if hook not in self._setups:
            try:
                self.setup_state.update(hook(self.options.device) or {})
                self._setups[hook] = None
            except Exception as exc:  # a plugin's failing setup is a finding about its cells, not a crash
                self._setups[hook] = exc
        return self._setups[hook]


def _fingerprints(op: str, batch: Batch) -> dict[str, int] | str:
    """``input_fingerprints``, or why they could not be taken."""
    try:
        return input_fingerprints(op, batch)
    except Exception as exc:  # the check is a guard, not a cell: its failure must not end the run
        _release_memory(batch.values.device)
        return f"not done: {type(exc).__name__}: {_first_line(exc)}"


def set_threads(options: Options) -> int:
    """Set torch's intra-op threads to ``options.threads`` for a CPU run (CPU timings depend on it; GPU runs
    leave it); the count in force, which each result records.

    Raises:
        ValueError: ``options.threads`` is below 1.
    """
    if options.threads is not None and options.device.type == "cpu":
        if options.threads < 1:
            raise ValueError(f"threads must be at least 1; got {options.threads}")
        if torch.get_num_threads() != options.threads:
            torch.set_num_threads(options.threads)
    return torch.get_num_threads()


def input_result(cell: Cell, device: torch.device, problem: Exception) -> Result:
    """The result of a cell whose batch could not be made: skipped when too large, else an error.

    Args:
        cell: the cell.
        device: where it would have run.
        problem: what ``prepare_case`` gave instead of a batch.

    Returns:
        The result, status from ``input_status``, reason ``input: <problem>``.
    """
    return Result(cell.op, cell.implementation, cell.mode, cell.case, device.type, status=input_status(problem),
                  reason=f"input: {problem}")


def prepare_case(op: str, case: Case, options: Options) -> tuple[Batch | Exception, torch.Tensor | None]:
    """The case's batch on the device and the op's float64 reference on the host, or the reason there is none.

    Args:
        op: a registered op.
        case: the case to make.
        options: the device and the byte limit.

    Returns:
        ``(batch, reference)``; or ``(problem, None)`` where ``problem`` is an ``InputTooLarge`` (the values
        alone pass the byte limit: nothing is made) or another exception saying why the batch could not
        be made (out of memory included). See ``input_status``.
    """
    too_large = input_too_large(case, options.byte_limit)
    if too_large is not None:
        return too_large, None
    try:
        spec = get_op(op)
        batch = spec.make_batch(case, options.device)
        check_offsets(batch.values, batch.offsets)
        # computed on the batch's device (impls.reference: fast there) but kept on the host: the runner holds it
        # through every cell of the case, and a cell may fill the device up to the byte limit (a padded tensor);
        # each check moves the cell's output to it
        return batch, spec.reference(batch).cpu()
    except torch.cuda.OutOfMemoryError as exc:
        _release_memory(options.device)
        return RuntimeError(f"out of memory making the batch: {_first_line(exc)}"), None
    except Exception as exc:
        return RuntimeError(f"{type(exc).__name__}: {_first_line(exc)}"), None


def run_cell(cell: Cell, batch: Batch, reference: torch.Tensor, options: Options, copy_gbps: float | None,
             *, plain: bool = False) -> Result:
    """Check and time one cell on a batch that is already made (``measure_cell``, its call let go after).

    Args:
        cell: the cell.
        batch: its case's batch, on ``options.device``.
        reference: the op's float64 result for ``batch``.
        options: how the cell is measured.
        copy_gbps: the run's copy bandwidth (for ``pct_of_copy``), or None.
        plain: run the implementation's ``plain`` twin on (values, offsets, padded_len) instead (the
            doctor's input-form check); the result says so in ``extra["input_form"]``.

    Returns:
        The result: ok (timed), wrong (not timed), skipped or error, with the reason; never raises for
        the implementation's own failures.
    """
    measured = measure_cell(cell, batch, reference, options, copy_gbps, plain=plain)
    measured.release(options.device)
    return measured.result


@dataclass
class Measured:
    """A cell's result and, when it was timed, its call: built, warm and checked, so that a caller (the doctor's
    ``reconcile``) can time it again (``measure.cell.retime_wall_and_host``) without compiling it again, until
    the next ``modes.compile_fn`` resets Dynamo. The caller lets it go (``release``): a compiled call holds its
    graph and device memory."""

    result: Result
    call: Callable[[], object] | None = None

    def release(self, device: torch.device) -> None:
        self.call = None
        _release_memory(device)


def measure_cell(cell: Cell, batch: Batch, reference: torch.Tensor, options: Options, copy_gbps: float | None,
                 *, plain: bool = False) -> Measured:
    """``run_cell``, the cell's call kept when it was timed (``Measured``): built (``modes.build``), its first
    call timed as the compile, its output checked against ``reference``, then timed (``measure.cell.time_call``).
    Never raises for the implementation's own failures."""
    impl = get_implementation(cell.op, cell.implementation)
    device = options.device
    result = Result(cell.op, cell.implementation, cell.mode, cell.case, device.type)
    result.bytes_moved = get_op(cell.op).must_move_bytes(batch)
    if plain:
        result.extra["input_form"] = "plain"
    skip = why_skip(impl, cell, batch, options)
    if plain and impl.plain is None:
        skip = f"{impl.name} has no plain twin"
    if skip:
        result.status, result.reason = SKIPPED, skip
        return Measured(result)
    fn, args = (impl.plain, impl.prepare_plain(batch)) if plain else (impl.fn, impl.prepare(batch))
    stage = "build"
    call = None

    def entering(name: str) -> None:  # time_call's stages name where a failure happened
        nonlocal stage
        stage = name

    try:
        result.threads = set_threads(options)
        call = modes_mod.build(fn, args, cell.mode, device, dynamic=options.dynamic)
        stage = "first call"
        sync = timing.synchronizer(device)
        start = time.perf_counter()
        out = call()
        sync()
        result.compile_s = time.perf_counter() - start
        fallback = modes_mod.boundary_fallback(call)
        if fallback is not None:  # the cell would time torch.compile(fn), not its mode
            result.status, result.reason = ERROR, f"jaggedperf.compile fell back to torch.compile: {fallback}"
        else:
            stage = "check"
            ok, result.rel_error, reason = check_output(out, reference, cell.case.dtype)
            if not ok:
                result.status, result.reason = WRONG, reason
            else:
                del out
                time_call(call, cell, result, options, copy_gbps, tag=".plain" if plain else "", on_stage=entering)
    except modes_mod.ModeUnavailable as exc:
        result.status, result.reason = SKIPPED, str(exc)
    except torch.cuda.OutOfMemoryError as exc:
        result.status, result.reason = ERROR, f"{stage}: out of memory: {_first_line(exc)}"
    except Exception as exc:  # a failing implementation is a finding, not a crash
        result.status, result.reason = ERROR, f"{stage}: {type(exc).__name__}: {_first_line(exc)}"
        result.extra["traceback"] = traceback.format_exc(limit=8)
    if result.status in TIMED:
        return Measured(result, call)
    call = None
    _release_memory(device)
    return Measured(result)


def why_skip(impl: Implementation, cell: Cell, batch: Batch, options: Options) -> str | None:
    """Why ``cell`` is not run on ``options.device`` (wrong device, padded tensor over the byte limit, graph
    mode without CUDA), or None.
    """
    if options.device.type not in impl.devices:
        return f"{impl.name} does not run on {options.device.type}"
    if impl.pads and batch.padded_nbytes() > options.byte_limit:
        return (f"padded tensor would take {batch.padded_nbytes() / 1e9:.2f} GB > byte limit "
                f"{options.byte_limit / 1e9:.2f} GB")
    if cell.mode == modes_mod.GRAPH and options.device.type != "cuda":
        return "graph mode needs CUDA"
    return None


def attach_speedups(results: list[Result]) -> None:
    """speedup_vs_eager = eager wall median / this wall median, same op, implementation and case; only where
    both cells are ok (an unstable cell's ratio would be a finding drawn from noise)."""
    eager = {(r.op, r.implementation, r.case): r for r in results
             if r.mode == modes_mod.EAGER and r.wall and r.status == OK}
    for r in results:
        base = eager.get((r.op, r.implementation, r.case))
        if base and r.wall and r.status == OK and r.wall.median_ms > 0:
            r.speedup_vs_eager = base.wall.median_ms / r.wall.median_ms


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _release_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
