"""NJT functions as users write them, for timing ``jaggedperf.compile`` against ``torch.compile`` and eager mode.

Each ``Workload`` builds, for one batch, a callable of NJTs and what a training step needs: the module's parameters
or the NJT input that requires grad, and the output gradient (an NJT like the output, with its cached seqlens, as
the compiled backward of ``torch.compile`` on an NJT requires of a tangent). The functions follow common patterns:
PyTorch's tutorial of jagged self-attention (a packed projection, heads split by ``unflatten``/``transpose``,
``scaled_dot_product_attention`` on NJTs), a layer norm with pointwise work and a residual, a softmax over the
ragged dim, tritonbench's jagged mean on the NJT, and the identity (the boundary's own cost).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from jaggedperf.batch import JaggedBatch
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab.measure import rounds, stats

__all__ = ["CROSSING_STEPS", "STEP_BAR", "WAYS", "WORKLOADS", "Built", "Cell", "Check", "StepVerdict", "Workload",
           "case_name", "check", "crossing_steps", "engine_steps", "forward", "get", "limit_walls", "region_step", "step",
           "step_verdict", "time_cell"]

WAYS = ("eager", "torch.compile", "jaggedperf.compile")
# the names of ``crossing_steps``' steps, in the order they build up from the floor
CROSSING_STEPS = ("floor + Unwrap", "floor + Unwrap + Join")


class SelfAttention(torch.nn.Module):
    """Multi-head self-attention over each sequence of an NJT: one packed q/k/v projection, SDPA, out projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = torch.chunk(self.qkv(x), 3, dim=-1)
        q, k, v = (t.unflatten(-1, [self.heads, -1]).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).flatten(-2))


class NormBlock(torch.nn.Module):
    """Layer norm, a projection, an activation, a residual: NJT in, NJT out."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.proj(self.norm(x))) * 0.5


def ragged_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=1) * 2.0


def ragged_softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """``ragged_softmax`` sequence by sequence on dense tensors (differentiable in ``x``'s values): the reference
    where torch's NJT softmax backward over the ragged dim is wrong (``jaggedperf.boundary.lowering``)."""
    values, bounds = x.values(), x.offsets().tolist()
    pieces = [torch.softmax(values[a:b], dim=0) for a, b in zip(bounds, bounds[1:])]
    return torch.nested.nested_tensor_from_jagged(torch.cat(pieces) * 2.0, x.offsets())


def njt_mean(x: torch.Tensor) -> torch.Tensor:
    return torch.mean(x, dim=1)


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class Built:
    """One workload on one batch."""

    fn: Callable[..., torch.Tensor]  # a function or module
    x: torch.Tensor  # the NJT it is called on
    leaves: tuple[torch.Tensor, ...]  # what a training step's gradients reach (reset to None after each step)
    grad: torch.Tensor | None  # the output gradient a training step backpropagates; None: no training step


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[[JaggedBatch, torch.dtype], Built]
    needs_cuda: bool = False  # SDPA on NJTs has no CPU kernel
    # Where torch's own NJT implementation is wrong: the same function computed another way, run in float64 on the
    # input NJT (its outputs and gradients are every way's reference then), and what is wrong in torch's (eager mode
    # and torch.compile measured against it too, not held to it)
    reference: Callable[[torch.Tensor], torch.Tensor] | None = None
    torch_wrong: str = ""


def _njt(batch: JaggedBatch, dtype: torch.dtype, requires_grad: bool) -> torch.Tensor:
    nt = torch.nested.nested_tensor_from_jagged(batch.values.to(dtype), batch.offsets, min_seqlen=batch.min_seqlen,
                                                max_seqlen=batch.max_seqlen)
    return nt.detach().requires_grad_(requires_grad)


def _grad_like(out: torch.Tensor, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device=out.device).manual_seed(seed)
    if not out.is_nested:
        return torch.randn(out.shape, generator=gen, device=out.device, dtype=out.dtype)
    values = torch.randn(out._values.shape, generator=gen, device=out.device, dtype=out.dtype)
    return torch.nested.nested_tensor_from_jagged(values, out._offsets, min_seqlen=out._maybe_min_seqlen,
                                                  max_seqlen=out._maybe_max_seqlen)


def _module(make: Callable[[int], torch.nn.Module]) -> Callable[[JaggedBatch, torch.dtype], Built]:
    def build(batch: JaggedBatch, dtype: torch.dtype) -> Built:
        torch.manual_seed(0)
        module = make(batch.M).to(device=batch.device, dtype=dtype)
        x = _njt(batch, dtype, requires_grad=False)
        with torch.no_grad():
            grad = _grad_like(module(x))
        return Built(module, x, tuple(module.parameters()), grad)

    return build


def _function(fn: Callable[[torch.Tensor], torch.Tensor], trains: bool) -> Callable[[JaggedBatch, torch.dtype], Built]:
    def build(batch: JaggedBatch, dtype: torch.dtype) -> Built:
        x = _njt(batch, dtype, requires_grad=trains)
        with torch.no_grad():
            grad = _grad_like(fn(x)) if trains else None
        return Built(fn, x, (x,) if trains else (), grad)

    return build


WORKLOADS = (
    Workload("attention", "self-attention over each sequence (PyTorch's NJT tutorial): projection, SDPA on NJTs",
             _module(lambda width: SelfAttention(width, heads=4)), needs_cuda=True),
    Workload("norm_block", "layer norm, projection, GELU, residual: NJT in, NJT out", _module(NormBlock)),
    Workload("ragged_softmax", "softmax over each sequence (the ragged dim), NJT out; the input trains",
             _function(ragged_softmax, trains=True), reference=ragged_softmax_reference,
             torch_wrong="torch's NJT softmax backward over the ragged dim reduces over the columns (its gradient)"),
    Workload("njt_mean", "tritonbench's jagged mean on the NJT (torch.mean over the ragged dim)",
             _function(njt_mean, trains=False)),
    Workload("identity", "returns its NJT argument: the boundary's own cost", _function(identity, trains=False)),
)


def get(name: str) -> Workload:
    """The workload of that name.

    Raises:
        KeyError: no such workload (the message lists them).
    """
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(f"no workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")


# --- checking and timing -------------------------------------------------------------------------------


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


def step(call: Callable, built: Built) -> Callable[[], object]:
    def step():
        out = call(built.x)
        out.backward(built.grad)
        for leaf in built.leaves:
            leaf.grad = None

    return step


def forward(call: Callable, built: Built) -> Callable[[], object]:
    def forward():
        with torch.no_grad():
            return call(built.x)

    return forward


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
                _limit_ratio(walls) if "engine" in fns else None,
                len(result.rounds), len(result.quiet),
                walls, [r.probe_us for r in result.rounds])


def engine_steps(built: Built) -> dict[str, Callable[[], object]]:
    """The autograd engine's own cost of one node with an NJT in and an NJT out on ``built``'s input NJT that trains,
    and of the same node on a plain leaf: ``clone`` (a C++ node whose backward passes its gradient on) stepped with
    a gradient of its shape ("engine", "engine plain") and called under no_grad ("engine fwd", "engine plain fwd").

    (engine - engine fwd) - (engine plain - engine plain fwd) is what a step pays for an NJT crossing autograd,
    whoever computes the rest: an NJT output's autograd metadata (its sizes and layout read through the NJT's
    dispatch), the NJT gradient handed to the root, the NJT gradient checked against the input's metadata on its
    edge and accumulated into the leaf (always a copy: autograd never takes an NJT gradient as it is).
    torch.compile's step on the NJT pays each of them around its compiled function. The copy of the gradient's values
    is not in it (both nodes copy alike, their gradient being held by the caller): the floor's step pays it itself
    ("floor + copy", ``region_step``)."""
    x = built.x
    plain = x._values.detach().requires_grad_()
    grad = torch.nested.nested_tensor_from_jagged(torch.randn_like(x._values), x._offsets,
                                                  min_seqlen=x._maybe_min_seqlen, max_seqlen=x._maybe_max_seqlen)
    engine, engine_fwd = _clone_node(x, grad)
    engine_plain, engine_plain_fwd = _clone_node(plain, grad._values)
    return {"engine": engine, "engine fwd": engine_fwd, "engine plain": engine_plain,
            "engine plain fwd": engine_plain_fwd}


def _clone_node(leaf: torch.Tensor, grad: torch.Tensor) -> tuple[Callable[[], object], Callable[[], object]]:
    """(a ``clone`` of ``leaf`` stepped with ``grad``, its gradient reset; the same ``clone`` under no_grad)."""

    def step():
        leaf.clone().backward(grad)
        leaf.grad = None

    def forward():
        with torch.no_grad():
            return leaf.clone()

    return step, forward


def _limit_ratio(walls_us: dict[str, list[float]]) -> float:
    """Median over the rounds of each round's limit (``limit_walls``) / torch.compile (``Cell.ratio_limit_tc``)."""
    return statistics.median([lim / tc for lim, tc in zip(limit_walls(walls_us), walls_us["torch.compile"])])


STEP_BAR = 0.8  # a training step through the boundary: at most this × torch.compile's


@dataclass(frozen=True)
class StepVerdict:
    """A training step's bar (``STEP_BAR`` × torch.compile's), judged on one cell."""

    outcome: str  # "holds"; "at the limit" (the bar lies below the limit and the step is not above it); "fails"
    limit_tc: float | None  # the limit (the larger of the floor and ``Cell.ratio_limit_tc``) / torch.compile
    # median(jaggedperf.compile) / median(limit) over the rounds with its bootstrap interval; None: no limit measured
    over_limit: stats.RatioInterval | None


def limit_kind(walls_us: dict[str, list[float]]) -> str | None:
    """Which definition of a step's limit a cell's walls measured: "copied" (the floor with the NJT leaf's gradient
    copied within its step, plus the engine's cost of an NJT crossing autograd, ``engine_steps``), "apart" (an
    earlier run's: that copy timed apart and added), "crossing" (earlier: without the copy, on a floor whose values
    crossed through ``Unwrap``), "leaf" (earlier still: the floor plus the NJT leaf's backward alone, without the
    no-grad calls), "floor" (no engine measured), None (no floor: the calls went to torch.compile)."""
    if "floor" not in walls_us:
        return None
    if "floor + copy" in walls_us:
        return "copied"
    if "gradient copy" in walls_us:
        return "apart"
    if "engine fwd" in walls_us:
        return "crossing"
    return "leaf" if "engine" in walls_us else "floor"


def limit_walls(walls_us: dict[str, list[float]]) -> list[float] | None:
    """Each round's limit of a step in µs from its cell's walls, by the definition they measured (``limit_kind``):
    the floor ("copied": the floor with the gradient's copy), plus the autograd engine's own cost of an NJT crossing
    autograd (the NJT node's less a plain node's; "leaf": that leaf's backward less a plain one's) and, "apart", the
    gradient's copy timed alone; None: no floor was measured."""
    w, kind = walls_us, limit_kind(walls_us)
    if kind in ("copied", "apart", "crossing"):
        floor = w["floor + copy"] if kind == "copied" else w["floor"]
        limits = [f + (e - ef) - (p - pf) for f, e, ef, p, pf in
                  zip(floor, w["engine"], w["engine fwd"], w["engine plain"], w["engine plain fwd"])]
        return [lim + c for lim, c in zip(limits, w["gradient copy"])] if kind == "apart" else limits
    if kind == "leaf":
        return [f + e - p for f, e, p in zip(w["floor"], w["engine"], w["engine plain"])]
    return None if kind is None else list(w["floor"])


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


def _q(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def case_name(case: Case) -> str:
    return f"B{case.B}-M{case.M}-L{case.seqlen}-s{case.sparsity}"


def region_step(compiled: Callable, built: Built, kind: str, *, copied: bool = False) -> Callable[[], object]:
    """The floor of any boundary for ``compiled`` (a ``jaggedperf.compile`` of ``built.fn``, called once): its
    compiled region on the NJT's parts, split once beforehand (a values leaf of their own where the NJT trains), with
    the region's own output taken as it comes (no NJT rebuilt): ``kind`` "forward" or "step" as ``time_cell``'s.

    ``copied`` (a step whose NJT trains): the values leaf's gradient is then copied within the step, as autograd
    copies an NJT leaf's gradient on accumulating it (never taking it as it is, where the plain leaf takes it), and
    freed with it at the step's end. Timed apart, that copy leaves out what it does to the step around it: at the
    seed's first shape on a CPU the floor with it took 1.8 ms more than the floor, the copy alone 0.7 ms
    (``docs/performance.md``, the model, 7b)."""
    with torch.no_grad():  # the parts as they are: no autograd node (``njt_autograd.Unwrap``) between them and x
        boundary, crossing, region = _region_of(compiled, built)
    tensor_of = _tensor_of()
    grad = built.grad._values if built.grad is not None and built.grad.is_nested else built.grad
    leaves = built.leaves
    if built.x.requires_grad:
        # the values as a plain leaf of their own, with the dynamic marks the region was compiled on (Dynamo guards on
        # them and on requires_grad: the same graph serves it); its gradient accumulates as a plain tensor's
        values = crossing.flat[0]
        leaf = values.detach().requires_grad_()
        leaf.__dict__.update({k: v for k, v in values.__dict__.items() if k.startswith("_dynamo")})
        crossing.flat[0] = leaf
        leaves = (leaf,)

    def forward():
        with torch.no_grad():
            return region(*crossing.flat)

    copy_of = leaves[0] if copied and built.x.requires_grad else None  # the values leaf, whose gradient is copied

    def step():
        tensor_of(region(*crossing.flat)).backward(grad)
        if copy_of is not None:
            copy_of.grad = copy_of.grad.clone()
        for leaf in leaves:
            leaf.grad = None

    return forward if kind == "forward" else step


def crossing_steps(compiled: Callable, built: Built) -> dict[str, Callable[[], object]]:
    """The boundary's training step built up from its floor (``region_step``), where ``built``'s input NJT trains:
    "floor + Unwrap", the call's arguments crossed as the boundary crosses them (``flatten``: the values out of the NJT
    through ``Unwrap``, whose gradient reaches the NJT as an NJT and accumulates into it) and the region's output
    backpropagated as it comes; "floor + Unwrap + Join", its output also made what ``fn`` returns (``join_output``: an
    NJT output rebuilt through ``Join``) and backpropagated with the NJT gradient. What is left to the whole step is
    the wrapper's own: its checks and the region's lookup."""
    from jaggedperf.boundary.crossing import flatten
    from jaggedperf.boundary.joining import join_output

    with torch.no_grad():  # the lookup alone: no Unwrap node made for nothing
        boundary, _, region = _region_of(compiled, built)
    args, grad, tensor_of = (built.x,), built.grad, _tensor_of()
    plain_grad = grad._values if grad.is_nested else grad

    def floor_unwrap():
        tensor_of(region(*flatten(args, {}, True, boundary.min_shift).flat)).backward(plain_grad)
        for leaf in built.leaves:
            leaf.grad = None

    def floor_unwrap_join():
        crossing = flatten(args, {}, True, boundary.min_shift)
        join_output(region(*crossing.flat), crossing).backward(grad)
        for leaf in built.leaves:
            leaf.grad = None

    return dict(zip(CROSSING_STEPS, (floor_unwrap, floor_unwrap_join)))


def _region_of(compiled: Callable, built: Built) -> tuple:
    """(the boundary of ``compiled``, ``built``'s input crossed as its calls cross it, the region that call runs in):
    crossed with the boundary's own min_seqlen shift, so a timed call feeds the region the inputs its graph was
    compiled for."""
    from jaggedperf.boundary import lowering
    from jaggedperf.boundary.crossing import flatten

    boundary = getattr(compiled, "boundary", compiled)
    crossing = flatten((built.x,), {}, True, boundary.min_shift)
    region = boundary.regions[crossing.key]

    def call(*flat):
        # as the boundary calls it: a graph compiled here (a grad mode the check did not run) lowers what the
        # boundary's compiles lower (``lowering``), so the floor runs the boundary's code
        with lowering.tracing():
            return region(*flat)

    return boundary, crossing, call


def _tensor_of() -> Callable[[object], torch.Tensor]:
    """What takes the tensor out of a region's record (an output NJT's values, a dense output's tensor), or returns
    the output itself (made once a builder: the timed calls pay no import)."""
    from jaggedperf.boundary.parts import Dense, Parts

    def tensor_of(out: object) -> torch.Tensor:
        return out.values if isinstance(out, Parts) else out.tensor if isinstance(out, Dense) else out

    return tensor_of
