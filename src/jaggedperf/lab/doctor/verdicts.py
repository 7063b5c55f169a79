"""Verdicts from measurements: a cell's evidence and its attribution (``attribution``) → a diagnosis: the
verdict line, the findings, the measured remedy, or why the doctor refuses a verdict.

Pure functions of an ``Evidence`` (recorded numbers in, words out): nothing here runs or times
anything, so every verdict can be tested on the CPU from numbers measured on a GPU.

The doctor refuses a verdict, and says why, when the eager, compiled or plain-twin timing is unstable
(``Result.status == UNSTABLE``), or when the residual passes ``SUM_TOLERANCE`` of |Δ| (unless Δ itself is
on par with eager, where a share of nothing means nothing).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.doctor.attribution import (
    DEVICE,
    GUARDS,
    NJT,
    SUM_TOLERANCE,
    WAIT_LABEL,
    Contribution,
    attribute,
    check_sum,
    host_timed,
    on_par,
    wall_us,
)
from jaggedperf.lab.doctor.evidence import Evidence, EvidenceRun, kernel_infos, not_tried_reason
from jaggedperf.lab.result import OK, TIMED, UNSTABLE


@dataclass
class Diagnosis:
    op: str
    implementation: str
    mode: str
    case_label: str
    available: bool
    reason: str | None = None
    wall_only: bool = False  # no device time: the host parts include the computation
    eager_wall_us: float | None = None
    compiled_wall_us: float | None = None
    delta_us: float | None = None
    contributions: list[Contribution] = field(default_factory=list)  # ordered by |us|, largest first
    parts_sum_us: float | None = None
    residual_us: float | None = None  # Δ − Σ parts: what the measured parts leave unattributed
    sums_ok: bool | None = None  # |residual| ≤ 10% of |Δ|
    residual_measured: bool | None = None  # False: no host timer in the evidence, host parts are remainders
    refused: str | None = None  # why there is no verdict (unstable inputs, residual past 10% of Δ), or None
    verdict: str = ""
    findings: list[str] = field(default_factory=list)
    remedy: str | None = None  # the measured remedy the verdict recommends (see ``remedy``), or None


@dataclass
class DoctorRecord:
    """A whole doctor run: environment, copy bandwidth, and per cell its evidence and diagnosis."""

    environment: dict
    copy_gbps: float | None
    evidence: list[Evidence]
    diagnoses: list[Diagnosis]

    def to_dict(self) -> dict:
        return {
            "environment": self.environment,
            "copy_gbps": self.copy_gbps,
            "cells": [{"evidence": e.to_dict(), "diagnosis": asdict(d)} for e, d in zip(self.evidence, self.diagnoses)],
        }


# --- words ---------------------------------------------------------------------------------------


def verdict(e: Evidence, delta: float, parts: list[Contribution]) -> str:
    """One line: how much slower or faster, the largest part pushing that way, and the kernels' side."""
    eager_wall, compiled_wall = wall_us(e.eager), wall_us(e.compiled)
    wall_only = not e.host.device_time
    tail = " (wall only: no device time)" if wall_only else ""
    if on_par(delta, eager_wall):
        head = f"on par with eager (Δ {delta:+.0f} µs on {eager_wall:.0f} µs){tail}"
    elif delta > 0:
        head = f"slower by {delta:.0f} µs ({compiled_wall:.0f} vs {eager_wall:.0f} µs per call){tail}"
    else:
        head = f"faster by {-delta:.0f} µs ({compiled_wall:.0f} vs {eager_wall:.0f} µs per call){tail}"
    sign = 1.0 if delta >= 0 else -1.0
    drivers = [p for p in parts if p.us * sign > 0]
    main = drivers[0] if drivers else parts[0]
    phrases = [phrase(main, e)]
    device = next((p for p in parts if p.key == DEVICE), None)
    if device is not None and device is not main:
        phrases.append(phrase(device, e))
    cost = e.compile_cost
    if delta < 0 and cost.repay_calls is not None:
        phrases.append(f"the {cost.compile_s:.1f} s first call is repaid after {cost.repay_calls:,} calls")
    fix = remedy(e, delta, parts)
    if fix is not None:
        phrases.append(fix)
    return f"{head}: " + "; ".join(phrases)


def remedy(e: Evidence, delta: float, parts: list[Contribution]) -> str | None:
    """The boundary, recommended with its measured numbers, when it is the remedy for this cell's slowdown.

    It is when the compiled call is slower than eager, the largest part of that is host work on NJT inputs,
    and the same implementation through ``jaggedperf.compile`` in the same torch mode (``e.boundary``)
    ran ok and faster than the compiled call.

    Args:
        e: the cell's evidence.
        delta, parts: from ``attribute``.

    Returns:
        ``compile it on its components: jaggedperf.compile(fn, mode='…') — X µs a call instead of Y (Z× eager)``,
        or None.
    """
    b = e.boundary
    if delta <= 0 or not parts or not b.available or b.result is None:
        return None
    drivers = [p for p in parts if p.us > 0]
    if not drivers or drivers[0].key != NJT:
        return None
    eager_wall, compiled_wall, fixed_wall = wall_us(e.eager), wall_us(e.compiled), wall_us(b.result)
    if fixed_wall is None or fixed_wall <= 0 or fixed_wall >= compiled_wall:
        return None
    return _recommendation(b.torch_mode, fixed_wall, compiled_wall, eager_wall)


def _recommendation(torch_mode: str, fixed_wall: float, compiled_wall: float, eager_wall: float) -> str:
    return (f"compile it on its components: jaggedperf.compile(fn, mode='{torch_mode}') — {fixed_wall:.0f} µs a "
            f"call instead of {compiled_wall:.0f} ({eager_wall / fixed_wall:.1f}× eager)")


DIRECT = "whatever the split, measured side by side:"  # how a refused verdict introduces a direct remedy


def direct_remedy(e: Evidence) -> str | None:
    """The boundary's recommendation when the attribution is refused, from its own side-by-side measurement.

    A refused attribution (a residual past the tolerance, an unstable twin) says nothing about *why* the
    compiled call is slow, but the boundary and the compiled call are two timings of their own: when both
    settled (status ok) and the boundary's p80 lies below the compiled call's p20 (their spreads apart), the
    boundary is faster whatever the split, and it is recommended with those numbers.

    Args:
        e: the cell's evidence.

    Returns:
        The recommendation in ``remedy``'s words, or None.
    """
    b = e.boundary
    if not b.available or b.result is None or b.result.status != OK or e.compiled.status != OK:
        return None
    fixed, compiled = b.result.wall, e.compiled.wall
    if fixed is None or compiled is None or fixed.p80_ms is None or compiled.p20_ms is None:
        return None
    if not fixed.p80_ms < compiled.p20_ms or wall_us(e.eager) is None:
        return None
    return _recommendation(b.torch_mode, fixed.median_ms * 1e3, compiled.median_ms * 1e3, wall_us(e.eager))


def phrase(p: Contribution, e: Evidence) -> str:
    """A few words for one part of the attribution, for the verdict line."""
    size = abs(p.us)
    if p.key == DEVICE:  # the kernels' own time, whether the part is that or the wait for it
        n = e.compiled.kernels_per_call
        subject = "its kernel is" if n is not None and round(n) == 1 else "its kernels are"
        kernels = e.compiled.device_time.median_us - e.eager.device_time.median_us
        said = f"{subject} {abs(kernels):.0f} µs {'slower' if kernels > 0 else 'faster'} than eager's"
        if p.label != WAIT_LABEL:
            return said
        return f"{size:.0f} µs {'more' if p.us > 0 else 'less'} waiting for the device than eager ({said})"
    if p.key == NJT:
        if p.us > 0:
            return f"{size:.0f} µs {'overhead' if not e.host.device_time else 'host overhead'} on NJT inputs"
        return f"{size:.0f} µs less host work on NJT inputs than on plain tensors"
    if p.key == GUARDS:
        return f"{size:.0f} µs guard evaluation"
    wall_only = not e.host.device_time
    what = "other work (computation included)" if wall_only else "other host work"
    return f"{size:.0f} µs {'more' if p.us > 0 else 'less'} {what} than eager"


def findings(e: Evidence) -> list[str]:
    """Sentences from the other sections: Dynamo, kernels, padding, CUDA graphs, compile cost."""
    out = [_dynamo_line(e)]
    k = e.kernels
    if k.available:
        out.append(_kernels_line(e))
    else:
        out.append(f"kernels: {k.reason}")
    if e.jagged is not None and e.jagged.pads:
        out.append(_padding_line(e))
    out.append(_cudagraphs_line(e))
    out.append(_boundary_line(e))
    cost = e.compile_cost
    if cost.compile_s is not None:
        repay = {"never": "never repaid: the compiled call is not faster per call",
                 "unknown": "repayment unknown"}.get(cost.repay, f"repaid {cost.repay}")
        out.append(f"compile: first call {cost.compile_s:.2f} s; {repay}")
    return [line for line in out if line]


def _dynamo_line(e: Evidence) -> str:
    d, g = e.host.dynamo, e.host.guards
    if not d.available:
        return f"Dynamo: {d.reason}"
    text = (f"Dynamo: {d.graphs} graph(s), {d.graph_breaks} graph break(s), "
            f"{'?' if d.recompiles is None else d.recompiles} recompile(s)")
    if g.available:
        text += f"; {g.guards} guards checked in {g.check_us:.1f} µs per call"
        pg = e.input_form.guards
        if pg is not None and pg.available:
            text += f" (plain twin: {pg.guards} guards in {pg.check_us:.1f} µs)"
    else:
        text += f"; guards: {g.reason}"
    if g.available and g.slowest:
        text += "; costliest guards alone: " + ", ".join(
            f"{x.kind} on {x.source} {x.us:.1f} µs" for x in g.slowest[:3])
    if d.break_reasons:
        text += f"; break: {d.break_reasons[0]}"
    if d.recompile_reasons:
        text += f"; recompile: {d.recompile_reasons[0]}"
    return text


def _kernels_line(e: Evidence) -> str:
    k = e.kernels

    def side(name: str, per_call: float | None, kernels) -> str:
        total = sum(x.us_per_call for x in kernels)
        names = ", ".join(x.name[:40] for x in kernels[:3]) + (" …" if len(kernels) > 3 else "")
        return f"{name} {_fmt(per_call, '.0f')} ({total:.1f} µs: {names})"

    text = "kernels per call: " + side("eager", k.eager_per_call, k.eager) + ", " + side(
        "compiled", k.compiled_per_call, k.compiled)
    if k.inductor_kernels:
        text += f"; Inductor generated {len(k.inductor_kernels)}"
    best = max((x for x in k.compiled if x.pct_of_copy is not None), key=lambda x: x.us_per_call, default=None)
    if best is not None:
        text += f"; the compiled program's longest kernel runs at {best.pct_of_copy:.0f}% of copy bandwidth"
    return text


def _padding_line(e: Evidence) -> str:
    m = e.jagged
    text = (f"padding: the padded program moves {nbytes(m.padded_path_bytes)} per call, "
            f"{m.ratio:.1f}× the {nbytes(m.must_move_bytes)} that must move "
            f"({(m.pad_fraction or 0):.0%} of the padded rows are padding)")
    dev = e.compiled.device_time
    copy = e.kernels.copy_gbps
    if dev is not None and dev.median_us > 0 and copy:
        needed = m.padded_path_bytes / (dev.median_us * 1e-6) / 1e9
        if needed > copy:
            text += (f"; moving that in the compiled call's {dev.median_us:.1f} µs would need {needed:.0f} GB/s "
                     f"> copy {copy:.0f} GB/s: the compiled program does not materialise the padded tensor")
    return text


def _cudagraphs_line(e: Evidence) -> str:
    g = e.cudagraphs
    if not g.available:
        return f"CUDA graphs: {g.reason}"
    parts = []
    if g.counterpart is not None:
        parts.append(f"{g.counterpart_mode} {_result_wall(g.counterpart)} per call "
                     f"(vs {e.mode} {_result_wall(e.compiled)})")
    if g.eager_graph is not None:
        parts.append(f"eager in a CUDA graph {_result_wall(g.eager_graph)} (vs eager {_result_wall(e.eager)})")
    if g.reason:
        parts.append(g.reason)
    text = "CUDA graphs: " + "; ".join(parts)
    with_graphs = g.counterpart_mode if modes_mod.uses_cuda_graphs(g.counterpart_mode or "") else e.mode
    if g.skip_reason:
        text += f"; Inductor skipped cudagraphs in {with_graphs}: {g.skip_reason}"
    elif g.counterpart is not None:
        text += f"; Inductor gave no reason to skip cudagraphs in {with_graphs}"
    copies = _graph_input_copies(e)
    if copies is not None:
        count, us = copies
        text += (f"; {with_graphs} copies its inputs into the graph's own buffers: {count:g} device-to-device "
                 f"copies, {us:.1f} µs a call, that {_other_mode(e, with_graphs)} does not make (inputs not at static "
                 "addresses: hold weights as nn.Parameters or mark them with torch._dynamo.mark_static_address)")
    return text


# The profiler's name for a device-to-device memcpy: how a CUDA-graph tree copies an input that is not at a static
# address into the buffer its graph was recorded with, before each replay.
DTOD_COPY = "Memcpy DtoD"


def _dtod(r) -> tuple[float, float]:
    """(copies, µs) a call of ``r``'s profiled device-to-device memcpys; (0, 0) when none were recorded."""
    rows = [k for k in kernel_infos(r, None, None) if k.name.startswith(DTOD_COPY)]
    return sum(k.calls_per_call for k in rows), sum(k.us_per_call for k in rows)


def _graph_input_copies(e: Evidence) -> tuple[float, float] | None:
    """The device-to-device copies a call that the CUDA-graph mode of the cell makes beyond the same program without
    graphs (the explained mode and its counterpart, one of each), as (copies, µs); None when it makes none more, or
    either side has no kernel record. The program is the same, so the extra copies are the graph tree's own."""
    g = e.cudagraphs
    if g.counterpart is None or g.counterpart.status not in TIMED or e.compiled.status not in TIMED:
        return None
    if modes_mod.uses_cuda_graphs(g.counterpart_mode or ""):
        graphed, plain = g.counterpart, e.compiled
    elif modes_mod.uses_cuda_graphs(e.mode):
        graphed, plain = e.compiled, g.counterpart
    else:
        return None
    if not graphed.extra.get("kernels") or not plain.extra.get("kernels"):
        return None
    (n_graphed, us_graphed), (n_plain, us_plain) = _dtod(graphed), _dtod(plain)
    if n_graphed <= n_plain:
        return None
    return n_graphed - n_plain, max(0.0, us_graphed - us_plain)


def _other_mode(e: Evidence, with_graphs: str) -> str:
    return e.mode if with_graphs != e.mode else (e.cudagraphs.counterpart_mode or "the mode without graphs")


def _boundary_line(e: Evidence) -> str | None:
    b = e.boundary
    if b.result is None:
        # not applicable (a dense implementation, or the explained mode is the boundary): nothing to say
        return None if b.reason is None or b.reason.startswith("not applicable") else f"boundary: {b.reason}"
    return (f"boundary: {b.mode} (jaggedperf.compile, mode='{b.torch_mode}') {_result_wall(b.result)} per call "
            f"(vs {e.mode} {_result_wall(e.compiled)}, eager {_result_wall(e.eager)})")


def _result_wall(r) -> str:
    if r.status not in TIMED or r.wall is None:
        return f"{r.status} ({r.reason})" if r.reason else r.status
    return f"{r.wall.median_ms * 1e3:.0f} µs" + (" (unstable)" if r.status == UNSTABLE else "")


def nbytes(n: int) -> str:
    """Bytes in decimal units: 512 B, 11.8 MB, 1.2 GB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


# --- whole cells ---------------------------------------------------------------------------------


def diagnose(e: Evidence) -> Diagnosis:
    """The diagnosis of one cell: the attribution, its sum check, the verdict and the findings.

    Args:
        e: the cell's evidence.

    Returns:
        The diagnosis; ``available=False`` with the reason when the cell was not tried for the compile budget
        (the verdict is that reason, in today's words: nothing was measured to give one), or when the eager or the
        compiled call did not run to a wall time (skipped, wrong, error).
    """
    d = Diagnosis(e.op, e.implementation, e.mode, e.case.label, available=False, wall_only=not e.host.device_time)
    if e.not_tried is not None:
        d.reason = d.verdict = not_tried_reason(e.not_tried)
        return d
    broken = [r for r in (e.eager, e.compiled) if r.status not in TIMED or r.wall is None]
    if broken:
        d.reason = "; ".join(f"{r.mode} {r.status}: {r.reason}" for r in broken)
        d.verdict = f"cannot attribute: {d.reason}"
        d.findings = [f"{r.mode}: {r.status}: {r.reason}" for r in broken]
        return d
    d.available = True
    d.eager_wall_us, d.compiled_wall_us = wall_us(e.eager), wall_us(e.compiled)
    d.delta_us, d.contributions = attribute(e)
    d.parts_sum_us, d.residual_us, d.sums_ok = check_sum(d.delta_us, d.contributions)
    d.residual_measured = host_timed(e)
    d.findings = findings(e)
    if not d.residual_measured:
        d.findings.append("no host timer in this evidence: the host parts are wall − device and 'other' is the "
                          "remainder, so the residual is zero by construction and checks nothing")
    d.refused = refusal(e, d)
    if d.refused:
        d.verdict = f"no verdict: {d.refused}"
        d.remedy = direct_remedy(e)
        if d.remedy is not None:
            d.verdict += f"; {DIRECT} {d.remedy}"
        return d
    d.verdict = verdict(e, d.delta_us, d.contributions)
    d.remedy = remedy(e, d.delta_us, d.contributions)
    return d


def refusal(e: Evidence, d: Diagnosis) -> str | None:
    """Why the doctor gives no verdict for a cell it could attribute, or None.

    It refuses when a timing it uses is unstable (eager, compiled, or the plain twin whose host time makes
    the NJT part), and when Δ is not on par with eager and the residual passes ``SUM_TOLERANCE`` of |Δ|.

    Args:
        e: the evidence.
        d: its diagnosis, attribution and sum check filled in.

    Returns:
        The reason, one phrase, or None.
    """
    used = [e.eager, e.compiled]
    if e.input_form.available and e.input_form.plain is not None:
        used.append(e.input_form.plain)
    shaky = [r for r in used if r.status == UNSTABLE]
    if shaky:
        what = "; ".join(f"{r.mode}{' (plain twin)' if r.extra.get('input_form') == 'plain' else ''}: {r.reason}"
                         for r in shaky)
        return (f"the timing it would rest on is unstable ({what}); measure on a quieter machine, or with more "
                "--attempts")
    if not d.sums_ok and not on_par(d.delta_us, d.eager_wall_us):
        share = abs(d.residual_us) / abs(d.delta_us) if d.delta_us else float("inf")
        return (f"the measured parts leave {d.residual_us:+.1f} µs of Δ {d.delta_us:+.1f} µs unattributed "
                f"({share:.0%} > {SUM_TOLERANCE:.0%}): the wall loop and the host timer disagree (a noisy machine, "
                "or host work overlapping device work)")
    return None


def diagnose_run(run: EvidenceRun) -> DoctorRecord:
    """Diagnose every cell of a doctor run.

    Args:
        run: from ``gather.gather_all``.

    Returns:
        The run's environment, copy bandwidth, evidence and one diagnosis per piece of evidence.
    """
    return DoctorRecord(run.environment, run.copy_gbps, run.evidence, [diagnose(e) for e in run.evidence])
