"""A bar that cannot hold on this hardware, judged against a limit measured in the same run.

Where a bar did not hold, the test calls ``at_limit``: an xfail naming the numbers when the measurement sits within
the limit measured beside it (the hardware's limit, decided by this run), else a failure (past the limit: the design's
miss, open work). No static mark: a written reason cannot tell the hardware's limit from a regression, and a strict
mark fails the suite on a card where the same bar holds (docs/decisions/strict-xfail-measured-limit.md).
"""

from typing import NoReturn

import pytest


def at_limit(within: bool, message: str, why: str) -> NoReturn:
    """Called where a bar missed: ``pytest.xfail`` with ``message`` and ``why`` (what the limit is) when ``within``
    the limit measured in the same run, else an ``AssertionError`` saying the call is past it."""
    if within:
        pytest.xfail(f"{message}: at the limit measured in the same run; {why}")
    raise AssertionError(f"{message}: past the limit measured in the same rounds")
