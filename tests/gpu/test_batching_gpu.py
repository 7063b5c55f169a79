"""The operators' vmap rules on CUDA (the Triton kernels on samples folded into columns or segments) against each
sample's own call, with torch's per-sample fallback switched off (the CPU tests: tests/ops/test_batching.py)."""

import pytest
import torch
from helpers.reference import lengths_to_offsets

import jaggedperf.ops  # noqa: F401 (registers the operators)

pytestmark = pytest.mark.gpu

OPS = torch.ops.jaggedperf
EPS = 1e-5
CALLS = {
    "jagged_sum": (lambda v, o: OPS.jagged_sum(v, o), 1, "N"),
    "jagged_mean": (lambda v, o: OPS.jagged_mean(v, o, True), 1, "N"),
    "jagged_expand": (lambda g, o: OPS.jagged_expand(g, o, 130, True), 1, "B"),
    "jagged_softmax": (lambda v, o: OPS.jagged_softmax(v, o), 1, "N"),
    "jagged_softmax_backward": (lambda y, g, o: OPS.jagged_softmax_backward(y, g, o), 2, "N"),
    "jagged_layer_norm": (lambda v, o: OPS.jagged_layer_norm(v, o, EPS), 1, "N"),
    "jagged_layer_norm_backward": (lambda v, g, o: OPS.jagged_layer_norm_backward(v, g, o, EPS), 2, "N"),
}


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_vmapped_call_on_cuda_is_each_sample_s_call(name, dtype):
    call, count, rows = CALLS[name]
    offsets = lengths_to_offsets([40, 0, 1, 64, 25], device="cuda")  # 130 rows
    n = 130 if rows == "N" else 5
    tensors = [torch.randn(6, n, 24, device="cuda").to(dtype) for _ in range(count)]
    enabled = torch._C._functorch._is_vmap_fallback_enabled()
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        got = torch.vmap(call, in_dims=(0,) * count + (None,))(*tensors, offsets)
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(enabled)
    expected = torch.stack([call(*(t[k] for t in tensors), offsets) for k in range(6)])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol)
