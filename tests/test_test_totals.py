"""scripts/test_totals.py: the test command's closing line adds both passes' counts (each pass's own line counts
half the suite)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "test_totals.py"
spec = importlib.util.spec_from_file_location("test_totals", SCRIPT)
test_totals = importlib.util.module_from_spec(spec)
spec.loader.exec_module(test_totals)


def test_the_closing_line_adds_both_passes():
    lines = ["1855 passed, 133 skipped, 45 xfailed, 126 deselected, 7 warnings in 2100.10s (0:35:00)",
             "= 126 passed, 126 skipped, 2239 deselected in 41.24s ="]
    assert test_totals.closing_line(lines, 2141) == \
        "whole run (2 passes): 1981 passed, 259 skipped, 45 xfailed, 7 warnings in 35 min 41 s"
    assert test_totals.totals(["1 failed, 2 passed, 1 error in 3s"]) == {"failed": 1, "passed": 2, "errors": 1}


def test_the_closing_line_says_when_a_pass_stopped_before_its_end():
    lines = ["FAILED tests/gpu/test_bars_gpu.py::test_a[x] - AssertionError: 1 in 2s",  # no summary: a test's line
             "375 passed, 2 skipped, 1 xfailed, 54 deselected in 225.40s (0:03:45)",
             "FAILED tests/gpu/test_compile_bars_gpu.py::test_b",
             "!!!!!!!!!!!!!!!!!!!!! session-timeout: 280.0 sec exceeded !!!!!!!!!!!!!!!!!!!!!!",
             "7 failed, 43 passed, 162 deselected, 4 xfailed, 15 warnings in 292.98s (0:04:52)"]
    assert test_totals.closing_line(lines, 532) == (
        "whole run (2 passes): 7 failed, 418 passed, 2 skipped, 5 xfailed, 15 warnings in 8 min 52 s; "
        "NOT ALL RUN, stopped early: session-timeout: 280.0 sec exceeded")
    assert "stopped" not in test_totals.closing_line(lines[1:3] + lines[4:], 532)
