import math

import pytest
import torch

from hypothesis import given, settings
from hypothesis import strategies as st

from jaggedperf.inputs import DISTRIBUTIONS, Case, length_bounds, make_batch, make_lengths, tritonbench_bounds


@pytest.mark.parametrize("seqlen,sparsity", [(100, 0.1), (500, 0.75), (1000, 0.5), (20000, 0.5), (10, 0.99)])
def test_tritonbench_lengths_follow_the_rule(seqlen, sparsity):
    case = Case(4096, 4, seqlen, sparsity)
    lengths = make_lengths(case)
    avg = math.floor(seqlen * (1 - sparsity))
    margin = math.floor(0.3 * seqlen)
    low, high = max(avg - margin, 1), min(avg + margin, seqlen)
    assert (low, high) == tritonbench_bounds(seqlen, sparsity)
    assert int(lengths.min()) >= low and int(lengths.max()) <= high
    # Uniform over [low, high]: the sample mean is within 5 standard errors of the midpoint,
    # and both ends are reached at this sample size.
    width = high - low + 1
    sd = math.sqrt((width**2 - 1) / 12)
    assert abs(lengths.double().mean().item() - (low + high) / 2) < 5 * sd / math.sqrt(case.B) + 1e-9
    if width <= 50:
        assert int(lengths.min()) == low and int(lengths.max()) == high


def test_heavy_tail_has_empties_and_a_long_tail():
    case = Case(4096, 4, 32768, 0.0, "heavy")
    lengths = make_lengths(case)
    empty = (lengths == 0).double().mean().item()
    assert 0.03 < empty < 0.07
    assert int(lengths.max()) > 20 * lengths.double().median().item()
    assert int(lengths.max()) <= 32768


def test_fixed_lengths():
    lengths = make_lengths(Case(7, 3, 40, 0.25, "fixed"))
    assert lengths.tolist() == [30] * 7


def test_empty_lengths_are_mostly_empty_and_the_rest_uniform():
    lengths = make_lengths(Case(20000, 3, 32, 0.9, "empty"))
    empty = (lengths == 0).double().mean().item()
    assert 0.88 < empty < 0.92
    rest = lengths[lengths > 0]
    assert int(rest.min()) == 1 and int(rest.max()) == 32
    assert make_lengths(Case(50, 3, 32, 1.0, "empty")).tolist() == [0] * 50
    assert int(make_lengths(Case(50, 3, 32, 0.0, "empty")).min()) >= 1
    assert make_lengths(Case(5, 3, 0, 0.5, "empty")).tolist() == [0] * 5


def test_same_seed_same_batch_and_other_seed_differs():
    a, b = make_batch(Case(64, 8, 50, 0.2)), make_batch(Case(64, 8, 50, 0.2))
    assert torch.equal(a.offsets, b.offsets) and torch.equal(a.values, b.values)
    c = make_batch(Case(64, 8, 50, 0.2, seed=7))
    assert not torch.equal(a.offsets, c.offsets)


def test_batch_metadata_matches_offsets():
    batch = make_batch(Case(33, 5, 80, 0.5, "heavy", "bf16"))
    lengths = batch.lengths()
    assert batch.offsets.dtype == torch.int64 and batch.offsets[0] == 0
    assert batch.values.shape == (int(batch.offsets[-1]), 5) and batch.values.dtype == torch.bfloat16
    assert batch.max_seqlen == int(lengths.max()) and batch.min_seqlen == int(lengths.min())
    nt = batch.to_nested()
    assert nt.is_nested and nt.size(0) == 33 and torch.equal(nt.offsets(), batch.offsets)
    assert nt._metadata_cache.get("max_seqlen") is not None


def test_values_are_random_not_constant():
    batch = make_batch(Case(16, 4, 100, 0.1))
    assert batch.values.std().item() == pytest.approx(1.0, rel=0.1)


def test_empty_batch():
    batch = make_batch(Case(0, 4, 100, 0.1))
    assert batch.B == 0 and batch.values.shape == (0, 4) and batch.offsets.tolist() == [0]


@pytest.mark.parametrize("bad", [dict(B=-1), dict(M=0), dict(sparsity=1.5), dict(distribution="zipf"), dict(dtype="int8")])
def test_bad_case_is_refused_with_a_reason(bad):
    kw = dict(B=4, M=4, seqlen=10, sparsity=0.5) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        Case(**kw)


@pytest.mark.parametrize("case", [Case(33, 5, 80, 0.5, "heavy", "bf16"), Case(16, 3, 40, 0.2), Case(0, 4, 10, 0.1),
                                  Case(8, 7, 30, 0.4, "fixed", "fp16", seed=3)], ids=lambda c: c.label)
def test_values_nbytes_matches_the_batch_without_making_it(case):
    values = make_batch(case).values
    assert case.values_nbytes() == values.numel() * values.element_size()


def test_batch_from_tensors_and_nested_round_trip_and_reject_bad_offsets():
    from jaggedperf.batch import JaggedBatch

    made = make_batch(Case(9, 3, 40, 0.5, "heavy"))
    again = JaggedBatch.from_nested(made.to_nested(), padded_len=40)
    assert torch.equal(again.values, made.values) and torch.equal(again.offsets, made.offsets)
    assert (again.max_seqlen, again.min_seqlen, again.padded_len) == (made.max_seqlen, made.min_seqlen, 40)
    with pytest.raises(ValueError, match="non-decreasing"):
        JaggedBatch.from_tensors(torch.randn(4, 2), torch.tensor([0, 3, 1, 4]))


@settings(max_examples=60, deadline=None)
@given(B=st.integers(0, 300), seqlen=st.integers(0, 500), sparsity=st.floats(0, 1),
       distribution=st.sampled_from(DISTRIBUTIONS), seed=st.integers(0, 2**31))
def test_length_bounds_hold_every_drawn_length(B, seqlen, sparsity, distribution, seed):
    case = Case(B, 1, seqlen, sparsity, distribution, seed=seed)
    low, high = length_bounds(case)
    lengths = make_lengths(case)
    assert 0 <= low <= high <= max(seqlen, 1)
    assert all(low <= n <= high for n in lengths.tolist())
