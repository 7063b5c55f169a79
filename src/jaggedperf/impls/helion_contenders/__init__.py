"""Helion contenders: our own Helion kernels for jagged_mean, jagged_sum, jagged_softmax and
jagged_layer_norm, registered as implementation ``helion`` of each op where they can run.

They are registered when the ``helion`` package is installed and a CUDA device is present; elsewhere each op
records why not (``Op.unavailable``; ``jaggedperf list`` shows it). ``import helion`` itself (about 5 s) is
left to the setup hook, so that a run or a sweep worker that never reaches a helion cell does not pay for it; a
helion that is installed but does not import makes each of its cells an error that says why.

Each takes ``(values, offsets, max_seqlen)`` like ``jaggedperf``'s own contenders (max_seqlen is not needed:
each program reads its own sequence's bounds), accumulates in fp32, and runs a fixed Helion config unless
``$JAGGEDPERF_HELION_AUTOTUNE`` asks for autotuning (``kernels.AUTOTUNE_ENV``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util

import torch

from jaggedperf.impls.jagged_layer_norm import EPS
from jaggedperf.impls.registry import implementation, mark_unavailable

NAME = "helion"
OPS = ("jagged_mean", "jagged_sum", "jagged_softmax", "jagged_layer_norm")


def unavailable_reason() -> str | None:
    """Why the helion contenders cannot run here (no helion package, no CUDA device), or None."""
    if importlib.util.find_spec("helion") is None:
        return "the helion package is not installed (pip install helion)"
    if not torch.cuda.is_available():
        return "helion's kernels need a CUDA device; none is available"
    return None


def _kernels():
    return importlib.import_module("jaggedperf.impls.helion_contenders.kernels")


def load_helion(device: torch.device) -> dict:
    """Setup hook: import helion and our kernels (their compile happens at each cell's first, untimed call).

    Returns:
        ``{"helion": {version, autotune}}`` for the run's environment.

    Raises:
        Exception: helion does not import here (each helion cell then records it).
    """
    kernels = _kernels()
    effort = kernels.autotune_effort()
    return {NAME: {"version": importlib.metadata.version("helion"),
                   "autotune": effort or "off: fixed configs (kernels.CONFIGS)"}}


def _mean(values, offsets, max_seqlen):
    return _kernels().jagged_mean(values, offsets, max_seqlen)


def _sum(values, offsets, max_seqlen):
    return _kernels().jagged_sum(values, offsets, max_seqlen)


def _softmax(values, offsets, max_seqlen):
    return _kernels().jagged_softmax(values, offsets, max_seqlen)


def _layer_norm(values, offsets, max_seqlen):
    return _kernels().jagged_layer_norm(values, offsets, max_seqlen, eps=EPS)


CONTENDERS = {
    "jagged_mean": (_mean, "Helion kernel (ours): one program per sequence × column block, fp32 sums / length"),
    "jagged_sum": (_sum, "Helion kernel (ours): one program per sequence × column block, fp32 sums"),
    "jagged_softmax": (_softmax, "Helion kernel (ours): per sequence × column block, online max/sum pass, then "
                                 "a write pass"),
    "jagged_layer_norm": (_layer_norm, "Helion kernel (ours): one program per sequence over its len·M elements, "
                                       "two-pass mean/variance, then a write pass"),
}


def register(reason: str | None) -> None:
    """Register the helion contender of each op, or, given a ``reason``, record why each is unavailable."""
    for op, (fn, description) in CONTENDERS.items():
        if reason is not None:
            mark_unavailable(op, NAME, reason)
        else:
            implementation(op, NAME, takes="dense", takes_max_seqlen=True, devices=("cuda",), setup=load_helion,
                           description=description)(fn)


register(unavailable_reason())
