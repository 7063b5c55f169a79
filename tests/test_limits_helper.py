"""tests/helpers/limits.py: a bar past its measured limit fails; one within it is the expected failure."""

import pytest
from helpers.limits import AtMeasuredLimit, at_limit, limit_xfail


def test_within_the_limit_raises_the_expected_failure():
    with pytest.raises(AtMeasuredLimit, match="1.3x"):
        at_limit(True, "1.3x")


def test_past_the_limit_is_an_assertion_error_not_the_expected_one():
    with pytest.raises(AssertionError, match="past the limit") as info:
        at_limit(False, "1.5x")
    assert not isinstance(info.value, AtMeasuredLimit)


def test_the_mark_is_strict_and_accepts_only_the_limit():
    mark = limit_xfail("why").mark
    assert mark.kwargs == {"strict": True, "raises": AtMeasuredLimit, "reason": "why"}
