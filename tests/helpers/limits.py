"""A bar that cannot hold on this hardware, judged against a limit measured in the same run.

A test marked ``limit_xfail(reason)`` asserts its bar; where the bar does not hold it calls ``at_limit``, which raises
``AtMeasuredLimit`` when the measurement sits within the limit measured beside it (the strict xfail: expected) and a
plain ``AssertionError`` when it does not (a regression past the limit: a failure). A bar that starts to hold is a
strict XPASS: the suite fails until the mark goes.
"""

import pytest


class AtMeasuredLimit(Exception):
    """The bar does not hold, and the measurement is within the limit measured in the same run."""


def limit_xfail(reason: str):
    """The strict xfail that only ``AtMeasuredLimit`` satisfies."""
    return pytest.mark.xfail(strict=True, raises=AtMeasuredLimit, reason=reason)


def at_limit(within: bool, message: str) -> None:
    """Raise ``AtMeasuredLimit(message)`` when ``within`` the measured limit, else ``AssertionError(message)``."""
    if within:
        raise AtMeasuredLimit(message)
    raise AssertionError(f"{message}: past the limit measured in the same rounds")
