"""jaggedperf plot | compare | report, through jaggedperf.cli.main."""

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from jaggedperf.cli import main
from jaggedperf.lab.result import RunRecord
from jaggedperf.lab.results.atomic import write_json
from jaggedperf.lab.results.store import append_result, write_environment_header
from helpers.fake_results import make_record, scaled


@pytest.fixture(scope="module")
def record() -> RunRecord:
    return make_record()


@pytest.fixture(scope="module")
def small(record) -> RunRecord:
    """Few figures: one bf16 case pair, eager and one compiled mode."""
    keep = [r for r in record.results if r.case.dtype == "bfloat16" and r.mode in ("eager", "compile:default")]
    return RunRecord(record.environment, keep, record.copy_gbps)


def sweep_file(path, record):
    write_environment_header(path, record.environment, record.copy_gbps)
    for r in record.results:
        append_result(path, r)
    return path


def is_target(r):
    return (r.implementation, r.mode, r.case.seqlen) == ("sum_padded", "eager", 100)


def test_compare_exit_code_only_fails_when_asked(tmp_path, record, capsys):
    a = tmp_path / "a.json"
    b = tmp_path / "b.jsonl"
    write_json(a, record)
    sweep_file(b, scaled(record, 1.5, is_target))
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "3 regression" in out and "B512-M64-L100-s0.1" in out
    out_json = tmp_path / "cmp.json"
    assert main(["compare", str(a), str(b), "--fail-on-regression", "--json", str(out_json)]) == 1
    d = json.loads(out_json.read_text())
    assert d["counts"]["regression"] == 3
    assert {c["case_label"] for c in d["cells"] if c["verdict"] == "regression"} == {
        "B512-M64-L100-s0.1", "B512-M64-L100-s0.5", "B512-M64-L100-s0.9"}
    # within the spread: no regression, exit 0 even with the flag
    c = tmp_path / "c.jsonl"
    sweep_file(c, scaled(record, 1.02, is_target))
    capsys.readouterr()
    assert main(["compare", str(a), str(c), "--fail-on-regression", "--changed"]) == 0
    assert "regression" not in capsys.readouterr().out


def test_corrupt_file_is_one_clean_error_line(tmp_path, small, capsys):
    path = sweep_file(tmp_path / "sweep.jsonl", small)
    lines = path.read_text().splitlines()
    lines[3] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    good = tmp_path / "good.json"
    write_json(good, small)
    for argv in (["plot", str(path)], ["report", str(path), "-o", str(tmp_path / "r.md")], ["compare", str(good), str(path)]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1 and "Traceback" not in captured.err + captured.out
        assert re.fullmatch(r"jaggedperf: error: .*sweep\.jsonl:4: not JSON \(.*\)\n", captured.err)
    assert not (tmp_path / "r.md").exists()


def test_missing_file_and_unwritable_output(tmp_path, small, capsys):
    assert main(["report", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err == f"jaggedperf: error: {tmp_path / 'nope.jsonl'}: no such file\n"
    good = tmp_path / "good.json"
    write_json(good, small)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["report", str(good), "-o", str(blocker / "r.md"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaggedperf: error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_truncated_sweep_still_plots_with_a_warning(tmp_path, small, capsys):
    path = sweep_file(tmp_path / "sweep.jsonl", small)
    with open(path, "a") as f:
        f.write('{"op": "jagged_mean", "implem')
    assert main(["plot", str(path)]) == 0
    captured = capsys.readouterr()
    assert "jaggedperf: warning:" in captured.err and "unfinished last line" in captured.err
    folder = tmp_path / "sweep-plots"  # default: beside the results file
    pngs = sorted(p.name for p in folder.glob("*.png"))
    assert len(pngs) == len(list(folder.glob("*.svg"))) == 5  # speedup, ours vs best (wall, device), roofline, latency
    assert all((folder / p).stat().st_size > 0 for p in pngs)
    assert "wrote 5 figures" in captured.out


def test_report_with_and_without_plots(tmp_path, small):
    results = tmp_path / "run.json"
    write_json(results, small)
    out = tmp_path / "reports" / "report.md"
    assert main(["report", str(results), "-o", str(out)]) == 0
    text = out.read_text()
    assert "## Speedup vs eager" in text and "## All cells" in text and "## Failures" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) == 5 and all(link.startswith("../run-plots/") for link in links)  # where `plot` draws them
    assert all((out.parent / link).is_file() for link in links)  # relative to the report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports", "run-plots", "run.json"]
    bare = tmp_path / "bare.md"
    assert main(["report", str(results), "-o", str(bare), "--no-plots"]) == 0
    assert "## Plots" not in bare.read_text() and not (tmp_path / "bare-plots").exists()


def test_report_after_plot_links_the_same_figures_without_drawing_them_again(tmp_path, small):
    results = tmp_path / "run.json"
    write_json(results, small)
    assert main(["plot", str(results)]) == 0
    folder = tmp_path / "run-plots"
    drawn = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert main(["report", str(results), "-o", str(tmp_path / "report.md")]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == drawn  # not one figure drawn again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "run-plots", "run.json"]  # no second folder
    assert len(re.findall(r"\]\(run-plots/[^)]+\.png\)", (tmp_path / "report.md").read_text())) == 5
    write_json(results, small)  # the results changed after the figures: drawn again, in the same folder
    os.utime(results, ns=(max(drawn.values()) + 10**9,) * 2)
    assert main(["report", str(results), "-o", str(tmp_path / "report.md")]) == 0
    assert all(p.stat().st_mtime_ns != drawn[p.name] for p in folder.iterdir())


def test_plot_into_a_chosen_folder(tmp_path, small, capsys):
    results = tmp_path / "run.json"
    write_json(results, small)
    assert main(["plot", str(results), "-o", str(tmp_path / "figs")]) == 0
    assert len(list((tmp_path / "figs").glob("*.png"))) == 5 and not (tmp_path / "run-plots").exists()


def test_fail_on_regression_fails_when_nothing_could_be_compared(tmp_path, record, capsys):
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    write_json(a, RunRecord(record.environment, [r for r in record.results if r.case.dtype == "bfloat16"]))
    write_json(b, RunRecord(record.environment, [r for r in record.results if r.case.dtype != "bfloat16"]))
    assert main(["compare", str(a), str(b)]) == 0  # not a gate: says so and passes
    assert "0 cells compared" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--fail-on-regression"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaggedperf: error: --fail-on-regression: nothing could be compared (no cell is in both")
    failing = [replace(r, status="error", wall=None, device_time=None) for r in record.results if r.case.dtype != "bfloat16"]
    write_json(c, RunRecord(record.environment, failing))
    assert main(["compare", str(c), str(c), "--fail-on-regression"]) == 2  # failing on both sides
    assert f"{len(failing)} cells are in both, none measured in both" in capsys.readouterr().err


def test_fail_on_regression_fails_when_every_cell_is_unstable(tmp_path, record, capsys):
    a = tmp_path / "a.json"
    unstable = [replace(r, status="unstable") for r in record.results if r.case.dtype != "bfloat16"]
    write_json(a, RunRecord(record.environment, unstable))
    assert main(["compare", str(a), str(a)]) == 0  # not a gate: shows the unstable cells and passes
    capsys.readouterr()
    assert main(["compare", str(a), str(a), "--fail-on-regression"]) == 2
    err = capsys.readouterr().err
    assert f"{len(unstable)} cells are in both, {len(unstable)} of them unstable on a side and none judged" in err


def test_compressed_results_files_are_read_by_every_command(tmp_path, small, capsys):
    import gzip

    import jaggedperf

    plain = sweep_file(tmp_path / "sweep.jsonl", small)
    packed = tmp_path / "sweep.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert len(jaggedperf.load(packed).rows()) == len(small.results)
    assert main(["report", str(packed), "-o", str(tmp_path / "r.md"), "--no-plots"]) == 0
    assert main(["compare", str(plain), str(packed)]) == 0
    assert main(["plot", str(packed)]) == 0
    assert (tmp_path / "sweep-plots").is_dir()  # named after the file it holds
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(b"{}")[:12])
    assert main(["report", str(broken), "-o", str(tmp_path / "b.md")]) == 2
    assert "gzip-compressed, but cannot be decompressed" in capsys.readouterr().err
    with pytest.raises(jaggedperf.lab.results.store.ResultsFileError, match="not a text file"):
        (tmp_path / "binary").write_bytes(b"\xff\xfe")
        jaggedperf.load(tmp_path / "binary")
    with pytest.raises(jaggedperf.lab.results.store.ResultsFileError, match="gzip-compressed; results are appended"):
        append_result(packed, small.results[0])


@pytest.mark.parametrize("field,value", [("wall", {"median_ms": "fast"}), ("rel_error", "big"), ("kernel_names", 3),
                                         ("extra", [])])
def test_a_wrongly_typed_field_is_one_clean_error_line(tmp_path, small, capsys, field, value):
    path = sweep_file(tmp_path / "sweep.jsonl", small)
    lines = path.read_text().splitlines()
    d = json.loads(lines[3])
    d[field] = {**d[field], **value} if isinstance(value, dict) else value
    lines[3] = json.dumps(d)
    path.write_text("\n".join(lines) + "\n")
    good = tmp_path / "good.json"
    write_json(good, small)
    for argv in (["plot", str(path)], ["report", str(path), "-o", str(tmp_path / "r.md")],
                 ["compare", str(good), str(path)]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err + captured.out
        assert re.fullmatch(rf'jaggedperf: error: .*sweep\.jsonl:4: {field}[.a-z_]*: expected .*\n', captured.err)
    assert not (tmp_path / "r.md").exists()


COMMITTED = sorted(p for p in (Path(__file__).resolve().parents[1] / "benchmarks" / "results").rglob("*")
                   if p.name.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz")))


def test_every_committed_json_file_is_read_alike_by_load_and_the_commands_or_refused_by_name(tmp_path, capsys):
    # A newcomer's first files: each committed results file (plain or gzip, a run's, a sweep's or a doctor's) gives
    # report the cells jaggedperf.load gives; any other JSON (a benchmark's summary) is refused saying so, never
    # read as a run of no cells.
    import jaggedperf
    from jaggedperf.lab.results.store import ResultsFileError

    read = set()
    for path in COMMITTED:
        report = tmp_path / f"{path.name}.md"
        try:
            cells = len(jaggedperf.load(path))
        except ResultsFileError as exc:
            assert main(["report", str(path), "-o", str(report), "--no-plots"]) == 2
            assert capsys.readouterr().err == f"jaggedperf: error: {exc}\n"
            assert "not a results file" in str(exc) or "missing keys" in str(exc), exc
            continue
        assert cells > 0, path
        assert main(["report", str(path), "-o", str(report), "--no-plots"]) == 0, capsys.readouterr().err
        assert re.search(rf"^{cells} cells\b", report.read_text(), re.M), path
        read.add(path.name)
    assert {"five_shapes.jsonl.gz", "neighbourhood.jsonl.gz", "doctor-seed.json.gz", "seed-table-shape1.json"} <= read


def test_a_timed_out_cell_reads_timed_out_in_the_report(tmp_path, small):
    # docs/columns.md: the status "timed out" (an error: the cell passed its --timeout), in every table
    from jaggedperf.lab.result import ERROR

    cut = replace(small.results[1], status=ERROR, reason="timed out after 30 s", wall=None, device_time=None,
                  stability=None, speedup_vs_eager=None, rel_error=None)
    path = tmp_path / "cut.json"
    write_json(path, RunRecord(small.environment, [small.results[0], cut, *small.results[2:]], small.copy_gbps))
    assert main(["report", str(path), "-o", str(tmp_path / "r.md"), "--no-plots"]) == 0
    text = (tmp_path / "r.md").read_text()
    label = f"{cut.case.label} | {cut.implementation} | {cut.mode}"
    assert f"| {label} | **timed out** |" in text  # all cells
    assert f"| timed out | {label} | timed out after 30 s |" in text  # failures
    assert "(1 of the errors timed out)" in text
