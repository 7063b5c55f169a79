import json
import re

import pytest

from jaggedperf.cli import main
from jaggedperf.impls.registry import implementation_names
from jaggedperf.lab import grid
from jaggedperf.lab.plugins import PLUGINS_ENV
from jaggedperf.lab.results.store import load_results, read_results

TINY = ["--B", "8", "--M", "3", "--seqlen", "10:20:10", "--sparsity", "0.5", "--warmup", "1", "--iters", "2",
        "--device", "cpu"]


def planned(out: str) -> dict[str, int]:
    line = next(line for line in out.splitlines() if line.startswith("plan:"))
    numbers = {"cells": r"(\d+) cells", "cases": r"\((\d+) cases\)", "done": r"(\d+) already in",
               "too_large": r"(\d+) skipped before dispatch", "to_run": r"(\d+) to run"}
    return {k: int(m.group(1)) if (m := re.search(p, line)) else 0 for k, p in numbers.items()}


def test_sweep_end_to_end_writes_every_cell_and_says_how_to_plot(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    code = main(["sweep", "--out", str(out), *TINY, "--impls", "segment_reduce,sum_padded", "--modes", "eager"])
    assert code == 0
    printed = capsys.readouterr().out
    assert planned(printed) == {"cells": 4, "cases": 2, "done": 0, "too_large": 0, "to_run": 4}
    assert "4 ok" in printed and f"jaggedperf plot {out}" in printed and f"jaggedperf report {out} -o" in printed
    lines = out.read_text().splitlines()
    assert len(lines) == 1 + 4 and lines[0].startswith('{"environment"')
    record = load_results(out)
    assert sorted((r.implementation, r.case.seqlen) for r in record.results) == [
        ("segment_reduce", 10), ("segment_reduce", 20), ("sum_padded", 10), ("sum_padded", 20)]
    assert record.environment["workers"][0]["name"] == "cpu"

    assert main(["sweep", "--out", str(out), *TINY, "--impls", "segment_reduce,sum_padded", "--modes", "eager"]) == 0
    assert planned(capsys.readouterr().out)["to_run"] == 0
    assert out.read_text().splitlines() == lines  # nothing run, nothing written


def test_plan_of_the_seed_preset_runs_nothing(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["sweep", "--out", str(out), "--preset", "seed", "--plan"]) == 0
    impls = len(implementation_names("jagged_mean"))  # all, by default
    assert planned(capsys.readouterr().out) == {"cells": 2 * impls * 2, "cases": 2, "done": 0, "too_large": 0,
                                                "to_run": 2 * impls * 2}
    assert not out.exists()
    assert main(["sweep", "--out", str(out), "--preset", "seed", "--B", "8", "16", "--dtype", "bf16", "--plan",
                 "--impls", "segment_reduce", "--modes", "eager,compile:default"]) == 0
    assert planned(capsys.readouterr().out)["to_run"] == 2 * 2 * 2


def test_plan_of_the_tritonbench_preset_filters_by_size(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["sweep", "--out", str(out), "--preset", "tritonbench", "--M", "64", "4096", "--plan",
                 "--impls", "segment_reduce", "--modes", "eager", "--byte-limit", "2GB"]) == 0
    plan = planned(capsys.readouterr().out)
    cases = grid.expand("tritonbench", M=[64, 4096])
    too_large = len(grid.split_by_size(cases, 2 * 10**9)[1])
    assert plan == {"cells": len(cases), "cases": len(cases), "done": 0, "too_large": too_large,
                    "to_run": len(cases) - too_large}
    assert 0 < too_large < len(cases)


def test_plugins_from_the_flag_or_the_environment(tmp_path, capsys, monkeypatch, sweep_plugin):
    out = str(tmp_path / "r.jsonl")
    assert main(["sweep", "--out", out, *TINY, "--impls", "test_raises", "--plan"]) == 2
    assert "unknown implementation 'test_raises'" in capsys.readouterr().err
    monkeypatch.setenv(PLUGINS_ENV, sweep_plugin)
    assert main(["sweep", "--out", out, *TINY, "--impls", "test_raises", "--modes", "eager", "--plan"]) == 0
    assert planned(capsys.readouterr().out)["to_run"] == 2
    monkeypatch.delenv(PLUGINS_ENV)
    assert main(["sweep", "--out", out, *TINY, "--plugin", "no_such_plugin_module", "--plan"]) == 2
    assert "plugin 'no_such_plugin_module' could not be imported" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--B", "8", "--M", "3"], "give --seqlen, --sparsity"),
    (["--preset", "seed", "--gpus", "2", "--device", "cpu"], "a CPU sweep has one worker"),
    (["--preset", "seed", "--sparsity", "0.5:2"], "sparsity must be in [0, 1]"),
])
def test_bad_requests_are_one_line_errors(tmp_path, capsys, args, message):
    assert main(["sweep", "--out", str(tmp_path / "r.jsonl"), *args, "--plan"]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--seqlen", "100:10"], "STOP is below START"),
    (["--B", "0.5"], "not an integer"),
    (["--gpus", "0"], "positive number or 'all'"),
    (["--timeout", "0"], "positive number of seconds"),
])
def test_bad_flag_values_are_argument_errors(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--out", str(tmp_path / "r.jsonl"), "--preset", "seed", *args, "--plan"])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_batch_size_too_large_to_draw_is_skipped_before_dispatch_not_a_crash(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["sweep", "--out", str(out), "--B", "1000000000000", "8", "--M", "3", "--seqlen", "10",
                 "--sparsity", "0.5", "--impls", "segment_reduce", "--modes", "eager", "--device", "cpu", "--plan"]) == 0
    assert planned(capsys.readouterr().out) == {"cells": 2, "cases": 2, "done": 0, "too_large": 1, "to_run": 1}


def test_an_unwritable_out_is_refused_before_any_worker_starts(tmp_path, capsys, monkeypatch):
    from jaggedperf.lab import sweep

    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: pytest.fail("the sweep started"))
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "r.jsonl"
    assert main(["sweep", "--out", str(out), *TINY, "--impls", "segment_reduce", "--modes", "eager", "--plan"]) == 0
    capsys.readouterr()  # --plan reads, and so may look at a file it cannot write
    assert main(["sweep", "--out", str(out), *TINY, "--impls", "segment_reduce", "--modes", "eager"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jaggedperf: error: cannot write {out}: {tmp_path / 'file'}: a folder on its path is a file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_second_sweep_on_the_same_out_is_refused_naming_the_holder(tmp_path, capsys):
    from helpers.isolated import hold_in_another_process

    out = tmp_path / "r.jsonl"
    holder = hold_in_another_process(out)
    try:
        args = ["sweep", "--out", str(out), *TINY, "--impls", "segment_reduce", "--modes", "eager"]
        assert main([*args, "--plan"]) == 0  # reading is not writing
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"jaggedperf: error: another sweep (pid {holder.pid} on ")
        assert f"is writing to {out} (it holds {out}.lock); wait for it to end, or give another --json" in err
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait(10)
    assert main(args) == 0  # the holder died: its lock went with it
    assert len(load_results(out).results) == 2


# --- retrying failed cells; resuming with other settings --------------------------------------------


def test_retry_failed_reruns_exactly_the_failed_cells_and_the_latest_result_is_read_back(tmp_path, capsys,
                                                                                         monkeypatch, sweep_plugin):
    from helpers.sweep_plugin import FLAKY, FLAKY_ENV

    out = tmp_path / "r.jsonl"
    args = ["sweep", "--out", str(out), *TINY, "--impls", f"segment_reduce,{FLAKY}", "--modes", "eager",
            "--plugin", sweep_plugin]
    monkeypatch.setenv(FLAKY_ENV, "fail")
    assert main(args) == 0
    assert {r.implementation: r.status for r in load_results(out).results} == {"segment_reduce": "ok", FLAKY: "error"}
    monkeypatch.delenv(FLAKY_ENV)
    capsys.readouterr()
    assert main([*args, "--plan"]) == 0
    assert planned(capsys.readouterr().out)["to_run"] == 0  # a plain resume never retries
    assert main([*args, "--retry-failed", "--plan"]) == 0
    line = capsys.readouterr().out
    assert planned(line) == {"cells": 4, "cases": 2, "done": 2, "too_large": 0, "to_run": 2}
    assert "2 failed there, to retry" in line
    before = out.read_text().splitlines()
    assert main([*args, "--retry-failed"]) == 0
    after = out.read_text().splitlines()
    assert after[:len(before)] == before and len(after) == len(before) + 1 + 2  # a header, the two retried cells
    record, warnings = read_results(out)
    assert warnings == []  # a retry repeats its cell on purpose
    flaky = [r for r in record.results if r.implementation == FLAKY]
    assert len(record.results) == 4 and [r.status for r in flaky] == ["ok", "ok"]  # the later line is the one read
    assert all(r.extra["retry"] == {"status": "error", "reason": "first call: RuntimeError: flaky failure"} for r in flaky)
    capsys.readouterr()
    assert main([*args, "--retry-failed", "--plan"]) == 0
    assert planned(capsys.readouterr().out)["to_run"] == 0  # nothing failed any more


def test_a_resume_with_other_settings_is_refused_listing_them_unless_accepted(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    args = ["sweep", "--out", str(out), "--B", "8", "--M", "3", "--sparsity", "0.5", "--impls", "segment_reduce",
            "--modes", "eager", "--device", "cpu"]
    assert main([*args, "--seqlen", "10", "--warmup", "1", "--iters", "2"]) == 0
    header = json.loads(out.read_text().splitlines()[0])
    assert header["environment"]["settings"] == {
        "device": "cpu", "warmup": 1, "iters": 2, "byte_limit": 8 * 10**9, "flush_l2": True, "device_time": True,
        "profile_calls": 10, "dynamic": None, "cold_compile": True, "threads": 1}
    capsys.readouterr()
    grown = [*args, "--seqlen", "10", "20", "--warmup", "1", "--iters", "3", "--dynamic"]
    before = out.read_text()
    assert main(grown) == 2
    err = capsys.readouterr().err
    assert err == (f"jaggedperf: error: {out} was measured with other settings than these: iters: 2 in the file, "
                   "3 now; dynamic: null in the file, true now (--accept-settings to add to it anyway, or give "
                   "another --json)\n")
    assert out.read_text() == before
    assert main([*args, "--seqlen", "10", "--warmup", "1", "--iters", "3", "--plan"]) == 0  # nothing to run: no check
    assert main([*grown, "--accept-settings"]) == 0
    assert "measured with other settings (accepted): iters: 2 in the file, 3 now" in capsys.readouterr().err
    record = load_results(out)
    assert len(record.results) == 2 and record.environment["more"][-1]["settings"]["iters"] == 3
    assert main([*grown[:-5], "--seqlen", "10", "20", "30", "--warmup", "1", "--iters", "3", "--dynamic"]) == 0
    assert main([*grown[:-5], "--seqlen", "40", "--warmup", "1", "--iters", "2"]) == 2  # against the last settings


def test_a_cell_past_its_timeout_reads_timed_out_in_the_summary(tmp_path, capsys, sweep_plugin):
    # docs/columns.md's status "timed out" (an error: the cell passed its --timeout), in the sweep's closing lines
    out = tmp_path / "r.jsonl"
    one_case = [*TINY[:4], "--seqlen", "10", *TINY[6:]]
    assert main(["sweep", "--json", str(out), *one_case, "--plugin", sweep_plugin, "--impls",
                 "test_hangs,segment_reduce", "--modes", "eager", "--timeout", "3"]) == 0
    printed = capsys.readouterr().out
    assert "sweep: 2 cells written (1 ok, 0 unstable, 0 wrong, 0 skipped, 1 error; 1 of the errors timed out)" in printed
    assert "• timed out: test_hangs · eager · B8-M3-L10-s0.5: after 3 s, compile included" in printed, printed
