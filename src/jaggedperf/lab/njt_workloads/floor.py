"""What a step through the boundary costs at least, timed beside it: the boundary's floor (its compiled region on the
NJT's parts split beforehand), the autograd engine's own cost of an NJT crossing autograd, the boundary's step built
up from that floor, and the limit a cell's walls give from them; and the timed callables themselves (a forward under
no_grad, a training step)."""

from __future__ import annotations

import statistics
from typing import Callable

import torch

from jaggedperf.lab.njt_workloads.catalog import Built

__all__ = ["CROSSING_STEPS", "crossing_steps", "engine_steps", "forward", "limit_kind", "limit_ratio", "limit_walls",
           "region_step", "step"]

# the names of ``crossing_steps``' steps, in the order they build up from the floor
CROSSING_STEPS = ("floor + Unwrap", "floor + Unwrap + Join")


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


def limit_ratio(walls_us: dict[str, list[float]]) -> float:
    """Median over the rounds of each round's limit (``limit_walls``) / torch.compile (``Cell.ratio_limit_tc``)."""
    return statistics.median([lim / tc for lim, tc in zip(limit_walls(walls_us), walls_us["torch.compile"])])
