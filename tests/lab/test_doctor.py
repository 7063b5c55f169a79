import dataclasses
import json
import logging
import math

import pytest
import torch

from jaggedperf.cli import main
from jaggedperf.cli.doctor import doctor_cases
from jaggedperf.cli._args import SEED_CASES
from jaggedperf.inputs import Case, make_batch
from jaggedperf.impls.registry import get_op
from jaggedperf.lab import input_size, modes, runner
from jaggedperf.lab.measure import stats
from jaggedperf.lab.doctor import attribution, evidence, gather, probes, verdicts
from jaggedperf.lab.result import ERROR, OK, SKIPPED, UNSTABLE
from helpers.evidence import MODE, TINY, make_evidence, result as _result

CPU = torch.device("cpu")


def _assert_residual_is_what_the_parts_leave(d: verdicts.Diagnosis):
    """A diagnosis from real measurements: the residual is measured, the refusal follows the rules."""
    assert d.available and d.residual_measured
    assert sum(p.us for p in d.contributions) + d.residual_us == pytest.approx(d.delta_us, abs=1e-6)
    assert d.sums_ok == (abs(d.residual_us) <= 0.1 * abs(d.delta_us) + 1e-9)
    if not d.sums_ok and not attribution.on_par(d.delta_us, d.eager_wall_us):
        assert d.verdict.startswith("no verdict: the measured parts leave") and d.remedy is None


def _assert_adds_up_and_ordered(d: verdicts.Diagnosis):
    assert d.available and d.sums_ok
    assert sum(p.us for p in d.contributions) == pytest.approx(d.delta_us, abs=1e-6)
    assert abs(d.residual_us) < 1e-6
    sizes = [abs(p.us) for p in d.contributions]
    assert sizes == sorted(sizes, reverse=True)
    assert sum(p.share for p in d.contributions) == pytest.approx(1.0)


# --- padding model -------------------------------------------------------------------------------


def test_padding_model_arithmetic():
    m = evidence.padding_model(B=4, M=2, padded_len=10, total_len=25, itemsize=4, offsets_itemsize=8)
    assert m.must_move_bytes == 25 * 2 * 4 + 5 * 8 + 4 * 2 * 4 == 272
    assert m.padded_bytes == 4 * 10 * 2 * 4 == 320
    assert m.padded_path_bytes == 272 + 2 * 320
    assert m.waste_bytes == 640
    assert m.ratio == pytest.approx(912 / 272)
    assert m.pad_fraction == pytest.approx(1 - 25 / 40)


def test_padding_model_of_a_batch_agrees_with_the_ops_floor():
    batch = make_batch(Case(16, 3, 30, 0.4))
    m = evidence.batch_padding_model(batch, pads=True)
    assert m.must_move_bytes == get_op("jagged_mean").must_move_bytes(batch)
    assert m.padded_bytes == batch.padded_nbytes()
    assert m.total_len == batch.total_len and m.padded_len == batch.padded_len


def test_padding_model_at_the_first_seed_shape():
    m = evidence.padding_model(512, 64, 100, 46080, 4)
    assert m.padded_bytes == 13_107_200
    assert 3.0 < m.ratio < 3.4


# --- attribution and verdicts --------------------------------------------------------------------


def test_njt_host_overhead_dominates():
    # The team's H200 numbers at the first seed shape: eager 112 µs (4 kernels, 20 µs), compiled 290 µs (1 kernel, 6 µs).
    ev = make_evidence(eager=(112, 20), compiled=(290, 6), plain=(40, 6), njt_guard_us=30, plain_guard_us=4)
    d = verdicts.diagnose(ev)
    _assert_adds_up_and_ordered(d)
    assert d.delta_us == pytest.approx(178)
    parts = {p.key: p.us for p in d.contributions}
    assert parts[attribution.DEVICE] == pytest.approx(-14)
    assert parts[attribution.NJT] == pytest.approx(284 - 34)
    assert parts[attribution.GUARDS] == pytest.approx(4)
    assert parts[attribution.OTHER] == pytest.approx(178 + 14 - 250 - 4)
    assert d.contributions[0].key == attribution.NJT
    assert d.verdict.startswith("slower by 178 µs")
    assert "250 µs host overhead on NJT inputs" in d.verdict
    assert "its kernel is 14 µs faster than eager's" in d.verdict
    njt = next(p for p in d.contributions if p.key == attribution.NJT)
    assert "26.0 µs is extra guard evaluation" in njt.detail
    assert any("never repaid" in f for f in d.findings)


def test_slower_kernel_dominates():
    ev = make_evidence(eager=(100, 20), compiled=(180, 100), plain=(170, 100), njt_guard_us=3, plain_guard_us=2,
                       compiled_kernels=3)
    d = verdicts.diagnose(ev)
    _assert_adds_up_and_ordered(d)
    assert d.contributions[0].key == attribution.DEVICE and d.contributions[0].us == pytest.approx(80)
    assert d.verdict.startswith("slower by 80 µs")
    assert "its kernels are 80 µs slower than eager's" in d.verdict
    assert "NJT" not in d.verdict.split(":")[1].split(";")[0]


def test_compiled_faster_repays_its_compile_in_a_finite_number_of_calls():
    ev = make_evidence(eager=(500, 450), compiled=(300, 260), plain=(290, 260), njt_guard_us=8, plain_guard_us=2,
                       compile_s=2.0)
    d = verdicts.diagnose(ev)
    _assert_adds_up_and_ordered(d)
    assert ev.compile_cost.saving_us == pytest.approx(200)
    assert ev.compile_cost.repay_calls == 10_000 and ev.compile_cost.repay == "after 10000 calls"
    assert d.verdict.startswith("faster by 200 µs")
    assert "its kernel is 190 µs faster than eager's" in d.verdict
    assert "repaid after 10,000 calls" in d.verdict
    assert any("repaid after 10000 calls" in f for f in d.findings)


def test_wall_only_evidence_still_adds_up_and_says_so():
    ev = make_evidence(eager=(170, None), compiled=(200, None), plain=(100, None), njt_guard_us=47, plain_guard_us=3)
    d = verdicts.diagnose(ev)
    _assert_adds_up_and_ordered(d)
    assert d.wall_only and attribution.DEVICE not in {p.key for p in d.contributions}
    assert {p.key: p.us for p in d.contributions}[attribution.NJT] == pytest.approx(100)
    assert "wall only" in d.verdict and "100 µs overhead on NJT inputs" in d.verdict


def test_dense_implementation_has_no_njt_part_and_uses_its_own_guards():
    ev = make_evidence(eager=(50, 10), compiled=(60, 8), njt_guard_us=2, takes="dense")
    d = verdicts.diagnose(ev)
    _assert_adds_up_and_ordered(d)
    keys = {p.key for p in d.contributions}
    assert attribution.NJT not in keys and attribution.GUARDS in keys
    assert {p.key: p.us for p in d.contributions}[attribution.GUARDS] == pytest.approx(2)


def test_on_par_wording():
    d = verdicts.diagnose(make_evidence(eager=(100, 20), compiled=(101, 20), plain=(99, 20), njt_guard_us=3,
                                      plain_guard_us=2))
    assert d.verdict.startswith("on par with eager")


def test_cudagraph_findings_from_recorded_numbers():
    ev = make_evidence(eager=(112, 20), compiled=(290, 6), plain=(40, 6), njt_guard_us=30, plain_guard_us=4)
    ev.cudagraphs = evidence.CudaGraphs(True, None, "test", MODE, "compile:max-autotune",
                                        eager_graph=_result("graph", 25, 20),
                                        counterpart=_result("compile:max-autotune", 280, 6),
                                        skip_reason="cpu device (arg3_1)")
    line = next(f for f in verdicts.diagnose(ev).findings if f.startswith("CUDA graphs"))
    assert "compile:max-autotune 280 µs per call (vs compile:max-autotune-no-cudagraphs 290 µs)" in line
    assert "eager in a CUDA graph 25 µs (vs eager 112 µs)" in line
    assert "Inductor skipped cudagraphs in compile:max-autotune: cpu device (arg3_1)" in line


def _with_kernels(r, **copies):
    """``r`` with a profiled kernel list: one compute kernel and ``copies`` as {name: (calls, µs)} a call."""
    r.extra["kernels"] = [{"name": "triton_poi_fused_0", "calls_per_call": 1.0, "us_per_call": 4.0}] + [
        {"name": name, "calls_per_call": n, "us_per_call": us} for name, (n, us) in copies.items()]
    return r


@pytest.mark.parametrize("graphed_copies, plain_copies, said", [
    ({"Memcpy DtoD (Device -> Device)": (7.0, 25.4)}, {}, "7 device-to-device copies, 25.4 µs a call"),
    ({"Memcpy DtoD (Device -> Device)": (3.0, 9.0)}, {"Memcpy DtoD (Device -> Device)": (1.0, 2.0)},
     "2 device-to-device copies, 7.0 µs a call"),
    ({"Memcpy DtoD (Device -> Device)": (1.0, 2.0)}, {"Memcpy DtoD (Device -> Device)": (1.0, 2.0)}, None),
    ({"Memcpy HtoD (Host -> Device)": (2.0, 5.0)}, {}, None),
])
def test_cudagraph_input_copies_are_the_graph_modes_copies_beyond_the_same_program_without_graphs(
        graphed_copies, plain_copies, said):
    """The CUDA-graph tree copies each input not at a static address into its recorded buffer before a replay: the
    device-to-device memcpys the graph mode makes beyond the same program without graphs are those copies."""
    ev = make_evidence(eager=(69, 50), compiled=(138, 28), takes="dense")
    _with_kernels(ev.compiled, **plain_copies)
    ev.cudagraphs = evidence.CudaGraphs(True, None, "test", MODE, "compile:max-autotune",
                                        counterpart=_with_kernels(_result("compile:max-autotune", 144, 48),
                                                                  **graphed_copies))
    line = next(f for f in verdicts.diagnose(ev).findings if f.startswith("CUDA graphs"))
    if said is None:
        assert "copies its inputs" not in line
    else:
        assert f"compile:max-autotune copies its inputs into the graph's own buffers: {said}" in line
        assert f"that {MODE} does not make" in line and "mark_static_address" in line


def test_the_rec_blocks_recorded_cuda_graph_mode_copied_its_weights_every_call():
    """The rec block's doctor on an H100 (committed evidence, weights passed as plain arguments then): its CUDA-graph
    mode made 7 device-to-device copies a call (ids, offsets, table, two weights, two biases) that the same program
    without graphs did not."""
    from pathlib import Path

    from jaggedperf.lab.doctor import saved

    path = Path(__file__).resolve().parents[2] / "benchmarks/results/h100/doctor-rec-block.json.gz"
    run = saved.load_evidence(path)
    dense = [e for e in run.evidence if e.implementation == "jaggedperf" and e.mode == MODE]
    assert dense
    for e in dense:
        line = next(f for f in verdicts.diagnose(e).findings if f.startswith("CUDA graphs"))
        assert "7 device-to-device copies" in line, line


def test_kernel_and_padding_findings_from_recorded_numbers():
    ev = make_evidence(eager=(112, 20), compiled=(290, 6), plain=(40, 6), njt_guard_us=30, plain_guard_us=4)
    must = ev.jagged.must_move_bytes
    ev.eager.extra["kernels"] = [{"name": "pad_kernel", "calls_per_call": 1.0, "us_per_call": 12.0},
                                 {"name": "reduce_kernel", "calls_per_call": 1.0, "us_per_call": 8.0}]
    ev.compiled.extra["kernels"] = [{"name": "triton_red_fused_div_sum_0", "calls_per_call": 1.0, "us_per_call": 6.0}]
    ev.kernels = evidence.Kernels(True, None, "test", 4000.0, must,
                                  evidence.kernel_infos(ev.eager, must, 4000.0),
                                  evidence.kernel_infos(ev.compiled, must, 4000.0), [], 4, 1, None,
                                  ["triton_red_fused_div_sum_0"])
    assert ev.kernels.compiled[0].inductor and not ev.kernels.eager[0].inductor
    assert ev.kernels.compiled[0].gbps == pytest.approx(must / 6e-6 / 1e9)
    assert ev.kernels.compiled[0].pct_of_copy == pytest.approx(100 * must / 6e-6 / 1e9 / 4000)
    found = verdicts.diagnose(ev).findings
    kline = next(f for f in found if f.startswith("kernels per call"))
    assert "eager 4 (20.0 µs" in kline and "compiled 1 (6.0 µs" in kline and "Inductor generated 1" in kline
    pline = next(f for f in found if f.startswith("padding"))
    assert "does not materialise the padded tensor" in pline  # 38 MB in 6 µs would need > 4000 GB/s


def test_a_failed_cell_cannot_be_attributed():
    ev = make_evidence(eager=(100, 20), compiled=(200, 10), plain=(50, 10), njt_guard_us=3, plain_guard_us=1)
    ev.compiled = _result(MODE, 0, status=ERROR)
    d = verdicts.diagnose(ev)
    assert not d.available and d.verdict.startswith("cannot attribute") and "boom" in d.verdict


def test_check_sum_flags_parts_that_miss_delta():
    parts = [attribution.Contribution("a", "a", 50.0, None, ""), attribution.Contribution("b", "b", 30.0, None, "")]
    total, residual, ok = attribution.check_sum(100.0, parts)
    assert (total, residual, ok) == (80.0, 20.0, False)
    assert attribution.check_sum(100.0, parts + [attribution.Contribution("c", "c", 15.0, None, "")])[2]


def test_compile_cost_never_and_unknown():
    e, c = _result("eager", 100, 20), _result(MODE, 150, 10, compile_s=3.0)
    assert evidence.compile_cost(e, c).repay == "never" and evidence.compile_cost(e, c).repay_calls is None
    c.compile_s = None
    assert evidence.compile_cost(e, c).repay == "unknown"


def test_doctor_record_serialises_every_section():
    ev = make_evidence(eager=(112, 20), compiled=(290, 6), plain=(40, 6), njt_guard_us=30, plain_guard_us=4)
    record = verdicts.DoctorRecord({"torch": "x"}, None, [ev], [verdicts.diagnose(ev)])
    data = json.loads(json.dumps(record.to_dict()))
    cell = data["cells"][0]
    for section in ("host", "input_form", "kernels", "jagged", "cudagraphs", "compile_cost"):
        assert section in cell["evidence"]
    assert cell["diagnosis"]["contributions"][0]["key"] == attribution.NJT


# --- Dynamo counters, guards, cudagraph messages (real torch) ------------------------------------


def _breaks(x):
    y = x + 1
    torch._dynamo.graph_break()
    return y * 2


def _scaled(x, n):
    return x * n


def test_watch_dynamo_counts_a_forced_graph_break():
    torch._dynamo.reset()
    with probes.watch_dynamo() as stats:
        torch.compile(_breaks, backend="eager")(torch.randn(4))
    assert stats.available
    assert stats.graph_breaks >= 1 and stats.graphs == 2 and stats.frames == 2
    assert any("graph_break" in r for r in stats.break_reasons)
    assert stats.recompiles == 0


def test_watch_dynamo_counts_a_recompile_and_its_reason():
    torch._dynamo.reset()
    compiled = torch.compile(_scaled, backend="eager")
    x = torch.randn(4)
    with probes.watch_dynamo() as stats:
        compiled(x, 2)
        compiled(x, 3)  # a new int constant: Dynamo recompiles (then treats n as dynamic)
    assert stats.recompiles >= 1 and stats.graph_breaks == 0
    assert stats.recompile_reasons and "n" in stats.recompile_reasons[0]
    cost = probes.guard_cost(_scaled, (x, 3))
    assert cost.available and cost.cache_entries >= 2


def test_guard_cost_counts_and_times_the_guards_of_the_hit_entry():
    torch._dynamo.reset()
    x = torch.randn(8)
    torch.compile(_scaled, backend="eager")(x, 2)
    cost = probes.guard_cost(_scaled, (x, 2), repeats=3, number=20)
    assert cost.available and cost.cache_entries == 1 and cost.entry_index == 0
    assert cost.guards > 0 and cost.kinds.get("TENSOR_MATCH", 0) >= 1
    assert 0 < cost.check_us < 10_000
    assert cost.slowest and all(g.us >= 0 for g in cost.slowest)
    torch._dynamo.reset()
    missing = probes.guard_cost(_scaled, (x, 2))
    assert not missing.available and "no cache entry" in missing.reason


def test_catch_cudagraph_messages_gets_inductors_skip_reason_and_restores_the_loggers():
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    loggers = probes._cudagraph_loggers()
    assert loggers, "no Inductor cudagraph/perf_hints logger found"
    before = [(lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
    with probes.catch_cudagraph_messages() as messages:
        log_cudagraph_skip_and_bump_counter("skipping cudagraphs due to a test reason")
        logging.getLogger("torch._inductor").warning("unrelated")
    assert messages == ["skipping cudagraphs due to a test reason"]
    assert probes.skip_reason(messages) == "a test reason"
    assert probes.skip_reason(["cudagraphs fine"]) is None
    assert [(lg.level, lg.propagate, list(lg.handlers)) for lg in loggers] == before


# --- the remedy: jaggedperf.compile, measured -----------------------------------------------------


def test_verdict_recommends_the_boundary_with_its_numbers_when_njt_host_work_is_the_slowdown():
    ev = make_evidence(eager=(112, 20), compiled=(290, 6), plain=(40, 6), njt_guard_us=30, plain_guard_us=4,
                       boundary=(45, 6))
    d = verdicts.diagnose(ev)
    fix = ("compile it on its components: jaggedperf.compile(fn, mode='max-autotune-no-cudagraphs') — 45 µs a call "
           "instead of 290 (2.5× eager)")
    assert d.remedy == fix and d.verdict.endswith("; " + fix)
    assert d.verdict.startswith("slower by 178 µs") and "250 µs host overhead on NJT inputs" in d.verdict
    line = next(f for f in d.findings if f.startswith("boundary:"))
    assert line == ("boundary: jagged-compile:max-autotune-no-cudagraphs (jaggedperf.compile, "
                    "mode='max-autotune-no-cudagraphs') 45 µs per call (vs compile:max-autotune-no-cudagraphs 290 µs, "
                    "eager 112 µs)")


@pytest.mark.parametrize("why,kwargs", [
    ("the kernels are the slowdown", dict(eager=(50, 20), compiled=(300, 250), plain=(290, 250), boundary=(280, 250))),
    ("the boundary is no faster", dict(eager=(112, 20), compiled=(290, 6), plain=(40, 6), boundary=(295, 6))),
    ("compiled is faster than eager", dict(eager=(400, 300), compiled=(200, 150), plain=(180, 150), boundary=(170, 150))),
    ("the boundary was not measured", dict(eager=(112, 20), compiled=(290, 6), plain=(40, 6))),
])
def test_no_recommendation_when_the_boundary_is_not_the_remedy(why, kwargs):
    d = verdicts.diagnose(make_evidence(**kwargs))
    assert d.remedy is None and "jaggedperf.compile(fn" not in d.verdict, why


def test_wall_only_recommendation_on_the_cpu_numbers():
    ev = make_evidence(eager=(300, None), compiled=(900, None), plain=(350, None), boundary=(320, None))
    d = verdicts.diagnose(ev)
    assert d.remedy.endswith("— 320 µs a call instead of 900 (0.9× eager)")


# --- gathering on the CPU ------------------------------------------------------------------------


def test_gather_a_dense_implementation_on_cpu():
    case = Case(8, 3, 12, 0.3)
    opts = runner.Options(device=CPU, warmup=1, iters=3)
    batch, ref = runner.prepare_case("jagged_mean", case, opts)
    ev = gather.gather("jagged_mean", "segment_reduce", "compile:default", case, batch, ref, opts, None)
    assert ev.eager.status == OK and ev.compiled.status == OK
    assert not ev.input_form.available and "already takes" in ev.input_form.reason
    assert not ev.kernels.available and "needs CUDA" in ev.kernels.reason
    assert not ev.cudagraphs.available and "needs CUDA" in ev.cudagraphs.reason
    assert not ev.host.device_time and ev.host.compiled_host_us == pytest.approx(ev.compiled.wall.median_ms * 1e3)
    assert ev.jagged is not None and not ev.jagged.pads
    assert not ev.boundary.available and ev.boundary.result is None and "not applicable" in ev.boundary.reason
    assert ev.compiled.host_call is not None and ev.host.compiled_call_us == ev.compiled.host_call.median_ms * 1e3
    _assert_residual_is_what_the_parts_leave(verdicts.diagnose(ev))


def test_gather_skips_the_extra_compiles_over_the_compile_budget():
    case = Case(8, 3, 12, 0.3)
    opts = runner.Options(device=CPU, warmup=1, iters=3)
    batch, ref = runner.prepare_case("jagged_mean", case, opts)
    ev = gather.gather("jagged_mean", "sum_padded", "compile:default", case, batch, ref, opts, None,
                         compile_budget_s=0.0)
    assert ev.compiled.status == OK and ev.input_form.plain is None
    assert not ev.input_form.available and "compile budget" in ev.input_form.reason
    assert not ev.boundary.available and ev.boundary.result is None and "compile budget" in ev.boundary.reason
    assert set(ev.stage_s) >= {"eager", "compile:default", "guards"} and all(v >= 0 for v in ev.stage_s.values())
    d = verdicts.diagnose(ev)
    _assert_residual_is_what_the_parts_leave(d)
    assert attribution.NJT not in {p.key for p in d.contributions}
    assert {p.key for p in d.contributions} >= {attribution.GUARDS, attribution.OTHER}


def test_gather_all_records_a_case_over_the_byte_limit_as_skipped_with_the_reason():
    big, small = Case(8, 4, 20, 0.5), Case(2, 1, 3, 0.5)
    opts = runner.Options(device=CPU, warmup=1, iters=2, byte_limit=small.values_nbytes())
    assert input_size.input_too_large(big, opts.byte_limit) is not None
    run = gather.gather_all("jagged_mean", [big], ["segment_reduce", "sum_padded"], MODE, opts)
    assert [(e.implementation, e.case) for e in run.evidence] == [("segment_reduce", big), ("sum_padded", big)]
    for ev in run.evidence:
        assert ev.eager.status == SKIPPED and ev.compiled.status == SKIPPED
        assert ev.eager.reason.startswith("input: values would take") and "byte limit" in ev.eager.reason
        assert not ev.host.device_time and ev.host.reason == ev.eager.reason and not ev.kernels.available
        assert not ev.input_form.available and ev.notes == [ev.eager.reason]
        d = verdicts.diagnose(ev)
        assert not d.available and d.verdict.startswith("cannot attribute: ") and "skipped" in d.verdict


def test_gather_refuses_a_mode_that_is_not_compiled():
    case = Case(4, 2, 5, 0.2)
    opts = runner.Options(device=CPU, warmup=1, iters=2)
    batch, ref = runner.prepare_case("jagged_mean", case, opts)
    with pytest.raises(ValueError, match="compiled mode"):
        gather.gather("jagged_mean", "sum_padded", "eager", case, batch, ref, opts, None)


# --- CLI -----------------------------------------------------------------------------------------



def test_cli_doctor_records_a_case_over_the_byte_limit_as_skipped(tmp_path, capsys):
    path = tmp_path / "doctor.json"
    assert main(["doctor", *TINY, "--byte-limit", "100B", "--json", str(path)]) == 0
    assert "cannot attribute" in capsys.readouterr().out
    (cell,) = json.loads(path.read_text())["cells"]
    assert cell["evidence"]["eager"]["status"] == SKIPPED and cell["evidence"]["compiled"]["status"] == SKIPPED
    assert "byte limit" in cell["evidence"]["eager"]["reason"] and not cell["diagnosis"]["available"]


def test_cli_doctor_end_to_end_on_cpu(tmp_path, capsys):
    path = tmp_path / "doctor.json"
    assert main(["doctor", *TINY, "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "verdict:" in out and "B8-M4-L20-s0.5" in out and "NestedTensor input overhead" in out
    data = json.loads(path.read_text())
    assert data["environment"]["torch"] == torch.__version__
    (cell,) = data["cells"]
    ev, diagnosis = cell["evidence"], cell["diagnosis"]
    assert ev["implementation"] == "sum_padded" and ev["mode"] == MODE and ev["case_label"] == "B8-M4-L20-s0.5"
    for section in ("host", "input_form", "kernels", "jagged", "cudagraphs", "compile_cost"):
        assert ev[section] is not None, section
    # the plain twin is what "input form" compiled
    assert ev["input_form"]["available"] and ev["input_form"]["plain"]["extra"]["input_form"] == "plain"
    assert ev["input_form"]["guards"]["function"] == "sum_padded_plain"
    assert ev["host"]["guards"]["function"] == "sum_padded" and ev["host"]["guards"]["guards"] > 0
    assert ev["host"]["dynamo"]["graphs"] >= 1 and ev["host"]["dynamo"]["recompiles"] == 0
    # GPU-only sections: unavailable, with the reason
    for section in ("kernels", "cudagraphs"):
        assert ev[section]["available"] is False and "needs CUDA" in ev[section]["reason"]
    assert ev["host"]["device_time"] is False and "needs CUDA" in ev["host"]["reason"]
    assert ev["jagged"]["pads"] and ev["jagged"]["waste_bytes"] > 0
    assert ev["compile_cost"]["compile_s"] > 0
    # the boundary: the same implementation through jaggedperf.compile in the same torch mode, measured
    twin = modes.boundary_twin(MODE)
    boundary = ev["boundary"]
    assert boundary["available"] and boundary["mode"] == twin and boundary["torch_mode"] == modes.torch_mode(MODE)
    assert boundary["result"]["mode"] == twin and boundary["result"]["status"] == OK
    assert boundary["result"]["wall"]["n"] == 5 and boundary["result"]["rel_error"] < 1e-5
    assert twin in ev["stage_s"] and f"{twin} (the boundary)" in out
    assert any(f.startswith(f"boundary: {twin}") for f in diagnosis["findings"])
    assert diagnosis["remedy"] is None or diagnosis["verdict"].endswith(diagnosis["remedy"])
    assert diagnosis["available"] and diagnosis["residual_measured"]
    assert math.isclose(sum(p["us"] for p in diagnosis["contributions"]) + diagnosis["residual_us"],
                        diagnosis["delta_us"], abs_tol=1e-6)
    assert diagnosis["sums_ok"] == (abs(diagnosis["residual_us"]) <= 0.1 * abs(diagnosis["delta_us"]) + 1e-9)
    if diagnosis["refused"]:
        direct = f"; {verdicts.DIRECT} {diagnosis['remedy']}" if diagnosis["remedy"] else ""
        assert diagnosis["verdict"] == f"no verdict: {diagnosis['refused']}{direct}"
    assert "residual (unattributed)" in out


def test_cli_doctor_needs_all_case_flags_or_none(capsys):
    assert main(["doctor", "--B", "8", "--device", "cpu"]) == 2
    assert "--seqlen" in capsys.readouterr().err


def test_doctor_defaults_to_the_seed_shapes():
    from jaggedperf.cli import build_parser

    args = build_parser().parse_args(["doctor"])
    assert [(c.B, c.M, c.seqlen, c.sparsity) for c in doctor_cases(args)] == [
        (c.B, c.M, c.seqlen, c.sparsity) for c in SEED_CASES]
    assert args.impls is None and args.modes == [MODE] and (args.warmup, args.iters) == (50, 200)


# --- measured parts, a real residual, refusals -----------------------------------------------------


def test_host_timer_parts_leave_a_real_residual():
    # wall loop: eager 100, compiled 400 (Δ 300); host timer: eager 95, compiled 390, plain 150; guards 20
    ev = make_evidence(eager=(100, None), compiled=(400, None), plain=(160, None), plain_guard_us=20,
                       njt_guard_us=60, host_calls=(95, 390, 150))
    d = verdicts.diagnose(ev)
    parts = {p.key: p.us for p in d.contributions}
    assert parts == {attribution.NJT: 240.0, attribution.GUARDS: 20.0, attribution.OTHER: 35.0}
    assert d.residual_measured and d.residual_us == pytest.approx(5.0) and d.sums_ok and d.refused is None
    assert d.verdict.startswith("slower by 300 µs") and "240 µs overhead on NJT inputs" in d.verdict
    assert "measured" not in " ".join(d.findings) or "residual is zero" not in " ".join(d.findings)


def test_a_residual_past_10_percent_of_delta_refuses_the_verdict_and_says_why():
    # the case: the wall loop saw 7401 µs (a preempted run), the host timer 86–89 µs: nothing explains it
    ev = make_evidence(eager=(57, None), compiled=(7401, None), plain=(80, None), plain_guard_us=5,
                       njt_guard_us=8, host_calls=(56, 89, 80))
    d = verdicts.diagnose(ev)
    assert d.available and not d.sums_ok and d.residual_us == pytest.approx(7401 - 57 - (89 - 56))
    assert d.refused.startswith("the measured parts leave +7311.0 µs of Δ +7344.0 µs unattributed (100% > 10%)")
    assert d.verdict == f"no verdict: {d.refused}" and d.remedy is None
    assert "overhead on NJT inputs" not in d.verdict


def _with_spreads(ev, rel=0.05):
    # p20/p80 at ±rel of each wall median (make_evidence's walls have no quantiles)
    for r in (ev.eager, ev.compiled, ev.boundary.result):
        m = r.wall.median_ms
        r.wall = dataclasses.replace(r.wall, p20_ms=m * (1 - rel), p80_ms=m * (1 + rel))
    return ev


def test_a_refused_attribution_still_recommends_a_boundary_that_is_faster_beyond_both_spreads():
    # the H200's case: the host timer saw eager at 190 µs against its 122 µs wall loop, so the parts leave 29% of
    # Δ unexplained; the boundary (122 µs) against the compiled call (480 µs) needs no attribution
    ev = _with_spreads(make_evidence(eager=(122, 32), compiled=(480, 25), plain=(99, 25), plain_guard_us=4,
                                     njt_guard_us=152, host_calls=(190, 445, 76), boundary=(122, 25)))
    d = verdicts.diagnose(ev)
    assert d.refused.startswith("the measured parts leave")
    fix = ("compile it on its components: jaggedperf.compile(fn, mode='max-autotune-no-cudagraphs') — 122 µs a call "
           "instead of 480 (1.0× eager)")
    assert d.remedy == fix and d.verdict == f"no verdict: {d.refused}; {verdicts.DIRECT} {fix}"


@pytest.mark.parametrize("why,change", [
    ("the spreads overlap", dict(boundary_p80=500)),
    ("the boundary's timing did not settle", dict(boundary_status=UNSTABLE)),
])
def test_a_refused_attribution_recommends_nothing_the_measurements_cannot_separate(why, change):
    ev = _with_spreads(make_evidence(eager=(122, 32), compiled=(480, 25), plain=(99, 25), plain_guard_us=4,
                                     njt_guard_us=152, host_calls=(190, 445, 76), boundary=(122, 25)))
    r = ev.boundary.result
    if "boundary_p80" in change:
        r.wall = dataclasses.replace(r.wall, p80_ms=change["boundary_p80"] / 1e3)
    if "boundary_status" in change:
        r.status = change["boundary_status"]
    d = verdicts.diagnose(ev)
    assert d.refused and d.remedy is None and d.verdict == f"no verdict: {d.refused}", why


def test_unstable_inputs_refuse_the_verdict_but_keep_the_parts():
    ev = make_evidence(eager=(100, None), compiled=(400, None), plain=(160, None), plain_guard_us=20,
                       host_calls=(95, 390, 150))
    ev.compiled.status, ev.compiled.reason = UNSTABLE, "wall IQR is 85% of the median (> 10%); after 3 attempts"
    d = verdicts.diagnose(ev)
    assert d.available and d.contributions and d.refused.startswith("the timing it would rest on is unstable")
    assert f"{MODE}: wall IQR is 85%" in d.refused and d.verdict.startswith("no verdict:")
    ev.input_form.plain.status, ev.input_form.plain.reason = UNSTABLE, "wall drifted"
    ev.compiled.status = OK
    assert "(plain twin): wall drifted" in verdicts.diagnose(ev).refused


def _overlapped_cell(waits):
    # a GPU cell as the H200 shows it: eager's four kernels (60 µs) run while its host still launches (150 µs),
    # so its wall (162) waits only for the last one (12 µs); the compiled call's one kernel (11 µs), launched
    # last, is waited for whole (16 µs with the sync); Δ 223 µs
    return make_evidence(eager=(162, 60), compiled=(385, 11), plain=(140, 11), plain_guard_us=20, njt_guard_us=60,
                         host_calls=(150, 369, 120), waits=waits)


def test_the_device_part_is_the_wait_at_the_sync_so_overlapped_kernels_do_not_leave_a_residual():
    d = verdicts.diagnose(_overlapped_cell(waits=(12, 16)))
    parts = {p.key: p.us for p in d.contributions}
    assert parts == {attribution.DEVICE: 4.0, attribution.NJT: 249.0, attribution.GUARDS: 20.0,
                     attribution.OTHER: -50.0}
    assert d.residual_measured and abs(d.residual_us) < 1e-9 and d.sums_ok and d.refused is None
    device = next(p for p in d.contributions if p.key == attribution.DEVICE)
    assert device.label == attribution.WAIT_LABEL and "device time 11.0 µs" in device.detail
    # the verdict still says what the kernels did, beside what the call waited for
    assert "4 µs more waiting for the device than eager (its kernel is 49 µs faster than eager's)" in d.verdict


def test_without_the_waits_the_device_time_difference_leaves_the_overlap_unattributed():
    d = verdicts.diagnose(_overlapped_cell(waits=None))
    device = next(p for p in d.contributions if p.key == attribution.DEVICE)
    assert device.us == -49.0 and device.label != attribution.WAIT_LABEL
    assert d.residual_us == pytest.approx(223 - (249 + 20 - 50 - 49)) and not d.sums_ok
    assert d.refused.startswith("the measured parts leave")


def test_on_par_cells_are_not_refused_for_a_residual_of_nothing():
    ev = make_evidence(eager=(100, None), compiled=(100.5, None), host_calls=(99, 101, None))
    d = verdicts.diagnose(ev)
    assert not d.sums_ok and d.refused is None and d.verdict.startswith("on par")


def test_evidence_without_the_host_timer_says_its_residual_checks_nothing():
    d = verdicts.diagnose(make_evidence(eager=(112, 20), compiled=(290, 6), plain=(40, 6), njt_guard_us=30,
                                           plain_guard_us=4))
    assert d.residual_measured is False and abs(d.residual_us) < 1e-9
    assert any("zero by construction" in f for f in d.findings)


def test_run_and_doctor_agree_on_the_same_cell_within_their_spreads(monkeypatch):
    from jaggedperf.lab.measure import timing
    from helpers.fake_clock import FakeClock, steady

    # every timed call, in run and in doctor alike, takes 300 µs ± 5%: the same cell must read the same
    monkeypatch.setattr(timing, "clock", FakeClock(steady(0.3, jitter=0.05)))
    case = Case(8, 3, 12, 0.3)
    opts = runner.Options(device=CPU, warmup=1, iters=40)
    (ran,) = runner.run(runner.plan("jagged_mean", [case], ["segment_reduce"], ["compile:default"]), opts).results
    batch, ref = runner.prepare_case("jagged_mean", case, opts)
    ev = gather.gather("jagged_mean", "segment_reduce", "compile:default", case, batch, ref, opts, None)
    doc = ev.compiled
    assert ran.status == OK and doc.status == OK and ran.threads == doc.threads == 1
    assert stats.intervals_overlap((ran.wall.p20_ms, ran.wall.p80_ms), (doc.wall.p20_ms, doc.wall.p80_ms))
    assert doc.wall.p20_ms <= ran.wall.median_ms <= doc.wall.p80_ms
    assert ran.wall.p20_ms <= doc.wall.median_ms <= ran.wall.p80_ms
    # the doctor's host timer measured the call on its own; on the CPU it reads the same as the wall
    assert doc.host_call.median_ms == pytest.approx(doc.wall.median_ms, rel=0.05)
    d = verdicts.diagnose(ev)
    assert d.residual_measured and abs(d.residual_us) <= 0.1 * max(abs(d.delta_us), 1.0) + 30
