"""The bad-offsets property, run inside a subprocess by test_offsets_property.py and by the GPU
tests: any offsets, valid or not, through every entry point, give the float64 reference or one of our
documented errors, and never crash. Each example is written to stderr before it runs, so that a crash
names the example that caused it."""

import re
import sys

import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from helpers.reference import assert_matches, reference_expand, reference_reduce

import jaggedperf
from jaggedperf.ops.reduce import op

OPS = torch.ops.jaggedperf
OFFSET_ERRORS = re.compile(r"offsets\[0\] must be 0; got |offsets must be non-decreasing; |"
                           r"offsets\[-1\] must equal (values\.shape\[0\]|n_rows)=")
HUGE = [2**31 - 1, -(2**31), 2**40, -(2**40), 2**62, -(2**63), 2**63 - 1]
ENTRY_POINTS = ["sum", "mean-nan", "mean-zero", "ops.sum", "ops.mean", "ops.expand"]
# Examples every run takes first, whatever it draws: (entry, (n_rows, offsets, valid), m, max_seqlen). An offset near
# +-2**63 overflows an int64 row index unless a kernel bounds its ranges before it adds to them (with max_seqlen given
# a start past its end reaches the balanced chunks' first tile); the draws reach these values too rarely.
EDGE_CASES = [(entry, (n_rows, torch.tensor(offsets), False), m, max_seqlen)
              for entry in ("sum", "ops.mean", "ops.expand") for m in (4, 5) for max_seqlen in (None, 2, 40)
              for n_rows, offsets in ((0, [2**63 - 1, 0]), (5, [0, 2**63 - 1, 5]), (5, [0, -(2**63), 5]))]


@st.composite
def offsets_cases(draw, max_b: int = 10, max_rows: int = 30):
    """(n_rows, offsets, valid): valid offsets, one broken value, or anything at all."""
    n_rows = draw(st.integers(0, max_rows))
    b = draw(st.integers(0, max_b))
    cuts = sorted(draw(st.lists(st.integers(0, n_rows), min_size=max(b - 1, 0), max_size=max(b - 1, 0))))
    valid = [0] + cuts + [n_rows] if b else [0] if n_rows == 0 else [0]
    kind = draw(st.sampled_from(["valid", "valid", "one-broken", "anything"]))
    near = st.integers(-3, n_rows + 3)
    if kind == "valid":
        offsets = valid
    elif kind == "one-broken":
        offsets = list(valid)
        offsets[draw(st.integers(0, len(offsets) - 1))] = draw(st.one_of(near, st.sampled_from(HUGE)))
    else:
        offsets = draw(st.lists(st.one_of(near, st.sampled_from(HUGE)), min_size=1, max_size=max_b + 1))
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    if dtype == torch.int32:
        offsets = [min(max(x, -(2**31)), 2**31 - 1) for x in offsets]
    ok = offsets[0] == 0 and offsets[-1] == n_rows and all(a <= b for a, b in zip(offsets, offsets[1:]))
    return n_rows, torch.tensor(offsets, dtype=dtype), ok


def call(entry: str, values, offsets, device_kernels: bool, max_seqlen):
    """One entry point; ``device_kernels``: the operators' Triton branch itself (the interpreter's, or CUDA)."""
    if entry == "ops.expand":
        grad = values[: offsets.shape[0] - 1] if values.shape[0] >= offsets.shape[0] - 1 else \
            torch.randn(offsets.shape[0] - 1, values.shape[1], device=values.device)
        if device_kernels and values.device.type != "cuda":
            return op.expand_triton(grad, offsets, values.shape[0], mean=True, max_seqlen=max_seqlen), grad
        return OPS.jagged_expand(grad, offsets, values.shape[0], True, max_seqlen), grad
    mean, empty_zero = entry != "sum" and entry != "ops.sum", entry in ("mean-zero", "ops.mean")
    if device_kernels and values.device.type != "cuda":
        return op.reduce_triton(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen), None
    if entry == "sum":
        return jaggedperf.jagged_sum(values, offsets, max_seqlen=max_seqlen), None
    if entry.startswith("mean"):
        return jaggedperf.jagged_mean(values, offsets, max_seqlen=max_seqlen, empty="zero" if empty_zero else "nan"), None
    if entry == "ops.sum":
        return OPS.jagged_sum(values, offsets, max_seqlen), None
    return OPS.jagged_mean(values, offsets, True, max_seqlen), None


def check_example(entry, case, m, max_seqlen, device, device_kernels: bool) -> str:
    """Run one example; returns "reference", "documented error" or "unspecified" (invalid offsets, unchecked).
    Raises AssertionError on a wrong answer or an undocumented error."""
    n_rows, offsets, ok = case
    values = torch.randn(n_rows, m, device=device)
    offsets = offsets.to(device)
    sys.stderr.write(f"example: {entry} n_rows={n_rows} m={m} max_seqlen={max_seqlen} "
                     f"offsets={offsets.tolist()} {offsets.dtype}\n")
    sys.stderr.flush()
    checked = device == "cpu" and not device_kernels  # the CPU's operators always check the offsets
    try:
        out, grad = call(entry, values, offsets, device_kernels, max_seqlen)
    except ValueError as e:
        assert checked and not ok and OFFSET_ERRORS.search(str(e)), f"{entry}: unexpected error {e!r} (valid={ok})"
        return "documented error"
    if device != "cpu":
        torch.cuda.synchronize()
    b = offsets.shape[0] - 1
    if not ok:
        assert not checked, f"{entry}: invalid offsets {offsets.tolist()} accepted on the CPU"
        expected = (n_rows, m) if entry == "ops.expand" else (b, m)
        assert tuple(out.shape) == expected  # values unspecified; the property is that nothing crashed
        return "unspecified"
    if entry == "ops.expand":
        torch.testing.assert_close(out.double().cpu(), reference_expand(grad, offsets, n_rows, mean=True),
                                   rtol=1e-5, atol=1e-6)
        return "reference"
    mean, empty_zero = entry not in ("sum", "ops.sum"), entry in ("mean-zero", "ops.mean")
    ref = reference_reduce(values, offsets, mean=mean, empty_zero=empty_zero)
    assert_matches(out, ref, torch.float32, scale=reference_reduce(values, offsets, mean=mean, empty_zero=True,
                                                                   absolute=True))
    return "reference"


def run(examples: int, device: str = "cpu", device_kernels: bool = False, seed: int = 0,
        widths: tuple[int, int] = (1, 5)) -> dict:
    """Run the property for ``examples`` examples, the values' width M drawn from ``widths`` (inclusive); returns how
    many ended each way. The GPU tests run one width a part: M is compiled into the kernels, so each width is its
    own set of Triton compiles, and the parts compile them on several workers at once."""
    tally = {"reference": 0, "documented error": 0, "unspecified": 0}

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(entry=st.sampled_from(ENTRY_POINTS), case=offsets_cases(), m=st.integers(*widths),
           max_seqlen=st.one_of(st.none(), st.integers(0, 40)))
    def prop(entry, case, m, max_seqlen):
        tally[check_example(entry, case, m, max_seqlen, device, device_kernels)] += 1

    for entry, case, m, max_seqlen in EDGE_CASES:
        if widths[0] <= m <= widths[1]:
            prop = example(entry=entry, case=case, m=m, max_seqlen=max_seqlen)(prop)
    torch.manual_seed(seed)
    prop()
    return tally
