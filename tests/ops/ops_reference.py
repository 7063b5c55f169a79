"""Moved to ``helpers.reference``; kept until tests/ops/test_reduce.py imports it from there."""

from helpers.reference import assert_matches, case_id, lengths_to_offsets, reference_expand, reference_reduce  # noqa: F401
