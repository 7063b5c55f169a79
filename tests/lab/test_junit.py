"""lab.junit: a junit run to a table, and a pass cut by its time limit told from a complete one."""

import json
import subprocess
import sys

from jaggedperf.lab import junit

SCRIPT = [sys.executable, "-m", "jaggedperf.lab.junit"]

# what pytest's junit writer leaves after `timeout -s INT`: the tests that ran, then the interrupted one unnamed
CUT_RUN = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="12.5">
<testcase classname="tests.gpu.test_a" file="tests/gpu/test_a.py" name="test_one[x]" time="1.0">
<properties><property name="ours_us" value="23.92" /><property name="path" value="native" /></properties></testcase>
<testcase classname="tests.gpu.test_a" file="tests/gpu/test_a.py" name="test_two" time="2.0">
<skipped type="pytest.xfail" message="H200: 1.8x the floor" /></testcase>
<testcase time="0.0"><error message="KeyboardInterrupt" /></testcase>
</testsuite></testsuites>"""
COLLECTED = """tests/gpu/test_a.py::test_one[x]
tests/gpu/test_a.py::test_two
tests/gpu/test_b.py::test_three

3 tests collected in 1.00s
"""


def test_names_the_collected_tests_a_cut_pass_left_without_a_result(tmp_path):
    (tmp_path / "run.xml").write_text(CUT_RUN)
    (tmp_path / "collected.txt").write_text(COLLECTED)
    run = subprocess.run([*SCRIPT, str(tmp_path / "run.xml"), "--json", str(tmp_path / "t.json"),
                          "--collected", str(tmp_path / "collected.txt")], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr  # passed and xfailed only, but incomplete
    assert "Incomplete: 1 of the 3 collected tests have no result" in run.stdout
    assert "- `tests/gpu/test_b.py::test_three`" in run.stdout
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["not_run"] == ["tests/gpu/test_b.py::test_three"]
    assert [t["outcome"] for t in saved["tests"]] == ["passed", "xfailed"]
    # what a test recorded travels with its outcome: a passed bar's numbers are kept too
    assert [t["numbers"] for t in saved["tests"]] == [{"ours_us": 23.92, "path": "native"}, {}]


def test_a_complete_run_of_passes_and_xfails_exits_0(tmp_path):
    (tmp_path / "run.xml").write_text(CUT_RUN)
    (tmp_path / "collected.txt").write_text(COLLECTED.replace("tests/gpu/test_b.py::test_three\n", ""))
    run = subprocess.run([*SCRIPT, str(tmp_path / "run.xml"), "--collected",
                          str(tmp_path / "collected.txt")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Incomplete" not in run.stdout and "2 tests in 12 s of test time: 1 passed, 1 xfailed" in run.stdout


def test_collected_ids_skip_pytest_s_summary_and_repeats(tmp_path):
    (tmp_path / "a.txt").write_text(COLLECTED)
    (tmp_path / "b.txt").write_text("tests/gpu/test_a.py::test_two\n")
    ids = junit.collected_ids([str(tmp_path / "a.txt"), str(tmp_path / "b.txt")])
    assert ids == ["tests/gpu/test_a.py::test_one[x]", "tests/gpu/test_a.py::test_two",
                   "tests/gpu/test_b.py::test_three"]


def test_pytest_s_internal_error_is_named_with_its_cause(tmp_path):
    # xdist's SIGINT crash after `timeout -s INT`: one error that no test owns, its last line the cause
    crashed = CUT_RUN.replace("</testsuite>", '<testcase classname="pytest" name="internal" time="0.000"><error '
                              'message="internal error">Traceback (most recent call last):\n  File "x"\n'
                              'RuntimeError: release unlocked lock\n</error></testcase></testsuite>')
    (tmp_path / "run.xml").write_text(crashed)
    tests, _ = junit.read([str(tmp_path / "run.xml")])
    internal = [t for t in tests if t.name == "internal"]
    assert [t.outcome for t in internal] == ["error"]
    assert internal[0].message.endswith("RuntimeError: release unlocked lock") and "internal error" in internal[0].message


BARS_RUN = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="3.0">
<properties><property name="copy_gbps" value="4245.0" /></properties>
<testcase file="tests/gpu/test_bars_gpu.py" name="test_forward_within_10_percent_of_the_floor[B8-M4-L4-s0]"
 time="1.0"><properties><property name="device_us" value="11.0" /><property name="floor_us" value="10.0" />
<property name="ratio" value="1.1" /></properties></testcase>
<testcase file="tests/gpu/test_other.py" name="test_not_a_bar" time="1.0" />
</testsuite></testsuites>"""


def test_the_bars_table_holds_each_bar_test_and_its_numbers(tmp_path):
    (tmp_path / "bars.xml").write_text(BARS_RUN)
    report = junit.bars(str(tmp_path / "bars.xml"))
    assert [r["test"] for r in report["rows"]] == ["test_forward_within_10_percent_of_the_floor"]
    assert report["rows"][0]["numbers"] == {"device_us": 11.0, "floor_us": 10.0, "ratio": 1.1}
    text = junit.bars_markdown(report)
    assert "copy bandwidth 4245 GB/s; 1 bar tests" in text and "11.00 µs, floor 10.00 µs: **1.10×**" in text
