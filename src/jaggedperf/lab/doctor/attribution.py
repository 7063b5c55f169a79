"""The attribution: compiled − eager of one cell, split into measured contributions, and the rules that
judge it (the parts' sum check, "on par"). ``verdicts`` turns it into words.

Pure functions of an ``Evidence`` (recorded numbers in, numbers out): nothing here runs or times
anything, so every attribution can be tested on the CPU from numbers measured on a GPU.

The attribution. With per-call medians in µs:

    Δ          = compiled wall − eager wall                 (the cells' wall loops)
    device     = compiled wait − eager wait                 (CUDA: the host timer's loop also times the sync after
                                                             each call returns: the device work the call's host
                                                             work did not hide; absent on the CPU)
    NJT inputs = compiled host − plain-twin host            (the plain twin, same mode: ``InputForm``)
    guards     = guard evaluation of the plain-form compiled call (the plain twin's, or the compiled
                 call's own when it has no NJT form), timed by calling Dynamo's guard check; the NJT
                 call's *extra* guards lie inside the NJT part, and the findings say how much
    other host = plain-form host − eager host − guards      (runtime wrappers, launches, Python)
    residual   = Δ − Σ parts                                (unattributed)

"host" is the host timer's median (``Result.host_call``: each call until it returns, device idle before
it, no sync), measured apart from the wall loop that gives Δ; a wall is a call's host work plus its wait
at the sync. Device *time* is not the device part: an eager call's several kernels run while the host is
still launching the next, so most of their time is hidden in its host work, while a compiled call's one
kernel, launched last, is waited for whole; their device times' difference then leaves the overlap
unattributed. The findings and the verdict still compare device times. So the parts are
measured, and the residual is what they do not explain: noise between the two loops. On the CPU the host
timer measures the whole call again, so the residual is the noise. Evidence without the waits (written
before they were timed) takes compiled − eager device time for the device part, as it did.

The residual is judged against ``SUM_TOLERANCE`` of |Δ|, and Δ against ``PAR_FRACTION`` of eager's wall
("on par"); ``verdicts`` refuses a verdict on those grounds.

Evidence written before the host timer existed has no host timer: its host is wall − device and "other"
is the remainder, so its residual is zero by construction; the diagnosis says so
(``verdicts.Diagnosis.residual_measured``).
"""

from __future__ import annotations

from dataclasses import dataclass

from jaggedperf.lab.doctor.evidence import Evidence

DEVICE = "device"
NJT = "njt_inputs"
GUARDS = "guards"
OTHER = "other_host"
WAIT_LABEL = "device work waited for"  # the device part measured as the wait at the sync (``_wait_part``)
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
    eager_wall, compiled_wall = wall_us(e.eager), wall_us(e.compiled)
    if eager_wall is None or compiled_wall is None:
        raise ValueError("attribution needs the wall time of both the eager and the compiled call")
    if host_timed(e):
        return delta_of(e), _measured_parts(e)
    return delta_of(e), _remainder_parts(e)


def delta_of(e: Evidence) -> float:
    """Δ = compiled wall median − eager wall median, µs per call."""
    return wall_us(e.compiled) - wall_us(e.eager)


def _device_part(e: Evidence) -> Contribution:
    e_dev, c_dev = e.eager.device_time.median_us, e.compiled.device_time.median_us
    return Contribution(
        DEVICE, "device time (kernels)", c_dev - e_dev, None,
        f"compiled device median − eager device median (compiled: {e.compiled.device_time.method}, "
        f"eager: {e.eager.device_time.method})",
        f"compiled {c_dev:.1f} µs{_kernel_count(e.compiled.kernels_per_call)} vs eager {e_dev:.1f} µs"
        f"{_kernel_count(e.eager.kernels_per_call)}")


def _wait_part(e: Evidence) -> Contribution:
    e_wait, c_wait = e.host.eager_wait_us, e.host.compiled_wait_us
    e_dev, c_dev = e.eager.device_time.median_us, e.compiled.device_time.median_us
    return Contribution(
        DEVICE, WAIT_LABEL, c_wait - e_wait, None,
        "compiled − eager median wait from the call's return to the end of the sync after it (the host timer's "
        "loop): device work not hidden behind the call's host work, and the sync",
        f"wait {c_wait:.1f} µs compiled vs {e_wait:.1f} µs eager; device time {c_dev:.1f} µs"
        f"{_kernel_count(e.compiled.kernels_per_call)} vs {e_dev:.1f} µs{_kernel_count(e.eager.kernels_per_call)}")


def _measured_parts(e: Evidence) -> list[Contribution]:
    """Every part from its own measurement: the host timer and its waits (device timers for evidence without
    the waits), the guard check."""
    wall_only = not e.host.device_time
    timer = "host timer (each call until it returns, no sync)" + ("; on the CPU, the whole call" if wall_only else "")
    waited = e.host.eager_wait_us is not None and e.host.compiled_wait_us is not None
    parts: list[Contribution] = [] if wall_only else [_wait_part(e) if waited else _device_part(e)]
    eager_h, compiled_h = e.host.eager_call_us, e.host.compiled_call_us
    form = e.input_form
    plain_h = form.plain_call_us if form.available and form.plain is not None else None
    if plain_h is not None:
        parts.append(_njt_part(e, compiled_h, plain_h, "NestedTensor input overhead",
                               f"compiled-NJT host − compiled-plain host, {timer}"))
    guard = _guard_part(e, twin=plain_h is not None)
    guards = guard.us if guard is not None else None
    if guard is not None:
        parts.append(guard)
    base_h = plain_h if plain_h is not None else compiled_h
    label = "other work (wall only: includes the computation)" if wall_only else "other host work"
    parts.append(Contribution(
        OTHER, label, base_h - eager_h - (guards or 0.0), None,
        f"{'plain-twin' if plain_h is not None else 'compiled'} host − eager host − guards, {timer}",
        f"host per call: {base_h:.1f} µs compiled{' (plain)' if plain_h is not None else ''} vs {eager_h:.1f} µs "
        "eager; runtime wrappers, launches and Python of the compiled call, minus eager's own dispatch"
        + ("; without device time the computation is in here too" if wall_only else "")))
    return _shared_and_sorted(parts, delta_of(e))


def _njt_part(e: Evidence, compiled_us: float, plain_us: float, label: str, method: str) -> Contribution:
    """The NJT part: the compiled call's host time on NJT inputs minus its plain twin's, as ``method`` measured."""
    return Contribution(
        NJT, label, compiled_us - plain_us, None, method,
        f"host per call: {compiled_us:.1f} µs on NJT inputs vs {plain_us:.1f} µs on plain tensors{_guard_detail(e)}")


def _guard_part(e: Evidence, *, twin: bool) -> Contribution | None:
    """The guard-evaluation part: the plain twin's guards when the NJT part is measured against the twin
    (the NJT call's extra guards are then in that part), else the compiled call's; None when not probed."""
    source = e.input_form.guards if twin else e.host.guards
    if source is None or not source.available or source.check_us is None:
        return None
    whose = "the plain twin's" if twin else "the compiled call's"
    return Contribution(
        GUARDS, "guard evaluation", source.check_us, None,
        f"{whose} Dynamo guards: guard_manager.check on the call's frame locals, median per call",
        f"{source.guards} guards" + (" (the NJT call's extra guards are in the NJT part)" if twin else ""))


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
        part = _njt_part(e, e.host.compiled_host_us, form.plain_host_us,
                         f"NestedTensor input overhead ({'wall' if wall_only else 'host'})",
                         "compiled-NJT host − compiled-plain host (the plain twin compiled in the same mode)"
                         + (" — wall only" if wall_only else ""))
        njt = part.us
        parts.append(part)

    guard = _guard_part(e, twin=njt is not None)
    guards = guard.us if guard is not None else None
    if guard is not None:
        parts.append(guard)

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


def on_par(delta: float, eager_wall: float) -> bool:
    """|Δ| within ``PAR_FRACTION`` of eager's wall (or 1 µs): compiled and eager are on par."""
    return abs(delta) <= max(1.0, PAR_FRACTION * eager_wall)


def wall_us(result) -> float | None:
    """A result's wall median in µs per call, or None when it has no wall time."""
    return None if result is None or result.wall is None else result.wall.median_ms * 1e3


def _guard_detail(e: Evidence) -> str:
    g, pg = e.host.guards, e.input_form.guards
    if not (g.available and pg is not None and pg.available):
        return ""
    extra = g.check_us - pg.check_us
    return (f"; of it, {extra:.1f} µs is extra guard evaluation ({g.guards} guards on NJT inputs in "
            f"{g.check_us:.1f} µs vs {pg.guards} on plain tensors in {pg.check_us:.1f} µs)")


def _kernel_count(n: float | None) -> str:
    return "" if n is None else f", {n:.0f} kernel{'s' if round(n) != 1 else ''}"
