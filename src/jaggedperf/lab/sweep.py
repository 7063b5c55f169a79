"""A sweep: every cell of a grid, on every GPU of the host, each cell under a timeout, every result
appended to a JSON-lines file as it finishes, so that a rerun resumes where a crash or kill stopped.

Planning (``plan_sweep``): the cells of ``runner.plan``, less those already in the results file
(``store.finished_keys``) and less the cases whose values alone pass the byte limit (recorded as skipped,
never dispatched). The rest is grouped into units, one per case, eager cells first: a unit goes to one
worker, which makes the case's batch once, and a compiled cell's eager twin is known before it.

Running (``run_sweep``): one long-lived worker process per slot (a GPU, or the CPU), started with the
spawn method and its slot's environment (``CUDA_VISIBLE_DEVICES``), so that each worker sees its GPU as
``cuda``. Spawn hands the parent's ``sys.path`` to the child, so plugins import there as here. A worker
imports the plugins, measures copy bandwidth once, says it is ready, then runs the units it is sent with
``runner.CellRunner`` and sends each result back. The parent is the only writer of the results file:
an environment header once every worker is ready (with each worker's GPU and copy bandwidth), then
one line per cell (``store.append_result`` fsyncs each), ``speedup_vs_eager`` filled in from the eager
twin of this run or of the resumed file.

Faults. A worker's cell in flight is the first of its unit without a result; its clock starts when the
unit is sent or the previous result arrives (the first cell's time includes making the case's batch).
Past the timeout the parent kills the worker with its process group (Inductor's compile workers go
too), records the cell as an error "timed out after N s", puts the unit's other cells back at the head
of the queue and starts a fresh worker on that slot. A worker that dies (a segfault, ``os._exit``, the
OOM killer) is handled the same way, the cell recorded as "worker died (exit code N)". A slot whose
worker fails to start (or dies with no cell in flight) ``Settings.start_attempts`` times with no result
in between is given up; with no slot left, ``SweepError``.
A worker whose cell failed checks that its device still works; a sticky CUDA error (an illegal memory
access in a kernel, say) would fail every later cell in that process, so the worker says so and the
parent replaces it, its unit's other cells requeued. A worker whose parent dies exits by itself (a
watchdog thread), so a killed sweep leaves no orphans.

Nothing here prints: progress goes to the ``on_start`` / ``on_result`` / ``on_note`` callbacks.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import statistics
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import grid, store
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab import runner
from jaggedperf.lab.env import environment, gpu_facts
from jaggedperf.lab.plugins import import_plugins
from jaggedperf.lab.result import ERROR, Result

DEFAULT_TIMEOUT_S = 600.0
_STOP = None  # the message that tells an idle worker to exit


class SweepError(Exception):
    """The sweep cannot go on (no worker could start). The results written so far stay; a rerun resumes."""


# --- where the workers run ------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSlot:
    """Where one worker runs: ``name`` as the parent sees it (``cuda:1``, ``cpu``), ``device`` as the
    worker sees it (``cuda`` or ``cpu``), the environment variables it starts with, and the CPU cores
    it is pinned to (none: not pinned)."""

    name: str
    device: str
    env: tuple[tuple[str, str], ...] = ()
    cpus: tuple[int, ...] = ()


def worker_slots(gpus: int | str | None = "all", device: str | None = None, *, device_count: int | None = None,
                 visible: str | None = None, cpus: Iterable[int] | None = None) -> list[WorkerSlot]:
    """One slot per GPU used, each seeing only its GPU through ``CUDA_VISIBLE_DEVICES`` and pinned to its
    own share of the cores, so that one worker's host work (a float64 reference, a compile) does not
    disturb another's wall times; one CPU slot, not pinned, when there is no GPU or ``device`` is
    ``"cpu"`` (more than one CPU worker would share the cores and skew the times). ``gpus``: a count or
    ``"all"``. ``device_count``, ``visible`` and ``cpus`` default to this host's
    (``torch.cuda.device_count()``, ``$CUDA_VISIBLE_DEVICES``, this process's CPU affinity).
    Raises ``ValueError``."""
    if device_count is None:
        device_count = torch.cuda.device_count()
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cpus is None:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()
    count = None if gpus in (None, "all") else int(gpus)
    if device == "cpu":
        if count is not None:
            raise ValueError(f"--gpus {count} with --device cpu: a CPU sweep has one worker")
        return [WorkerSlot("cpu", "cpu")]
    if device_count == 0:
        if device is None and count is None:
            return [WorkerSlot("cpu", "cpu")]
        raise ValueError(f"{'--gpus ' + str(count) if count else '--device cuda'}: no CUDA GPU is available")
    count = device_count if count is None else count
    if not 1 <= count <= device_count:
        raise ValueError(f"--gpus {count}: this host has {device_count} GPU{'s' if device_count > 1 else ''}")
    ids = [v.strip() for v in visible.split(",")] if visible else [str(i) for i in range(device_count)]
    cores = sorted(cpus)
    share = len(cores) // count  # contiguous blocks (0 when there are fewer cores than workers: no pinning)
    return [WorkerSlot(f"cuda:{i}", "cuda", (("CUDA_VISIBLE_DEVICES", ids[i]),), tuple(cores[i * share:(i + 1) * share]))
            for i in range(count)]


# --- planning -------------------------------------------------------------------------------------


@dataclass
class SweepPlan:
    out: Path
    cells: list[runner.Cell]  # every cell of the grid, in plan order, each once
    done: int  # of these, how many are already in the results file
    too_large: list[Result]  # skipped before dispatch: the case's values alone pass the byte limit
    units: list[list[runner.Cell]]  # the cells to run, one list per case, eager cells first
    warnings: list[str] = field(default_factory=list)  # met reading the results file

    @property
    def to_run(self) -> int:
        return sum(len(unit) for unit in self.units)


def plan_sweep(out: str | os.PathLike, op: str, cases: Iterable[Case], implementations: Iterable[str],
               modes: Iterable[str], *, byte_limit: int, device: str) -> SweepPlan:
    """What a sweep into ``out`` has left to do. ``device``: the workers' device type, for the skipped
    results. Raises ``KeyError``/``ValueError`` for unknown names, ``store.ResultsFileError``."""
    cells = list(dict.fromkeys(runner.plan(op, cases, implementations, modes)))
    done, warnings = store.finished_keys(out)
    pending = [c for c in cells if c.key not in done]
    _, too_large = grid.split_by_size(dict.fromkeys(c.case for c in pending), byte_limit)
    problems = dict(too_large)
    by_case: dict[Case, list[runner.Cell]] = {}
    for cell in pending:
        if cell.case not in problems:
            by_case.setdefault(cell.case, []).append(cell)
    units = [sorted(unit, key=lambda c: c.mode != modes_mod.EAGER) for unit in by_case.values()]
    skipped = [runner.input_result(c, torch.device(device), problems[c.case]) for c in pending if c.case in problems]
    return SweepPlan(Path(out), cells, len(cells) - len(pending), skipped, units, warnings)


# --- running --------------------------------------------------------------------------------------


@dataclass
class Settings:
    timeout_s: float = DEFAULT_TIMEOUT_S  # per cell, compile included
    start_timeout_s: float = DEFAULT_TIMEOUT_S  # for a worker to import torch, the plugins, and measure bandwidth
    start_attempts: int = 3  # failed starts (with no result in between) before a slot is given up
    plugins: tuple[str, ...] = ()  # modules every worker imports before it runs anything
    log_path: str | None = None  # the workers' stdout and stderr are appended here (None: this process's)


@dataclass
class SweepOutcome:
    results: list[Result]  # written by this run, in order (the pre-filtered skips first)
    environment: dict | None  # of the header written (None when there was nothing to write)
    copy_gbps: float | None


StartCallback = Callable[[str, "runner.Cell | None"], None]  # (worker, cell now in flight, or None: idle)
ResultCallback = Callable[[str, Result], None]  # (worker, result just written)
NoteCallback = Callable[[str], None]  # a worker timed out, died, failed to start


def run_sweep(plan: SweepPlan, slots: list[WorkerSlot], options: runner.Options, settings: Settings | None = None, *,
              on_start: StartCallback | None = None, on_result: ResultCallback | None = None,
              on_note: NoteCallback | None = None) -> SweepOutcome:
    """Run ``plan``'s units on one worker per slot, appending to ``plan.out``. See the module's notes."""
    settings = settings or Settings()
    sweep = _Sweep(plan, slots, options, settings, on_start or _nothing, on_result or _nothing, on_note or _nothing)
    try:
        return sweep.run()
    finally:
        sweep.close()


def _nothing(*_args) -> None:
    pass


class _Sweep:
    """The scheduler: the parent's view of the workers, the queue of units, the results file."""

    def __init__(self, plan, slots, options, settings, on_start, on_result, on_note) -> None:
        if not slots:
            raise ValueError("a sweep needs at least one worker slot")
        self.plan, self.options, self.settings = plan, options, settings
        self.on_start, self.on_result, self.on_note = on_start, on_result, on_note
        self.workers = [_Worker(slot) for slot in slots]
        self.queue: deque[list[runner.Cell]] = deque(list(unit) for unit in plan.units)
        self.results: list[Result] = []
        self.eager: dict[tuple, Result] = {}
        if plan.done:
            self.eager = {_twin_key(r): r for r in store.load_results(plan.out).results if r.mode == modes_mod.EAGER}

    def run(self) -> SweepOutcome:
        if not self.queue:
            if not self.plan.too_large:
                return SweepOutcome([], None, None)
            env = environment()
            store.write_environment_header(self.plan.out, env, None)
            for r in self.plan.too_large:
                self._record(r)
            return SweepOutcome(self.results, env, None)
        for w in self.workers:
            self._start(w)
        while any(w.state == _STARTING for w in self.workers):
            self._step()
        ready = [w for w in self.workers if w.state != _GONE]
        if not ready:
            raise SweepError(f"no worker could start: {self._last_failure()}")
        env, copy_gbps = self._header(ready)
        store.write_environment_header(self.plan.out, env, copy_gbps)
        for r in self.plan.too_large:
            self._record(r)
        while self.queue or any(w.state == _BUSY for w in self.workers):
            if not any(w.state != _GONE for w in self.workers):
                raise SweepError(f"every worker failed to start: {self._last_failure()}")
            self._dispatch()
            self._step()
        return SweepOutcome(self.results, env, copy_gbps)

    def close(self) -> None:
        for w in self.workers:
            w.stop()

    # --- one turn of the loop ---

    def _dispatch(self) -> None:
        for w in self.workers:
            if w.state == _IDLE and self.queue:
                w.send_unit(self.queue.popleft(), self.settings.timeout_s)
                self.on_start(w.slot.name, w.unit[0])

    def _step(self) -> None:
        """Wait for a message, a death or the next deadline, and handle what happened."""
        live = [w for w in self.workers if w.process is not None]
        if not live:
            return
        deadlines = [w.deadline for w in live if w.deadline is not None]
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        waitables = [o for w in live for o in (w.conn, w.process.sentinel)]
        multiprocessing.connection.wait(waitables, timeout=None if timeout is None else min(timeout, 5.0))
        for w in live:
            process = w.process
            for message in w.receive():
                self._handle(w, message)
            if w.process is not process:  # replaced while its messages were handled
                continue
            if not process.is_alive():
                for message in w.receive():  # what it sent before it died
                    self._handle(w, message)
                if w.process is process:
                    self._died(w)
            elif w.deadline is not None and time.monotonic() >= w.deadline and not w.conn.poll():
                self._timed_out(w)

    def _handle(self, w: _Worker, message: tuple) -> None:
        kind, payload = message
        if kind == "ready":
            w.ready(payload)
        elif kind == "failed":  # the worker could not start and says why; its death follows
            w.last_failure = payload
        elif kind == "result":
            w.unit = [c for c in w.unit if c.key != payload.key]  # the first: a worker runs its unit in order
            w.start_failures = 0  # it has done useful work
            self._record(payload, w.slot.name)
            if w.unit:
                w.deadline = time.monotonic() + self.settings.timeout_s
                self.on_start(w.slot.name, w.unit[0])
            else:
                w.state, w.deadline = _IDLE, None
                self.on_start(w.slot.name, None)
        elif kind == "unusable":  # its device no longer works after the cell just recorded
            rest = w.unit
            w.kill()
            if rest:
                self.queue.appendleft(rest)
            self.on_note(f"{w.slot.name}: the device is unusable after an error ({payload}); starting a fresh worker")
            self.on_start(w.slot.name, None)
            self._start(w)

    def _timed_out(self, w: _Worker) -> None:
        w.kill()
        if w.state == _STARTING:
            self._start_failed(w, f"did not start within {self.settings.start_timeout_s:g} s")
        else:
            self._lose_cell(w, f"timed out after {self.settings.timeout_s:g} s")

    def _died(self, w: _Worker) -> None:
        code = w.process.exitcode
        w.kill()  # reap it and any children it left in its process group
        if w.state == _STARTING:
            self._start_failed(w, w.last_failure or f"exited during start-up (exit code {_exit_code(code)})")
        elif w.unit:
            self._lose_cell(w, f"worker died (exit code {_exit_code(code)})")
        else:  # counted as a failed start: a worker that keeps dying with no cell must not loop for ever
            self._start_failed(w, f"exited while idle (exit code {_exit_code(code)})")

    def _lose_cell(self, w: _Worker, reason: str) -> None:
        """Record the cell in flight on ``w`` (already killed) as an error, requeue the rest, restart."""
        cell, rest = w.unit[0], w.unit[1:]
        self._record(Result(cell.op, cell.implementation, cell.mode, cell.case, w.slot.device, status=ERROR,
                            reason=reason), w.slot.name)
        if rest:
            self.queue.appendleft(rest)
        self.on_note(f"{w.slot.name}: {cell.implementation} · {cell.mode} · {cell.case.label}: {reason}; "
                     "starting a fresh worker")
        self.on_start(w.slot.name, None)
        self._start(w)

    def _start_failed(self, w: _Worker, reason: str) -> None:
        """A worker that died or hung with no cell in flight: try again, or give the slot up after
        ``Settings.start_attempts`` such failures with no result in between."""
        w.start_failures += 1
        w.last_failure = reason
        if w.start_failures >= self.settings.start_attempts:
            w.state, w.unit = _GONE, []
            self.on_note(f"{w.slot.name}: worker failed to start {w.start_failures} times ({reason}); slot given up")
        else:
            self.on_note(f"{w.slot.name}: worker failed to start ({reason}); trying again")
            self._start(w)

    def _start(self, w: _Worker) -> None:
        w.start(self.options, self.settings)

    def _last_failure(self) -> str:
        return next((w.last_failure for w in self.workers if w.last_failure), "unknown")

    # --- the results file ---

    def _header(self, ready: list[_Worker]) -> tuple[dict, float | None]:
        gpu = next((w.info["gpu_facts"] for w in ready if w.info.get("gpu_facts")), None)
        env = environment(gpu=gpu)
        env["workers"] = [{"name": w.slot.name, **{k: v for k, v in w.info.items() if k != "gpu_facts"},
                           **(w.info.get("gpu_facts") or {})} for w in ready]
        measured = [w.info["copy_gbps"] for w in ready if w.info.get("copy_gbps")]
        return env, (statistics.fmean(measured) if measured else None)

    def _record(self, result: Result, worker: str | None = None) -> None:
        """Fill in the speedup from the eager twin, append the result (fsync'ed), tell the caller."""
        twin = self.eager.get(_twin_key(result))
        runner.attach_speedups([twin, result] if twin is not None else [result])
        if result.mode == modes_mod.EAGER:
            self.eager[_twin_key(result)] = result
        if worker is not None:
            result.extra["worker"] = worker
        store.append_result(self.plan.out, result)
        self.results.append(result)
        if worker is not None:
            self.on_result(worker, result)


def _twin_key(r: Result) -> tuple:
    return (r.op, r.implementation, r.case)


def _exit_code(code: int | None) -> str:
    if code is None:
        return "unknown"
    if code < 0:
        try:
            return f"{code}, {signal.Signals(-code).name}"
        except ValueError:
            pass
    return str(code)


# --- the parent's handle on one worker ------------------------------------------------------------

_STARTING, _IDLE, _BUSY, _GONE = "starting", "idle", "busy", "gone"


class _Worker:
    def __init__(self, slot: WorkerSlot) -> None:
        self.slot = slot
        self.process: multiprocessing.process.BaseProcess | None = None
        self.conn: multiprocessing.connection.Connection | None = None
        self.state = _GONE
        self.unit: list[runner.Cell] = []  # sent and not yet resulted; unit[0] is in flight
        self.deadline: float | None = None
        self.info: dict = {}
        self.leads_group = False  # it has made its own process group (it says so by being ready)
        self.start_failures = 0
        self.last_failure: str | None = None

    def start(self, options: runner.Options, settings: Settings) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent_end, child_end = ctx.Pipe()
        process = ctx.Process(target=_worker_main, name=f"jaggedperf-sweep-{self.slot.name}",
                              args=(child_end, self.slot, options, tuple(settings.plugins), settings.log_path))
        with _environ(dict(self.slot.env)):
            process.start()
        child_end.close()
        self.process, self.conn, self.state, self.unit, self.last_failure = process, parent_end, _STARTING, [], None
        self.deadline = time.monotonic() + settings.start_timeout_s

    def ready(self, info: dict) -> None:
        self.info, self.state, self.deadline = info, _IDLE, None
        self.leads_group = hasattr(os, "killpg")

    def send_unit(self, unit: list[runner.Cell], timeout_s: float) -> None:
        self.conn.send(unit)
        self.unit, self.state, self.deadline = list(unit), _BUSY, time.monotonic() + timeout_s

    def receive(self) -> list[tuple]:
        messages = []
        try:
            while self.conn.poll():
                messages.append(self.conn.recv())
        except (EOFError, OSError):  # the worker is gone; its death is handled by the caller
            pass
        return messages

    def kill(self) -> None:
        """Kill the worker and, once it leads its own process group, the group: Inductor's compile
        workers go too, even when the worker itself has already exited."""
        process = self.process
        if process is None:
            return
        if self.leads_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        process.kill()  # a no-op on a process already reaped
        process.join(10)
        self._forget()

    def stop(self) -> None:
        """Ask an idle worker to exit; kill one that is busy, starting, or does not exit."""
        if self.process is None:
            return
        if self.state == _IDLE:
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(_STOP)
            # Wait for it to exit without reaping it: until kill() reaps it, its pid still names its group.
            multiprocessing.connection.wait([self.process.sentinel], timeout=10)
        self.kill()

    def _forget(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.process, self.conn, self.deadline, self.leads_group = None, None, None, False


@contextlib.contextmanager
def _environ(changes: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``changes`` while a worker is spawned (the child copies it at start)."""
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- the worker process ---------------------------------------------------------------------------


def _worker_main(conn, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...], log_path: str | None) -> None:
    if log_path:
        _redirect_output(log_path, slot)
    if hasattr(os, "setpgrp"):
        os.setpgrp()  # its own process group: a kill on timeout takes its children with it
    _exit_with_parent()
    try:
        if slot.cpus:
            os.sched_setaffinity(0, slot.cpus)
            torch.set_num_threads(len(slot.cpus))
        import_plugins(plugins)
        device = torch.device(slot.device)
        options = replace(options, device=device)
        copy_gbps = runner.measure_copy_bandwidth(device)
        info = {"device": slot.device, "copy_gbps": copy_gbps,
                "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                "threads": torch.get_num_threads(),
                "gpus_visible": torch.cuda.device_count() if device.type == "cuda" else 0,
                "gpu_uuid": str(torch.cuda.get_device_properties(device).uuid) if device.type == "cuda" else None,
                "gpu_facts": gpu_facts(device) if device.type == "cuda" else None}
    except BaseException as exc:
        conn.send(("failed", f"{type(exc).__name__}: {' '.join(str(exc).split())}"))
        raise SystemExit(1)
    conn.send(("ready", info))
    run_one = runner.CellRunner(options, copy_gbps)
    while True:
        try:
            unit = conn.recv()
        except EOFError:  # the parent is gone
            return
        if unit is _STOP:
            return
        for cell in unit:
            try:
                result = run_one(cell)
                conn.send(("result", result))
            except Exception as exc:  # the runner records a cell's own failures; this is anything else
                result = Result(cell.op, cell.implementation, cell.mode, cell.case, device.type, status=ERROR,
                                reason=f"worker: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
                result.extra["traceback"] = traceback.format_exc(limit=8)
                conn.send(("result", result))
            if result.status == ERROR:
                problem = _device_unusable(device)
                if problem:
                    conn.send(("unusable", problem))
                    return


def _device_unusable(device: torch.device) -> str | None:
    """Why ``device`` can no longer run anything in this process (a sticky CUDA error), or None."""
    if device.type != "cuda":
        return None
    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).cpu()
        torch.cuda.synchronize(device)
    except Exception as exc:
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return None


def _exit_with_parent() -> None:
    """Exit as soon as the parent process ends, whatever this worker is doing (no orphans)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _redirect_output(path: str, slot: WorkerSlot) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    os.write(2, f"--- {stamp} worker {slot.name} (pid {os.getpid()}) started\n".encode())
