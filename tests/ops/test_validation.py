"""Each bad input gets its documented error, naming the argument and the rule."""

import pytest
import torch
from helpers.reference import lengths_to_offsets

import jaggedperf

V = torch.randn(6, 3)
O = lengths_to_offsets([2, 4])

LAYOUT_ERRORS = [
    ("values-not-tensor", lambda: jaggedperf.jagged_sum([[1.0]], O), TypeError, "values and offsets must be torch.Tensor"),
    ("values-1d", lambda: jaggedperf.jagged_sum(torch.randn(6), O), ValueError, "values must be 2-D"),
    ("values-3d", lambda: jaggedperf.jagged_mean(torch.randn(6, 3, 1), O), ValueError, "values must be 2-D"),
    ("offsets-2d", lambda: jaggedperf.jagged_sum(V, O[None]), ValueError, "offsets must be 1-D"),
    ("offsets-float", lambda: jaggedperf.jagged_sum(V, O.float()), TypeError, "offsets must be int32 or int64"),
    ("offsets-empty", lambda: jaggedperf.jagged_sum(V, O[:0]), ValueError, "offsets must hold B\\+1 >= 1"),
    ("values-int", lambda: jaggedperf.jagged_mean(V.int(), O), TypeError, "values dtype torch.int32 is not supported"),
    ("values-fp64", lambda: jaggedperf.jagged_mean(V.double(), O), TypeError, "values dtype torch.float64"),
    ("offsets-missing", lambda: jaggedperf.jagged_mean(V), TypeError, "offsets is required"),
    ("empty-mode", lambda: jaggedperf.jagged_mean(V, O, empty="skip"), ValueError, "empty must be 'nan' or 'zero'"),
    ("max-seqlen", lambda: jaggedperf.jagged_mean(V, O, max_seqlen=-1), ValueError, "max_seqlen must be None or an int"),
    ("max-seqlen-past-int64", lambda: jaggedperf.jagged_mean(V, O, max_seqlen=2**70), ValueError,
     "max_seqlen must be None or an int in \\[0, 2\\*\\*63 - 1\\]; got 1180591620717411303424"),
    ("max-seqlen-bool", lambda: jaggedperf.jagged_sum(V, O, max_seqlen=True), ValueError, "got bool"),
    ("meta-device", lambda: jaggedperf.jagged_sum(V, O.to("meta")), ValueError, "offsets must be on the same device"),
]


@pytest.mark.parametrize("name,call,exc,match", LAYOUT_ERRORS, ids=[e[0] for e in LAYOUT_ERRORS])
def test_layout_errors_always_raise(name, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


OFFSET_ERRORS = [
    ("first-not-zero", torch.tensor([1, 3, 6]), "offsets\\[0\\] must be 0; got 1"),
    ("decreasing", torch.tensor([0, 4, 2, 6]), "offsets must be non-decreasing; offsets\\[2\\]=2 < offsets\\[1\\]=4"),
    ("last-short", torch.tensor([0, 2, 5]), "offsets\\[-1\\] must equal values.shape\\[0\\]=6; got 5"),
    ("last-long", torch.tensor([0, 2, 7], dtype=torch.int32), "offsets\\[-1\\] must equal values.shape\\[0\\]=6; got 7"),
    ("batch-empty-values-not", torch.tensor([0]), "offsets\\[-1\\] must equal values.shape\\[0\\]=6; got 0"),
]


@pytest.mark.parametrize("name,offsets,match", OFFSET_ERRORS, ids=[e[0] for e in OFFSET_ERRORS])
@pytest.mark.parametrize("fn", [jaggedperf.jagged_sum, jaggedperf.jagged_mean], ids=["sum", "mean"])
def test_offset_errors_raise_when_validating(fn, name, offsets, match):
    with pytest.raises(ValueError, match=match):
        fn(V, offsets, validate=True)


@pytest.mark.parametrize("fn", [jaggedperf.jagged_sum, jaggedperf.jagged_mean], ids=["sum", "mean"])
@pytest.mark.parametrize("name,offsets,match", OFFSET_ERRORS, ids=[e[0] for e in OFFSET_ERRORS])
def test_offsets_are_always_checked_on_the_cpu(fn, name, offsets, match):
    # no sync to save on the CPU, and an unchecked offset there could index out of bounds
    with pytest.raises(ValueError, match=match):
        fn(V, offsets)
    with pytest.raises(ValueError, match=match):
        fn(V, offsets, validate=False)


def test_nested_tensor_errors():
    nt = torch.nested.nested_tensor_from_jagged(V, O)
    with pytest.raises(TypeError, match="NestedTensor alone or \\(values, offsets\\), not both"):
        jaggedperf.jagged_mean(nt, O)
    strided = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)])
    with pytest.raises(ValueError, match="layout=torch.jagged"):
        jaggedperf.jagged_mean(strided)
    holes = torch.nested.nested_tensor_from_jagged(V, O, lengths=torch.tensor([1, 3]))
    with pytest.raises(ValueError, match="lengths \\(holes"):
        jaggedperf.jagged_sum(holes)


def test_batch_of_zero_gives_empty_result():
    for fn in (jaggedperf.jagged_sum, jaggedperf.jagged_mean):
        out = fn(torch.randn(0, 5, dtype=torch.bfloat16), torch.zeros(1, dtype=torch.int32), validate=True)
        assert out.shape == (0, 5) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("name,offsets,match", OFFSET_ERRORS, ids=[e[0] for e in OFFSET_ERRORS])
def test_offset_errors_without_numpy(name, offsets, match, monkeypatch):
    from jaggedperf import checks

    monkeypatch.setattr(checks, "_np", None)  # the torch fallback gives the same messages
    with pytest.raises(ValueError, match=match):
        checks.check_offsets(V, offsets)
    checks.check_offsets(V, O)
