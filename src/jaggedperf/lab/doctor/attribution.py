"""Verdicts from measurements: evidence → ordered contributions → a verdict line per cell.

Pure functions of an ``Evidence`` (recorded numbers in, words out): nothing here runs or times
anything, so every verdict can be tested on the CPU from numbers measured on a GPU.

The attribution. With per-call medians in µs:

    Δ          = compiled wall − eager wall                 (the cells' wall loops)
    device     = compiled device − eager device             (device timers; absent on the CPU)
    NJT inputs = compiled host − plain-twin host            (the plain twin, same mode: ``InputForm``)
    guards     = guard evaluation of the plain-form compiled call (the plain twin's, or the compiled
                 call's own when it has no NJT form), timed by calling Dynamo's guard check; the NJT
                 call's *extra* guards lie inside the NJT part, and the findings say how much
    other host = plain-form host − eager host − guards      (runtime wrappers, launches, Python)
    residual   = Δ − Σ parts                                (unattributed)

"host" is the host timer's median (``Result.host_call``: each call until it returns, device idle before
it, no sync), measured apart from the wall loop that gives Δ. So the parts are measured, and the residual
is what they do not explain: noise between the two measurements, host work overlapping device work, a
sync's own cost. On the CPU the host timer measures the whole call again, so the residual is the noise.

The doctor refuses a verdict, and says why, when the eager, compiled or plain-twin timing is unstable
(``Result.status == UNSTABLE``), or when the residual passes ``SUM_TOLERANCE`` of |Δ| (unless Δ itself is
on par with eager, where a share of nothing means nothing).

Evidence written before the host timer existed has no host timer: its host is wall − device and "other"
is the remainder, so its residual is zero by construction; the diagnosis says so (``residual_measured``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab.doctor.evidence import Evidence, EvidenceRun
from jaggedperf.lab.result import TIMED, UNSTABLE

DEVICE = "device"
NJT = "njt_inputs"
GUARDS = "guards"
OTHER = "other_host"
SUM_TOLERANCE = 0.10  # parts must add to Δ within this fraction of |Δ|
PAR_FRACTION = 0.02  # |Δ| under this fraction of eager's wall (or 1 µs) is "on par"


@dataclass
class Contribution:
    key: str  # device | njt_inputs | guards | other_host
    label: str
    us: float  # µs per call this part adds to compiled − eager (negative: it saves)
    share: float | None  # us / Δ (None when Δ is 0)
    method: str  # how it is measured
    detail: str | None = None


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


# --- attribution ---------------------------------------------------------------------------------


def host_timed(e: Evidence) -> bool:
    """Whether the evidence has the host timer for the calls the host parts use (eager, compiled, and the plain
    twin when its part is taken)."""
    form = e.input_form
    plain_needed = form.available and form.plain is not None
    return (e.host.eager_call_us is not None and e.host.compiled_call_us is not None
            and (not plain_needed or form.plain_call_us is not None))


def attribute(e: Evidence) -> tuple[float, list[Contribution]]:
    """Split compiled − eager into measured parts (see the module docstring for each part).

    Args:
        e: the cell's evidence.

    Returns:
        ``(Δ in µs per call, parts ordered by |µs|, largest first)``; Δ − Σ parts is the residual
        (``check_sum``); it is zero by construction only for evidence without the host timer.

    Raises:
        ValueError: the wall time of the eager or the compiled call is missing.
    """
    eager_wall, compiled_wall = _wall_us(e.eager), _wall_us(e.compiled)
    if eager_wall is None or compiled_wall is None:
        raise ValueError("attribution needs the wall time of both the eager and the compiled call")
    if host_timed(e):
        return delta_of(e), _measured_parts(e)
    return delta_of(e), _remainder_parts(e)


def delta_of(e: Evidence) -> float:
    """Δ = compiled wall median − eager wall median, µs per call."""
    return _wall_us(e.compiled) - _wall_us(e.eager)


def _device_part(e: Evidence) -> Contribution:
    e_dev, c_dev = e.eager.device_time.median_us, e.compiled.device_time.median_us
    return Contribution(
        DEVICE, "device time (kernels)", c_dev - e_dev, None,
        f"compiled device median − eager device median (compiled: {e.compiled.device_time.method}, "
        f"eager: {e.eager.device_time.method})",
        f"compiled {c_dev:.1f} µs{_kernel_count(e.compiled.kernels_per_call)} vs eager {e_dev:.1f} µs"
        f"{_kernel_count(e.eager.kernels_per_call)}")


def _measured_parts(e: Evidence) -> list[Contribution]:
    """Every part from its own measurement: device timers, the host timer, the guard check."""
    wall_only = not e.host.device_time
    timer = "host timer (each call until it returns, no sync)" + ("; on the CPU, the whole call" if wall_only else "")
    parts: list[Contribution] = [] if wall_only else [_device_part(e)]
    eager_h, compiled_h = e.host.eager_call_us, e.host.compiled_call_us
    form = e.input_form
    plain_h = form.plain_call_us if form.available and form.plain is not None else None
    if plain_h is not None:
        parts.append(Contribution(
            NJT, "NestedTensor input overhead", compiled_h - plain_h, None,
            f"compiled-NJT host − compiled-plain host, {timer}",
            f"host per call: {compiled_h:.1f} µs on NJT inputs vs {plain_h:.1f} µs on plain tensors"
            f"{_guard_detail(e)}"))
    guard_source = form.guards if plain_h is not None else e.host.guards
    guards = guard_source.check_us if guard_source is not None and guard_source.available else None
    if guards is not None:
        whose = "the plain twin's" if plain_h is not None else "the compiled call's"
        parts.append(Contribution(
            GUARDS, "guard evaluation", guards, None,
            f"{whose} Dynamo guards: guard_manager.check on the call's frame locals, median per call",
            f"{guard_source.guards} guards" + (" (the NJT call's extra guards are in the NJT part)"
                                               if plain_h is not None else "")))
    base_h = plain_h if plain_h is not None else compiled_h
    label = "other work (wall only: includes the computation)" if wall_only else "other host work"
    parts.append(Contribution(
        OTHER, label, base_h - eager_h - (guards or 0.0), None,
        f"{'plain-twin' if plain_h is not None else 'compiled'} host − eager host − guards, {timer}",
        f"host per call: {base_h:.1f} µs compiled{' (plain)' if plain_h is not None else ''} vs {eager_h:.1f} µs "
        "eager; runtime wrappers, launches and Python of the compiled call, minus eager's own dispatch"
        + ("; without device time the computation is in here too" if wall_only else "")))
    return _shared_and_sorted(parts, delta_of(e))


def _remainder_parts(e: Evidence) -> list[Contribution]:
    """Evidence without the host timer: host = wall − device, and "other" is what is left of Δ (so the parts
    add up to Δ by construction)."""
    delta = delta_of(e)
    wall_only = not e.host.device_time
    parts: list[Contribution] = []
    if wall_only:
        d_host = delta
    else:
        device = _device_part(e)
        d_host = delta - device.us
        parts.append(device)

    njt = None
    form = e.input_form
    if form.available and form.plain_host_us is not None and e.host.compiled_host_us is not None:
        njt = e.host.compiled_host_us - form.plain_host_us
        parts.append(Contribution(
            NJT, f"NestedTensor input overhead ({'wall' if wall_only else 'host'})", njt, None,
            "compiled-NJT host − compiled-plain host (the plain twin compiled in the same mode)"
            + (" — wall only" if wall_only else ""),
            f"host per call: {e.host.compiled_host_us:.1f} µs on NJT inputs vs {form.plain_host_us:.1f} µs on plain "
            f"tensors{_guard_detail(e)}"))

    guard_source = form.guards if njt is not None else e.host.guards
    guards = guard_source.check_us if guard_source is not None and guard_source.available else None
    if guards is not None:
        whose = "the plain twin's" if njt is not None else "the compiled call's"
        parts.append(Contribution(
            GUARDS, "guard evaluation", guards, None,
            f"{whose} Dynamo guards: guard_manager.check on the call's frame locals, median per call",
            f"{guard_source.guards} guards" + (" (the NJT call's extra guards are in the NJT part)"
                                               if njt is not None else "")))

    other = d_host - (njt or 0.0) - (guards or 0.0)
    parts.append(Contribution(
        OTHER, "other work (wall only: includes the computation)" if wall_only else "other host work", other, None,
        "Δhost − the parts above (remainder)" if not wall_only else "Δwall − the parts above (remainder)",
        "runtime wrappers, launches and Python of the compiled call, minus eager's own dispatch"
        + ("; without device time the computation is in here too" if wall_only else "")))
    return _shared_and_sorted(parts, delta)


def _shared_and_sorted(parts: list[Contribution], delta: float) -> list[Contribution]:
    for p in parts:
        p.share = p.us / delta if delta else None
    parts.sort(key=lambda p: -abs(p.us))
    return parts


def check_sum(delta: float, parts: list[Contribution], tolerance: float = SUM_TOLERANCE) -> tuple[float, float, bool]:
    """How well ``parts`` add up to ``delta``.

    Returns:
        ``(Σ parts, residual Δ − Σ, ok)`` with ok = |residual| ≤ ``tolerance``·|Δ|.
    """
    total = sum(p.us for p in parts)
    residual = delta - total
    return total, residual, abs(residual) <= tolerance * abs(delta) + 1e-9


# --- words ---------------------------------------------------------------------------------------


def verdict(e: Evidence, delta: float, parts: list[Contribution]) -> str:
    """One line: how much slower or faster, the largest part pushing that way, and the kernels' side."""
    eager_wall, compiled_wall = _wall_us(e.eager), _wall_us(e.compiled)
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
    eager_wall, compiled_wall, fixed_wall = _wall_us(e.eager), _wall_us(e.compiled), _wall_us(b.result)
    if fixed_wall is None or fixed_wall <= 0 or fixed_wall >= compiled_wall:
        return None
    return (f"compile it on its components: jaggedperf.compile(fn, mode='{b.torch_mode}') — {fixed_wall:.0f} µs a "
            f"call instead of {compiled_wall:.0f} ({eager_wall / fixed_wall:.1f}× eager)")


def phrase(p: Contribution, e: Evidence) -> str:
    """A few words for one part of the attribution, for the verdict line."""
    size = abs(p.us)
    if p.key == DEVICE:
        n = e.compiled.kernels_per_call
        subject = "its kernel is" if n is not None and round(n) == 1 else "its kernels are"
        return f"{subject} {size:.0f} µs {'slower' if p.us > 0 else 'faster'} than eager's"
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
    return text


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


def _guard_detail(e: Evidence) -> str:
    g, pg = e.host.guards, e.input_form.guards
    if not (g.available and pg is not None and pg.available):
        return ""
    extra = g.check_us - pg.check_us
    return (f"; of it, {extra:.1f} µs is extra guard evaluation ({g.guards} guards on NJT inputs in "
            f"{g.check_us:.1f} µs vs {pg.guards} on plain tensors in {pg.check_us:.1f} µs)")


def nbytes(n: int) -> str:
    """Bytes in decimal units: 512 B, 11.8 MB, 1.2 GB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _kernel_count(n: float | None) -> str:
    return "" if n is None else f", {n:.0f} kernel{'s' if round(n) != 1 else ''}"


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _wall_us(result) -> float | None:
    return None if result is None or result.wall is None else result.wall.median_ms * 1e3


# --- whole cells ---------------------------------------------------------------------------------


def diagnose(e: Evidence) -> Diagnosis:
    """The diagnosis of one cell: the attribution, its sum check, the verdict and the findings.

    Args:
        e: the cell's evidence.

    Returns:
        The diagnosis; ``available=False`` with the reason when the eager or the compiled call did not
        run to a wall time (skipped, wrong, error).
    """
    d = Diagnosis(e.op, e.implementation, e.mode, e.case.label, available=False, wall_only=not e.host.device_time)
    broken = [r for r in (e.eager, e.compiled) if r.status not in TIMED or r.wall is None]
    if broken:
        d.reason = "; ".join(f"{r.mode} {r.status}: {r.reason}" for r in broken)
        d.verdict = f"cannot attribute: {d.reason}"
        d.findings = [f"{r.mode}: {r.status}: {r.reason}" for r in broken]
        return d
    d.available = True
    d.eager_wall_us, d.compiled_wall_us = _wall_us(e.eager), _wall_us(e.compiled)
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


def on_par(delta: float, eager_wall: float) -> bool:
    """|Δ| within ``PAR_FRACTION`` of eager's wall (or 1 µs): compiled and eager are on par."""
    return abs(delta) <= max(1.0, PAR_FRACTION * eager_wall)


def diagnose_run(run: EvidenceRun) -> DoctorRecord:
    """Diagnose every cell of a doctor run.

    Args:
        run: from ``gather.gather_all``.

    Returns:
        The run's environment, copy bandwidth, evidence and one diagnosis per piece of evidence.
    """
    return DoctorRecord(run.environment, run.copy_gbps, run.evidence, [diagnose(e) for e in run.evidence])
