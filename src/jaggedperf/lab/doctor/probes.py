"""Probes into torch's compiler: what Dynamo did (frames, graphs, breaks, recompiles), what its guards
cost, and what Inductor said about CUDA graphs. The doctor's evidence uses them; they know nothing
of jagged ops.

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
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch

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


def fill_recompiles(stats: CompileStats, guards: GuardCost) -> None:
    """When the compilation metrics are not exposed, recompiles = cache entries − 1 (top-level frame)."""
    if stats.available and stats.recompiles is None and guards.cache_entries:
        stats.recompiles = guards.cache_entries - 1
        stats.method += "; recompiles from Dynamo's cache entries of the top-level frame (entries − 1)"
