"""``jaggedperf.compile``'s public face: the compiled function and module, the fallback, the data-dependent retry.

The invariants are the package's docstring's; how arguments cross is ``crossing``'s, what the compiled region does
``region``'s, how outputs come back ``joining``'s.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Any, Callable, Iterator

import torch
import torch.utils._pytree as pytree
import torch.utils.checkpoint

from jaggedperf.boundary import lowering
from jaggedperf.boundary.backend import compile_region
from jaggedperf.boundary.crossing import MIN_SEQLEN_SHIFT, Crossing, fallback_reason, flatten
from jaggedperf.boundary.joining import join_output
from jaggedperf.boundary.region import RAGGED_SYMBOL as _RAGGED_SYMBOL
from jaggedperf.boundary.region import RanEagerly, make_region
from jaggedperf.njt import JAGGED_CLASS as NestedTensor

__all__ = ["BoundaryFallbackWarning", "BoundaryFunction", "compile"]

# Frames from these files are the boundary's own or nn.Module's dispatch to a BoundaryModule's forward, never the
# user's call (``_caller_stacklevel``).
_NOT_THE_CALLER = (os.path.dirname(os.path.abspath(__file__)) + os.sep, torch.nn.modules.module.__file__)
# Bound once: the common call checks its result's type with it.
_Tensor = torch.Tensor
# False in eager mode; Dynamo folds a call of this very function to True while it traces
_is_compiling = torch.compiler.is_compiling
# Dynamo's switch that makes a graph break inside it raise while Dynamo traces (a traceable context manager)
_error_on_graph_break = getattr(torch._dynamo, "error_on_graph_break", None)
# Dynamo's settings under which values read from tensors (lengths, ``tolist``) become unbacked symbols
# instead of a failure: the retry for functions that compile only that way on the components.
_DATA_DEPENDENT = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}
# What the compiled code raises, as it runs, for its inputs (the jagged ops' checks among them): never a compile's
# failure, which Dynamo and Inductor wrap in their own types. Also the caller's own control flow through ``fn``:
# non-reentrant activation checkpointing stops a recomputation by raising from a saved-tensor hook, which must reach
# its caller as it would from eager mode (a fallback ran ``fn`` again inside the recomputation: an assertion in
# ``backward()``).
_CALLERS_ERRORS = (ValueError, TypeError) + tuple(
    e for e in (getattr(torch.utils.checkpoint, "_StopRecomputationError", None),) if e is not None)
# What a region compiled whole raises at Dynamo's recompile limit (where torch names none so, the region falls back):
# FailOnRecompileLimitHit under fullgraph, an Unsupported of this graph-break type under error_on_graph_break
# (``backend``), or (a torch that runs the frame as it is there) the region's ``RanEagerly`` with its cache full.
_RecompileLimitHit = getattr(torch._dynamo.exc, "FailOnRecompileLimitHit", ())
_RECOMPILE_LIMIT = "Dynamo recompile limit exceeded"
# The ragged size of an NJT made in the graph takes a guard Dynamo cannot build whenever an op compares it with a size:
# with an int before torch 2.15 (an IndexError; pytorch#185016 folds that since), with a symbolic size (a feature width
# made dynamic: a guard naming an ephemeral source, a SyntaxError) on 2.15 too. The regions start with ragged sizes of
# their own on every torch, so no compile fails on it first (a failed compile and its retry are one graph more).
_OWN_RAGGED = True


# The seqlens computed before crossing, in the order tried after data-dependent failures (``seqlens_first``)
SEQLENS_TRIED: tuple[tuple[str, ...], ...] = ((), ("max",), ("min",), ("max", "min"))


class BoundaryFallbackWarning(UserWarning):
    """Calls went to ``torch.compile(fn)`` instead of compiling on the NJT's components."""


class BoundaryFunction:
    """``fn`` compiled on its NJT arguments' components; call it as you would call ``fn``.

    Attributes:
        fn: the user's function (or module).
        compile_kwargs: what is passed to ``torch.compile`` (for the regions and for the fallback).
        regions: one compiled region per call signature (the arguments' pytree structure and layout).
        fallbacks: the signatures whose calls go to ``torch.compile(fn)``, each with its reason: a compile or run on
            the components failed where ``torch.compile(fn)`` did not. Each is decided once, on its first failure.
        last_fallback: why the latest call went to ``torch.compile(fn)``, or None when it crossed as components.
        pass_through: the signatures with no NJT argument (nothing to cross) and, under ``fullgraph`` (otherwise
            ``skips_fn``), those whose region computes nothing (``fn`` returns its arguments or constants): their
            calls go to ``torch.compile(fn)``, silently,
            which compiles the same graphs (the first) or none either (the second) and costs less.
        dynamo_config: the Dynamo settings the regions are compiled and called under: empty, or
            ``_DATA_DEPENDENT`` once the function needed them.
        seqlens_first: the seqlens (``"max"``, ``"min"``) that NJT arguments caching none have computed before they
            cross (a host read each, cached on the caller's NJT as eager mode caches a seqlen it computes), so a
            function that needs them (a softmax over the ragged dim, SDPA, padding to the max) compiles whole on the
            components instead of failing on a data-dependent read. After each compile that failed on such a read
            while an NJT argument cached none, the next of ``SEQLENS_TRIED``: the max alone (what such ops read),
            the min alone, then both, so the NJTs cache what eager mode's would, as their outputs then do.
        own_ragged: the regions rebuild NJTs with ragged sizes of their own (``region.rebuild_own_ragged``), whose
            equalities fold as a nested int's do: from the start, as Dynamo cannot build a guard on the ragged size
            of an NJT made in the graph (layer_norm compares it with the feature width), so no compile fails on it
            first; again after a compile failed so where a test started without them; never with the data-dependent
            settings, and not after a compile with them failed. Static and symbolic feature widths alike (a width
            that changed under automatic dynamic shapes, ``dynamic=True``): one graph over the widths where
            torch.compile on the NJT keeps one.
        skips_fn: a trace of ``fn`` computed nothing (it returned its arguments or constants) and ``torch.compile(fn)``
            would then have skipped ``fn`` for good: Dynamo marks the code of a frame it traced no operation for (unless
            ``fullgraph``) so that every later call runs eagerly, inputs an earlier graph was compiled for too, while
            the functions it calls are still compiled. The same mark is set on ``fn``'s code and every later call goes
            to ``torch.compile(fn)``: the same path, the same errors (a later call that would fail to compile runs
            eagerly there).
        disabled: ``torch.compile(fn, **compile_kwargs)`` would return ``fn`` itself (``disable=True``,
            ``TORCHDYNAMO_DISABLE=1``, Dynamo's ``config.disable`` as ``TORCH_COMPILE_DISABLE=1`` sets it), decided when
            made, as torch.compile decides: every call is ``fn``'s own, on the caller's NJTs (the region run without
            Dynamo would run ``fn`` on rebuilt NJTs, where an in-place change that trains is not caught).
        min_shift: what a cached min_seqlen's crossing tensor adds to it (``crossing.flatten``): 2, so no min_seqlen
            is a size Dynamo specialises; 0 after a compile failed on reading the ``_min_seqlen`` property of an NJT
            that caches one (Dynamo answers it only from a graph input's size): then up to three graphs for the
            min_seqlen (0, 1, more), as torch.compile on the NJT takes.
    """

    def __init__(self, fn: Callable, compile_kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.compile_kwargs = dict(compile_kwargs)
        lowering.install()
        # the values' and offsets' first dims cross marked dynamic unless dynamic=False (the values then keep the NJT
        # constructor's unguarded mark on their ragged dim, and the seqlens cross marked whatever dynamic says: what
        # torch.compile on the NJT sees)
        self._mark = self.compile_kwargs.get("dynamic", None) is not False
        name = getattr(fn, "__name__", type(fn).__name__)
        self._base_name = "jaggedperf_boundary_" + "".join(c if c.isalnum() else "_" for c in name)
        self._name = self._base_name
        self.regions: dict[tuple, Callable] = {}
        self.fallbacks: dict[tuple, str] = {}
        self.pass_through: set[tuple] = set()
        self._backends: dict[tuple, Any] = {}
        self.last_fallback: str | None = None
        self.dynamo_config: dict[str, Any] = {}
        self.own_ragged = _OWN_RAGGED
        self.seqlens_first: tuple[str, ...] = ()
        self.min_shift = MIN_SEQLEN_SHIFT
        self.disabled = _dynamo_disabled(self.compile_kwargs)
        self.skips_fn = False
        # fn traced inline raises on a graph break (``_traced``); without Dynamo's switch, as before it, it does not
        self._whole = bool(self.compile_kwargs.get("fullgraph")) and not self.disabled and _error_on_graph_break is not None
        self._made = 0  # regions made so far (each is named after its number)
        self._tried: set[tuple[bool, bool]] = set()
        self._fallback: Callable | None = None
        self._warned: set[str] = set()
        if not isinstance(fn, torch.nn.Module):
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _is_compiling():
            return self._traced(*args, **kwargs)
        if self.disabled:
            return self.fn(*args, **kwargs)
        if self.skips_fn:
            return self.fallback()(*args, **kwargs)
        if self.seqlens_first:
            _cache_seqlens(args, kwargs, self.seqlens_first)
        crossing = flatten(args, kwargs, self._mark, self.min_shift)
        key = crossing.key
        if crossing.reason is not None or (self.fallbacks and key in self.fallbacks):
            return self._fall_back(crossing.reason or self.fallbacks[key], args, kwargs)
        if self.pass_through and key in self.pass_through:
            self.last_fallback = None
            return self.fallback()(*args, **kwargs)
        region = self.regions.get(key)
        if region is None:
            if not any(code[0] == "j" for code in crossing.layout):
                # no NJT argument: nothing crosses, and torch.compile(fn) is the same compile without the region's
                # fullgraph (which would turn fn's graph breaks into a fallback and its warning)
                self.pass_through.add(key)
                self.last_fallback = None
                return self.fallback()(*args, **kwargs)
            region = self._region(crossing)
        try:
            out = self._call(region, crossing)
            result = out if type(out) is _Tensor else join_output(out, crossing)
        except Exception as err:  # noqa: BLE001 (whatever fails on the components is torch.compile(fn)'s to answer)
            failure = err
        else:
            failure = None
        if failure is not None:
            # answered outside the handler: a retry's failure must not carry this one as its context, or the next
            # retry would be chosen for this (answered) reason too (``_retry_for`` reads the whole chain)
            return self._after_error(failure, crossing, args, kwargs)
        self.last_fallback = None
        if self._backends:  # empty once every region's first compile was looked at
            backend = self._backends.get(key)
            if backend is not None and (backend.computes_nothing or backend.compiled):
                if backend.compiled == 0:
                    self.pass_through.add(key)
                del self._backends[key]  # decided after the first compile: never looked at again
        return result

    def _traced(self, *args: Any, **kwargs: Any) -> Any:
        """The call while Dynamo traces its caller (an outer torch.compile or jaggedperf.compile): ``fn`` inlined
        into the caller's graph, as Dynamo inlines a nested torch.compile'd function or module (with the outer
        compile's settings). Dynamo folds ``_is_compiling()`` to True, so the trace takes this path alone and breaks
        no graph: the crossing (its dynamic marks, its autograd nodes) is not traceable, and the caller's graph
        already holds what a region would compile."""
        if self._whole:
            # Dynamo traces a nested torch.compile(fn, fullgraph=True) raising on a graph break in fn, even where
            # the outer compile allows them
            with _error_on_graph_break(True):
                return self.fn(*args, **kwargs)
        return self.fn(*args, **kwargs)

    def _region(self, crossing: Crossing) -> Callable:
        codes = "".join(c[0] for c in crossing.layout)
        # A name no earlier region of this function had: Dynamo keeps what it learned of a frame's inputs (automatic
        # dynamic sizes) by code name and place, so a region made again after a failure under another name sees
        # none of the failed one's inputs (whose flat list differed: a retry's seqlens cross as more tensors).
        self._made += 1
        name = f"{self._name}_{codes}_{self._made}"
        region, backend = compile_region(make_region(self.fn, name, crossing.spec, crossing.layout,
                                                     self.own_ragged, self.min_shift),
                                         self.compile_kwargs, self._traced_empty)
        self.regions[crossing.key] = region
        if backend is not None:
            self._backends[crossing.key] = backend
        return region

    def _traced_empty(self) -> None:
        """A region's trace computed nothing: mark ``fn``'s code as ``torch.compile(fn)`` would have (``skips_fn``)."""
        if self.compile_kwargs.get("fullgraph") or torch._dynamo.config.allow_empty_graphs:
            return  # torch.compile keeps the empty graph and fn's code
        code, skip = _frame_code(self.fn), getattr(torch._dynamo.eval_frame, "skip_code", None)
        if code is not None and skip is not None:
            skip(code)
            self.skips_fn = True

    def _call(self, region: Callable, crossing: Crossing) -> Any:
        # Where this call traces (a first call, a recompile), NJT ops with a kernel of ours are lowered (``lowering``).
        with lowering.tracing():
            if not self.dynamo_config:
                return region(*crossing.flat)
            # only functions that needed the data-dependent settings come here (a context manager per call)
            with torch._dynamo.config.patch(**self.dynamo_config):
                return region(*crossing.flat)

    def _after_error(self, err: Exception, crossing: Crossing, args: tuple, kwargs: dict) -> Any:
        """A compile or call on the components failed: retry once under each setting that answers the failure (the
        seqlens computed before crossing, the data-dependent settings, own ragged sizes), else answer as
        ``torch.compile(fn)`` does and, where it succeeds, send this signature there."""
        if type(err) in _CALLERS_ERRORS:
            # raised by the compiled code as it ran on these inputs (Dynamo and Inductor wrap what fails while they
            # trace or compile): the caller's error, e.g. a jagged op's check of its offsets, raised as eager mode
            # raises it, with no fallback to compile
            raise err
        if isinstance(err, RanEagerly) and not _past_recompile_limit(self.regions.get(crossing.key)):
            # Dynamo compiled no graph for this call and ran the region as it is (a compiler stance, a frame it
            # skips): torch.compile(fn) runs fn so then, as it is, and so does this call (nothing is marked)
            self.last_fallback = None
            return self.fn(*args, **kwargs)
        if isinstance(err, (_RecompileLimitHit, RanEagerly)) or getattr(err, "gb_type", None) == _RECOMPILE_LIMIT:
            # The region met Dynamo's recompile limit: it recompiles where fn's own frame does (the same sizes,
            # dtypes, grad modes; the ragged sizes marked at least as torch.compile's NJT has them), with a limit of
            # its own per signature, so torch.compile(fn) has met its limit by these calls too. Past it, torch.compile
            # runs fn as it is and compiles nothing more, or raises (fullgraph=True, fail_on_recompile_limit_hit):
            # the same here, and the region keeps its graphs for the calls they serve. (Sending the signature to
            # torch.compile(fn) compiled more graphs than torch.compile, in a frame of its own, with a warning.)
            if self.compile_kwargs.get("fullgraph") or torch._dynamo.config.fail_on_recompile_limit_hit:
                raise err
            self.last_fallback = None
            return self.fn(*args, **kwargs)
        while (change := self._retry_for(err, crossing)) is not None:
            # New regions (new code objects: Dynamo's state from the failed compile stays with the old ones, and a
            # retry on them fails on symbols that state left pending), under the new setting.
            change()
            self.regions, self._backends = {}, {}
            added = _cache_seqlens(args, kwargs, self.seqlens_first)
            crossing = flatten(args, kwargs, self._mark, self.min_shift)
            try:
                region = self._region(crossing)
                out = self._call(region, crossing)
                result = join_output(out, crossing)
            except Exception as again:  # noqa: BLE001
                err = again
                for cache, key in added:  # this attempt failed: the NJTs cache only what eager mode would
                    del cache[key]
                crossing = flatten(args, kwargs, self._mark, self.min_shift)
            else:
                self.last_fallback = None
                return result
        self.seqlens_first = ()  # no setting let it compile: calls going to torch.compile(fn) compute nothing first
        # A failure that torch.compile(fn) shares is the user's (e.g. a shape mismatch met while tracing): it is
        # raised as torch.compile raises it, and the components stay in use for this signature.
        out = self.fallback()(*args, **kwargs)
        reason = f"compiling on the NJT's components failed ({_describe(err)})"
        self.fallbacks[crossing.key] = reason
        self.last_fallback = reason
        self._warn(reason)
        return out

    def _retry_for(self, err: Exception, crossing: Crossing) -> Callable[[], None] | None:
        """The setting to compile again under after ``err``; None: no untried setting answers it. First, for a
        data-dependent failure while an NJT argument lacks a seqlen, the next seqlens computed before crossing
        (``seqlens_first``); then (data-dependent, own ragged sizes) pairs, each tried at most once per function."""
        self._tried.add((bool(self.dynamo_config), self.own_ragged))
        if _data_dependent(err) and self.seqlens_first != SEQLENS_TRIED[-1] and _lacks_a_seqlen(crossing):
            following = SEQLENS_TRIED[SEQLENS_TRIED.index(self.seqlens_first) + 1]
            return lambda: setattr(self, "seqlens_first", following)
        if self.min_shift and _chain_says(err, "sourceless builder") and any(c[:2] == "jm" for c in crossing.layout):
            # Dynamo evaluates an NJT's property on the fake NJT and cannot return the size of a tensor made in the
            # graph (the min_seqlen's, made from the shifted one): the min_seqlen then crosses as its own size
            return lambda: setattr(self, "min_shift", 0)
        if _data_dependent(err):
            wanted = (True, False)  # unbacked symbols are not combined with the regions' own ragged sizes
        elif _unguardable_ragged_size(err):
            wanted = (bool(self.dynamo_config), True)
        elif self.own_ragged and _chain_says(err, _RAGGED_SYMBOL):
            wanted = (bool(self.dynamo_config), False)  # the region's own ragged size failed where torch's may not
        else:
            return None
        if wanted in self._tried or wanted == (True, True):
            return None
        return lambda: self._use(*wanted)

    def _use(self, data_dependent: bool, own_ragged: bool) -> None:
        self.dynamo_config = dict(_DATA_DEPENDENT) if data_dependent else {}
        self.own_ragged = own_ragged
        self._name = f"{self._base_name}{'_dd' if data_dependent else ''}{'_or' if own_ragged else ''}"

    def fallback(self) -> Callable:
        """``torch.compile(fn, **compile_kwargs)``, made on first use.

        Returns:
            the compiled function that calls which cannot cross as components go to.
        """
        if self._fallback is None:
            self._fallback = torch.compile(self.fn, **self.compile_kwargs)
        return self._fallback

    def _fall_back(self, reason: str, args: tuple, kwargs: dict) -> Any:
        self._warn(reason)
        self.last_fallback = reason
        return self.fallback()(*args, **kwargs)

    def _warn(self, reason: str) -> None:
        if reason in self._warned:
            return
        self._warned.add(reason)
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        warnings.warn(f"jaggedperf.compile({name}): falling back to torch.compile: {reason}",
                      BoundaryFallbackWarning, stacklevel=_caller_stacklevel())


def _dynamo_disabled(compile_kwargs: dict[str, Any]) -> bool:
    """Whether ``torch.compile(fn, **compile_kwargs)`` returns ``fn`` unchanged or runs it without Dynamo: what it
    reads when it wraps (``disable``, ``TORCHDYNAMO_DISABLE``) and Dynamo's switch as it stands then."""
    if compile_kwargs.get("disable") or os.environ.get("TORCHDYNAMO_DISABLE", "") == "1":
        return True
    return bool(torch._dynamo.config.disable)


def _past_recompile_limit(region: Callable | None) -> bool:
    """Whether Dynamo holds as many graphs for ``region``'s code as its recompile limit allows."""
    code = getattr(getattr(region, "_torchdynamo_orig_callable", None), "__code__", None)
    entries = getattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list", None)
    config = torch._dynamo.config
    limit = getattr(config, "recompile_limit", None) or getattr(config, "cache_size_limit", 8)
    return code is not None and entries is not None and len(entries(code)) >= limit


def _frame_code(fn: Callable) -> Any:
    """The code of the frame ``torch.compile(fn)`` compiles: a function's, a module's ``forward``'s; None for other
    callables (a partial, an object with ``__call__``)."""
    if isinstance(fn, torch.nn.Module):
        fn = fn.__dict__.get("forward", type(fn).forward)
    return getattr(getattr(fn, "__func__", fn), "__code__", None)


def _caller_stacklevel() -> int:
    """``warnings.warn``'s stacklevel, called from ``_warn``, that names the first frame outside this package (and
    nn.Module's call machinery): the user's call, whichever path led to the warning, so the warning points at their
    line."""
    frame, level = sys._getframe(1), 1  # the frame of _warn, the function that calls warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(_NOT_THE_CALLER):
        frame, level = frame.f_back, level + 1
    return level


def _cache_seqlens(args: tuple, kwargs: dict, which: tuple[str, ...]) -> list[tuple[dict, str]]:
    """Compute and cache ``which`` seqlens (``"max"``, ``"min"``) of every NJT argument that can cross and caches
    none: what eager mode does on the first op that needs one (a host read of the offsets each).

    Returns:
        (the NJT's metadata cache, the key added) for each seqlen cached.
    """
    added: list[tuple[dict, str]] = []
    if not which:
        return added
    for leaf in pytree.tree_leaves((args, kwargs)):  # NJTs in containers too (only calls that need the seqlens)
        if isinstance(leaf, NestedTensor) and fallback_reason(leaf) is None:
            cache = leaf._metadata_cache
            if "max" in which and "max_seqlen" not in cache:
                leaf._get_max_seqlen()
                added.append((cache, "max_seqlen"))
            if "min" in which and "min_seqlen" not in cache:
                leaf._get_min_seqlen()
                added.append((cache, "min_seqlen"))
    return added


def _lacks_a_seqlen(crossing: Crossing) -> bool:
    """Whether an NJT crossed without a cached min or max seqlen (its layout code ``j--``, ``jm-`` or ``j-x``)."""
    return any(code[0] == "j" and code != "jmx" for code in crossing.layout)


def _data_dependent(err: Exception) -> bool:
    """Whether Dynamo failed on a value read from a tensor (what ``_DATA_DEPENDENT`` lets it trace)."""
    names = {"DataDependentOutputException", "GuardOnDataDependentSymNode", "DynamicOutputShapeException"}
    return (any(type(e).__name__ in names for e in _chain(err))  # the chain Dynamo wraps the tracer's error in
            or "data-dependent" in str(err) or "DataDependentOutputException" in str(err))


def _unguardable_ragged_size(err: Exception) -> bool:
    """Whether Dynamo failed to build a guard on a symbol it has no source for: the ragged size of an NJT made in
    the graph (``region._own_ragged_size``), compared with an int (before torch 2.15): an IndexError, or compared
    with a symbolic size (2.15 too): a guard's source text naming the symbol's ephemeral source, which does not parse."""
    return _chain_says(err, "list index out of range", IndexError) or any(
        isinstance(e, SyntaxError) and "<ephemeral" in (e.text or "") for e in _chain(err))


def _chain_says(err: Exception, text: str, kind: type | None = None) -> bool:
    """Whether an exception in ``err``'s chain (Dynamo wraps the tracer's and the backend's) says ``text``."""
    return any((kind is None or type(e) is kind) and text in str(e) for e in _chain(err))


def _chain(err: Exception) -> Iterator[BaseException]:
    """``err`` and the exceptions it wraps, at most 8."""
    seen, e = 0, err
    while e is not None and seen < 8:
        yield e
        e, seen = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__, seen + 1


def _describe(err: Exception) -> str:
    """``Type: first line``, naming the backend's own exception where Dynamo wrapped one."""
    inner = getattr(err, "inner_exception", None) or err.__cause__
    text = f"{type(err).__name__}"
    for e in (inner, err) if inner is not None else (err,):
        lines = [line for line in str(e).splitlines() if line.strip()]
        if lines:
            name = f"{type(e).__name__}: " if e is inner else ""
            return f"{text}: {name}{lines[0].strip()[:200]}"
    return text


def compile(fn: Callable | None = None, **torch_compile_kwargs: Any) -> Any:
    """``torch.compile`` for functions and modules that take jagged NestedTensors.

    Each jagged NJT argument (anywhere in the args/kwargs pytrees) crosses into the compiled region
    as its values, offsets and cached min/max seqlen, and is rebuilt inside; NJT results are taken
    apart inside and rebuilt outside. This removes the per-call cost of Dynamo's NJT guards and of
    the compiled runtime's subclass handling; results and gradients are those of ``torch.compile(fn)``.

    Args:
        fn: a function or ``nn.Module``; when None, returns a decorator (``@jaggedperf.compile(mode=...)``).
        **torch_compile_kwargs: passed to ``torch.compile`` unchanged (``mode``, ``dynamic``,
            ``fullgraph``, ``backend``, ``options``, ...). Unless ``dynamic=False``, the NJTs' ragged
            dims (total length, B, min/max seqlen) are marked dynamic, so they do not recompile; under
            ``dynamic=False`` the min/max seqlens still are, as torch.compile on the NJT sees them.

    Returns:
        a :class:`BoundaryFunction` (a :class:`~jaggedperf.boundary.module.BoundaryModule` for a module), called like ``fn``.
        Calls that cannot cross as components (an NJT with lengths, an NJT ragged in a dim other
        than 1, a compile or run on the components that fails where ``torch.compile(fn)`` does not) go to
        ``torch.compile(fn)`` with one :class:`BoundaryFallbackWarning` per reason.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if fn is None:
        return functools.partial(compile, **torch_compile_kwargs)
    if isinstance(fn, torch.nn.Module):
        from jaggedperf.boundary.module import BoundaryModule  # it imports BoundaryFunction from here

        return BoundaryModule(fn, torch_compile_kwargs)
    if not callable(fn):
        raise TypeError(f"jaggedperf.compile: expected a function or nn.Module, got {type(fn).__name__}")
    return BoundaryFunction(fn, torch_compile_kwargs)
