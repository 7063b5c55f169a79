"""Reconciling the parts' sum: the eager and the compiled call timed again, side by side, when their measured parts
do not add up to Δ.

Δ comes from each cell's wall loop, the parts from its host timer, measured one after the other by
``measure.cell.time_call``. The plain twin's host and the guards cancel in the sum (``attribution``), so the residual
Δ − Σ parts is (compiled wall − host − wait) − (eager wall − host − wait): how far the two cells' loops disagree, in
µs. ``runner`` settles each cell's pair to a *relative* gap only; this module aims at the residual itself.

When the residual the attribution would have (``attribute``, ``check_sum``) passes ``SUM_TOLERANCE`` of |Δ| and Δ
is not on par with eager, the calls kept warm by ``runner.measure_cell`` are timed again in rounds,
each the eager call then the compiled one (``measure.cell.retime_wall_and_host``: wall loop, then host timer), so
that one round's parts come from the same
minutes of the machine: at most ``stability.attempts − 1`` rounds, stopping at the first within tolerance. The round
with the smallest |residual| is written into the results when it beats the first measurement and leaves every
stable timing stable. Nothing forces the sum: a residual still past the tolerance stays, and ``verdicts`` refuses.

``gather`` reconciles before it compiles anything else: ``modes.compile_fn`` resets Dynamo, which drops every
compiled code's cache entries, so a compiled call kept past the next compile would compile again. That is why the
plain twin (compiled later) is not in the rounds: its host moves the split between the NJT and the other host part,
never their sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from jaggedperf.lab import runner
from jaggedperf.lab.measure.cell import retime_wall_and_host
from jaggedperf.lab.doctor.attribution import SUM_TOLERANCE, attribute, check_sum, host_timed, on_par, wall_us
from jaggedperf.lab.doctor.evidence import (
    CudaGraphs,
    Evidence,
    HostOverhead,
    InputForm,
    Kernels,
    Reconcile,
    compile_cost,
    host_call_us,
    sync_wait_us,
)
from jaggedperf.lab.doctor.probes import CompileStats, GuardCost
from jaggedperf.lab.result import OK, UNSTABLE, Result

METHOD = ("when the parts leave more than the tolerance of Δ unattributed, the eager and compiled calls (kept warm, "
          "not compiled again) are timed again in rounds — wall loop then host timer, eager then compiled — and the "
          "round with the smallest |residual| is kept if it beats the first measurement")
WITHIN = "the first measurement's parts add up within the tolerance"
ON_PAR = "Δ is on par with eager: the sum is not judged there"
_QUIET = (WITHIN, ON_PAR)  # reasons for which no round was wanted: nothing to tell the reader


@dataclass
class Calls:
    """The warm calls ``reconcile`` times again (``runner.Measured.call`` of the eager and the compiled cell)."""

    eager: Callable[[], object] | None = None
    compiled: Callable[[], object] | None = None

    def release(self, device: torch.device) -> None:
        """Let the calls go (a compiled call holds its graph and device memory) and return the cached memory."""
        self.eager = self.compiled = None
        if device.type == "cuda":
            torch.cuda.empty_cache()


@dataclass
class _Round:
    number: int
    eager: Result  # the results as they would be with this round's timings
    compiled: Result
    delta_us: float
    residual_us: float
    ok: bool
    unsettles: bool  # it would turn a stable timing unstable


def reconcile(eager: Result, compiled: Result, calls: Calls, options: runner.Options, *, device_time: bool,
              on_stage: Callable[[str], None] | None = None) -> Reconcile | None:
    """Time the eager and compiled calls again while their parts do not add up to Δ (see the module docstring).

    Args:
        eager, compiled: the cells' results, timed with the host timer; the kept round is written into them.
        calls: their warm calls; the caller releases them (``Calls.release``).
        options: how to time (warm-up, iterations, the stability policy and its attempts).
        device_time: whether the attribution uses device time (``HostOverhead.device_time``).
        on_stage: called with "reconcile" when a round is about to run.

    Returns:
        What was done, or None when either cell was not timed with the host timer (no measured residual).
    """
    if not (eager.timed and compiled.timed):
        return None
    first = _pair(eager, compiled, device_time)
    if not host_timed(first):
        return None
    delta, residual, ok = _sum_check(first)
    record = Reconcile(METHOD, SUM_TOLERANCE, delta, residual, delta, residual, ok)
    if ok:
        record.reason = WITHIN
    elif on_par(delta, wall_us(eager)):
        record.reason = ON_PAR
    elif calls.eager is None or calls.compiled is None:
        record.reason = "not timed again: the warm calls were not kept"
    elif options.stability.attempts < 2:
        record.reason = "not timed again: the stability policy allows a single attempt"
    if record.reason is not None:
        return record
    if on_stage:
        on_stage("reconcile")
    best: _Round | None = None
    for number in range(1, options.stability.attempts):
        try:
            now = _round(number, eager, compiled, calls, options, device_time)
        except Exception as exc:  # the first measurement stands; a re-measurement's failure is recorded, not raised
            if isinstance(exc, torch.cuda.OutOfMemoryError) and options.device.type == "cuda":
                torch.cuda.empty_cache()
            text = str(exc).strip().splitlines()
            record.reason = f"round {number} stopped: {type(exc).__name__}: {text[0][:300] if text else ''}"
            break
        record.rounds = number
        record.deltas_us.append(now.delta_us)
        record.residuals_us.append(now.residual_us)
        if best is None or (now.unsettles, abs(now.residual_us)) < (best.unsettles, abs(best.residual_us)):
            best = now
        if now.ok and not now.unsettles:
            break
    if best is not None and not best.unsettles and abs(best.residual_us) < abs(residual):
        _write(eager, best.eager)
        _write(compiled, best.compiled)
        record.kept_round = best.number
        record.delta_after_us, record.residual_after_us, record.sums_ok = best.delta_us, best.residual_us, best.ok
    if not record.sums_ok and record.reason is None:
        record.reason = f"no round's parts added up within {SUM_TOLERANCE:.0%} of Δ"
    return record


def describe(record: Reconcile | None) -> str | None:
    """One line for the evidence's notes when the parts were (or were to be) timed again; None when no round was
    wanted.

    Args:
        record: from ``reconcile``.

    Returns:
        The line, in µs, or None.
    """
    if record is None or record.reason in _QUIET:
        return None
    share = abs(record.residual_before_us) / abs(record.delta_before_us) if record.delta_before_us else float("inf")
    line = (f"the parts first left {record.residual_before_us:+.1f} µs of Δ {record.delta_before_us:+.1f} µs "
            f"unattributed ({share:.0%} > {record.tolerance:.0%})")
    if record.rounds:
        each = ", ".join(f"{r:+.1f}" for r in record.residuals_us)
        line += (f"; the eager and compiled calls were timed again side by side, {record.rounds} "
                 f"round{'s' if record.rounds != 1 else ''} (residuals {each} µs)")
    if record.kept_round is not None:
        line += (f"; round {record.kept_round} kept: {record.residual_after_us:+.1f} µs of Δ "
                 f"{record.delta_after_us:+.1f} µs")
    elif record.rounds:
        line += "; none beat the first measurement, which is kept"
    if record.reason is not None:
        line += f"; {record.reason}"
    return line


def _round(number: int, eager: Result, compiled: Result, calls: Calls, options: runner.Options,
           device_time: bool) -> _Round:
    """One round: the eager call, then the compiled one, each its wall loop then its host timer; judged on
    copies, the results left as they are."""
    e = retime_wall_and_host(calls.eager, eager, options)
    c = retime_wall_and_host(calls.compiled, compiled, options)
    delta, residual, ok = _sum_check(_pair(e, c, device_time))
    unsettles = any(before.status == OK and after.status == UNSTABLE for before, after in ((eager, e), (compiled, c)))
    return _Round(number, e, c, delta, residual, ok, unsettles)


def _write(result: Result, kept: Result) -> None:
    """The kept round's timings into ``result``, in place (its identity and every other field unchanged)."""
    for name in ("wall", "stability", "host_call", "sync_wait", "host_us", "status", "reason"):
        setattr(result, name, getattr(kept, name))
    result.extra["host_wall_gap"] = kept.extra["host_wall_gap"]


def _pair(eager: Result, compiled: Result, device_time: bool) -> Evidence:
    """Evidence of the eager and compiled cells alone: its residual is the whole cell's, since the plain twin's host
    and the guards cancel in the parts' sum."""
    no = "not needed for the residual of the eager and compiled pair"
    host = HostOverhead(device_time, None, "", None, None, GuardCost(False, no), CompileStats(False, no),
                        host_call_us(eager), host_call_us(compiled), sync_wait_us(eager), sync_wait_us(compiled))
    return Evidence(eager.op, eager.implementation, compiled.mode, eager.case, eager.device, "", eager, compiled,
                    host, InputForm(False, no, ""), Kernels(False, no, ""), None,
                    CudaGraphs(False, no, "", compiled.mode, None), compile_cost(eager, compiled))


def _sum_check(e: Evidence) -> tuple[float, float, bool]:
    """(Δ, residual, within tolerance) as the attribution computes them."""
    delta, parts = attribute(e)
    _, residual, ok = check_sum(delta, parts, SUM_TOLERANCE)
    return delta, residual, ok
