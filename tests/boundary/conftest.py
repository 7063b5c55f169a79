"""Every boundary test starts and ends with Dynamo's caches empty: a compile (or a failed one) of one test's function
leaves state for its code objects that another test's counts of graphs and fallbacks would read."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
