"""The row-wise families' test material: cases, float64 references (a plain loop over sequences calling
torch.softmax / torch.layer_norm, unlike the kernels), tolerances, and the kernels run through the JIT with their
outputs poisoned. Shared by the CPU and interpreter tests (tests/ops) and the GPU tests."""

from __future__ import annotations

import torch

from jaggedperf.ops import testing
from jaggedperf.ops.layer_norm.plan import plan_layer_norm, plan_layer_norm_backward
from jaggedperf.ops.softmax.plan import plan_softmax, plan_softmax_backward
from helpers.reference import DTYPE_NAMES, lengths_to_offsets

FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16
FAMILIES = ("softmax", "layer_norm")
EPS = 1e-5
# per element: |out − ref| <= RTOL·|ref| + ATOL (the output's own rounding dominates for 16-bit types; fp32
# statistics add ~1e-7 relative to the segment's scale)
RTOL = {FP32: 1e-5, BF16: 1e-2, FP16: 2e-3, torch.float64: 1e-12}
ATOL = {FP32: 2e-6, BF16: 2e-5, FP16: 2e-5, torch.float64: 1e-12}

# (lengths, M, dtype, offsets dtype, note)
CASES = [
    ([], 3, FP32, torch.int64, "none"),
    ([7], 1, FP32, torch.int64, "one"),
    ([0], 3, FP16, torch.int32, "one"),
    ([4, 0, 5], 129, BF16, torch.int64, ""),
    ([4, 0, 5], 129, FP32, torch.int32, ""),
    ([0, 0, 3, 1, 0, 0], 3, FP16, torch.int64, "lead-trail"),
    ([0, 0, 23, 0, 0], 3, FP32, torch.int64, "one-holds-all"),
    ([1, 30, 2, 0, 9, 1, 1, 12], 16, BF16, torch.int32, "long"),
    ([2, 70, 1, 0], 64, FP16, torch.int64, "long"),
    ([3, 5, 2], 300, FP32, torch.int64, "two-col-blocks"),
]


def case_id(lengths, M, dtype, offsets_dtype, note) -> str:
    parts = [f"B{len(lengths)}", f"M{M}", DTYPE_NAMES[dtype]]
    if any(n == 0 for n in lengths):
        parts.append("empty")
    if offsets_dtype == torch.int32:
        parts.append("i32")
    return "-".join(parts + ([note] if note else []))


IDS = [case_id(*case) for case in CASES]


def make(lengths, M, dtype, offsets_dtype=torch.int64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    offsets = lengths_to_offsets(lengths, offsets_dtype)
    return torch.randn(int(offsets[-1]), M, generator=gen).to(dtype), offsets


def reference(family: str, values, offsets, eps: float = EPS) -> torch.Tensor:
    """(N, M) float64: torch.softmax(dim=0) or torch.layer_norm(t, t.shape) of each sequence t."""
    v = values.detach().to("cpu", torch.float64)
    o = [int(x) for x in offsets]
    out = torch.zeros_like(v)
    for a, b in zip(o[:-1], o[1:]):
        if b > a:
            seg = v[a:b]
            out[a:b] = torch.softmax(seg, dim=0) if family == "softmax" else torch.layer_norm(seg, seg.shape, eps=eps)
    return out


def reference_backward(family: str, values, offsets, grad) -> torch.Tensor:
    """(N, M) float64: the gradient of ``reference`` w.r.t. values, given the output's gradient."""
    v = values.detach().to(torch.float64).requires_grad_(True)
    out = reference_graph(family, v, offsets)
    (dv,) = torch.autograd.grad(out, v, grad.to(torch.float64), allow_unused=True)
    return torch.zeros_like(v) if dv is None else dv


def reference_graph(family: str, v, offsets):
    o = [int(x) for x in offsets]
    parts = [torch.softmax(v[a:b], dim=0) if family == "softmax" else torch.layer_norm(v[a:b], v[a:b].shape, eps=EPS)
             for a, b in zip(o[:-1], o[1:]) if b > a]
    return torch.cat(parts) if parts else v * 0


def assert_close(out, ref, dtype, what="output", rtol=None, atol=None):
    """``out`` has ``dtype`` and ref's shape; NaN exactly where ref has it; the rest within RTOL/ATOL. Compared where
    ``ref`` is (a GPU test keeps its reference on the device: on the CPU a 134 M-element check took seconds)."""
    assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected {dtype}"
    assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    got = out.detach().to(ref.device, torch.float64)
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{what}: NaN where the reference has none, or not"
    finite = ~torch.isnan(ref)
    bound = (RTOL[dtype] if rtol is None else rtol) * ref.abs() + (ATOL[dtype] if atol is None else atol)
    bad = finite & ~((got - ref).abs() <= bound)
    assert not bool(bad.any()), (f"{what}: {int(bad.sum())} elements off, first at {torch.nonzero(bad)[0].tolist()}:"
                                 f" got {got[bad][0].item()!r}, expected {ref[bad][0].item()!r}")


def run_forward(family: str, values, offsets, *, cfg=None, max_seqlen=None, eps: float = EPS,
                per_element: bool | None = None) -> torch.Tensor:
    """The family's forward kernel through the JIT, its output poisoned with NaN first (per_element: softmax's)."""
    if family == "softmax":
        planned = plan_softmax(values, offsets, max_seqlen=max_seqlen, cfg=cfg, per_element=per_element)
    else:
        planned = plan_layer_norm(values, offsets, eps, max_seqlen=max_seqlen, cfg=cfg)
    planned.out.fill_(float("nan"))
    testing.run_direct(planned.launches)
    return planned.out


def run_backward(family: str, values, offsets, grad, *, cfg=None, max_seqlen=None) -> torch.Tensor:
    """The family's backward kernel through the JIT (softmax: from its forward's output), output poisoned."""
    if family == "softmax":
        planned = plan_softmax_backward(run_forward(family, values, offsets, cfg=cfg), grad, offsets,
                                        max_seqlen=max_seqlen, cfg=cfg)
    else:
        planned = plan_layer_norm_backward(values, grad, offsets, EPS, max_seqlen=max_seqlen, cfg=cfg)
    planned.out.fill_(float("nan"))
    testing.run_direct(planned.launches)
    return planned.out


def backward_tolerance(dtype):
    # the gradient is a difference of O(1) terms: its 16-bit rounding is relative to those, not to the result
    return {} if dtype == FP32 else {"atol": 2 * RTOL[dtype]}
