import math

import pytest
import torch

from jaggedperf.impls import jagged_mean as builtin
from jaggedperf.impls.registry import Implementation, get_implementation, get_op
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import input_size, runner
from jaggedperf.lab.measure import correctness
from jaggedperf.lab.result import ERROR, OK, SKIPPED, WRONG

CPU = torch.device("cpu")
SMALL = Case(16, 4, 30, 0.3)


def quick(**kw):
    return runner.Options(device=CPU, warmup=1, iters=3, **kw)


@pytest.fixture
def extra_impls():
    """Register throw-away implementations of jagged_mean for one test."""
    impls = get_op("jagged_mean").implementations
    added = []

    def add(name, fn, **kw):
        impls[name] = Implementation("jagged_mean", name, fn, kw.pop("takes", "dense"), "test", **kw)
        added.append(name)

    yield add
    for name in added:
        del impls[name]


def test_plan_is_the_product_grouped_by_case():
    cells = runner.plan("jagged_mean", [SMALL, Case(8, 2, 10, 0.1)], ["sum_padded", "segment_reduce"], ["eager", "graph"])
    assert len(cells) == 8
    assert [c.case for c in cells[:4]] == [SMALL] * 4


@pytest.mark.parametrize("kind,bad,valid", [
    ("impls", ["nope"], "segment_reduce"),
    ("modes", ["compile:fast"], "compile:max-autotune-no-cudagraphs"),
])
def test_unknown_names_list_the_valid_ones(kind, bad, valid):
    impls, modes = (bad, ["eager"]) if kind == "impls" else (["sum_padded"], bad)
    with pytest.raises((KeyError, ValueError), match=valid):
        runner.plan("jagged_mean", [SMALL], impls, modes)


def test_every_builtin_implementation_is_correct_on_cpu_with_an_empty_sequence():
    case = Case(40, 3, 20, 0.5, "heavy")  # heavy: has empty sequences
    batch = make_batch(case)
    assert int((batch.lengths() == 0).sum()) > 0 or pytest.skip("draw has no empty sequence")
    op = get_op("jagged_mean")
    ref = op.reference(batch)
    for impl in op.implementations.values():
        ok, rel, reason = correctness.check_output(impl.fn(*impl.prepare(batch)), ref, "float32")
        assert ok, (impl.name, reason)


def test_run_records_ok_cells_with_wall_stats_and_speedups():
    cells = runner.plan("jagged_mean", [SMALL], ["sum_padded", "segment_reduce"], ["eager", "compile:default"])
    record = runner.run(cells, quick())
    assert [r.status for r in record.results] == [OK] * 4
    for r in record.results:
        assert r.wall.n == 3 and r.wall.median_ms > 0 and r.compile_s > 0
        assert r.rel_error < 1e-5 and r.bytes_moved > 0
        assert r.device_time is None  # no device time on the CPU
        assert r.speedup_vs_eager == pytest.approx(
            record.results[[x.implementation for x in record.results].index(r.implementation)].wall.median_ms
            / r.wall.median_ms)
    assert record.environment["torch"] == torch.__version__
    assert record.environment["settings"] == quick().settings() and record.environment["settings"]["iters"] == 3


def test_a_raising_implementation_is_recorded_and_the_run_goes_on(extra_impls):
    def boom(values, offsets):
        raise RuntimeError("kaboom\nsecond line")

    extra_impls("boom", boom)
    record = runner.run(runner.plan("jagged_mean", [SMALL], ["boom", "segment_reduce"], ["eager"]), quick())
    boom_result, other = record.results
    assert boom_result.status == ERROR and "kaboom" in boom_result.reason and "second" not in boom_result.reason
    assert other.status == OK


def test_a_wrong_implementation_is_marked_and_not_timed(extra_impls):
    extra_impls("off_by_a_bit", lambda v, o: torch.segment_reduce(v, "mean", offsets=o, axis=0) * 1.01)
    (result,) = runner.run(runner.plan("jagged_mean", [SMALL], ["off_by_a_bit"], ["eager"]), quick()).results
    assert result.status == WRONG and result.wall is None
    assert result.rel_error == pytest.approx(0.01, rel=1e-3)


def test_an_out_of_memory_is_recorded_as_error(extra_impls):
    def oom(values, offsets):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 EiB")

    extra_impls("oom", oom)
    (result,) = runner.run(runner.plan("jagged_mean", [SMALL], ["oom"], ["eager"]), quick()).results
    assert result.status == ERROR and "out of memory" in result.reason


def test_byte_limit_skips_padded_implementations_with_the_reason():
    case = Case(64, 64, 1000, 0.9)  # padded: 64·1000·64·4 = 16.4 MB; values ≈ 1.6 MB
    record = runner.run(runner.plan("jagged_mean", [case], ["sum_padded", "segment_reduce"], ["eager"]),
                        quick(byte_limit=10**7))
    padded, plain = record.results
    assert padded.status == SKIPPED and "byte limit" in padded.reason
    assert plain.status == OK


def test_byte_limit_skips_a_whole_case_whose_values_are_too_large():
    (result,) = runner.run(runner.plan("jagged_mean", [Case(10**6, 1024, 10**4, 0.5)], ["segment_reduce"], ["eager"]),
                           quick()).results
    assert result.status == SKIPPED and "byte limit" in result.reason


def test_graph_mode_is_skipped_on_cpu():
    (result,) = runner.run(runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["graph"]), quick()).results
    assert result.status == SKIPPED and "CUDA" in result.reason


@pytest.mark.parametrize("out,reason", [
    (torch.zeros(2, 3), "NaN"),
    (torch.zeros(3, 3), "shape"),
    ("not a tensor", "tensor"),
])
def test_check_output_rejects(out, reason):
    ref = torch.tensor([[1.0, 2.0, 3.0], [math.nan] * 3], dtype=torch.float64)
    ok, _, why = correctness.check_output(out, ref, "float32")
    assert not ok and reason in why


def test_check_output_tolerance_depends_on_dtype():
    ref = torch.ones(4, 4, dtype=torch.float64)
    out = torch.full((4, 4), 1.004)
    assert not correctness.check_output(out, ref, "float32")[0]
    assert correctness.check_output(out.bfloat16(), ref, "bfloat16")[0]


def test_run_cell_runs_the_plain_twin_when_asked():
    batch, ref = runner.prepare_case("jagged_mean", SMALL, quick())
    cell = runner.Cell("jagged_mean", "sum_padded", "eager", SMALL)
    result = runner.run_cell(cell, batch, ref, quick(), None, plain=True)
    assert result.status == OK and result.extra["input_form"] == "plain" and result.wall.n == 3
    no_twin = runner.run_cell(runner.Cell("jagged_mean", "segment_reduce", "eager", SMALL), batch, ref, quick(), None,
                              plain=True)
    assert no_twin.status == SKIPPED and "no plain twin" in no_twin.reason


def test_a_case_over_the_byte_limit_is_skipped_before_its_batch_is_made():
    case = Case(16, 4, 30, 0.3)
    limit = case.values_nbytes() - 1
    assert input_size.input_too_large(case, limit) is not None and input_size.input_too_large(case, limit + 1) is None
    record = runner.run(runner.plan("jagged_mean", [case], ["segment_reduce"], ["eager"]), quick(byte_limit=limit))
    (r,) = record.results
    assert r.status == SKIPPED and r.reason.startswith("input: values would take")


# --- setup hooks ----------------------------------------------------------------------------------


def test_a_setup_hook_runs_once_before_its_implementations_first_cell_and_its_state_is_recorded(extra_impls):
    events = []

    def setup(device):
        events.append(("setup", device))
        return {"fake_setup": {"ready": True}}

    def hooked(values, offsets):
        events.append(("call",))
        return torch.segment_reduce(values, "mean", offsets=offsets, axis=0)

    extra_impls("hooked", hooked, setup=setup)
    other = runner.run(runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager"]), quick())
    assert events == [] and "fake_setup" not in other.environment  # only for the implementation that has it

    seen = []
    cases = [SMALL, Case(8, 2, 10, 0.1)]
    record = runner.run(runner.plan("jagged_mean", cases, ["segment_reduce", "hooked"], ["eager"]), quick(),
                        on_start=lambda cell: seen.append((cell.implementation, len(events))))
    assert [r.status for r in record.results] == [OK] * 4
    assert events[0] == ("setup", CPU) and events.count(events[0]) == 1  # once, before any call of it
    assert len(events) > 1 and all(e == ("call",) for e in events[1:])
    assert seen[:2] == [("segment_reduce", 0), ("hooked", 0)]  # not before the first cell of its own
    assert record.environment["fake_setup"] == {"ready": True}


def test_a_failing_setup_hook_fails_its_cells_once_and_the_run_goes_on(extra_impls):
    calls = []

    def setup(device):
        calls.append(device)
        raise RuntimeError("no library\nmore")

    extra_impls("needs_lib", lambda v, o: torch.segment_reduce(v, "mean", offsets=o, axis=0), setup=setup)
    extra_impls("needs_lib_too", lambda v, o: torch.segment_reduce(v, "mean", offsets=o, axis=0), setup=setup)
    cells = runner.plan("jagged_mean", [SMALL, Case(8, 2, 10, 0.1)], ["needs_lib", "segment_reduce", "needs_lib_too"],
                        ["eager"])
    results = runner.run(cells, quick()).results
    assert len(calls) == 1  # one hook, one device: called once, shared by both implementations
    assert [r.status for r in results] == [ERROR, OK, ERROR] * 2
    assert all(r.reason == "setup: RuntimeError: no library" for r in results if r.status == ERROR)


def test_our_implementations_build_the_native_launch_path_on_cuda_only(monkeypatch):
    assert get_implementation("jagged_mean", "jaggedperf").setup is builtin.native_launch
    assert get_implementation("jagged_mean", "jaggedperf_njt").setup is builtin.native_launch
    assert {n for n, i in get_op("jagged_mean").implementations.items() if i.setup} == {"jaggedperf", "jaggedperf_njt"}
    built = []

    def prepare():
        built.append(True)
        return {"status": "ready", "reason": None, "build_seconds": 1.5, "plans": 3}

    monkeypatch.setattr(builtin.ops, "prepare_native_launch", prepare)
    assert builtin.native_launch(CPU) is None and built == []
    assert builtin.native_launch(torch.device("cuda")) == {
        "native_launch": {"status": "ready", "reason": None, "build_seconds": 1.5}}
    assert built == [True]


def test_a_huge_case_is_judged_by_arithmetic_without_drawing_its_lengths(monkeypatch):
    import jaggedperf.inputs as inputs

    def no_drawing(case):
        raise AssertionError(f"drew the lengths of {case}")

    monkeypatch.setattr(inputs, "make_lengths", no_drawing)
    inputs._total_length.cache_clear()
    huge = input_size.input_too_large(Case(10**12, 3, 10, 0.5), runner.DEFAULT_BYTE_LIMIT)  # ≥ 2 rows each
    assert str(huge) == "values would take at least 24000.00 GB > byte limit 8.00 GB"
    empty_ok = input_size.input_too_large(Case(10**12, 3, 10, 0.5, "heavy"), runner.DEFAULT_BYTE_LIMIT)  # may be empty
    assert str(empty_ok) == "offsets would take 8000.00 GB > byte limit 8.00 GB"
    wide = input_size.input_too_large(Case(10**6, 4096, 1000, 0.5), runner.DEFAULT_BYTE_LIMIT)  # ≥ 200 rows each
    assert str(wide).startswith("values would take at least 3276.80 GB > byte limit")
    assert input_size.input_too_large(Case(10**6, 1, 100, 0.5, "heavy"), runner.DEFAULT_BYTE_LIMIT) is None  # ≤ 400 MB
    record = runner.run(runner.plan("jagged_mean", [Case(10**12, 3, 10, 0.5, "heavy")], ["segment_reduce"], ["eager"]),
                        quick())
    (r,) = record.results
    assert r.status == SKIPPED and r.reason == "input: offsets would take 8000.00 GB > byte limit 8.00 GB"


# --- implementations that change their inputs -----------------------------------------------------


def test_a_fingerprint_changes_with_any_element_and_with_order_not_with_a_copy():
    from jaggedperf.lab.fingerprint import CHUNK, STEP, fingerprint

    x = torch.randn(CHUNK + 1000, 3)  # spans two chunks
    base = int(fingerprint(x))
    assert int(fingerprint(x.clone())) == base
    for change in (lambda t: t.mul_(2), lambda t: t.copy_(t.flip(0)), lambda t: t[-1, -1].add_(1e-3),
                   lambda t: t[CHUNK + 5].copy_(t[3]), lambda t: t.view(-1)[0].copy_(-t.view(-1)[0])):
        y = x.clone()
        change(y)
        assert int(fingerprint(y)) != base
    bits = x.view(-1).view(torch.int32).to(torch.int64)  # the definition, in one piece: Σ bits_i·(i·STEP + 1)
    assert base == int((bits * (torch.arange(bits.numel()) * STEP + 1)).sum())
    zero = torch.zeros(4)
    assert int(fingerprint(zero)) != int(fingerprint(-zero))  # bit for bit: -0.0 is a change
    for t in (torch.arange(10), torch.ones(3, dtype=torch.bfloat16), torch.ones(2, dtype=torch.bool), torch.empty(0)):
        assert int(fingerprint(t)) == int(fingerprint(t.clone()))


@pytest.mark.parametrize("tensor", ["values", "offsets"])
def test_an_implementation_that_changes_its_inputs_is_the_error_and_the_next_is_measured_on_the_real_batch(
        extra_impls, tensor):
    def doubles(values, offsets):
        values.mul_(2)
        return torch.segment_reduce(values, "mean", offsets=offsets, axis=0)

    def shifts(values, offsets):
        out = torch.segment_reduce(values, "mean", offsets=offsets, axis=0)
        offsets[1:-1].add_(1)
        return out

    extra_impls("mutates", doubles if tensor == "values" else shifts)
    other = Case(8, 2, 10, 0.1)
    extra_impls("segment_reduce_after", get_implementation("jagged_mean", "segment_reduce").fn)
    cells = runner.plan("jagged_mean", [SMALL, other], ["segment_reduce", "mutates", "segment_reduce_after"], ["eager"])
    results = runner.run(cells, quick()).results
    assert [r.implementation for r in results[:3]] == ["segment_reduce", "mutates", "segment_reduce_after"]
    assert [r.status for r in results] == [OK, ERROR, OK] * 2
    bad = results[1]
    assert bad.reason.startswith(f"changed its inputs in place ({tensor}); an implementation must leave the batch")
    assert bad.extra["before_input_check"]["status"] in (OK, WRONG)
    assert results[2].rel_error < 1e-5 and results[2].wall is not None  # not "wrong": measured on the real input


def test_a_model_ops_weights_are_watched_too(extra_impls):
    from jaggedperf.lab.fingerprint import input_tensors

    batch, _ = runner.prepare_case("rec_block", Case(4, 8, 6, 0.3), quick())
    assert set(input_tensors("rec_block", batch)) == {"values", "offsets", "table", "w1", "b1", "w2", "b2"}


# --- samples, stability, threads ------------------------------------------------------------------

import json  # noqa: E402

from jaggedperf.lab.measure import stats, timing  # noqa: E402
from jaggedperf.lab.result import UNSTABLE, Result, recompute  # noqa: E402
from helpers.fake_clock import FakeClock, drifting, noisy, steady  # noqa: E402


def test_a_cell_whose_timing_never_settles_is_unstable_with_its_figures(monkeypatch):
    # eager settles on its second attempt; compiled drifts in all three (load arrived mid-measurement)
    script = noisy(1.0, n=30) + steady(1.0, n=30) + drifting(0.5, step_at=20, factor=1.4, n=30) * 3
    monkeypatch.setattr(timing, "clock", FakeClock(script))
    cells = runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager", "compile:default"])
    eager, compiled = runner.run(cells, runner.Options(device=CPU, warmup=1, iters=30)).results
    assert eager.status == OK and eager.stability.attempts == 2 and eager.stability.stable
    assert compiled.status == UNSTABLE and compiled.stability.attempts == 3
    assert "drifted" in compiled.reason and compiled.reason.endswith("after 3 attempts")
    assert compiled.wall.median_ms == pytest.approx(0.5, rel=0.05)  # its figures are kept...
    assert compiled.speedup_vs_eager is None  # ...but no speedup is drawn from them
    assert len(compiled.stability.history) == 3


def test_results_keep_their_samples_and_every_statistic_recomputes_from_them(monkeypatch):
    monkeypatch.setattr(timing, "clock", FakeClock(steady(0.25, jitter=0.05)))
    (r,) = runner.run(runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager"]),
                      runner.Options(device=CPU, warmup=1, iters=40)).results
    assert r.status == OK and r.wall.samples_ms().size == 40 and r.threads == 1
    d = json.loads(json.dumps(r.to_dict()))
    assert d["wall"]["samples"].startswith(stats.CODEC_PREFIX)
    back = Result.from_dict(d)
    fresh = recompute(Result.from_dict(d))
    for name in ("median_ms", "p20_ms", "p80_ms", "iqr_ms", "min_ms", "max_ms", "mean_ms", "n"):
        assert getattr(fresh.wall, name) == pytest.approx(getattr(back.wall, name), rel=1e-6), name
    assert fresh.stability.iqr_rel == pytest.approx(back.stability.iqr_rel, rel=1e-5)
    # a result edited to hold noise recomputes to unstable: the status follows the samples
    d["wall"]["samples"] = stats.encode(noisy(0.25, n=40))
    assert recompute(Result.from_dict(d)).status == UNSTABLE


def test_cpu_runs_set_and_record_the_thread_count():
    before = torch.get_num_threads()
    try:
        record = runner.run(runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager"]), quick(threads=2))
        assert record.results[0].threads == 2 and record.environment["threads"] == 2
        assert torch.get_num_threads() == 2
        with pytest.raises(ValueError):
            runner.set_threads(quick(threads=0))
    finally:
        torch.set_num_threads(before)


def test_every_timed_cell_records_the_hosts_speed_beside_it():
    (r,) = runner.run(runner.plan("jagged_mean", [SMALL], ["segment_reduce"], ["eager"]),
                      runner.Options(device=CPU, warmup=1, iters=20)).results
    before, after = r.extra["host_speed_us"]
    assert 0 < before < 1e4 and 0 < after < 1e4  # µs a one-element add: a real, positive figure
    assert Result.from_dict(json.loads(json.dumps(r.to_dict()))).extra["host_speed_us"] == [before, after]


def test_the_copy_probe_takes_a_smaller_buffer_when_the_gpu_is_full(monkeypatch):
    sizes = []

    def probe(device, nbytes):
        sizes.append(nbytes)
        if nbytes > 1 << 28:
            raise torch.OutOfMemoryError("CUDA out of memory (nine other workers)")
        return 4200.0

    monkeypatch.setattr(timing, "copy_bandwidth_gbps", probe)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert timing.measure_copy_bandwidth(torch.device("cuda")) == 4200.0 and sizes == [1 << 30, 1 << 28]
    monkeypatch.setattr(timing, "copy_bandwidth_gbps", lambda device, nbytes: 1 / 0)
    assert timing.measure_copy_bandwidth(torch.device("cuda")) is None  # any other failure: no figure
    assert timing.measure_copy_bandwidth(CPU) is None
