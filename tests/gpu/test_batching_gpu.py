"""The operators' vmap rules on CUDA (the Triton kernels on samples folded into columns or segments) against each
sample's own call, with torch's per-sample fallback switched off (the CPU tests: tests/ops/test_batching.py)."""

import pytest
import torch
from helpers.batching import CALLS, no_fallback
from helpers.reference import lengths_to_offsets

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_vmapped_call_on_cuda_is_each_sample_s_call(name, dtype):
    call, count, rows = CALLS[name]
    offsets = lengths_to_offsets([40, 0, 1, 64, 25], device="cuda")  # 130 rows
    n = 130 if rows == "N" else 5
    tensors = [torch.randn(6, n, 24, device="cuda").to(dtype) for _ in range(count)]
    got = no_fallback(lambda: torch.vmap(call, in_dims=(0,) * count + (None,))(*tensors, offsets))
    expected = torch.stack([call(*(t[k] for t in tensors), offsets) for k in range(6)])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), expected.float(), rtol=tol, atol=tol)
