"""float64 references for the jagged ops, and the comparison the tests use.

Kept beside the kernels' tests: a plain loop over segments in float64 on the CPU, deliberately
unlike the kernels (no index_add, no tiles), so a shared mistake is unlikely.
"""

from __future__ import annotations

import torch

# Relative tolerance on each element, by output dtype (the output's own rounding dominates for 16-bit
# types). Accumulation is fp32 everywhere: its error is bounded by ACC_TOL · Σ|x| (see bound()).
RTOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2, torch.float64: 1e-12}
ACC_TOL = 2e-5

DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64"}


def lengths_to_offsets(lengths, dtype=torch.int64, device="cpu") -> torch.Tensor:
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + int(n))
    return torch.tensor(offsets, dtype=dtype, device=device)


def reference_reduce(values, offsets, *, mean: bool, empty_zero: bool = False, absolute: bool = False):
    """(B, M) float64: sum (or mean) of each segment's rows; ``absolute`` sums |x| (the error scale)."""
    v = values.detach().to("cpu", torch.float64)
    if absolute:
        v = v.abs()
    o = [int(x) for x in offsets.to("cpu", torch.int64)]
    rows = []
    for b in range(len(o) - 1):
        seg = v[o[b]:o[b + 1]]
        total = seg.sum(0)
        if mean:
            n = seg.shape[0]
            total = torch.zeros_like(total) if (n == 0 and empty_zero) else total / n
        rows.append(total)
    if not rows:
        return torch.zeros((0, values.shape[1]), dtype=torch.float64)
    return torch.stack(rows)


def reference_expand(grad, offsets, n_rows: int, *, mean: bool):
    """(n_rows, M) float64: each row gets its segment's grad (/ length for mean)."""
    g = grad.detach().to("cpu", torch.float64)
    o = [int(x) for x in offsets.to("cpu", torch.int64)]
    out = torch.zeros((n_rows, g.shape[1]), dtype=torch.float64)
    for b in range(len(o) - 1):
        n = o[b + 1] - o[b]
        if n:
            out[o[b]:o[b + 1]] = g[b] / n if mean else g[b]
    return out


def rel_error(out, ref) -> float:
    """‖out − ref‖ / ‖ref‖ where the reference is finite (0 where it never is), on ref's device."""
    out = out.detach().to(ref.device, torch.float64)
    finite = torch.isfinite(ref)
    if not bool(finite.any()):
        return 0.0
    num = (out[finite] - ref[finite]).norm()
    den = ref[finite].norm()
    return float(num / den) if float(den) > 0 else float(num)


# Elements compared at a time: the comparison's float64 temporaries stay under ~1 GB whatever the output's size (a
# 473M-element gradient compared whole on the CPU took ~20 GB and a minute).
CHUNK_ELEMENTS = 1 << 24


def assert_matches(out, ref, dtype, *, scale=None, what="output"):
    """``out`` has ``dtype``, NaN/±Inf exactly where ``ref`` has them, and each finite element within
    RTOL[dtype]·|ref| + ACC_TOL·scale (scale: Σ|x| per element, the fp32 accumulation's error scale)
    + half a subnormal step of ``dtype`` (values below its smallest normal are stored that coarsely:
    a mean gradient of 1/40000 in fp16 carries ~2% rounding, and that is the dtype, not the kernel).
    Compared on ``ref``'s device (a GPU reference stays there), CHUNK_ELEMENTS at a time, by rows."""
    assert out.dtype == dtype, f"{what}: dtype {out.dtype}, expected {dtype}"
    assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if ref.dim() == 0:
        out, ref, scale = out.reshape(1), ref.reshape(1), None if scale is None else scale.reshape(1)
    rows = max(CHUNK_ELEMENTS // max(ref[0].numel(), 1), 1) if ref.shape[0] else 1
    for start in range(0, ref.shape[0], rows):
        end = start + rows
        _assert_rows_match(out[start:end], ref[start:end], None if scale is None else scale[start:end], dtype, what,
                           start, lambda: rel_error(out, ref))


def _assert_rows_match(out, ref, scale, dtype, what, first_row, whole_rel_error):
    # assert_matches on rows [first_row, first_row + len(ref)): indices in messages are the whole tensor's
    got = out.detach().to(ref.device, torch.float64)
    nan_got, nan_ref = torch.isnan(got), torch.isnan(ref)
    if not torch.equal(nan_got, nan_ref):
        at = torch.nonzero(nan_got != nan_ref)[:5]
        at[:, 0] += first_row
        raise AssertionError(f"{what}: NaN at {at.tolist()} differs")
    inf_ref = torch.isinf(ref)
    assert torch.equal(got[inf_ref], ref[inf_ref]), f"{what}: ±Inf entries differ"
    finite = torch.isfinite(ref)
    if scale is None:
        scale = ref.abs()
    info = torch.finfo(dtype)
    subnormal_step = info.smallest_normal * info.eps
    bound = RTOL[dtype] * ref.abs() + ACC_TOL * scale + subnormal_step / 2 + 1e-30
    bad = finite & ~((got - ref).abs() <= bound)
    if bool(bad.any()):
        first = torch.nonzero(bad)[0].tolist()
        raise AssertionError(f"{what}: {int(bad.sum())} elements off in rows {first_row}..{first_row + len(ref) - 1}, "
                             f"first at {[first[0] + first_row] + first[1:]}: got {got[bad][0].item()!r}, expected "
                             f"{ref[bad][0].item()!r}; rel error {whole_rel_error():.3g}")


def case_id(lengths, M, dtype, offsets_dtype=torch.int64, empty="nan", extra="") -> str:
    parts = [f"B{len(lengths)}", f"M{M}", DTYPE_NAMES[dtype]]
    if any(n == 0 for n in lengths):
        parts.append("empty")
    if offsets_dtype == torch.int32:
        parts.append("i32")
    if empty == "zero":
        parts.append("zero")
    if extra:
        parts.append(extra)
    return "-".join(parts)


def ragged_softmax_and_grad(x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(x, dim=1) * 2 of the NJT ``x`` and its gradient of ``x``'s values for the output gradient ``grad`` (an
    NJT), sequence by sequence on dense float64 tensors (``njt_workloads.ragged_softmax_reference``): the values of
    both."""
    from jaggedperf.lab.njt_workloads import ragged_softmax_reference

    x64 = x.detach().double().requires_grad_()
    out = ragged_softmax_reference(x64)
    out.backward(grad.double())
    return out._values.detach(), x64.grad._values
