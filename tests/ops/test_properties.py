"""Property tests: any batch (B from 0, empty sequences, one sequence holding everything, any M,
dtype, offsets dtype, non-contiguous values, broken offsets) gives the reference result or the
documented error. The CPU operator path runs the profile's full example count per dtype; the Triton
kernels under TRITON_INTERPRET=1 run fewer, smaller examples (with random forced chunk sizes)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers.interpret import INTERP_EXAMPLES, needs_interpreter
from helpers.reference import assert_matches, reference_reduce

import jaggedperf
from jaggedperf.ops import testing

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
DTYPE_IDS = ["fp32", "bf16", "fp16"]


@st.composite
def lengths_strategy(draw, max_b, max_len):
    b = draw(st.integers(0, max_b))
    shape = draw(st.sampled_from(["mixed", "one-holds-all", "all-empty", "uniform"]))
    if shape == "one-holds-all" and b:
        lengths = [0] * b
        lengths[draw(st.integers(0, b - 1))] = draw(st.integers(1, max_len * 3))
        return lengths
    if shape == "all-empty":
        return [0] * b
    if shape == "uniform":
        return [draw(st.integers(0, max_len))] * b
    return draw(st.lists(st.one_of(st.just(0), st.integers(1, max_len)), min_size=b, max_size=b))


@st.composite
def batches(draw, max_b, max_len, max_m):
    lengths = draw(lengths_strategy(max_b, max_len))
    M = draw(st.one_of(st.integers(1, max_m), st.sampled_from([1, 3, 129])))
    offsets_dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    contiguous = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    total = sum(lengths)
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(total, 2 * M, generator=gen)
    values = base[:, ::2] if not contiguous else base[:, :M].contiguous()
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    if lengths:
        offsets[1:] = torch.tensor(lengths).cumsum(0)
    return values, offsets.to(offsets_dtype)


# each breaks exactly one rule, whatever B (0 included)
CORRUPTIONS = {
    "first": ("offsets\\[0\\] must be 0", lambda o: o.clone().index_fill_(0, torch.tensor([0]), 1)),
    "decreasing": ("offsets must be non-decreasing", lambda o: torch.cat([o[:1], o[-1:] + 1, o])),
    "last": ("offsets\\[-1\\] must equal values.shape\\[0\\]", lambda o: torch.cat([o, o[-1:] + 1])),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@given(batch=batches(max_b=40, max_len=30, max_m=40), op=st.sampled_from(["sum", "mean-nan", "mean-zero"]),
       corrupt=st.sampled_from([None, None, None, "first", "decreasing", "last"]))
def test_cpu_operator_gives_reference_or_documented_error(dtype, batch, op, corrupt):
    values, offsets = batch
    values = values.to(dtype)
    if corrupt is not None:
        message, breaker = CORRUPTIONS[corrupt]
        with pytest.raises(ValueError, match=message):
            _call(op, values, breaker(offsets), validate=True)
        return
    out = _call(op, values, offsets, validate=True)
    mean, empty_zero = op != "sum", op == "mean-zero"
    ref = reference_reduce(values, offsets, mean=mean, empty_zero=empty_zero)
    scale = reference_reduce(values, offsets, mean=mean, empty_zero=True, absolute=True)
    assert_matches(out, ref, dtype, scale=scale)


def _call(op, values, offsets, validate):
    if op == "sum":
        return jaggedperf.jagged_sum(values, offsets, validate=validate)
    return jaggedperf.jagged_mean(values, offsets, empty=op.removeprefix("mean-"), validate=validate)


@needs_interpreter
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=INTERP_EXAMPLES)
@given(batch=batches(max_b=8, max_len=12, max_m=9), op=st.sampled_from(["sum", "mean-nan", "mean-zero"]),
       chunk=st.one_of(st.none(), st.integers(1, 8)))
def test_triton_kernels_give_reference(dtype, batch, op, chunk):
    values, offsets = batch
    values = values.to(dtype).contiguous()
    mean, empty_zero = op != "sum", op == "mean-zero"
    poison = 12345.0 if (mean and not empty_zero) else float("nan")
    out = testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, rows_per_chunk=chunk, poison=poison)
    ref = reference_reduce(values, offsets, mean=mean, empty_zero=empty_zero)
    scale = reference_reduce(values, offsets, mean=mean, empty_zero=True, absolute=True)
    assert_matches(out, ref, dtype, scale=scale)
    again = testing.launch_reduce(values, offsets, mean=mean, empty_zero=empty_zero, rows_per_chunk=chunk)
    assert torch.equal(out.view(torch.uint8), again.view(torch.uint8))  # deterministic
