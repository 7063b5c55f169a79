"""rec_block: embedding lookup of jagged ids → jagged mean → MLP, a whole model in the lab."""

import pytest
import torch

from jaggedperf.impls import rec_block
from jaggedperf.impls.registry import get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import runner
from jaggedperf.lab.measure import correctness
from jaggedperf.lab.doctor import gather
from jaggedperf.lab.result import OK

CPU = torch.device("cpu")
OP = get_op("rec_block")


@pytest.mark.parametrize("case", [Case(40, 3, 20, 0.5, "heavy"), Case(16, 5, 30, 0.3, dtype="bfloat16"),
                                  Case(3, 1, 4, 0.0, "fixed")], ids=lambda c: c.label)
def test_every_contender_and_plain_twin_equals_the_float64_reference_in_eager(case):
    batch = OP.make_batch(case, CPU)
    if case.distribution == "heavy":
        assert int((batch.lengths() == 0).sum()) > 0 or pytest.skip("draw has no empty sequence")
    reference = OP.reference(batch)
    assert reference.shape == (case.B, case.M) and reference.dtype == torch.float64
    assert set(OP.implementations) == {"njt_mean", "sum_padded", "segment_reduce", "index_add", "jaggedperf",
                                       "jaggedperf_njt"}
    for impl in OP.implementations.values():
        forms = [("fn", impl.fn(*impl.prepare(batch)))]
        if impl.plain is not None:
            forms.append(("plain", impl.plain(*impl.prepare_plain(batch))))
        for form, out in forms:
            ok, rel, reason = correctness.check_output(out, reference, case.dtype)
            assert ok, (impl.name, form, reason)


def test_the_batch_is_drawn_from_the_cases_seed_on_the_device():
    case = Case(6, 4, 10, 0.2)
    a, b = OP.make_batch(case, CPU), OP.make_batch(case, CPU)
    for x, y in zip((a.values, a.offsets, *a.params), (b.values, b.offsets, *b.params)):
        assert torch.equal(x, y)
    other = OP.make_batch(Case(6, 4, 10, 0.2, seed=7), CPU)
    assert not torch.equal(a.table, other.table)
    assert a.table.shape == (rec_block.VOCABULARY, 4) and a.w1.shape == (16, 4) and a.w2.shape == (4, 16)
    assert a.values.dtype == torch.int64 and int(a.values.max()) < rec_block.VOCABULARY
    assert a.offsets.tolist()[-1] == a.total_len == a.values.shape[0]


def test_must_move_bytes_counts_ids_gathered_rows_weights_and_output():
    batch = OP.make_batch(Case(5, 2, 8, 0.0, "fixed"), CPU)  # every length 8: total_len 40
    ids, offsets = 40 * 8, 6 * 8
    rows, weights, out = 40 * 2 * 4, (8 * 2 + 8 + 2 * 8 + 2) * 4, 5 * 2 * 4
    assert OP.must_move_bytes(batch) == ids + offsets + rows + weights + out
    assert batch.padded_nbytes() == 5 * 8 * 2 * 4


def test_a_compiled_cell_through_the_boundary_runs_and_is_correct():
    cells = runner.plan("rec_block", [Case(8, 3, 12, 0.3)], ["sum_padded"], ["eager", "jagged-compile:default"])
    record = runner.run(cells, runner.Options(device=CPU, warmup=1, iters=3))
    for r in record.results:
        assert r.status == OK, r.reason
        assert r.rel_error < 1e-5 and r.bytes_moved == record.results[0].bytes_moved > 0
    assert record.results[1].compile_s > 0 and record.results[1].speedup_vs_eager is not None


def test_the_doctor_gathers_a_rec_block_cell_without_a_padding_model():
    case = Case(8, 3, 12, 0.3)
    opts = runner.Options(device=CPU, warmup=1, iters=3)
    batch, reference = runner.prepare_case("rec_block", case, opts)
    ev = gather.gather("rec_block", "segment_reduce", "compile:default", case, batch, reference, opts, None,
                       compile_budget_s=0.0)
    assert ev.eager.status == OK and ev.compiled.status == OK
    assert ev.jagged is None  # the padding model describes jagged_mean-style batches only
    assert ev.host.guards.available and ev.host.guards.function == "segment_reduce"
