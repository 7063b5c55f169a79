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
