"""Evidence: what the doctor measures about one compiled cell and its eager twin.

For implementation × compiled mode × case, ``gather`` runs these callables through
``runner.run_cell`` (so each is checked against the float64 reference and timed the lab's way:
wall = the seed's method; device = CUDA-graph replay, else the profiler's kernel sum; kernels from
``torch.profiler``):

1. **eager** — the implementation as written;
2. **compiled** — the same in the compiled mode, while Dynamo is watched (``watch_dynamo``:
   graphs, graph breaks, recompiles, from ``torch._dynamo.utils.counters`` and Dynamo's
   compilation metrics); after it ran, the guard check of the cache entry its inputs hit is timed
   (``guard_cost``);
3. **compiled plain** — the implementation's ``plain`` twin (the same computation on
   ``(values, offsets)`` tensors) compiled in the same mode and watched the same way: it separates
   NestedTensor overhead from the computation;
4. on CUDA only, **eager in a CUDA graph** (mode ``graph``) and the compiled mode's **CUDA-graph
   counterpart** (``max-autotune-no-cudagraphs`` ↔ ``max-autotune``, ``default`` ↔
   ``reduce-overhead``), while a logging handler catches Inductor's "skipping cudagraphs due to …".

From those results it derives the sections of an ``Evidence``: host overhead, input form, kernels,
jagged handling (the padding model, from shapes), CUDA graphs and compile cost. A section that
cannot be measured here carries ``available=False`` and the reason (on the CPU: no device time,
kernels or CUDA graphs — "needs CUDA"), so that every JSON has every section.

Frugality: when the compiled call takes longer than ``compile_budget_s`` to compile, the two
extra compiles (plain twin, CUDA-graph counterpart) are skipped and their sections say so.

Torch internals used (checked against the sources of torch 2.11 and 2.13), each behind a fallback
that records "not exposed in torch X" (or leaves the field None) instead of failing:

- ``torch._dynamo.eval_frame._debug_get_cache_entry_list`` and ``CacheEntry.guard_manager``
  (``GuardManagerWrapper.check``, ``root.get_leaf_guards / get_child_managers /
  get_epilogue_lambda_guards``): guard count and check time; per-guard times call the leaf guards
  themselves on the values their ``get_source()`` names (best effort: left out when not callable);
- ``torch._dynamo.utils.counters`` and ``torch._dynamo.utils.get_compilation_metrics``: frames,
  graphs, graph breaks, recompiles and their reasons, Dynamo's guard count, compile time, its
  one-call guard-latency profile and ``cudagraph_skip_reason``; recompiles fall back to the number
  of cache entries − 1;
- the Inductor artifact loggers ``torch._inductor.*.__cudagraphs`` (where 2.11 and 2.13 log
  "skipping cudagraphs due to …" from ``log_cudagraph_skip_and_bump_counter``) and
  ``*.__perf_hints`` (where older releases logged it), plus ``counters["inductor"]["cudagraph_skips"]``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator

import torch

from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.registry import get_implementation, get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab import runner
from jaggedperf.lab.env import environment
from jaggedperf.lab.result import ERROR, OK, SKIPPED, Result

NEEDS_CUDA = "needs CUDA"
INDUCTOR_KERNEL_PREFIX = "triton_"

# The compiled mode with CUDA graphs for each compiled mode without, and back.
CUDAGRAPH_COUNTERPART = {
    "compile:max-autotune-no-cudagraphs": "compile:max-autotune",
    "compile:max-autotune": "compile:max-autotune-no-cudagraphs",
    "compile:default": "compile:reduce-overhead",
    "compile:reduce-overhead": "compile:default",
}

GUARD_METHOD = (
    "Dynamo's cache entries for the function's code (torch._dynamo.eval_frame._debug_get_cache_entry_list); "
    "each entry's guard_manager.check(frame locals) is called in cache order until one accepts the call's "
    "inputs, as the C++ frame hook does on every call; median of {repeats} runs of {number} checks (warm). "
    "Count = leaf guards in the accepting entry's tree plus its epilogue guards. Only the top-level frame is "
    "timed: frames resumed after a graph break have guards of their own."
)
DYNAMO_METHOD = (
    "deltas of torch._dynamo.utils.counters (frames, stats.unique_graphs, graph_break) and the new entries of "
    "torch._dynamo.utils.get_compilation_metrics() (recompile_reason, compile_id attempt > 0, guard_count) "
    "over the cell: compile, warm-up, timed and profiled calls"
)
HOST_METHOD = "host = wall median − device median per call (µs)"
HOST_METHOD_WALL_ONLY = "no device time on the CPU (needs CUDA): host = wall median, which includes the computation"
CUDAGRAPH_METHOD = (
    "the same cell in mode 'graph' (eager captured once in a CUDA graph, replayed) and in the compiled mode's "
    "CUDA-graph counterpart; Inductor's skip message caught by a logging.Handler on the torch._inductor "
    "'cudagraphs' and 'perf_hints' artifact loggers while the cells ran, else the compilation metrics' "
    "cudagraph_skip_reason"
)


# --- sections ------------------------------------------------------------------------------------


@dataclass
class GuardTime:
    """One leaf guard timed alone on the value its source names."""

    kind: str  # TENSOR_MATCH, LAMBDA_GUARD, ...
    source: str  # what it guards, e.g. L['nt']
    us: float  # one evaluation, median
    code: str  # the guard's first code part, shortened


@dataclass
class GuardCost:
    """Dynamo's guards on one compiled function: how many, and what checking them costs per call."""

    available: bool
    reason: str | None = None  # why not measured
    method: str = ""
    function: str | None = None  # the function whose frame is guarded
    cache_entries: int | None = None  # entries Dynamo holds for the function's code
    entry_index: int | None = None  # the one the call's inputs hit (0 = checked first)
    guards: int | None = None  # leaf + epilogue guards of that entry
    kinds: dict[str, int] = field(default_factory=dict)  # guard type -> count (LAMBDA_GUARD runs Python)
    check_us: float | None = None  # checking the entries up to the hit, per call
    compile_metric_us: float | None = None  # Dynamo's own one-call profile at compile time (guard_latency_us)
    slowest: list[GuardTime] = field(default_factory=list)  # the costliest single guards of the hit entry


@dataclass
class CompileStats:
    """What Dynamo did while a compiled cell ran."""

    available: bool
    reason: str | None = None
    method: str = DYNAMO_METHOD
    frames: int | None = None  # frames Dynamo was called on (counters["frames"]["total"]; skipped ones included)
    compiled_frames: int | None = None  # frames it compiled: resume functions after breaks and recompiles included
    graphs: int | None = None  # FX graphs handed to the backend
    graph_breaks: int | None = None
    break_reasons: list[str] = field(default_factory=list)
    recompiles: int | None = None
    recompile_reasons: list[str] = field(default_factory=list)
    guard_count: int | None = None  # summed over the compiled frames (compilation metrics)
    dynamo_compile_s: float | None = None  # Dynamo's own compile time for those frames
    cudagraph_skips: int | None = None  # counters["inductor"]["cudagraph_skips"] delta
    cudagraph_skip_reasons: list[str] = field(default_factory=list)  # compilation metrics' cudagraph_skip_reason
    fail_reasons: list[str] = field(default_factory=list)


@dataclass
class HostOverhead:
    """Per-call host work (wall − device) of the eager and the compiled call, and Dynamo's part in it."""

    device_time: bool  # device time measured for both: host = wall − device; False: wall only
    reason: str | None
    method: str
    eager_host_us: float | None
    compiled_host_us: float | None
    guards: GuardCost
    dynamo: CompileStats


@dataclass
class InputForm:
    """The same computation compiled on plain (values, offsets): separates NestedTensor overhead."""

    available: bool
    reason: str | None
    method: str
    plain: Result | None = None  # the plain twin, compiled in the same mode
    plain_host_us: float | None = None
    guards: GuardCost | None = None
    dynamo: CompileStats | None = None


@dataclass
class KernelInfo:
    name: str
    calls_per_call: float
    us_per_call: float
    inductor: bool  # generated by Inductor (name starts with triton_)
    gbps: float | None  # bytes the op must move / this kernel's time per call
    pct_of_copy: float | None  # gbps / copy bandwidth of the run, %


@dataclass
class Kernels:
    available: bool
    reason: str | None
    method: str
    copy_gbps: float | None = None
    must_move_bytes: int | None = None
    eager: list[KernelInfo] = field(default_factory=list)
    compiled: list[KernelInfo] = field(default_factory=list)
    plain: list[KernelInfo] = field(default_factory=list)
    eager_per_call: float | None = None
    compiled_per_call: float | None = None
    plain_per_call: float | None = None
    inductor_kernels: list[str] = field(default_factory=list)  # Inductor-generated kernels the compiled call ran


@dataclass
class PaddingModel:
    """Bytes a pad-then-reduce program moves per call vs the bytes that must move (see ``padding_model``)."""

    pads: bool  # the implementation materialises the padded tensor
    B: int
    M: int
    padded_len: int
    total_len: int
    itemsize: int
    offsets_itemsize: int
    padded_bytes: int  # the (B, padded_len, M) tensor
    padded_path_bytes: int  # values + offsets read, padded written and read back, output written
    must_move_bytes: int  # values + offsets read, output written
    waste_bytes: int  # padded_path − must_move
    ratio: float | None  # padded_path / must_move
    pad_fraction: float | None  # share of the padded rows that are padding: 1 − total_len / (B·padded_len)
    method: str = ""


@dataclass
class CudaGraphs:
    available: bool
    reason: str | None
    method: str
    compiled_mode: str
    counterpart_mode: str | None
    eager_graph: Result | None = None  # eager captured in a CUDA graph
    counterpart: Result | None = None  # the compiled mode's CUDA-graph counterpart
    skip_reason: str | None = None  # why Inductor skipped cudagraphs, None when it gave none
    skip_messages: list[str] = field(default_factory=list)
    skips_counted: int | None = None


@dataclass
class CompileCost:
    compile_s: float | None  # first call of the compiled callable: compile + one run
    eager_first_call_s: float | None
    eager_wall_us: float | None
    compiled_wall_us: float | None
    saving_us: float | None  # eager wall − compiled wall, per call
    repay_calls: int | None  # ceil(compile_s / saving) when compiled is faster
    repay: str  # "after N calls" | "never" | "unknown"


@dataclass
class Evidence:
    op: str
    implementation: str
    mode: str
    case: Case
    device: str
    takes: str  # "njt" or "dense"
    eager: Result
    compiled: Result
    host: HostOverhead
    input_form: InputForm
    kernels: Kernels
    jagged: PaddingModel | None
    cudagraphs: CudaGraphs
    compile_cost: CompileCost
    notes: list[str] = field(default_factory=list)
    stage_s: dict[str, float] = field(default_factory=dict)  # seconds spent per stage of gathering this cell

    def to_dict(self) -> dict:
        d = asdict(self)
        d["case_label"] = self.case.label
        return d


@dataclass
class EvidenceRun:
    environment: dict
    copy_gbps: float | None
    evidence: list[Evidence]


# --- pure pieces ---------------------------------------------------------------------------------


def padding_model(B: int, M: int, padded_len: int, total_len: int, itemsize: int, offsets_itemsize: int = 8,
                  *, pads: bool = True) -> PaddingModel:
    """Bytes a pad-then-reduce program asks the device to move per call, vs the bytes that must move.

    With s = itemsize and o = offsets itemsize:

    - must move: values read once (total_len·M·s) + offsets read once ((B+1)·o) + the (B, M)
      output written once (B·M·s): the op's floor, whatever the implementation;
    - padded path: the same, plus the dense (B, padded_len, M) tensor written by the pad op and read
      back by the reduction (2·B·padded_len·M·s).

    The waste is the difference: 2·B·padded_len·M·s. The model counts what the written program asks
    for, eager's kernels one by one; small intermediates (lengths, the (B, M) sums before the
    division) are left out, and a reduction that reads the padded tensor more than once (nanmean:
    a NaN-masked sum and a count) moves more than the model says. A compiled program may fuse the pad into the reduction and never
    materialise the padded tensor: the kernels section (time and %-of-copy of each kernel) shows
    whether it did.
    """
    must = total_len * M * itemsize + (B + 1) * offsets_itemsize + B * M * itemsize
    padded = B * padded_len * M * itemsize
    path = must + 2 * padded
    slots = B * padded_len
    return PaddingModel(
        pads=pads, B=B, M=M, padded_len=padded_len, total_len=total_len, itemsize=itemsize,
        offsets_itemsize=offsets_itemsize, padded_bytes=padded, padded_path_bytes=path, must_move_bytes=must,
        waste_bytes=path - must, ratio=path / must if must else None,
        pad_fraction=1 - total_len / slots if slots else None,
        method="must = values + offsets read + output written; padded path = must + padded tensor written and "
               "read back (2·B·padded_len·M·s)",
    )


def batch_padding_model(batch: JaggedBatch, *, pads: bool) -> PaddingModel:
    return padding_model(batch.B, batch.M, batch.padded_len, batch.total_len, batch.values.element_size(),
                         batch.offsets.element_size(), pads=pads)


def compile_cost(eager: Result, compiled: Result) -> CompileCost:
    """First-call time of the compiled call and how many calls repay it: compile_s / (eager − compiled wall)."""
    e_us = _wall_us(eager)
    c_us = _wall_us(compiled)
    saving = None if e_us is None or c_us is None else e_us - c_us
    repay_calls, repay = None, "unknown"
    if saving is not None and compiled.compile_s is not None:
        if saving > 0:
            repay_calls = max(1, math.ceil(compiled.compile_s * 1e6 / saving))
            repay = f"after {repay_calls} calls"
        else:
            repay = "never"
    return CompileCost(compiled.compile_s, eager.compile_s, e_us, c_us, saving, repay_calls, repay)


def host_us(result: Result | None, *, wall_only: bool) -> float | None:
    """Host µs per call: wall − device, or the wall itself when device time is not used."""
    if result is None or result.wall is None:
        return None
    if wall_only:
        return result.wall.median_ms * 1e3
    if result.device_time is None:
        return None
    return result.wall.median_ms * 1e3 - result.device_time.median_us


def kernel_infos(result: Result | None, must_move: int | None, copy_gbps: float | None) -> list[KernelInfo]:
    """The profiler's kernels of a result (``extra["kernels"]``, from timing.profile_kernels) with bandwidths."""
    if result is None:
        return []
    out = []
    for k in result.extra.get("kernels", []):
        us = k["us_per_call"]
        gbps = must_move / (us * 1e-6) / 1e9 if must_move and us > 0 else None
        out.append(KernelInfo(k["name"], k["calls_per_call"], us, k["name"].startswith(INDUCTOR_KERNEL_PREFIX), gbps,
                              100 * gbps / copy_gbps if gbps and copy_gbps else None))
    return out


def _wall_us(result: Result | None) -> float | None:
    return None if result is None or result.wall is None else result.wall.median_ms * 1e3


def _not_exposed(what: str, exc: BaseException | None = None) -> str:
    tail = f" ({type(exc).__name__}: {_first_line(exc)})" if exc is not None else ""
    return f"{what} not exposed in torch {torch.__version__}{tail}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


# --- Dynamo: counters and compilation metrics ----------------------------------------------------


def _counters():
    from torch._dynamo.utils import counters

    return counters


def _snapshot(counters) -> dict[str, dict]:
    return {k: dict(v) for k, v in counters.items()}


def _delta(before: dict, after: dict, group: str) -> dict:
    b = before.get(group, {})
    return {k: v - b.get(k, 0) for k, v in after.get(group, {}).items() if v - b.get(k, 0)}


def _compilation_metrics() -> list | None:
    try:
        from torch._dynamo.utils import get_compilation_metrics
    except ImportError:
        return None
    try:
        return list(get_compilation_metrics())
    except Exception:
        return None


_COMPILE_ID = re.compile(r"(\d+)/(\d+)")


def _is_recompile(metric) -> bool:
    if getattr(metric, "recompile_reason", None):
        return True
    match = _COMPILE_ID.search(str(getattr(metric, "compile_id", "") or ""))
    return bool(match and int(match.group(2)) > 0)


@contextlib.contextmanager
def watch_dynamo() -> Iterator[CompileStats]:
    """Yields a ``CompileStats`` that is filled in when the block ends (from counter and metric deltas)."""
    try:
        counters = _counters()
        before = _snapshot(counters)
    except Exception as exc:  # pragma: no cover - depends on the torch build
        yield CompileStats(False, _not_exposed("torch._dynamo.utils.counters", exc))
        return
    metrics_before = _compilation_metrics()
    seen = {id(m) for m in metrics_before or []}
    stats = CompileStats(True)
    try:
        yield stats
    finally:
        after = _snapshot(counters)
        stats.frames = _delta(before, after, "frames").get("total", 0)
        stats.graphs = _delta(before, after, "stats").get("unique_graphs", 0)
        breaks = _delta(before, after, "graph_break")
        stats.graph_breaks = sum(v for v in breaks.values() if v > 0)
        stats.break_reasons = [_one_line(str(reason)) for reason, n in breaks.items() if n > 0]
        stats.cudagraph_skips = _delta(before, after, "inductor").get("cudagraph_skips", 0)
        metrics_after = _compilation_metrics()
        if metrics_before is None or metrics_after is None:
            stats.reason = _not_exposed("torch._dynamo.utils.get_compilation_metrics") + ": recompiles unknown"
        else:
            new = [m for m in metrics_after if id(m) not in seen]
            stats.compiled_frames = len(new)
            stats.recompiles = sum(1 for m in new if _is_recompile(m))
            stats.recompile_reasons = [_one_line(m.recompile_reason) for m in new
                                       if getattr(m, "recompile_reason", None)]
            counts = [m.guard_count for m in new if getattr(m, "guard_count", None) is not None]
            stats.guard_count = sum(counts) if counts else None
            times = [m.entire_frame_compile_time_s for m in new
                     if getattr(m, "entire_frame_compile_time_s", None) is not None]
            stats.dynamo_compile_s = sum(times) if times else None
            stats.cudagraph_skip_reasons = [str(m.cudagraph_skip_reason) for m in new
                                            if getattr(m, "cudagraph_skip_reason", None)]
            stats.fail_reasons = [_one_line(str(m.fail_reason)) for m in new if getattr(m, "fail_reason", None)]


def _one_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:limit]


# --- Dynamo: guards ------------------------------------------------------------------------------


def frame_locals(fn: Callable, args: tuple) -> dict:
    """The locals the function's frame starts with for these arguments (what the guards read)."""
    bound = inspect.signature(fn).bind(*args)
    bound.apply_defaults()
    return dict(bound.arguments)


def guard_cost(fn: Callable, args: tuple, *, repeats: int = 7, number: int = 100) -> GuardCost:
    """Count and time the guards of the cache entry that ``fn(*args)`` hits (call it after the compiled
    function ran, before the next ``torch._dynamo.reset``)."""
    method = GUARD_METHOD.format(repeats=repeats, number=number)
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError as exc:
        return GuardCost(False, _not_exposed("torch._dynamo.eval_frame._debug_get_cache_entry_list", exc), method, name)
    try:
        entries = list(_debug_get_cache_entry_list(fn.__code__))
    except Exception as exc:
        return GuardCost(False, _not_exposed("Dynamo's cache entry list", exc), method, name)
    if not entries:
        return GuardCost(False, "Dynamo holds no cache entry for the function (not compiled, or skipped)", method,
                         name, cache_entries=0)
    managers = [getattr(e, "guard_manager", None) for e in entries]
    if any(m is None or not hasattr(m, "check") for m in managers):
        return GuardCost(False, _not_exposed("CacheEntry.guard_manager.check"), method, name,
                         cache_entries=len(entries))
    local = frame_locals(fn, args)
    try:
        hit = next((i for i, m in enumerate(managers) if m.check(local)), None)
    except Exception as exc:
        return GuardCost(False, f"guard check raised {type(exc).__name__}: {_first_line(exc)}", method, name,
                         cache_entries=len(entries))
    if hit is None:
        return GuardCost(False, "no cache entry accepts the call's inputs", method, name, cache_entries=len(entries))
    checked = managers[: hit + 1]

    def check_all() -> None:
        for m in checked:
            if m.check(local):
                break

    per_check = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            check_all()
        per_check.append((time.perf_counter() - start) / number * 1e6)
    count, kinds = count_guards(managers[hit])
    return GuardCost(True, None, method, name, cache_entries=len(entries), entry_index=hit, guards=count,
                     kinds=kinds, check_us=statistics.median(per_check),
                     compile_metric_us=_compile_time_guard_latency(fn),
                     slowest=slowest_guards(managers[hit], local, getattr(fn, "__globals__", {})))


def count_guards(manager) -> tuple[int | None, dict[str, int]]:
    """Leaf guards in a guard-manager tree (plus its epilogue guards), by kind; falls back to code parts."""
    root = getattr(manager, "root", None)
    if root is None or not hasattr(root, "get_leaf_guards") or not hasattr(root, "get_child_managers"):
        parts = getattr(manager, "code_parts", None)
        return (len(parts), {}) if parts is not None else (None, {})
    kinds: dict[str, int] = {}

    def walk(node) -> None:
        for guard in node.get_leaf_guards():
            kinds[type(guard).__name__] = kinds.get(type(guard).__name__, 0) + 1
        for child in node.get_child_managers():
            walk(child)

    try:
        walk(root)
        for guard in getattr(root, "get_epilogue_lambda_guards", lambda: [])():
            key = f"epilogue {type(guard).__name__}"
            kinds[key] = kinds.get(key, 0) + 1
    except Exception:
        return None, {}
    return sum(kinds.values()), dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def slowest_guards(manager, local: dict, global_ns: dict, *, top: int = 5, number: int = 50) -> list[GuardTime]:
    """The costliest leaf guards of a guard-manager tree, each called alone on its value.

    A manager's value is its source evaluated against the frame (``L`` = frame locals, ``G`` = the
    function's globals; e.g. ``L['nt']._values``); root and epilogue guards take the frame locals.
    Guards that cannot be called alone (relational ones such as NO_TENSOR_ALIASING) or whose source
    does not evaluate are left out. A best-effort breakdown: the tree check is the cost that counts.
    """
    root = getattr(manager, "root", None)
    if root is None or not hasattr(root, "get_leaf_guards"):
        return []
    namespace = {"L": local, "G": global_ns}
    timed: list[GuardTime] = []

    def time_guard(guard, value, source: str) -> None:
        if not callable(guard):
            return
        try:
            guard(value)
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(number):
                    guard(value)
                runs.append((time.perf_counter() - start) / number * 1e6)
        except Exception:
            return
        code = ""
        with contextlib.suppress(Exception):
            code = _one_line(guard.verbose_code_parts()[0].split("  #")[0], 120)
        timed.append(GuardTime(type(guard).__name__, source, statistics.median(runs), code))

    def walk(node, value, source: str) -> None:
        for guard in node.get_leaf_guards():
            time_guard(guard, value, source)
        for child in node.get_child_managers():
            try:
                child_source = child.get_source()
                child_value = eval(child_source, {"__builtins__": {}}, namespace)  # noqa: S307 - Dynamo's own source text
            except Exception:
                continue
            walk(child, child_value, child_source)

    try:
        walk(root, local, "frame")
        for guard in getattr(root, "get_epilogue_lambda_guards", lambda: [])():
            time_guard(guard, local, "epilogue")
    except Exception:
        pass
    timed.sort(key=lambda g: -g.us)
    return timed[:top]


def _compile_time_guard_latency(fn: Callable) -> float | None:
    """Dynamo's own guard-latency profile (one call after a cache flush) for this function, when recorded."""
    metrics = _compilation_metrics() or []
    for m in reversed(metrics):
        if getattr(m, "co_name", None) == fn.__code__.co_name and getattr(m, "guard_latency_us", None) is not None:
            return float(m.guard_latency_us)
    return None


# --- Inductor: cudagraph skip messages -----------------------------------------------------------


class _MessageCatcher(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            return
        if "cudagraph" in message.lower() and message not in self.messages:
            self.messages.append(message)


def _cudagraph_loggers() -> list[logging.Logger]:
    """Inductor's artifact loggers that carry the skip message: ``*.__cudagraphs`` (torch ≥ 2.7) and
    ``*.__perf_hints`` (older torch)."""
    for module in ("torch._inductor.cudagraph_utils", "torch._inductor.cudagraph_trees",
                   "torch._inductor.output_code", "torch._inductor.compile_fx"):
        with contextlib.suppress(Exception):
            __import__(module)
    names = [name for name in logging.root.manager.loggerDict
             if name.startswith("torch._inductor") and name.endswith((".__cudagraphs", ".__perf_hints"))]
    return [logging.getLogger(name) for name in sorted(names)]


@contextlib.contextmanager
def catch_cudagraph_messages() -> Iterator[list[str]]:
    """Collect Inductor's cudagraph messages ("skipping cudagraphs due to …") logged in the block.

    The handler sits on the artifact loggers themselves; while the block runs they log at INFO and
    do not propagate (the message lands in the evidence, not on stderr). Restored afterwards.
    """
    catcher = _MessageCatcher()
    loggers = _cudagraph_loggers()
    saved = [(lg, lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(catcher)
        lg.propagate = False
        if not lg.isEnabledFor(logging.INFO):
            lg.setLevel(logging.INFO)
    try:
        yield catcher.messages
    finally:
        for lg, level, propagate in saved:
            lg.removeHandler(catcher)
            lg.setLevel(level)
            lg.propagate = propagate


def skip_reason(messages: Iterable[str]) -> str | None:
    """The reason in the first "skipping cudagraphs due to …" message, else None."""
    for message in messages:
        low = message.lower()
        if "skipping cudagraphs" in low:
            at = low.find("due to")
            return message[at + len("due to"):].strip() if at >= 0 else message.strip()
    return None


# --- gathering -----------------------------------------------------------------------------------


DEFAULT_COMPILE_BUDGET_S = 30.0


def gather(op: str, implementation: str, mode: str, case: Case, batch: JaggedBatch, reference: torch.Tensor,
           options: runner.Options, copy_gbps: float | None, *, cudagraphs: bool = True,
           compile_budget_s: float | None = DEFAULT_COMPILE_BUDGET_S,
           on_stage: Callable[[str], None] | None = None) -> Evidence:
    """Measure one compiled cell and its eager twin (see the module docstring for what runs).

    Frugality: when the compiled call's first call (its compile) took longer than
    ``compile_budget_s``, the two extra compiles (plain twin, CUDA-graph counterpart) are skipped
    and the sections say so (None: no limit). Eager is put in a CUDA graph only when the lab could
    capture it for its device time (``device_time.method == "graph"``).
    """
    if not modes_mod.is_compiled(mode):
        raise ValueError(f"the doctor explains a compiled mode; got {mode!r}")
    impl = get_implementation(op, implementation)
    cuda = options.device.type == "cuda"
    notes: list[str] = []
    stage_s: dict[str, float] = {}
    clock = {"name": None, "at": time.perf_counter()}

    def stage(name: str | None) -> None:
        now = time.perf_counter()
        if clock["name"] is not None:
            stage_s[clock["name"]] = stage_s.get(clock["name"], 0.0) + now - clock["at"]
        clock["name"], clock["at"] = name, now
        if name is not None and on_stage:
            on_stage(name)

    def cell(m: str) -> runner.Cell:
        return runner.Cell(op, implementation, m, case)

    stage("eager")
    eager = runner.run_cell(cell(modes_mod.EAGER), batch, reference, options, copy_gbps)

    stage(mode)
    with watch_dynamo() as dynamo, catch_cudagraph_messages() as compiled_messages:
        compiled = runner.run_cell(cell(mode), batch, reference, options, copy_gbps)
    stage("guards")
    guards = (guard_cost(impl.fn, impl.prepare(batch)) if compiled.status == OK
              else GuardCost(False, f"compiled call {compiled.status}: {compiled.reason}"))
    _fill_recompiles(dynamo, guards)
    over_budget = None
    if compile_budget_s is not None and compiled.compile_s is not None and compiled.compile_s > compile_budget_s:
        over_budget = (f"skipped to stay frugal: the compiled call took {compiled.compile_s:.0f} s to compile "
                       f"(> compile budget {compile_budget_s:g} s; raise --compile-budget to run it)")
        notes.append(over_budget)

    if impl.takes == "dense":
        input_form = InputForm(False, "not applicable: the implementation already takes (values, offsets) tensors",
                               "")
    elif impl.plain is None:
        input_form = InputForm(False, f"{implementation} has no plain twin: NestedTensor overhead cannot be "
                                      "separated", "")
    elif over_budget:
        input_form = InputForm(False, f"plain twin {over_budget}", "")
    else:
        stage(f"{mode} · plain twin")
        with watch_dynamo() as plain_dynamo:
            plain = runner.run_cell(cell(mode), batch, reference, options, copy_gbps, plain=True)
        stage("guards")
        plain_guards = (guard_cost(impl.plain, impl.prepare_plain(batch)) if plain.status == OK
                        else GuardCost(False, f"plain twin {plain.status}: {plain.reason}"))
        _fill_recompiles(plain_dynamo, plain_guards)
        input_form = InputForm(True, None, f"the plain twin {impl.plain.__name__}(values, offsets, padded_len) "
                                           f"compiled in {mode} and timed like the cell", plain, None, plain_guards,
                               plain_dynamo)
        if plain.status != OK:
            input_form.available, input_form.reason = False, f"plain twin {plain.status}: {plain.reason}"

    graphs = CudaGraphs(False, None, CUDAGRAPH_METHOD, mode, CUDAGRAPH_COUNTERPART.get(mode))
    if not cuda:
        graphs.reason = f"{NEEDS_CUDA}: CUDA graphs (mode 'graph', Inductor cudagraphs) run only on the GPU"
    elif not cudagraphs:
        graphs.reason = "not asked for (--no-cudagraphs)"
    else:
        reasons = []
        if eager.device_time is not None and eager.device_time.method == "graph":
            stage("graph")
            graphs.eager_graph = runner.run_cell(cell(modes_mod.GRAPH), batch, reference, options, copy_gbps)
        else:
            reasons.append("eager could not be captured in a CUDA graph (timing.capture_graph refused it: a host "
                           "sync or a CPU op), so mode 'graph' was not run")
        if over_budget:
            reasons.append(f"{graphs.counterpart_mode} {over_budget}")
        else:
            stage(graphs.counterpart_mode)
            with watch_dynamo() as cg_dynamo, catch_cudagraph_messages() as cg_messages:
                graphs.counterpart = runner.run_cell(cell(graphs.counterpart_mode), batch, reference, options,
                                                     copy_gbps)
            with_graphs = modes_mod.uses_cuda_graphs(graphs.counterpart_mode)
            messages = cg_messages if with_graphs else compiled_messages
            watched = cg_dynamo if with_graphs else dynamo
            graphs.skip_messages = list(messages)
            graphs.skip_reason = skip_reason(messages) or (watched.cudagraph_skip_reasons[0]
                                                           if watched.cudagraph_skip_reasons else None)
            graphs.skips_counted = watched.cudagraph_skips
        graphs.available = graphs.eager_graph is not None or graphs.counterpart is not None
        graphs.reason = "; ".join(reasons) or None
    stage(None)

    wall_only, why = _wall_only(options, eager, compiled)
    host = HostOverhead(not wall_only, why, HOST_METHOD_WALL_ONLY if wall_only else HOST_METHOD,
                        host_us(eager, wall_only=wall_only), host_us(compiled, wall_only=wall_only), guards, dynamo)
    input_form.plain_host_us = host_us(input_form.plain, wall_only=wall_only)
    must_move = get_op(op).must_move_bytes(batch)
    kernels = _kernels(cuda, options, must_move, copy_gbps, eager, compiled, input_form.plain)
    cost = compile_cost(eager, compiled)
    if wall_only:
        notes.append(why)
    if options.device_time and cuda and not options.flush_l2:
        notes.append("device time measured without an L2 flush, as the wall loop runs (warm L2)")
    return Evidence(op, implementation, mode, case, options.device.type, impl.takes, eager, compiled, host, input_form,
                    kernels, batch_padding_model(batch, pads=impl.pads), graphs, cost, notes,
                    {k: round(v, 3) for k, v in stage_s.items()})


def _fill_recompiles(stats: CompileStats, guards: GuardCost) -> None:
    """When the compilation metrics are not exposed, recompiles = cache entries − 1 (top-level frame)."""
    if stats.available and stats.recompiles is None and guards.cache_entries:
        stats.recompiles = guards.cache_entries - 1
        stats.method += "; recompiles from Dynamo's cache entries of the top-level frame (entries − 1)"


def _wall_only(options: runner.Options, *results: Result) -> tuple[bool, str | None]:
    if options.device.type != "cuda":
        return True, f"{NEEDS_CUDA}: no device time on the CPU; host overhead uses wall time only"
    if not options.device_time:
        return True, "device time not asked for: host overhead uses wall time only"
    missing = [r.mode for r in results if r.status == OK and r.device_time is None]
    if missing:
        return True, f"no device time for {', '.join(missing)}: host overhead uses wall time only"
    return False, None


def _kernels(cuda: bool, options: runner.Options, must_move: int, copy_gbps: float | None, eager: Result,
             compiled: Result, plain: Result | None) -> Kernels:
    method = ("torch.profiler over {n} calls per callable (timing.profile_kernels): kernels per call, each kernel's "
              "device µs per call; bandwidth = bytes the op must move / the kernel's time, vs the copy bandwidth "
              "measured in this run").format(n=options.profile_calls)
    if not cuda:
        return Kernels(False, f"{NEEDS_CUDA}: torch.profiler kernel times need a CUDA device", method,
                       must_move_bytes=must_move)
    if not options.device_time:
        return Kernels(False, "device time not asked for", method, must_move_bytes=must_move)
    k = Kernels(True, None, method, copy_gbps, must_move,
                kernel_infos(eager, must_move, copy_gbps), kernel_infos(compiled, must_move, copy_gbps),
                kernel_infos(plain, must_move, copy_gbps),
                eager.kernels_per_call, compiled.kernels_per_call, plain.kernels_per_call if plain else None)
    k.inductor_kernels = [x.name for x in k.compiled if x.inductor]
    if compiled.kernels_per_call is None:
        k.available, k.reason = False, f"compiled call {compiled.status}: {compiled.reason}"
    return k


def unavailable_evidence(op: str, implementation: str, mode: str, case: Case, device: str, status: str,
                         reason: str) -> Evidence:
    """An ``Evidence`` whose cells never ran (the case's input could not be made): every section says why."""
    impl = get_implementation(op, implementation)

    def result(m: str) -> Result:
        return Result(op, implementation, m, case, device, status=status, reason=reason)

    eager, compiled = result(modes_mod.EAGER), result(mode)
    no = GuardCost(False, reason)
    return Evidence(
        op, implementation, mode, case, device, impl.takes, eager, compiled,
        HostOverhead(False, reason, "", None, None, no, CompileStats(False, reason)),
        InputForm(False, reason, ""), Kernels(False, reason, ""), None,
        CudaGraphs(False, reason, CUDAGRAPH_METHOD, mode, CUDAGRAPH_COUNTERPART.get(mode)),
        compile_cost(eager, compiled), [reason],
    )


def gather_all(op: str, cases: Iterable[Case], implementations: list[str], mode: str, options: runner.Options, *,
               cudagraphs: bool = True, compile_budget_s: float | None = DEFAULT_COMPILE_BUDGET_S,
               on_start: Callable[[str, Case], None] | None = None,
               on_stage: Callable[[str], None] | None = None,
               on_evidence: Callable[[Evidence], None] | None = None) -> EvidenceRun:
    """Evidence for every implementation × case (each case's batch made once), with the run's environment."""
    get_op(op)
    for name in implementations:
        get_implementation(op, name)
    modes_mod.check_modes([mode])
    if options.cold_compile:
        modes_mod.disable_compile_caches()
    copy_gbps = runner.measure_copy_bandwidth(options.device)
    out: list[Evidence] = []
    for case in cases:
        batch, reference = runner.prepare_case(op, case, options)
        for name in implementations:
            if on_start:
                on_start(name, case)
            if isinstance(batch, Exception):
                status = SKIPPED if isinstance(batch, runner._TooLarge) else ERROR
                ev = unavailable_evidence(op, name, mode, case, options.device.type, status, f"input: {batch}")
            else:
                ev = gather(op, name, mode, case, batch, reference, options, copy_gbps, cudagraphs=cudagraphs,
                            compile_budget_s=compile_budget_s, on_stage=on_stage)
            out.append(ev)
            if on_evidence:
                on_evidence(ev)
        batch = reference = None
    return EvidenceRun(environment(), copy_gbps, out)
