"""The library's values that the command line's parsers show or choose from, written here so that building the
parsers (``--help``, ``--version``, a typo's usage line) imports no torch: each module that owns one of them imports
torch, and importing it costs seconds. ``tests/test_cli_startup.py`` holds every value equal to its owner's; the
values a user's flag is checked against when a command runs (presets, names) are read from their owners then."""

from __future__ import annotations

DEFAULT_SEED = 1337  # jaggedperf.inputs.DEFAULT_SEED
DISTRIBUTIONS = ("tritonbench", "heavy", "fixed", "empty")  # jaggedperf.inputs.DISTRIBUTIONS
# jaggedperf.lab.results.tables.METRICS' names
METRICS = ("latency", "speedup", "accuracy", "device", "host", "kernels", "gbps", "compile_time")
DEFAULT_BYTE_LIMIT = 8 * 10**9  # jaggedperf.lab.runner.DEFAULT_BYTE_LIMIT
SWEEP_TIMEOUT_S = 600.0  # jaggedperf.lab.sweep.DEFAULT_TIMEOUT_S
DOCTOR_COMPILE_BUDGET_S = 30.0  # jaggedperf.lab.doctor.gather.DEFAULT_COMPILE_BUDGET_S
COMPARE_K = 2.0  # jaggedperf.lab.results.compare.K
COMPARE_MIN_REL = 0.05  # jaggedperf.lab.results.compare.MIN_REL
