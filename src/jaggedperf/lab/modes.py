"""Modes: how an implementation is run. ``build`` turns (function, arguments, mode) into a
zero-argument callable; its first call is the one that compiles (or captures).

Two compiled families share torch.compile's four modes:

- ``compile:<torch mode>``: ``torch.compile(fn, mode=...)``, the NJT argument guarded and flattened by
  Dynamo and the compiled runtime on every call;
- ``jagged-compile:<torch mode>``: ``jaggedperf.compile(fn, mode=...)`` (``jaggedperf.boundary``), the
  same Inductor program compiled on the NJT's components (values, offsets, seqlens). On an
  implementation that takes plain tensors it compiles what ``compile:<torch mode>`` compiles.

A mode of either family with CUDA graphs (``reduce-overhead``, ``max-autotune``) needs CUDA.

The names and their checks import no torch (the CLI's parsers and ``--help`` are built from them before torch
loads); what builds or compiles a call imports it there.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Iterator

from jaggedperf.names import unknown_message

if TYPE_CHECKING:
    import torch

    from jaggedperf.boundary import BoundaryFunction

EAGER = "eager"
GRAPH = "graph"
COMPILE_MODES = {
    "compile:default": "default",
    "compile:reduce-overhead": "reduce-overhead",
    "compile:max-autotune": "max-autotune",
    "compile:max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs",
}
TORCH_COMPILE_PREFIX = "compile:"
BOUNDARY_PREFIX = "jagged-compile:"
# jaggedperf.compile (the NJT boundary) in each torch.compile mode: the same keys as COMPILE_MODES, renamed.
BOUNDARY_MODES = {BOUNDARY_PREFIX + torch_mode: torch_mode for torch_mode in COMPILE_MODES.values()}
MODES = (EAGER, *COMPILE_MODES, *BOUNDARY_MODES, GRAPH)
SEED_COMPILED_MODE = "compile:max-autotune-no-cudagraphs"
# torch modes that replay CUDA graphs (in either family)
_CUDA_GRAPH_TORCH_MODES = ("reduce-overhead", "max-autotune")

DESCRIPTIONS_TORCH = {
    "default": "Inductor",
    "reduce-overhead": "Inductor + CUDA graphs",
    "max-autotune": "autotuned kernels + CUDA graphs",
    "max-autotune-no-cudagraphs": "autotuned kernels, no CUDA graphs (the seed's mode)",
}
DESCRIPTIONS = {
    EAGER: "plain eager PyTorch",
    "compile:default": "torch.compile()",
    "compile:reduce-overhead": "torch.compile(mode='reduce-overhead'): Inductor + CUDA graphs",
    "compile:max-autotune": "torch.compile(mode='max-autotune'): autotuned kernels + CUDA graphs",
    "compile:max-autotune-no-cudagraphs": "torch.compile(mode='max-autotune-no-cudagraphs'): the seed's mode",
    **{mode: f"jaggedperf.compile(mode='{torch_mode}'): {DESCRIPTIONS_TORCH[torch_mode]}, compiled on the NJT's "
              "components (no NJT guards or subclass handling per call)" for mode, torch_mode in BOUNDARY_MODES.items()},
    GRAPH: "eager captured once in a CUDA graph and replayed (GPU only)",
}


class ModeUnavailable(RuntimeError):
    """The mode cannot run here (e.g. CUDA graphs on the CPU): the cell is skipped, not failed."""


def check_modes(names: list[str]) -> list[str]:
    """``names`` when every one is a mode.

    Raises:
        ValueError: an unknown mode (the first; the message names the closest valid modes and lists them all).
    """
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise ValueError(unknown_message("mode", unknown[0], MODES))
    return names


def is_compiled(mode: str) -> bool:
    """Whether ``mode`` runs through ``torch.compile`` (directly or through ``jaggedperf.compile``)."""
    return mode in COMPILE_MODES or mode in BOUNDARY_MODES


def is_boundary(mode: str) -> bool:
    """Whether ``mode`` is a ``jagged-compile:`` mode (``jaggedperf.compile``)."""
    return mode in BOUNDARY_MODES


def torch_mode(mode: str) -> str:
    """The ``torch.compile(mode=...)`` string of a compiled mode of either family.

    Raises:
        ValueError: ``mode`` is not compiled.
    """
    if mode in COMPILE_MODES:
        return COMPILE_MODES[mode]
    if mode in BOUNDARY_MODES:
        return BOUNDARY_MODES[mode]
    raise ValueError(f"{mode!r} is not a compiled mode")


def boundary_twin(mode: str) -> str | None:
    """``jagged-compile:<m>`` for ``compile:<m>``; None for any other mode."""
    return BOUNDARY_PREFIX + COMPILE_MODES[mode] if mode in COMPILE_MODES else None


def uses_cuda_graphs(mode: str) -> bool:
    """Whether ``mode`` replays CUDA graphs (``graph``, or an Inductor mode with cudagraphs, in either family)."""
    return mode == GRAPH or (is_compiled(mode) and torch_mode(mode) in _CUDA_GRAPH_TORCH_MODES)


@contextlib.contextmanager
def cold_compile() -> Iterator[None]:
    """Inside: no on-disk FX-graph or AOT-autograd cache, so every compile is cold (a compiled cell pays, and
    records, a cold compile) and writes nothing there. The settings before are restored on leaving: a process
    that times cold compiles for a while (the doctor, a GPU test) still loads the graphs compiled before or
    after it, as the GPU suite's timed pass loads the Inductor programs its parallel pass compiled."""
    import torch._functorch.config
    import torch._inductor.config

    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        yield


def jagged_compile(fn: Callable, **options) -> BoundaryFunction:
    """``jaggedperf.compile(fn, **options)``, imported when first called (a seam the tests replace)."""
    from jaggedperf.boundary import compile as boundary_compile

    return boundary_compile(fn, **options)


def compile_fn(fn: Callable, mode: str, *, dynamic: bool | None = None) -> Callable:
    """``fn`` compiled for a compiled mode, from a reset compiler state (no cache carried between cells).

    Args:
        fn: the implementation.
        mode: a key of ``COMPILE_MODES`` (``torch.compile``) or ``BOUNDARY_MODES`` (``jaggedperf.compile``).
        dynamic: ``dynamic=`` for either (the boundary marks the ragged dims dynamic unless it is False).

    Returns:
        The compiled callable (compiling happens on its first call).

    Raises:
        ValueError: ``mode`` is not compiled.
    """
    import torch

    options = {"mode": torch_mode(mode), "dynamic": dynamic}
    torch._dynamo.reset()
    if is_boundary(mode):
        return jagged_compile(fn, **options)
    return torch.compile(fn, **options)


def build(fn: Callable, args: tuple, mode: str, device: torch.device, *, dynamic: bool | None = None) -> Callable[[], torch.Tensor]:
    """A no-argument callable that runs ``fn(*args)`` in ``mode`` (compiling or capturing happens on its first call
    for compiled modes, here for ``graph``).

    Args:
        fn: the implementation.
        args: its prepared arguments.
        mode: one of ``MODES``.
        device: where it runs.
        dynamic: ``torch.compile(dynamic=...)`` for compiled modes.

    Returns:
        The callable; each call returns the output tensor.

    Raises:
        ValueError: an unknown mode.
        ModeUnavailable: the mode needs CUDA and ``device`` is not CUDA.
    """
    check_modes([mode])
    if mode == EAGER:
        return lambda: fn(*args)
    if mode == GRAPH:
        if device.type != "cuda":
            raise ModeUnavailable("graph mode needs CUDA")
        return _graph_callable(fn, args, device)
    if uses_cuda_graphs(mode) and device.type != "cuda":
        # Inductor silently drops CUDA graphs on the CPU; the cell would repeat compile:default.
        raise ModeUnavailable(f"{mode} uses CUDA graphs, which need CUDA")
    compiled = compile_fn(fn, mode, dynamic=dynamic)
    if is_boundary(mode):
        return BoundaryCall(compiled, args)
    return lambda: compiled(*args)


class BoundaryCall:
    """The callable of a ``jagged-compile:`` cell, which can say whether the boundary gave up on the
    components and ran ``torch.compile(fn)`` instead (then the cell did not measure its mode)."""

    def __init__(self, compiled: BoundaryFunction, args: tuple) -> None:
        self.compiled = compiled
        self.args = args

    def __call__(self) -> torch.Tensor:
        return self.compiled(*self.args)

    @property
    def fell_back(self) -> str | None:
        """Why the latest call went to ``torch.compile(fn)`` (a compile failure on the components), or None."""
        return self.compiled.last_fallback


def boundary_fallback(call: Callable) -> str | None:
    """Why the callable of a ``jagged-compile:`` cell fell back to ``torch.compile(fn)``; None when it did not
    or when ``call`` is not such a callable.

    Args:
        call: what ``build`` returned, after its first call.

    Returns:
        The boundary's reason, or None.
    """
    return call.fell_back if isinstance(call, BoundaryCall) else None


def _graph_callable(fn: Callable, args: tuple, device: torch.device) -> Callable[[], torch.Tensor]:
    """Capture on first call (after warm-up on a side stream); later calls replay."""
    import torch

    state: dict = {}

    def call():
        if "graph" not in state:
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):
                for _ in range(3):
                    fn(*args)
            torch.cuda.current_stream(device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                state["out"] = fn(*args)
            state["graph"] = graph
        state["graph"].replay()
        return state["out"]

    return call
