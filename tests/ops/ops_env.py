"""Moved to ``helpers.interpret``; kept until tests/ops/test_reduce.py imports it from there."""

from helpers.interpret import needs_interpreter  # noqa: F401
