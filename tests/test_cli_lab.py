import json

import pytest

from jaggedperf.cli import main

SMALL = ["--B", "8", "--M", "3", "--seqlen", "20", "--sparsity", "0.3", "--warmup", "1", "--iters", "3"]


def test_list_shows_implementations_and_modes(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("unbind_mean", "nanmean_padded", "sum_padded", "njt_mean", "segment_reduce",
                 "compile:max-autotune-no-cudagraphs", "graph"):
        assert name in out


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
    code = main(["repro", "--modes", "eager", "--impls", "sum_padded,nanmean_padded", "--warmup", "1", "--iters", "2"])
    assert code == 0
    captured = capsys.readouterr()
    assert "B512-M64-L100-s0.1" in captured.out and "B512-M64-L500-s0.75" in captured.out
    assert "CPU" in captured.err


def test_an_interrupted_run_keeps_the_finished_cells_in_its_json(tmp_path, monkeypatch):
    from jaggedperf.lab import runner
    from jaggedperf.lab.store import load_results

    real = runner.run_cell
    calls = []

    def interrupt_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_cell", interrupt_second)
    path = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt):
        main(["run", *SMALL, "--impls", "sum_padded,segment_reduce", "--modes", "eager", "--device", "cpu",
              "--json", str(path)])
    (kept,) = load_results(path).results
    assert kept.implementation == "sum_padded" and kept.status == "ok"
