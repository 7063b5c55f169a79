"""jaggedperf.lab.reduce_row's strict check: one wrong element shows, whatever the tensor's size."""

import math

import torch

from jaggedperf.lab import reduce_row


def test_elementwise_error_is_relative_to_the_scale_and_exact_where_it_is_zero():
    ref = torch.tensor([[1.0, float("nan")], [0.0, -2.0]], dtype=torch.float64)
    scale = torch.tensor([[2.0, float("nan")], [0.0, 4.0]], dtype=torch.float64)
    assert reduce_row.elementwise_error(torch.tensor([[1.5, float("nan")], [0.0, -2.0]]), ref, scale) == 0.25
    assert reduce_row.elementwise_error(torch.tensor([[1.0, 3.0], [0.0, -2.0]]), ref, scale) == math.inf  # NaN lost
    assert reduce_row.elementwise_error(torch.tensor([[1.0, float("nan")], [1e-30, -2.0]]), ref, scale) == math.inf
    assert reduce_row.elementwise_error(torch.tensor([[math.inf, float("nan")], [0.0, -2.0]]), ref, scale) == math.inf


def test_one_wrong_element_among_many_fails_where_the_relative_l2_error_passes():
    ref = torch.randn(100_000, 4, dtype=torch.float64)
    out = ref.float()
    out[123, 2] += 0.5
    assert reduce_row.rel_error(out, ref) < 1e-2
    assert reduce_row.elementwise_error(out, ref, ref.abs() + 1) > 1e-2
    assert reduce_row.elementwise_error(ref.float(), ref, ref.abs() + 1) < 1e-6
