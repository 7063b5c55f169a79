"""tests/helpers/limits.py: a missed bar within its measured limit is an xfail; past it, a failure."""

import pytest
from helpers.limits import at_limit


def test_within_the_limit_is_an_xfail_naming_the_numbers_and_the_limit():
    with pytest.raises(pytest.xfail.Exception, match="1.3x: at the limit measured in the same run; the floor"):
        at_limit(True, "1.3x", "the floor")


def test_past_the_limit_is_an_assertion_error_not_an_xfail():
    with pytest.raises(AssertionError, match="1.5x: past the limit") as info:
        at_limit(False, "1.5x", "the floor")
    assert not isinstance(info.value, pytest.xfail.Exception)
