"""One workload on one case: each way (eager mode, torch.compile, jaggedperf.compile) checked against eager mode or the
workload's float64 reference, its graphs counted over batches of other lengths (``check``), then timed side by side
in interleaved rounds with the boundary's floor and limit beside it (``time_cell``), and a training step's bar judged
on the cell (``step_verdict``)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab.measure import rounds, stats
from jaggedperf.lab.njt_workloads.catalog import Built, Workload, get
from jaggedperf.lab.njt_workloads.floor import (crossing_steps, engine_steps, forward, limit_ratio, limit_walls,
                                                region_step, step)

__all__ = ["STEP_BAR", "WAYS", "Cell", "Check", "StepVerdict", "case_name", "check", "step_verdict", "time_cell"]

WAYS = ("eager", "torch.compile", "jaggedperf.compile")


@dataclass
class Cell:
    workload: str
    case: str
    kind: str  # "forward" or "step"
    medians_us: dict[str, float]
    p20_us: dict[str, float]
    p80_us: dict[str, float]
    ratio_jp_tc: float  # median within-round jaggedperf.compile / torch.compile
    ratio_jp_tc_p20: float
    ratio_jp_tc_p80: float
    ratio_tc_eager: float | None  # median within-round torch.compile / eager; None: eager mode was not timed
    ratio_floor_tc: float | None  # the boundary's floor (its region on pre-split parts) / torch.compile; None: none
    # That floor, with the copy autograd makes of an NJT leaf's gradient made within its step, plus the autograd
    # engine's own cost of an NJT crossing autograd where the input NJT trains (an NJT node's, less a plain node's:
    # ``engine_steps``): the least any step on that NJT can take, torch.compile's included; None: no NJT input
    # trains (or no floor)
    ratio_limit_tc: float | None
    rounds: int
    quiet_rounds: int
    walls_us: dict[str, list[float]]
    probes_us: list[float]


@dataclass
class Check:
    workload: str
    case: str
    graphs: dict[str, int]  # Dynamo's graphs over the first call and three batches of other lengths (training too)
    fell_back: str | None
    errors: dict[str, str]
    max_rel_error: dict[str, float]  # against eager mode, or the workload's float64 reference where it has one

    def held(self) -> dict[str, float]:
        """The errors the ways are held to: every way's, less eager mode's and torch.compile's where torch's own
        implementation is wrong (``Workload.torch_wrong``: those are measured, not held)."""
        wrong = get(self.workload).torch_wrong
        return {way: e for way, e in self.max_rel_error.items() if not wrong or way == "jaggedperf.compile"}


def _rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a = a.values() if a.is_nested else a
    b = b.values() if b.is_nested else b
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _ways(fn, mode: str) -> dict[str, Callable]:
    import jaggedperf  # the package's face (the lab sits below it)

    kwargs = {} if mode == "default" else {"mode": mode}
    return {"eager": fn, "torch.compile": torch.compile(fn, dynamic=True, **kwargs),
            "jaggedperf.compile": jaggedperf.compile(fn, **kwargs)}


def _other_batches(call: Callable, workload: Workload, case: Case, device, dtype) -> None:
    for seed in range(1, 4):  # three more batches of the case: other lengths, other B-row lengths, same shape class
        other = make_batch(Case(case.B, case.M, case.seqlen, case.sparsity, seed=seed), device)
        with torch.no_grad():
            call(workload.build(other, dtype).x)


def check(workload: Workload, case: Case, device: torch.device, dtype: torch.dtype,
          mode: str) -> tuple[Check, dict[str, Callable], Built]:
    """Each way's outputs (and a training step's gradients) against eager mode's, or the workload's float64
    ``reference`` where it has one; the graphs over other batches."""
    torch._dynamo.reset()
    built = workload.build(make_batch(case, device), dtype)
    ways = _ways(built.fn, mode)
    errors, rel, graphs = {}, {}, {}
    if workload.reference is not None:
        reference, grads_ref = _float64_reference(workload.reference, built)
    else:
        with torch.no_grad():
            reference = built.fn(built.x)
        grads_ref = None
        if built.grad is not None:
            _run_backward(built.fn, built)
            grads_ref = [leaf.grad.clone() for leaf in built.leaves]
            for leaf in built.leaves:
                leaf.grad = None
    for name, call in ways.items():
        try:
            graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
            with torch.no_grad():
                out = call(built.x)
            rel[name] = _rel_error(out, reference)
            if grads_ref is not None:
                _run_backward(call, built)
                for leaf, ref in zip(built.leaves, grads_ref):
                    rel[name] = max(rel[name], _rel_error(leaf.grad, ref))
                    leaf.grad = None
            if name != "eager":
                _other_batches(call, workload, case, device, dtype)
                graphs[name] = torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs_before
        except Exception as err:  # noqa: BLE001 (recorded: the cell is not timed)
            errors[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    jp = ways["jaggedperf.compile"]
    fell_back = getattr(getattr(jp, "boundary", jp), "last_fallback", None)
    return Check(workload.name, case_name(case), graphs, fell_back, errors, rel), ways, built


def _float64_reference(reference: Callable, built: Built) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """``reference``'s output on the input NJT in float64, and its gradient there (the only leaf: the input)."""
    x = built.x.detach().to(torch.float64).requires_grad_(built.grad is not None)
    out = reference(x)
    if built.grad is None:
        return out.detach(), None
    out.backward(built.grad.to(torch.float64))
    return out.detach(), [x.grad]


def _run_backward(call, built) -> None:
    call(built.x).backward(built.grad)


def time_cell(workload: Workload, case: Case, kind: str, ways: dict[str, Callable], built: Built,
              device: torch.device, n_rounds: int, parts: bool = False) -> Cell:
    """Wall per call of each way in ``n_rounds`` interleaved rounds: ``kind`` "forward" (under no_grad) or "step"
    (forward, backward of the fixed output gradient, gradients reset). ``ways`` needs torch.compile and
    jaggedperf.compile; eager mode is timed where it is among them (a bar that does not read it leaves it out: at the
    seed's first shape its attention step takes 19 ms a call against torch.compile's 3). ``parts``: a step whose input
    NJT trains also times the boundary's step built up from its floor (``crossing_steps``)."""
    make = forward if kind == "forward" else step
    fns = {name: make(call, built) for name, call in ways.items()}
    boundary = getattr(ways["jaggedperf.compile"], "boundary", ways["jaggedperf.compile"])
    if not boundary.fallbacks and not boundary.pass_through and boundary.regions:
        fns["floor"] = region_step(ways["jaggedperf.compile"], built, kind)  # the boundary's own floor, beside
        if kind == "step" and built.x.requires_grad:
            fns["floor + copy"] = region_step(ways["jaggedperf.compile"], built, kind, copied=True)
            fns.update(engine_steps(built))
            if parts:
                fns.update(crossing_steps(ways["jaggedperf.compile"], built))
    for fn in fns.values():  # compiled (and the backward graph) before the first round
        for _ in range(3):
            fn()
    result = rounds.run(fns, device, rounds=n_rounds)
    walls = {name: result.walls(name) for name in fns}
    ratios = sorted(result.ratios("jaggedperf.compile", "torch.compile"))
    return Cell(workload.name, case_name(case), kind,
                {n: statistics.median(w) for n, w in walls.items()},
                {n: _q(w, 0.2) for n, w in walls.items()}, {n: _q(w, 0.8) for n, w in walls.items()},
                statistics.median(ratios), _q(ratios, 0.2), _q(ratios, 0.8),
                statistics.median(result.ratios("torch.compile", "eager")) if "eager" in fns else None,
                statistics.median(result.ratios("floor", "torch.compile")) if "floor" in fns else None,
                limit_ratio(walls) if "engine" in fns else None,
                len(result.rounds), len(result.quiet),
                walls, [r.probe_us for r in result.rounds])


def _q(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def case_name(case: Case) -> str:
    return f"B{case.B}-M{case.M}-L{case.seqlen}-s{case.sparsity}"


STEP_BAR = 0.8  # a training step through the boundary: at most this × torch.compile's


@dataclass(frozen=True)
class StepVerdict:
    """A training step's bar (``STEP_BAR`` × torch.compile's), judged on one cell."""

    outcome: str  # "holds"; "at the limit" (the bar lies below the limit and the step is not above it); "fails"
    limit_tc: float | None  # the limit (the larger of the floor and ``Cell.ratio_limit_tc``) / torch.compile
    # median(jaggedperf.compile) / median(limit) over the rounds with its bootstrap interval; None: no limit measured
    over_limit: stats.RatioInterval | None


def step_verdict(cell: Cell) -> StepVerdict | None:
    """The step bar on ``cell`` (None for a forward): it holds at ``STEP_BAR`` × torch.compile's or below; where the
    limit measured in the same rounds is above that bar, the step is at the limit unless the bootstrap interval of
    its median over the limit's median lies wholly above 1 (above it beyond the run's own spread); else it fails."""
    if cell.kind != "step":
        return None
    limits = [r for r in (cell.ratio_floor_tc, cell.ratio_limit_tc) if r is not None]
    limit_tc = max(limits, default=None)
    walls = limit_walls(cell.walls_us)
    over = stats.bootstrap_ratio(walls, cell.walls_us["jaggedperf.compile"]) if walls else None
    if cell.ratio_jp_tc <= STEP_BAR:
        return StepVerdict("holds", limit_tc, over)
    if limit_tc is not None and limit_tc > STEP_BAR and over is not None and over.low <= 1.0:
        return StepVerdict("at the limit", limit_tc, over)
    return StepVerdict("fails", limit_tc, over)
