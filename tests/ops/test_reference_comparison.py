"""The tests' comparison (``ops_reference.assert_matches``) judges a tensor compared in row chunks as it judges it
whole: every chunk checked, and a failure named by its row in the whole tensor."""

import pytest
import torch

from helpers import reference as ops_reference
from helpers.reference import assert_matches


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(ops_reference, "CHUNK_ELEMENTS", 12)  # 3 rows of 4 columns a chunk


def _pair():
    ref = torch.randn(10, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return ref.to(torch.float32), ref


def test_equal_tensors_pass_in_chunks(small_chunks):
    out, ref = _pair()
    assert_matches(out, ref, torch.float32)
    assert_matches(out[0, 0], ref[0, 0], torch.float32)  # 0-d
    assert_matches(out[:0], ref[:0], torch.float32)  # no rows


@pytest.mark.parametrize("row", [0, 2, 3, 9])  # first and last rows of chunks, the last chunk (one row)
def test_an_element_off_in_any_chunk_is_named_by_its_row_in_the_whole(small_chunks, row):
    out, ref = _pair()
    out[row, 1] += 1.0
    with pytest.raises(AssertionError, match=rf"1 elements off in rows \d+\.\.\d+, first at \[{row}, 1\]"):
        assert_matches(out, ref, torch.float32)


def test_a_nan_where_the_reference_has_none_is_found_in_a_later_chunk(small_chunks):
    out, ref = _pair()
    out[7, 3] = float("nan")
    with pytest.raises(AssertionError, match=r"NaN at \[\[7, 3\]\] differs"):
        assert_matches(out, ref, torch.float32)


def test_the_scale_is_sliced_with_its_rows(small_chunks):
    out, ref = _pair()
    out[8, 0] = ref[8, 0] + 0.5  # within ACC_TOL · scale only where the scale is huge
    scale = torch.ones_like(ref)
    scale[8, 0] = 1e5
    assert_matches(out, ref, torch.float32, scale=scale)
    scale[8, 0] = 1.0
    with pytest.raises(AssertionError, match=r"first at \[8, 0\]"):
        assert_matches(out, ref, torch.float32, scale=scale)
