"""The jagged family in the lab: jagged_sum, jagged_softmax and jagged_layer_norm registered with
tritonbench's torch contenders and ours, each equal to its op's float64 reference (here on the CPU), the references
held to a loop over sequences, and the command line running them."""

import pytest
import torch

from jaggedperf.batch import JaggedBatch
from jaggedperf.cli import main
from jaggedperf.impls.registry import get_op
from jaggedperf.inputs import Case
from jaggedperf.lab.measure import correctness

CPU = torch.device("cpu")
FAMILY = {
    "jagged_sum": {"unbind_sum", "sum_padded", "njt_sum", "segment_reduce", "jaggedperf", "jaggedperf_njt"},
    "jagged_softmax": {"unbind_softmax", "softmax_padded", "njt_softmax", "jaggedperf", "jaggedperf_njt"},
    "jagged_layer_norm": {"unbind_layer_norm", "layer_norm_padded", "njt_layer_norm", "jaggedperf",
                          "jaggedperf_njt"},
}


def _batch_with_empties(dtype):
    # lengths 0, 5, 0, 9, 1 (an empty first and middle sequence), M = 3, padded to 12
    offsets = torch.tensor([0, 0, 5, 5, 14, 15])
    values = torch.randn(15, 3, generator=torch.Generator().manual_seed(3)).to(dtype)
    return JaggedBatch.from_tensors(values, offsets, padded_len=12)


# Each op's definition on one sequence t (a (len, M) tensor), as a loop over sequences computes it; the references
# compute every sequence at once (index_add, scatter_reduce), on the batch's device.
PER_SEQUENCE = {
    "jagged_softmax": (lambda t: torch.softmax(t, dim=0), True),  # (definition, rows kept: (total_len, M))
    "jagged_layer_norm": (lambda t: torch.layer_norm(t, t.shape, eps=1e-5), True),
    "jagged_sum": (lambda t: t.sum(0), False),  # one row a sequence: (B, M)
    "jagged_mean": (lambda t: t.mean(0), False),
}


@pytest.mark.parametrize("op", list(PER_SEQUENCE))
def test_each_reference_is_its_op_on_each_sequence_in_a_loop(op):
    # empty sequences, a one-row one, a constant one, large values, NaN and ±inf included
    lengths = [0, 1, 7, 0, 30, 3, 2, 4, 6]
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    values = torch.randn(sum(lengths), 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    values[8:38] += 1e4  # the long sequence far from 0
    values[38:41] = 2.5  # a constant sequence
    values[41, 1], values[43, 2], values[44, 0] = float("nan"), float("inf"), float("-inf")
    values[46, 3] = float("inf")  # +inf alone in its sequence and column
    given = values.clone()
    batch = JaggedBatch.from_tensors(values, offsets, padded_len=30)
    got = get_op(op).reference(batch)
    definition, rowwise = PER_SEQUENCE[op]
    bounds = offsets.tolist()
    each = [definition(values[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    expected = torch.cat(each) if rowwise else torch.stack(each)
    assert got.dtype == torch.float64 and got.device == values.device
    # the layer norm's mean and variance are summed in another order than torch's: ~1e-12 off where a sequence sits
    # 1e4 from 0
    tol = 1e-10 if op == "jagged_layer_norm" else 1e-12
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, equal_nan=True)
    assert torch.equal(values.isnan(), given.isnan()) and torch.equal(values.nan_to_num(), given.nan_to_num()), \
        "a reference changed its batch (a float64 batch's values are the reference's own input)"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", list(FAMILY))
def test_every_contender_equals_the_float64_reference(op, dtype):
    spec = get_op(op)
    assert set(spec.implementations) - {"helion"} == FAMILY[op]  # helion's where it installs with CUDA (its own tests)
    for batch in (spec.make_batch(Case(24, 5, 20, 0.3, dtype=dtype), CPU), _batch_with_empties(getattr(torch, dtype))):
        reference = spec.reference(batch)
        rows = batch.B if op == "jagged_sum" else batch.total_len
        assert reference.shape == (rows, batch.M) and reference.dtype == torch.float64
        assert spec.must_move_bytes(batch) == batch.nbytes() + rows * batch.M * batch.values.element_size()
        for impl in (i for i in spec.implementations.values() if "cpu" in i.devices):
            ok, _, reason = correctness.check_output(impl.fn(*impl.prepare(batch)), reference, dtype)
            assert ok, (impl.name, reason)


@pytest.mark.parametrize("op", ["jagged_softmax", "jagged_layer_norm"])
def test_run_on_the_command_line(op, tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["run", "--op", op, "--device", "cpu", "--B", "8", "--M", "4", "--seqlen", "10", "--sparsity", "0.2",
                 "--modes", "eager", "--warmup", "1", "--iters", "2", "--json", str(out)])
    assert code == 0 and out.exists()
    text = capsys.readouterr().out
    for name in FAMILY[op]:
        assert name in text


def test_a_benchmark_row_checks_then_times_every_contender_but_those_skipped(monkeypatch):
    """``family.row`` on the CPU, its device timer and Inductor's compile replaced: every contender not skipped is
    checked against float64 and timed; the best torch eager contender is the least of theirs; the row says where
    its seconds went."""
    from jaggedperf.impls.jagged_softmax import _masked_softmax
    from jaggedperf.impls.rowwise import padded_round_trip
    from jaggedperf.lab import family, harness

    timed = []

    def device_time(call, device):
        timed.append(call)
        return {"median_us": 10.0 * len(timed), "p20_us": 1.0, "p80_us": 1.0, "method": "fake", "l2_flushed": True}

    monkeypatch.setattr(harness, "device_time", device_time)
    monkeypatch.setattr(family, "padded_compiled", lambda op: lambda v, o, n: padded_round_trip(
        v, o, n, _masked_softmax, float("-inf")))
    skip = ("jaggedperf_njt", "jaggedperf_no_max_seqlen")
    row = family.row("jagged_softmax", Case(6, 3, 8, 0.3), 100.0, skip=skip, device=CPU)
    assert set(row["contenders"]) == FAMILY["jagged_softmax"] - set(skip) | {"inductor_padded"}
    assert all(c["ok"] and "median_us" in c for c in row["contenders"].values()), row["contenders"]
    assert len(timed) == len(row["contenders"]) + 1  # and the backward
    torch_eager = [c["median_us"] for n, c in row["contenders"].items() if n in ("unbind_softmax", "softmax_padded",
                                                                                   "njt_softmax")]
    assert row["best_torch_eager_us"] == min(torch_eager)
    assert set(row["seconds"]) == {"inputs", "reference", "inductor_compile", "backward", *row["contenders"]}
    assert all(seconds >= 0 for seconds in row["seconds"].values()), row["seconds"]
    assert all("first_call_s" in c for c in row["contenders"].values())
