"""``jaggedperf.compile``'s public face: the compiled function and module, the fallback, the data-dependent retry.

The invariants are the package's docstring's; how an NJT crosses is ``crossing``'s.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Any, Callable

import torch

from jaggedperf.boundary.crossing import flatten, join_output, make_flat_region, make_region, split_args

__all__ = ["BoundaryFallbackWarning", "BoundaryFunction", "BoundaryModule", "compile"]

# Frames from these files are the boundary's own or nn.Module's dispatch to a BoundaryModule's forward, never the
# user's call (``_caller_stacklevel``).
_NOT_THE_CALLER = (os.path.dirname(os.path.abspath(__file__)) + os.sep, torch.nn.modules.module.__file__)
# flatten's result not taken yet (None is one of its results: an argument that needs the pytree walk).
_UNFLATTENED = object()
# Bound once: the common call checks its result's type with it.
_Tensor = torch.Tensor
# Dynamo's settings under which values read from tensors (lengths, ``tolist``) become unbacked symbols
# instead of a failure: the retry for functions that compile only that way on the components.
_DATA_DEPENDENT = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}


class BoundaryFallbackWarning(UserWarning):
    """A call went to ``torch.compile(fn)`` instead of compiling on the NJT's components."""



class BoundaryFunction:
    """``fn`` compiled on its NJT arguments' components; call it as you would call ``fn``.

    Attributes:
        fn: the user's function (or module).
        compile_kwargs: what is passed to ``torch.compile`` (for the region and for the fallback).
        region: ``torch.compile`` of the region that rebuilds NJTs and calls ``fn`` (the pytree path).
        flat_regions: one compiled region per layout of positional arguments (the flat path).
        broken: why compiling on the components failed, once it has; every call then falls back.
        dynamo_config: the Dynamo settings the regions are compiled and called under: empty, or
            ``_DATA_DEPENDENT`` once the function needed them.
    """

    def __init__(self, fn: Callable, compile_kwargs: dict[str, Any]) -> None:
        self.fn = fn
        self.compile_kwargs = dict(compile_kwargs)
        self._mark = self.compile_kwargs.get("dynamic", None) is not False
        name = getattr(fn, "__name__", type(fn).__name__)
        self._name = "jaggedperf_boundary_" + "".join(c if c.isalnum() else "_" for c in name)
        self.broken: str | None = None
        self.dynamo_config: dict[str, Any] = {}
        self._new_regions()
        self._fallback: Callable | None = None
        self._warned: set[str] = set()
        if not isinstance(fn, torch.nn.Module):
            functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or self.broken is not None or self.dynamo_config:
            return self._call(args, kwargs)
        # The common call (positional NJTs, tensors, leaves), inline: one flattening pass and the compiled region
        # called bare. Its host time is the boundary's whole cost over a plain compiled call, which is what users
        # compare it with.
        flat = flatten(args, self._mark)
        if flat is None or flat[2] is not None:  # a pytree argument, or a reason to fall back: not flattened again
            return self._call(args, kwargs, flat)
        layout, flat_args, _ = flat
        region = self.flat_regions.get(layout) or self._flat_region(layout)
        try:
            out = region(*flat_args)
        except torch._dynamo.exc.TorchDynamoException as err:
            return self._after_error(err, args, kwargs)
        return out if isinstance(out, _Tensor) else join_output(out)

    def _call(self, args: tuple, kwargs: dict, flat: Any = _UNFLATTENED) -> Any:
        """Any call: the flat or the pytree path, the fallback, the data-dependent settings (``flat``: the
        arguments' ``flatten`` when the caller has it)."""
        if self.broken is not None:
            return self._fall_back(self.broken, args, kwargs)
        call = self._region_call(args, kwargs, flat)
        if isinstance(call, str):
            return self._fall_back(call, args, kwargs)
        try:
            out = call() if not self.dynamo_config else self._call_patched(call)
        except torch._dynamo.exc.TorchDynamoException as err:
            return self._after_error(err, args, kwargs)
        return join_output(out)

    def _after_error(self, err: Exception, args: tuple, kwargs: dict) -> Any:
        """A compile on the components failed: retry once under the data-dependent settings where they apply,
        else fall back to ``torch.compile(fn)``."""
        if self.dynamo_config or not _data_dependent(err):
            return self._fall_back_after(err, args, kwargs)
        # New regions (new code objects: Dynamo's state from the failed compile stays with the old
        # ones, and a retry on them fails on symbols that state left pending), under the settings.
        self.dynamo_config = dict(_DATA_DEPENDENT)
        with torch._dynamo.config.patch(**self.dynamo_config):
            self._new_regions("_dd")
        try:
            out = self._call_patched(self._region_call(args, kwargs))
        except torch._dynamo.exc.TorchDynamoException as again:
            return self._fall_back_after(again, args, kwargs)
        return join_output(out)

    def _new_regions(self, suffix: str = "") -> None:
        self._name += suffix
        self.region = torch.compile(make_region(self.fn, self._name), **self.compile_kwargs)
        self.flat_regions: dict[tuple[str, ...], Callable] = {}

    def _region_call(self, args: tuple, kwargs: dict, flat: Any = _UNFLATTENED) -> Callable[[], Any] | str:
        """The compiled region's call on these arguments' components, or why they cannot cross (a reason);
        ``flat``: the arguments' ``flatten``, when already taken."""
        if flat is _UNFLATTENED:
            flat = None if kwargs else flatten(args, self._mark)
        if flat is not None:
            layout, flat_args, reason = flat
            if reason is not None:
                return reason
            region = self.flat_regions.get(layout) or self._flat_region(layout)
            return lambda: region(*flat_args)
        crossing_args, crossing_kwargs, reason = split_args(args, kwargs, self._mark)
        if reason is not None:
            return reason
        return lambda: self.region(crossing_args, crossing_kwargs)

    def _flat_region(self, layout: tuple[str, ...]) -> Callable:
        region = self.flat_regions[layout] = torch.compile(
            make_flat_region(self.fn, f"{self._name}_{''.join(layout)}", layout), **self.compile_kwargs)
        return region

    def _call_patched(self, call: Callable[[], Any]) -> Any:
        # only functions that needed the data-dependent settings come here (a context manager per call)
        with torch._dynamo.config.patch(**self.dynamo_config):
            return call()

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
        return self.fallback()(*args, **kwargs)

    def _fall_back_after(self, err: Exception, args: tuple, kwargs: dict) -> Any:
        # A failure that torch.compile(fn) shares is the user's error (e.g. a shape mismatch met while
        # tracing): it is raised as torch.compile raises it, and the boundary stays in use.
        out = self.fallback()(*args, **kwargs)
        self.broken = f"compiling on the NJT's components failed ({_describe(err)})"
        self._warn(self.broken)
        return out

    def _warn(self, reason: str) -> None:
        if reason in self._warned:
            return
        self._warned.add(reason)
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        warnings.warn(f"jaggedperf.compile({name}): falling back to torch.compile: {reason}",
                      BoundaryFallbackWarning, stacklevel=_caller_stacklevel())


def _caller_stacklevel() -> int:
    """``warnings.warn``'s stacklevel, called from ``_warn``, that names the first frame outside this package (and
    nn.Module's call machinery): the user's call, whichever path (flat, pytree, retry, module) led to the warning, so
    the warning points at their line."""
    frame, level = sys._getframe(1), 1  # the frame of _warn, the function that calls warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(_NOT_THE_CALLER):
        frame, level = frame.f_back, level + 1
    return level


def _data_dependent(err: Exception) -> bool:
    """Whether Dynamo failed on a value read from a tensor (what ``_DATA_DEPENDENT`` lets it trace)."""
    names = {"DataDependentOutputException", "GuardOnDataDependentSymNode", "DynamicOutputShapeException"}
    seen, e = 0, err
    while e is not None and seen < 8:  # the chain Dynamo wraps the tracer's error in
        if type(e).__name__ in names:
            return True
        e, seen = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__, seen + 1
    return "data-dependent" in str(err) or "DataDependentOutputException" in str(err)


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


class BoundaryModule(torch.nn.Module):
    """An ``nn.Module`` whose calls go through a :class:`BoundaryFunction` of the wrapped module.

    Like ``torch.compile``'s OptimizedModule, it holds the original as ``_orig_mod`` (so its
    state_dict keys gain that prefix) and reads unknown attributes from it.
    """

    def __init__(self, mod: torch.nn.Module, compile_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._orig_mod = mod
        self.boundary = BoundaryFunction(mod, compile_kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.boundary(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_orig_mod"), name)


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
            dims (total length, B, min/max seqlen) are marked dynamic, so they do not recompile.

    Returns:
        a :class:`BoundaryFunction` (a :class:`BoundaryModule` for a module), called like ``fn``.
        Calls that cannot cross as components (an NJT with lengths, an NJT ragged in a dim other
        than 1, a compile failure on the components) go to ``torch.compile(fn)`` with one
        :class:`BoundaryFallbackWarning` per reason.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if fn is None:
        return functools.partial(compile, **torch_compile_kwargs)
    if isinstance(fn, torch.nn.Module):
        return BoundaryModule(fn, torch_compile_kwargs)
    if not callable(fn):
        raise TypeError(f"jaggedperf.compile: expected a function or nn.Module, got {type(fn).__name__}")
    return BoundaryFunction(fn, torch_compile_kwargs)
