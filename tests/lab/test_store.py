import csv
import json
import math

import pytest

from jaggedperf.inputs import Case
from jaggedperf.lab.result import OK, Result, RunRecord
from jaggedperf.lab.results.atomic import csv_columns, write_csv, write_json
from jaggedperf.lab.results.store import (
    ResultsFileError,
    append_result,
    finished_keys,
    load_results,
    read_results,
    write_environment_header,
)
from helpers.fake_results import ENVIRONMENT, make_record


@pytest.fixture(scope="module")
def record() -> RunRecord:
    return make_record()


def write_jsonl(path, record, split=None):
    """A sweep file: header, results, and (at index ``split``) a second header as a resumed sweep writes."""
    write_environment_header(path, record.environment, record.copy_gbps)
    for i, r in enumerate(record.results):
        if i == split:
            write_environment_header(path, dict(record.environment, date="2026-12-02T08:00:00+00:00"), 3850.0)
        append_result(path, r)


def test_json_document_round_trip(tmp_path, record):
    path = tmp_path / "run.json"
    write_json(path, record)
    back = load_results(path)
    assert back == record
    assert back.to_dict() == record.to_dict()
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed into place


def test_write_json_replaces_atomically(tmp_path, record):
    path = tmp_path / "run.json"
    path.write_text("old")
    write_json(path, RunRecord({"gpu": "x"}, record.results[:3], None))
    assert load_results(path).results == record.results[:3]
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_jsonl_round_trip_and_header_merge(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    write_jsonl(path, record, split=100)
    back, warnings = read_results(path)
    assert warnings == []
    assert back.results == record.results
    assert back.copy_gbps == record.copy_gbps  # the first header wins
    more = back.environment.pop("more")
    assert back.environment == ENVIRONMENT
    assert more == [dict(ENVIRONMENT, date="2026-12-02T08:00:00+00:00", copy_gbps=3850.0)]
    # every line is one JSON object
    lines = path.read_text().splitlines()
    assert len(lines) == len(record.results) + 2
    assert all(isinstance(json.loads(line), dict) for line in lines)


def test_identical_later_header_is_not_kept(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    write_environment_header(path, ENVIRONMENT, 3900.0)
    append_result(path, record.results[0])
    write_environment_header(path, ENVIRONMENT, 3900.0)
    assert "more" not in load_results(path).environment


def test_a_cell_written_twice_keeps_the_later_line(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    first = record.results[0]
    again = Result(first.op, first.implementation, first.mode, first.case, "cuda", "error", "OOM")
    append_result(path, first)
    append_result(path, again)
    back, warnings = read_results(path)
    assert back.results == [again]
    assert len(warnings) == 1 and "sweep.jsonl:2" in warnings[0] and "line 1" in warnings[0]


def test_resume_keys(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    assert finished_keys(path) == (set(), [])  # nothing yet
    write_jsonl(path, RunRecord(record.environment, record.results[:50], record.copy_gbps))
    keys, warnings = finished_keys(path)
    assert warnings == []
    assert keys == {r.key for r in record.results[:50]}
    assert record.results[50].key not in keys
    assert any(r.status != OK for r in record.results[:50] if r.key in keys)  # failures count as finished


def test_truncated_last_line_is_skipped_with_a_warning_and_cut_by_the_next_append(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    write_jsonl(path, RunRecord(record.environment, record.results[:5], record.copy_gbps))
    line = json.dumps(record.results[5].to_dict())
    with open(path, "a") as f:
        f.write(line[: len(line) // 2])  # killed while writing
    keys, warnings = finished_keys(path)
    assert keys == {r.key for r in record.results[:5]}
    assert len(warnings) == 1 and "sweep.jsonl:7" in warnings[0] and "unfinished" in warnings[0]
    # resuming appends the cell again; the half line is gone and the file reads cleanly
    append_result(path, record.results[5])
    back, warnings = read_results(path)
    assert warnings == [] and back.results == record.results[:6]


def test_a_complete_last_line_without_newline_is_kept(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    path.write_text(json.dumps(record.results[0].to_dict()))  # e.g. written by hand or another tool
    assert load_results(path).results == record.results[:1]
    append_result(path, record.results[1])
    assert load_results(path).results == record.results[:2]


def test_corrupt_line_names_file_and_line(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    write_jsonl(path, RunRecord(record.environment, record.results[:4], record.copy_gbps))
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:40]  # line 3 broken, more lines after it
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsFileError, match=r"sweep\.jsonl:3: not JSON"):
        load_results(path)
    with pytest.raises(ResultsFileError, match=r"sweep\.jsonl:3"):
        finished_keys(path)


def test_broken_last_line_with_newline_is_an_error(tmp_path, record):
    path = tmp_path / "sweep.jsonl"
    append_result(path, record.results[0])
    with open(path, "a") as f:
        f.write("{oops\n")
    with pytest.raises(ResultsFileError, match=r"sweep\.jsonl:2: not JSON"):
        load_results(path)


def test_missing_file(tmp_path):
    with pytest.raises(ResultsFileError, match=r"nope\.json: no such file"):
        load_results(tmp_path / "nope.json")


@pytest.mark.parametrize(
    "content,message",
    [
        ("this is not json\n", r"bad:1: not JSON"),
        ('{\n "environment": {},\n "results": [\n  {"op": 1,}\n ]\n}\n', r"bad:4: not JSON"),
        ("[1, 2]", r"bad: expected a JSON object"),
        ('{"environment": {}, "results": {}}', r'"results" must be a list'),
        ('{"environment": {}, "results": [{"op": "jagged_mean"}]}', r"bad: results\[0\]: missing keys 'implementation', 'mode', 'case', 'device'"),
        ('{"op": "x", "implementation": "y", "mode": "eager", "device": "cpu", "case": {"B": 1}}\n', r"bad:1: case is missing 'M', 'seqlen', 'sparsity'"),
        ('{"environment": {}}\n{"hello": 1}\n', r"bad:2: neither an environment header nor a result: missing keys"),
        ('{"environment": {}}\n[1]\n', r"bad:2: expected a JSON object, got a list"),
        ('{"environment": []}\n', r"bad:1: \"environment\" must be an object"),
        ('{"op": "x", "implementation": "y", "mode": "eager", "device": "cpu", "status": "fine",'
         ' "case": {"B": 1, "M": 1, "seqlen": 1, "sparsity": 0}}\n', r"bad:1: unknown status 'fine'"),
        ('{"op": "x", "implementation": "y", "mode": "eager", "device": "cpu",'
         ' "case": {"B": 1, "M": 1, "seqlen": 1, "sparsity": 2}}\n', r"bad:1: case: not a valid Case: sparsity must be in"),
        ('{"op": "x", "implementation": "y", "mode": "eager", "device": "cpu", "wall": {"median_ms": 1},'
         ' "case": {"B": 1, "M": 1, "seqlen": 1, "sparsity": 0}}\n', r"bad:1: wall: missing required field 'mean_ms' of WallStats"),
    ],
)
def test_bad_content_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "bad"
    path.write_text(content)
    with pytest.raises(ResultsFileError, match=message) as info:
        load_results(path)
    assert "\n" not in str(info.value)


def test_empty_file_is_an_empty_record_with_a_warning(tmp_path):
    path = tmp_path / "sweep.jsonl"
    path.write_text("")
    record, warnings = read_results(path)
    assert record.results == [] and warnings and "empty" in warnings[0]


def test_a_whole_document_on_one_line_reads_as_either_form(tmp_path, record):
    path = tmp_path / "compact.json"
    small = RunRecord(record.environment, record.results[:3], record.copy_gbps)
    path.write_text(json.dumps(small.to_dict()))
    assert load_results(path) == small
    append_result(path, record.results[3])  # and a sweep may append to it
    assert load_results(path).results == record.results[:4]


def test_csv_flat_columns(tmp_path, record):
    path = tmp_path / "run.csv"
    write_csv(path, record.results)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(record.results)
    cols = list(rows[0].keys())
    assert cols == csv_columns(record.results)
    for name in ("op", "implementation", "mode", "status", "reason", "case_label", "case.B", "case.seqlen",
                 "case.sparsity", "case.dtype", "wall.median_ms", "wall.std_ms", "wall.n", "device_time.median_us",
                 "device_time.p80_us", "host_us", "kernels_per_call", "bytes_moved", "gbps", "pct_of_copy",
                 "speedup_vs_eager", "compile_s", "kernel_names", "extra.total_len"):
        assert name in cols, name
    assert not any(c in ("case", "wall", "device_time", "extra") for c in cols)
    r0, row = record.results[0], rows[0]
    assert row["case_label"] == r0.case.label and int(row["case.B"]) == r0.case.B
    assert math.isclose(float(row["wall.median_ms"]), r0.wall.median_ms, rel_tol=1e-12)
    bad = next(i for i, r in enumerate(record.results) if r.status != OK)
    assert rows[bad]["wall.median_ms"] == "" and rows[bad]["reason"] == record.results[bad].reason


def test_append_serialises_before_touching_the_file(tmp_path):
    path = tmp_path / "sweep.jsonl"
    bad = Result("jagged_mean", "x", "eager", Case(1, 1, 1, 0.0), "cpu", extra={"obj": object()})
    with pytest.raises(TypeError):
        append_result(path, bad)
    assert not path.exists() or path.read_text() == ""


def test_append_refuses_a_json_document_and_foreign_tails(tmp_path, record):
    doc = tmp_path / "run.json"
    write_json(doc, RunRecord(record.environment, record.results[:2], None))
    before = doc.read_bytes()
    with pytest.raises(ResultsFileError, match=r"run\.json:1: not a JSON-lines results file"):
        append_result(doc, record.results[2])
    assert doc.read_bytes() == before
    doc.write_bytes(before.rstrip(b"\n"))  # a document without its final newline is not cut either
    with pytest.raises(ResultsFileError):
        append_result(doc, record.results[2])
    assert doc.read_bytes() == before.rstrip(b"\n")
    sweep = tmp_path / "sweep.jsonl"
    append_result(sweep, record.results[0])
    with open(sweep, "a") as f:
        f.write("hand-written note")
    with pytest.raises(ResultsFileError, match=r"sweep\.jsonl:2: last line is not JSON"):
        append_result(sweep, record.results[1])
    partial = tmp_path / "partial.jsonl"
    partial.write_text('{"environment": {"gpu": "NVI')  # killed while writing the very first line
    append_result(partial, record.results[0])
    assert load_results(partial).results == record.results[:1]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_follow_the_umask_as_the_sweeps_jsonl_does(tmp_path, record, umask):
    import os

    old = os.umask(umask)
    try:
        write_json(tmp_path / "run.json", record)
        write_csv(tmp_path / "run.csv", record.results)
        append_result(tmp_path / "sweep.jsonl", record.results[0])
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"run.json": 0o666 & ~umask, "run.csv": 0o666 & ~umask, "sweep.jsonl": 0o666 & ~umask}


def test_an_atomic_rewrite_keeps_the_mode_of_the_file_it_replaces(tmp_path, record):
    path = tmp_path / "run.json"
    write_json(path, record)
    path.chmod(0o640)
    write_json(path, record)
    assert path.stat().st_mode & 0o777 == 0o640


_GOOD = {"op": "x", "implementation": "y", "mode": "eager", "device": "cpu",
         "case": {"B": 1, "M": 1, "seqlen": 1, "sparsity": 0}}


@pytest.mark.parametrize("change,message", [
    ({"wall": {"mean_ms": 1, "std_ms": 0, "median_ms": "fast", "min_ms": 1, "max_ms": 1, "n": 2}},
     'wall.median_ms: expected a number, got a string "fast"'),
    ({"wall": {"mean_ms": 1, "std_ms": 0, "median_ms": 1, "min_ms": 1, "max_ms": 1, "n": 2.5}},
     'wall.n: expected an integer, got a number 2.5'),
    ({"device_time": {"median_us": 1, "p20_us": 1, "p80_us": 1, "method": "graph", "l2_flushed": "yes"}},
     'device_time.l2_flushed: expected a boolean, got a string "yes"'),
    ({"wall": [1, 2]}, 'wall: expected an object (WallStats), got a list [1, 2]'),
    ({"rel_error": "big"}, 'rel_error: expected a number, got a string "big"'),
    ({"speedup_vs_eager": True}, 'speedup_vs_eager: expected a number, got a boolean true'),
    ({"kernel_names": "abc"}, 'kernel_names: expected a list, got a string "abc"'),
    ({"extra": []}, 'extra: expected an object, got a list []'),
    ({"reason": 3}, 'reason: expected a string, got a number 3'),
    ({"case": {"B": "8", "M": 1, "seqlen": 1, "sparsity": 0}}, 'case.B: expected an integer, got a string "8"'),
    ({"case": {"B": 8, "M": 1, "seqlen": 1, "sparsity": 0, "dtype": None}}, 'case.dtype: expected a string, got null'),
    ({"op": 7}, 'op: expected a string, got a number 7'),
])
def test_a_field_of_the_wrong_type_is_one_clear_error(tmp_path, change, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"environment": {}}\n' + json.dumps({**_GOOD, **change}) + "\n")
    with pytest.raises(ResultsFileError) as info:
        load_results(path)
    assert str(info.value) == f"{path}:2: {message}"
    doc = tmp_path / "bad.json"
    doc.write_text(json.dumps({"environment": {}, "results": [_GOOD, {**_GOOD, **change}]}))
    with pytest.raises(ResultsFileError) as info:
        load_results(doc)
    assert str(info.value) == f"{doc}: results[1]: {message}"


def test_numbers_may_be_integers_and_optional_fields_null(tmp_path):
    path = tmp_path / "ok.jsonl"
    path.write_text(json.dumps({**_GOOD, "compile_s": 2, "wall": None, "rel_error": None, "extra": {"x": [1]}}) + "\n")
    (r,) = load_results(path).results
    assert r.compile_s == 2 and r.wall is None


def test_check_writable_refuses_what_the_writers_would_fail_on_and_leaves_nothing_behind(tmp_path):
    from jaggedperf.lab.results.atomic import check_writable

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError) as info:
        check_writable(blocker / "deeper" / "r.json")
    assert info.value.filename == str(blocker)
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)
    check_writable(tmp_path / "new" / "folders" / "r.json")  # the writers make folders: fine, and none made yet
    check_writable(tmp_path / "r.json")
    check_writable(blocker)  # an existing file: opened for appending, unchanged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"] and blocker.read_text() == "x"
