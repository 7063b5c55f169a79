"""The operators' calls the vmap rules' tests make (CPU: tests/ops/test_batching.py; CUDA: its GPU twin), and torch's
per-sample vmap fallback switched off around a call."""

from __future__ import annotations

import torch

import jaggedperf.ops  # noqa: F401 (registers the operators)

OPS = torch.ops.jaggedperf
EPS = 1e-5

# name → (the call on (tensors..., offsets), how many (rows, M) tensors lead, the leading tensors' rows: N or B)
CALLS = {
    "jagged_sum": (lambda v, o: OPS.jagged_sum(v, o), 1, "N"),
    "jagged_mean": (lambda v, o: OPS.jagged_mean(v, o, True), 1, "N"),
    "jagged_expand": (lambda g, o: OPS.jagged_expand(g, o, int(o[-1]), True), 1, "B"),
    "jagged_softmax": (lambda v, o: OPS.jagged_softmax(v, o), 1, "N"),
    "jagged_softmax_backward": (lambda y, g, o: OPS.jagged_softmax_backward(y, g, o), 2, "N"),
    "jagged_layer_norm": (lambda v, o: OPS.jagged_layer_norm(v, o, EPS), 1, "N"),
    "jagged_layer_norm_backward": (lambda v, g, o: OPS.jagged_layer_norm_backward(v, g, o, EPS), 2, "N"),
}


def no_fallback(fn):
    """``fn()`` with torch's per-sample vmap fallback switched off: an operator without a rule then raises."""
    enabled = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        return fn()
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(enabled)
