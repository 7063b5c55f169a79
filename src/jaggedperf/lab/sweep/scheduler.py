"""Running a sweep's plan: the scheduler. One worker per slot (started by a back end, local processes
by default), each cell under a timeout, every result appended to the plan's JSON-lines file as it
finishes, so that a rerun resumes where a crash or kill stopped.

A worker imports the plugins, measures copy bandwidth once, says it is ready, then runs the units it is
sent and sends each result back (``worker``). The parent is the only writer of the results file: an
environment header once every worker is ready (with each worker's GPU and copy bandwidth, and the
measurement settings), then one line per cell (``store.append_result`` fsyncs each), ``speedup_vs_eager``
filled in from the eager twin of this run or of the resumed file; a retried cell's line carries what failed
before (``extra["retry"]``).

Faults. A worker's cell in flight is the first of its unit without a result; its clock starts when the
unit is sent or the previous result arrives (the first cell's time includes making the case's batch).
Past the timeout the parent kills the worker (with everything it started), records the cell as an error
"timed out after N s", puts the unit's other cells back at the head of the queue and starts a fresh
worker on that slot. A worker that dies (a segfault, ``os._exit``, the OOM killer) is handled the same
way, the cell recorded as "worker died (exit code N)". A slot whose worker fails to start (or dies with
no cell in flight) ``Settings.start_attempts`` times with no result in between is given up; with no slot
left, ``SweepError``. A worker that reports its device unusable is replaced, its unit's other cells
requeued. A worker its back end reports lost with its machine (``WorkerHandle.lost``: a Ray node that left
the cluster) is replaced and its unit requeued whole, the cell in flight included: the loss was not its doing.
Each result records where it ran (``extra``: worker, host, GPU name, torch version).

Nothing here prints: progress goes to the ``on_start`` / ``on_result`` / ``on_note`` callbacks.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab import runner
from jaggedperf.lab.measure.env import environment
from jaggedperf.lab.result import ERROR, Result
from jaggedperf.lab.results import store
from jaggedperf.lab.sweep import lock
from jaggedperf.lab.sweep.backend import Backend, WorkerHandle
from jaggedperf.lab.sweep.local import LocalProcesses
from jaggedperf.lab.sweep.plan import SweepPlan
from jaggedperf.lab.sweep.slots import WorkerSlot

DEFAULT_TIMEOUT_S = 600.0


class SweepError(Exception):
    """The sweep cannot go on (no worker could start). The results written so far stay; a rerun resumes."""


# --- running --------------------------------------------------------------------------------------


@dataclass
class Settings:
    """How a sweep runs its workers."""

    timeout_s: float = DEFAULT_TIMEOUT_S  # per cell, compile included
    start_timeout_s: float = DEFAULT_TIMEOUT_S  # for a worker to import torch, the plugins, and measure bandwidth
    start_attempts: int = 3  # failed starts (with no result in between) before a slot is given up
    plugins: tuple[str, ...] = ()  # modules every worker imports before it runs anything
    log_path: str | None = None  # the workers' stdout and stderr are appended here (None: this process's)


@dataclass
class SweepOutcome:
    """What ``run_sweep`` wrote."""

    results: list[Result]  # written by this run, in order (the pre-filtered skips first)
    environment: dict | None  # of the header written (None when there was nothing to write)
    copy_gbps: float | None


StartCallback = Callable[[str, "runner.Cell | None"], None]  # (worker, cell now in flight, or None: idle)
ResultCallback = Callable[[str, Result], None]  # (worker, result just written)
NoteCallback = Callable[[str], None]  # a worker timed out, died, failed to start


def run_sweep(plan: SweepPlan, slots: list[WorkerSlot], options: runner.Options, settings: Settings | None = None, *,
              on_start: StartCallback | None = None, on_result: ResultCallback | None = None,
              on_note: NoteCallback | None = None, backend: Backend | None = None) -> SweepOutcome:
    """Run ``plan``'s units on one worker per slot, appending to ``plan.out`` (see the module's notes).

    Args:
        plan: from ``plan_sweep``.
        slots: where the workers run, one worker each.
        options: how each cell is measured (each worker sets its own device).
        settings: timeouts, start attempts, plugins, the workers' log (default ``Settings()``).
        on_start: (worker, cell now in flight, or None when it waits).
        on_result: (worker, result just written).
        on_note: a worker timed out, died, failed to start, or lost its device.
        backend: what starts the workers (default: ``LocalProcesses``).

    Returns:
        The results written by this run and the header's environment and copy bandwidth.

    Raises:
        SweepError: no worker could start, or every slot was given up.
        lock.SweepLocked: another process's sweep is writing to ``plan.out``.
        ValueError: no slot.
        store.ResultsFileError, OSError: the results file cannot be read or appended to.
    """
    settings = settings or Settings()
    with lock.hold(plan.out):  # already held when the caller took it before planning, as the CLI does
        sweep = _Sweep(plan, slots, options, settings, on_start or _nothing, on_result or _nothing,
                       on_note or _nothing, backend or LocalProcesses())
        try:
            return sweep.run()
        finally:
            sweep.close()


def _nothing(*_args) -> None:
    pass


class _Sweep:
    """The scheduler: the parent's view of the workers, the queue of units, the results file."""

    def __init__(self, plan, slots, options, settings, on_start, on_result, on_note, backend: Backend) -> None:
        if not slots:
            raise ValueError("a sweep needs at least one worker slot")
        self.plan, self.options, self.settings, self.backend = plan, options, settings, backend
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
            env = self._environment(None)
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
        live = [w for w in self.workers if w.handle is not None]
        if not live:
            return
        deadlines = [w.deadline for w in live if w.deadline is not None]
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        self.backend.wait([w.handle for w in live], None if timeout is None else min(timeout, 5.0))
        for w in live:
            handle = w.handle
            for message in w.receive():
                self._handle(w, message)
            if w.handle is not handle:  # replaced while its messages were handled
                continue
            if not handle.alive():
                for message in w.receive():  # what it sent before it died
                    self._handle(w, message)
                if w.handle is handle:
                    self._died(w)
            elif w.deadline is not None and time.monotonic() >= w.deadline and not handle.has_message():
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
            self._record(payload, w.slot.name, w.info)
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
        code = w.handle.exit_code()
        lost = getattr(w.handle, "lost", None)  # optional in a back end (``backend.WorkerHandle.lost``)
        lost = bool(lost and lost())
        w.kill()  # reap it and anything it started that is still running
        if lost and w.unit:  # its machine left: no cell of it is to blame, all go back to the queue
            self.queue.appendleft(w.unit)
            self.on_note(f"{w.slot.name}: its machine was lost with {len(w.unit)} cells in flight; requeued, "
                         "starting a fresh worker")
            self.on_start(w.slot.name, None)
            self._start(w)
        elif w.state == _STARTING:
            self._start_failed(w, w.last_failure or f"exited during start-up (exit code {_exit_code(code)})")
        elif w.unit:
            self._lose_cell(w, f"worker died (exit code {_exit_code(code)})")
        else:  # counted as a failed start: a worker that keeps dying with no cell must not loop for ever
            self._start_failed(w, f"exited while idle (exit code {_exit_code(code)})")

    def _lose_cell(self, w: _Worker, reason: str) -> None:
        """Record the cell in flight on ``w`` (already killed) as an error, requeue the rest, restart."""
        cell, rest = w.unit[0], w.unit[1:]
        self._record(Result(cell.op, cell.implementation, cell.mode, cell.case, w.slot.device, status=ERROR,
                            reason=reason), w.slot.name, w.info)
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
        w.start(self.backend, self.options, self.settings)

    def _last_failure(self) -> str:
        return next((w.last_failure for w in self.workers if w.last_failure), "unknown")

    # --- the results file ---

    def _header(self, ready: list[_Worker]) -> tuple[dict, float | None]:
        gpu = next((w.info["gpu_facts"] for w in ready if w.info.get("gpu_facts")), None)
        env = self._environment(gpu)
        env["workers"] = [{"name": w.slot.name, **{k: v for k, v in w.info.items() if k != "gpu_facts"},
                           **(w.info.get("gpu_facts") or {})} for w in ready]
        measured = [w.info["copy_gbps"] for w in ready if w.info.get("copy_gbps")]
        return env, (statistics.fmean(measured) if measured else None)

    def _environment(self, gpu: dict | None) -> dict:
        """The header's environment: this process's, with the sweep's settings and the cells' CPU threads."""
        env = environment(gpu=gpu)
        env["settings"] = self._settings()
        if env["settings"]["device"] == "cpu" and self.options.threads is not None:
            env["threads"] = self.options.threads  # what every cell runs with (``runner.set_threads``), not ours
        return env

    def _settings(self) -> dict:
        """How this sweep measures, for its header (the workers' device: the slots', not the parent's)."""
        return self.options.settings(device=self.workers[0].slot.device)

    def _record(self, result: Result, worker: str | None = None, info: dict | None = None) -> None:
        """Fill in the speedup from the eager twin, mark a retry with what failed before, tag the result with
        where it ran (worker, host, GPU name, torch version: ``info`` is the worker's ready message), append
        it (fsync'ed), tell the caller."""
        if result.key in self.plan.retried:
            result.extra[store.RETRY] = self.plan.retried[result.key]
        twin = self.eager.get(_twin_key(result))
        runner.attach_speedups([twin, result] if twin is not None else [result])
        if result.mode == modes_mod.EAGER:
            self.eager[_twin_key(result)] = result
        if worker is not None:
            result.extra["worker"] = worker
        for key, value in _where(info or {}).items():
            result.extra.setdefault(key, value)
        store.append_result(self.plan.out, result)
        self.results.append(result)
        if worker is not None:
            self.on_result(worker, result)


def _where(info: dict) -> dict:
    """Where a worker ran, as each of its results records it: host, GPU name (absent on the CPU), torch."""
    gpu = (info.get("gpu_facts") or {}).get("gpu")
    where = {"host": info.get("host"), "gpu": gpu, "torch": info.get("torch")}
    return {k: v for k, v in where.items() if v is not None}


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


# --- the parent's view of one worker --------------------------------------------------------------

_STARTING, _IDLE, _BUSY, _GONE = "starting", "idle", "busy", "gone"


class _Worker:
    """A slot, the handle of the worker now on it (None: none), and what the scheduler knows of it."""

    def __init__(self, slot: WorkerSlot) -> None:
        self.slot = slot
        self.handle: WorkerHandle | None = None
        self.state = _GONE
        self.unit: list[runner.Cell] = []  # sent and not yet resulted; unit[0] is in flight
        self.deadline: float | None = None
        self.info: dict = {}
        self.start_failures = 0
        self.last_failure: str | None = None

    def start(self, backend: Backend, options: runner.Options, settings: Settings) -> None:
        self.handle = backend.start(self.slot, options, tuple(settings.plugins), settings.log_path)
        self.state, self.unit, self.last_failure = _STARTING, [], None
        self.deadline = time.monotonic() + settings.start_timeout_s

    def ready(self, info: dict) -> None:
        self.info, self.state, self.deadline = info, _IDLE, None

    def send_unit(self, unit: list[runner.Cell], timeout_s: float) -> None:
        self.handle.send(unit)
        self.unit, self.state, self.deadline = list(unit), _BUSY, time.monotonic() + timeout_s

    def receive(self) -> list[tuple]:
        return self.handle.receive() if self.handle is not None else []

    def kill(self) -> None:
        """Kill the worker (with what it started) and forget it."""
        if self.handle is not None:
            self.handle.kill()
        self._forget()

    def stop(self) -> None:
        """Ask an idle worker to exit; kill one that is busy, starting, or does not exit."""
        if self.handle is None:
            return
        if self.state == _IDLE:
            self.handle.stop()
        else:
            self.handle.kill()
        self._forget()

    def _forget(self) -> None:
        self.handle, self.deadline = None, None
