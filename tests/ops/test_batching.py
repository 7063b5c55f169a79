"""The operators' vmap rules (``jaggedperf.ops.batching``): a vmapped call equals the operator called on each sample
and stacked, for every operator (the backward ones too), any sample dim, a sample dim on some operands only,
offsets that differ between samples, empty batches; invalid offsets still raise; torch's per-sample fallback (and
its warning) is never taken: the tests switch it off."""

import pytest
import torch
from helpers.batching import CALLS, no_fallback
from helpers.reference import lengths_to_offsets

LENGTHS = [3, 0, 1, 4, 2]


def operands(name: str, samples: int, width: int = 3, lengths=LENGTHS, seed: int = 0):
    call, count, rows = CALLS[name]
    gen = torch.Generator().manual_seed(seed)
    offsets = lengths_to_offsets(lengths)
    n = int(offsets[-1]) if rows == "N" else len(lengths)
    return call, [torch.randn(samples, n, width, generator=gen) for _ in range(count)], offsets


def looped(call, tensors, offsets):
    return torch.stack([call(*(t[k] for t in tensors), offsets) for k in range(tensors[0].shape[0])])


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("in_dim", [0, 1, 2])
def test_a_vmapped_call_is_each_sample_s_call(name, in_dim):
    call, tensors, offsets = operands(name, samples=4)
    moved = [t.movedim(0, in_dim) for t in tensors]
    dims = (in_dim,) * len(tensors) + (None,)
    got = no_fallback(lambda: torch.vmap(call, in_dims=dims)(*moved, offsets))
    torch.testing.assert_close(got, looped(call, tensors, offsets), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["jagged_softmax_backward", "jagged_layer_norm_backward"])
def test_a_sample_dim_on_one_operand_only(name):
    call, (first, second), offsets = operands(name, samples=3)
    got = no_fallback(lambda: torch.vmap(call, in_dims=(None, 0, None))(first[0], second, offsets))
    expected = torch.stack([call(first[0], second[k], offsets) for k in range(3)])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["jagged_sum", "jagged_softmax", "jagged_layer_norm"])
def test_offsets_that_differ_between_samples_are_called_sample_by_sample(name):
    call = CALLS[name][0]
    values, offsets = torch.randn(2, 5, 3), torch.tensor([[0, 2, 5], [0, 1, 5]])
    got = no_fallback(lambda: torch.vmap(call)(values, offsets))
    torch.testing.assert_close(got, torch.stack([call(values[k], offsets[k]) for k in range(2)]))


@pytest.mark.parametrize("name", CALLS)
def test_an_empty_batch(name):
    call, tensors, offsets = operands(name, samples=2, lengths=[])
    assert no_fallback(lambda: torch.vmap(call, in_dims=(0,) * len(tensors) + (None,))(*tensors, offsets)).shape[0] == 2


@pytest.mark.parametrize("name", ["jagged_softmax", "jagged_layer_norm", "jagged_sum"])
@pytest.mark.parametrize("bad", [[0, 3, 2, 10], [0, 3, 3, 9], [1, 3, 3, 10]])
def test_invalid_offsets_raise_under_vmap(name, bad):
    call, _, _ = operands(name, samples=2)
    values = torch.randn(2, 10, 3)
    with pytest.raises(ValueError, match="offsets"):
        no_fallback(lambda: torch.vmap(call, in_dims=(0, None))(values, torch.tensor(bad)))


def test_per_sample_gradients_take_the_rules():
    offsets = lengths_to_offsets(LENGTHS)
    x = torch.randn(5, int(offsets[-1]), 3, dtype=torch.float64)
    ops = torch.ops.jaggedperf

    def loss(v):
        return ops.jagged_layer_norm(ops.jagged_softmax(v, offsets), offsets, 1e-5).pow(3).sum()

    got = no_fallback(lambda: torch.func.vmap(torch.func.grad(loss))(x))
    torch.testing.assert_close(got, torch.stack([torch.func.grad(loss)(x[k]) for k in range(5)]))


@pytest.mark.parametrize("name", CALLS)
def test_samples_past_the_cpu_fold_are_called_one_by_one(name, monkeypatch):
    from jaggedperf.ops import batching

    monkeypatch.setattr(batching, "CPU_FOLD_ELEMENTS", 0)
    call, tensors, offsets = operands(name, samples=3)
    got = no_fallback(lambda: torch.vmap(call, in_dims=(0,) * len(tensors) + (None,))(*tensors, offsets))
    torch.testing.assert_close(got, looped(call, tensors, offsets))
