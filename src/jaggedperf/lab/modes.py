"""Modes: how an implementation is run. ``build`` turns (function, arguments, mode) into a
zero-argument callable; its first call is the one that compiles (or captures)."""

from __future__ import annotations

from typing import Callable

import torch

EAGER = "eager"
GRAPH = "graph"
COMPILE_MODES = {
    "compile:default": "default",
    "compile:reduce-overhead": "reduce-overhead",
    "compile:max-autotune": "max-autotune",
    "compile:max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs",
}
MODES = (EAGER, *COMPILE_MODES, GRAPH)
SEED_COMPILED_MODE = "compile:max-autotune-no-cudagraphs"

DESCRIPTIONS = {
    EAGER: "plain eager PyTorch",
    "compile:default": "torch.compile()",
    "compile:reduce-overhead": "torch.compile(mode='reduce-overhead'): Inductor + CUDA graphs",
    "compile:max-autotune": "torch.compile(mode='max-autotune'): autotuned kernels + CUDA graphs",
    "compile:max-autotune-no-cudagraphs": "torch.compile(mode='max-autotune-no-cudagraphs'): the seed's mode",
    GRAPH: "eager captured once in a CUDA graph and replayed (GPU only)",
}


class ModeUnavailable(RuntimeError):
    """The mode cannot run here (e.g. CUDA graphs on the CPU): the cell is skipped, not failed."""


def check_modes(names: list[str]) -> list[str]:
    """``names`` when every one is a mode.

    Raises:
        ValueError: an unknown mode (the message lists the valid ones).
    """
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {', '.join(unknown)}; valid modes: {', '.join(MODES)}")
    return names


def is_compiled(mode: str) -> bool:
    """Whether ``mode`` runs through ``torch.compile``."""
    return mode in COMPILE_MODES


def uses_cuda_graphs(mode: str) -> bool:
    """Whether ``mode`` replays CUDA graphs (``graph``, or an Inductor mode with cudagraphs)."""
    return mode in (GRAPH, "compile:reduce-overhead", "compile:max-autotune")


def disable_compile_caches() -> None:
    """No on-disk FX-graph or AOT-autograd cache: every compiled cell pays (and records) a cold compile."""
    import torch._functorch.config
    import torch._inductor.config

    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False


def compile_fn(fn: Callable, mode: str, *, dynamic: bool | None = None) -> Callable:
    """``torch.compile`` for a mode, from a reset compiler state (no cache carried between cells)."""
    torch._dynamo.reset()
    return torch.compile(fn, mode=COMPILE_MODES[mode], dynamic=dynamic)


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
    return lambda: compiled(*args)


def _graph_callable(fn: Callable, args: tuple, device: torch.device) -> Callable[[], torch.Tensor]:
    """Capture on first call (after warm-up on a side stream); later calls replay."""
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
