import json

import pytest

from jaggedperf.cli import main
from jaggedperf.impls.registry import get_op

SMALL = ["--B", "8", "--M", "3", "--seqlen", "20", "--sparsity", "0.3", "--warmup", "1", "--iters", "3"]


def test_list_shows_implementations_and_modes(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("unbind_mean", "nanmean_padded", "sum_padded", "njt_mean", "segment_reduce",
                 "compile:max-autotune-no-cudagraphs", "jagged-compile:max-autotune-no-cudagraphs", "graph"):
        assert name in out
    assert main(["list", "--op", "rec_block"]) == 0
    out = capsys.readouterr().out
    assert "rec_block" in out and "index_add" in out and "jagged-compile:default" in out


def test_run_end_to_end_on_cpu_writes_json_with_environment(tmp_path, capsys):
    path = tmp_path / "r.json"
    code = main(["run", *SMALL, "--M", "3", "5", "--impls", "sum_padded,segment_reduce",
                 "--modes", "eager,compile:default", "--device", "cpu", "--json", str(path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "eager vs compile:default" in out and "B8-M5-L20-s0.3" in out
    data = json.loads(path.read_text())
    assert len(data["results"]) == 2 * 2 * 2
    assert {r["status"] for r in data["results"]} == {"ok"}
    env = data["environment"]
    for key in ("torch", "triton", "cuda", "driver", "gpu", "python", "git_commit", "command"):
        assert key in env
    assert env["command"].startswith("jaggedperf")


def test_run_with_unknown_implementation_lists_valid_ones(capsys):
    assert main(["run", *SMALL, "--impls", "fastest", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "fastest" in err and "segment_reduce" in err


def test_run_with_unknown_mode_lists_valid_ones(capsys):
    assert main(["run", *SMALL, "--modes", "eager,turbo", "--device", "cpu"]) == 2
    assert "compile:reduce-overhead" in capsys.readouterr().err


def test_bad_dtype_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", *SMALL, "--dtype", "int8"])
    assert exc.value.code == 2 and "int8" in capsys.readouterr().err


def test_repro_eager_only_on_cpu_prints_the_seed_shapes(capsys):
    code = main(["repro", "--device", "cpu", "--modes", "eager", "--impls", "sum_padded,nanmean_padded", "--warmup", "1",
                 "--iters", "2"])
    assert code == 0
    captured = capsys.readouterr()
    assert "B512-M64-L100-s0.1" in captured.out and "B512-M64-L500-s0.75" in captured.out
    assert "CPU" in captured.err


def test_an_interrupted_run_keeps_the_finished_cells_in_its_json_and_says_so_in_one_line(tmp_path, monkeypatch,
                                                                                          capsys):
    from jaggedperf.lab import runner
    from jaggedperf.lab.results.store import load_results

    real = runner.run_cell
    calls = []

    def interrupt_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_cell", interrupt_second)
    path = tmp_path / "r.json"
    assert main(["run", *SMALL, "--impls", "sum_padded,segment_reduce", "--modes", "eager", "--device", "cpu",
                 "--json", str(path)]) == 130
    (kept,) = load_results(path).results
    assert kept.implementation == "sum_padded" and kept.status == "ok"
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"interrupted: 1 of 2 cells finished, kept in {path}; run the same command again to measure "
                       "them all, or `jaggedperf sweep --json R.jsonl` with the same flags, which resumes where it "
                       "stopped")
    assert not any("Traceback" in line for line in err)


# --- --timeout: the same cells through the sweep's worker processes -------------------------------


def _cells(path):
    from jaggedperf.lab.results.store import load_results

    return [(r.implementation, r.mode, r.case.label, r.status, r.reason) for r in load_results(path).results]


def _table_rows(out: str, columns: int, keep=(0, 1, 2, -1)) -> list[tuple[str, ...]]:
    """The rows of the printed tables that have ``columns`` columns (6: the seed table on the CPU, 9: every cell there;
    the device columns are left out),
    each cut to the columns ``keep`` (by default the case, implementation, mode and status)."""
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    return [tuple(row[i] for i in keep) for row in rows if len(row) == columns]


def test_run_with_a_timeout_records_a_hanging_cell_as_timed_out_and_goes_on(tmp_path, capsys, monkeypatch,
                                                                           sweep_plugin):
    import multiprocessing

    from jaggedperf.lab.plugins import PLUGINS_ENV

    monkeypatch.setenv(PLUGINS_ENV, sweep_plugin)  # imported here and in the worker
    cpu = [*SMALL, "--modes", "eager", "--device", "cpu"]
    failed_today = main(["run", *cpu, "--impls", "segment_reduce,test_raises"])  # in this process, a failed cell
    capsys.readouterr()
    path = tmp_path / "r.json"
    code = main(["run", *cpu, "--impls", "segment_reduce,test_hangs,sum_padded", "--timeout", "3",
                 "--json", str(path), "--csv", str(tmp_path / "r.csv")])
    assert code == failed_today
    assert _cells(path) == [("segment_reduce", "eager", "B8-M3-L20-s0.3", "ok", None),
                            ("test_hangs", "eager", "B8-M3-L20-s0.3", "error", "timed out after 3 s"),
                            ("sum_padded", "eager", "B8-M3-L20-s0.3", "ok", None)]  # the cell after it ran too
    captured = capsys.readouterr()
    assert "• timed out: test_hangs · eager · B8-M3-L20-s0.3: after 3 s, compile included" in captured.out
    assert _table_rows(captured.out, 9)[1] == ("B8-M3-L20-s0.3", "test_hangs", "eager", "timed out")
    assert "timed out after 3 s; starting a fresh worker" in " ".join(captured.err.split())
    assert (tmp_path / "r.csv").read_text().count("timed out after 3 s") == 1
    assert multiprocessing.active_children() == []  # its workers stopped or killed


def test_run_with_a_timeout_gives_the_same_cells_and_tables_as_in_process(tmp_path, capsys):
    args = ["run", *SMALL, "--M", "3", "5", "--impls", "sum_padded,segment_reduce", "--modes", "eager,compile:default",
            "--device", "cpu"]
    assert main([*args, "--json", str(tmp_path / "in.json")]) == 0
    in_process = capsys.readouterr().out
    assert main([*args, "--timeout", "120", "--json", str(tmp_path / "iso.json")]) == 0
    isolated = capsys.readouterr().out
    cells = _cells(tmp_path / "in.json")
    assert len(cells) == 8 and {c[3] for c in cells} == {"ok"}
    assert _cells(tmp_path / "iso.json") == cells  # the same cells, ok, in the same (plan) order
    for columns, keep in ((6, (0, 1)), (9, (0, 1, 2, -1))):  # the seed table's rows (case, impl), every cell's
        assert _table_rows(isolated, columns, keep) == _table_rows(in_process, columns, keep) != []
    record = json.loads((tmp_path / "iso.json").read_text())
    assert [w["name"] for w in record["environment"]["workers"]] == ["cpu"]  # ran in a worker
    assert all(r["speedup_vs_eager"] for r in record["results"])


@pytest.mark.parametrize("command", ["run", "repro"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_timeout_must_be_a_positive_number_of_seconds(capsys, command, value):
    with pytest.raises(SystemExit) as exc:
        main([command, *(SMALL if command == "run" else []), "--timeout", value])
    assert exc.value.code == 2 and "positive number of seconds" in capsys.readouterr().err


def test_repro_caps_a_cell_by_device_unless_told(monkeypatch):
    """unbind_mean compiles for minutes: repro's cells run in a worker under REPRO_GPU_CELL_TIMEOUT_S on a GPU, its
    compiled cells under REPRO_CPU_CELL_TIMEOUT_S on the CPU, with fewer calls there; ``--timeout none`` or S
    overrides both; ``run`` keeps its own defaults everywhere."""
    from jaggedperf.cli import lab
    from jaggedperf.cli._args import resolve_device_defaults, timeout_from_args
    from jaggedperf.cli import build_parser

    parser = build_parser()
    default = parser.parse_args(["repro"])
    assert timeout_from_args(default, "cuda") == lab.REPRO_GPU_CELL_TIMEOUT_S
    assert timeout_from_args(default, "cpu") == lab.REPRO_CPU_CELL_TIMEOUT_S
    assert sorted(resolve_device_defaults(default, "cpu")) == ["attempts", "iters", "timeout", "warmup"]
    assert (default.warmup, default.iters, default.attempts) == (3, 15, 2)
    on_gpu = parser.parse_args(["repro"])
    assert resolve_device_defaults(on_gpu, "cuda") == [] and (on_gpu.warmup, on_gpu.iters) == (50, 200)
    given = parser.parse_args(["repro", "--iters", "200"])
    assert "iters" not in resolve_device_defaults(given, "cpu") and given.iters == 200
    assert timeout_from_args(parser.parse_args(["repro", "--timeout", "none"]), "cuda") is None
    assert timeout_from_args(parser.parse_args(["repro", "--timeout", "7"]), "cpu") == 7.0
    run_default = parser.parse_args(["run", *SMALL])
    assert timeout_from_args(run_default, "cuda") is None  # run keeps every cell in this process


def test_repros_gpu_budget_leaves_the_seeds_unbind_mean_room_to_compile():
    # The seed's first row on the H200: torch.compile's unbind_mean compile, as the committed run measured it, fits
    # the GPU budget at least twice over (a busier host, another torch), so the row is measured, not cut.
    import json
    from pathlib import Path

    from jaggedperf.cli import lab

    committed = Path(__file__).resolve().parents[1] / "benchmarks/results/h200/seed-table-shape1.json"
    (cell,) = [r for r in json.loads(committed.read_text())["results"]
               if (r["implementation"], r["mode"]) == ("unbind_mean", lab.modes_mod.SEED_COMPILED_MODE)]
    assert cell["status"] == "ok" and cell["compile_s"] > lab.REPRO_CPU_CELL_TIMEOUT_S
    assert lab.REPRO_GPU_CELL_TIMEOUT_S >= 2 * cell["compile_s"]
    note = lab.gpu_budget_note(lab.REPRO_GPU_CELL_TIMEOUT_S)
    assert "50 warm-up and 200 timed calls" in note and "cut > 240 s" in note and "--timeout none" in note


# --- the boundary (jagged-compile:) beside the seed's compiled mode --------------------------------


def test_repro_runs_the_seeds_mode_and_the_boundary_in_it_by_default(monkeypatch):
    from jaggedperf.cli import lab

    seen = {}

    def plan(op, cases, impls, modes):  # what repro asks the runner for; nothing is run
        seen.update(op=op, impls=impls, modes=modes, compiled_mode=lab._compiled_mode(modes))
        raise ValueError("planned")

    monkeypatch.setattr(lab.runner, "plan", plan)
    assert main(["repro"]) == 2
    assert seen["modes"] == ["eager", "compile:max-autotune-no-cudagraphs", "jagged-compile:max-autotune-no-cudagraphs"]
    assert seen["compiled_mode"] == "compile:max-autotune-no-cudagraphs" and seen["op"] == "jagged_mean"
    assert lab._boundary_mode(seen["modes"], seen["compiled_mode"]) == "jagged-compile:max-autotune-no-cudagraphs"
    assert main(["repro", "--op", "rec_block"]) == 2  # a model at the seed's shapes, every contender
    assert seen["op"] == "rec_block" and seen["impls"] == list(get_op("rec_block").implementations)


def test_run_prints_the_boundary_columns_beside_the_compiled_mode(capsys):
    code = main(["run", *SMALL, "--impls", "sum_padded", "--modes", "eager,compile:default,jagged-compile:default",
                 "--device", "cpu"])
    assert code == 0
    out = capsys.readouterr().out
    assert "eager vs compile:default and jagged-compile:default" in out
    (row,) = _table_rows(out, 8, keep=(1, 5, 6))  # the seed table with the two boundary columns (no device ones)
    assert row[0] == "sum_padded" and row[1] != "—" and row[2].endswith("×")


# --- flags that would measure nothing -------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "repro", "sweep", "doctor"])
@pytest.mark.parametrize("flag,value,message", [
    ("--iters", "0", "argument --iters: expected a positive integer, got '0'"),
    ("--iters", "-5", "argument --iters: expected a positive integer"),
    ("--warmup", "-1", "argument --warmup: expected an integer >= 0, got '-1'"),
    ("--warmup", "x", "argument --warmup: expected an integer, got 'x'"),
    ("--impls", "", "argument --impls/--only: expected one or more comma-separated names, got ''"),
    ("--impls", " , ", "argument --impls/--only: expected one or more comma-separated names"),
    ("--modes", "", "argument --modes: expected one or more comma-separated names, got ''"),
])
def test_counts_and_lists_that_would_measure_nothing_are_argument_errors(tmp_path, capsys, command, flag, value,
                                                                         message):
    argv = {"run": ["run", *SMALL], "repro": ["repro"], "sweep": ["sweep", "--out", str(tmp_path / "r.jsonl"), *SMALL],
            "doctor": ["doctor"]}[command]
    with pytest.raises(SystemExit) as exc:
        main([*argv, flag, value, "--device", "cpu"])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_options_refuse_counts_that_measure_nothing():
    from jaggedperf.lab.runner import Options

    for bad in ({"iters": 0}, {"warmup": -1}, {"profile_calls": 0}, {"byte_limit": -1}):
        with pytest.raises(ValueError, match="Options need iters >= 1, warmup >= 0"):
            Options(**bad)
    assert Options(iters=1, warmup=0).iters == 1


def test_run_of_a_batch_size_too_large_to_draw_skips_its_cells(capsys):
    assert main(["run", "--B", "1000000000000", "--M", "3", "--seqlen", "10", "--sparsity", "0.5", "--warmup", "1",
                 "--iters", "2", "--distribution", "heavy", "--impls", "segment_reduce", "--modes", "eager", "--device", "cpu"]) == 0
    assert "skipped" in capsys.readouterr().out


# --- outputs that cannot be written are refused before anything is measured ------------------------


@pytest.mark.parametrize("command,flag", [("run", "--json"), ("run", "--csv"), ("repro", "--json"),
                                          ("doctor", "--json")])
@pytest.mark.parametrize("where", ["through_a_file", "a_directory"])
def test_an_unwritable_output_is_refused_before_measuring(tmp_path, capsys, monkeypatch, command, flag, where):
    from jaggedperf.lab import runner
    from jaggedperf.lab.doctor import gather

    def measured(*_a, **_k):
        raise AssertionError("measured before checking the output")

    monkeypatch.setattr(runner.CellRunner, "__call__", measured)
    monkeypatch.setattr(gather, "gather_all", measured)
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "out.json" if where == "through_a_file" else tmp_path
    argv = {"run": ["run", *SMALL, "--impls", "segment_reduce", "--modes", "eager"],
            "repro": ["repro", "--modes", "eager"], "doctor": ["doctor", "--impls", "sum_padded"]}[command]
    assert main([*argv, "--device", "cpu", flag, str(path)]) == 2
    captured = capsys.readouterr()
    reason = "a folder on its path is a file" if where == "through_a_file" else "is a directory"
    assert captured.err.startswith(f"jaggedperf: error: cannot write {path}: ") and reason in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


# --- tritonbench's flags, plugins, 80 columns -------------------------------------------------------


def test_run_with_tritonbench_flags_prints_csv_or_the_chosen_metrics_and_the_baseline(capsys):
    argv = ["run", *SMALL, "--only", "sum_padded,segment_reduce", "--mode", "eager", "--device", "cpu",
            "--baseline", "sum_padded"]
    assert main([*argv, "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("op,implementation,mode,") and len(lines) == 3  # header + 2 cells, no table
    assert main([*argv, "--metrics", "latency,accuracy"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "wall µs" in line and "mode" in line)
    assert "rel err" in header and "device µs" not in header and "speedup" not in header
    baseline = out[out.index("speedup vs sum_padded"):]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in baseline.splitlines() if line.startswith("│")]
    assert [row[1] for row in rows] == ["sum_padded", "segment_reduce"]
    assert rows[0][3] == "1.00×" and rows[1][3].endswith("×")  # the baseline against itself, and the other


def test_list_and_run_take_plugins_like_sweep(capsys, sweep_plugin):
    assert main(["list", "--plugin", sweep_plugin]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "test_raises" in line)
    assert sweep_plugin in row and "built-in" in next(line for line in out.splitlines() if "sum_padded" in line)
    assert main(["run", *SMALL, "--plugin", sweep_plugin, "--impls", "test_raises", "--modes", "eager",
                 "--device", "cpu"]) == 0
    assert "error: test_raises" in capsys.readouterr().out


def test_tables_at_80_columns_keep_every_name_whole_and_distinct():
    from rich.console import Console

    from jaggedperf.cli.lab import show
    from jaggedperf.lab import modes
    from jaggedperf.lab.results import tables
    from dataclasses import replace

    from helpers.fake_results import make_results

    assert len({tables.short_mode(m) for m in modes.MODES}) == len(modes.MODES)
    results = [replace(r, implementation="jaggedperf_njt") if r.implementation == "njt_mean" else r
               for r in make_results(modes=("eager", "compile:max-autotune-no-cudagraphs",
                                            "jagged-compile:max-autotune-no-cudagraphs"))
               if r.implementation in ("jaggedperf", "njt_mean")]
    for table in (tables.seed_table(results, "compile:max-autotune-no-cudagraphs"),
                  tables.cells_table(results), tables.baseline_table(results, "jaggedperf")):
        console = Console(width=80, record=True)
        show(console, table)
        text = console.export_text()
        assert max(map(len, text.splitlines())) <= 80
        rows = [line.replace("│", " ").split() for line in text.splitlines()]
        rows = [row for row in rows if row and row[0].startswith("B") and "-M" in row[0]]
        assert rows and {row[1] for row in rows} == {"jaggedperf", "jaggedperf_njt"}  # whole, never cut alike
        assert all(not cell.endswith("…") for row in rows for cell in row)


def test_the_seed_table_on_the_cpu_drops_the_device_columns_and_keeps_the_compile_time():
    # A CPU run has no device time, host split or kernel count: those columns would be all "—", and at 160 columns
    # they pushed out the compile time, which says what a cut compile took (`> 30`).
    from dataclasses import replace

    from rich.console import Console

    from helpers.fake_results import make_record
    from jaggedperf.cli.lab import show
    from jaggedperf.lab.result import ERROR
    from jaggedperf.lab.results import tables

    seed = "compile:max-autotune-no-cudagraphs"
    cpu = [replace(r, device="cpu", device_time=None, host_us=None, kernels_per_call=None)
           for r in make_record().results if r.mode in ("eager", seed)][:12]
    cut = next(i for i, r in enumerate(cpu) if r.mode == seed)
    cpu[cut] = replace(cpu[cut], status=ERROR, reason="timed out after 30 s", wall=None, speedup_vs_eager=None)
    console = Console(width=160, record=True)
    show(console, tables.seed_table(cpu, seed))
    text = console.export_text()
    header = next(line for line in text.splitlines() if "implementation" in line)
    assert "compile s" in header and "dev µs" not in header and "kernels" not in header and "host" not in header
    assert "cut > 30 s" in text and "> 30 " in text.replace("cut > 30 s", "") and "left out" not in text
