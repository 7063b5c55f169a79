"""``lab.reduce_row``'s references and judgement on the CPU (its timed rows run on the GPU: the kernel bars), and the GPU
tests' reference built on it (``helpers.gpu``); its strict check: one wrong element shows, whatever the tensor's size."""

import math

import pytest
import torch

from jaggedperf.lab import reduce_row
from helpers.gpu import gpu_reference

OFFSETS = torch.tensor([0, 0, 4, 5, 10])  # an empty segment first, a one-row one


def _values():
    return torch.randn(10, 3, generator=torch.Generator().manual_seed(0))


def _segments(offsets):
    bounds = offsets.tolist()
    return list(zip(bounds[:-1], bounds[1:]))


@pytest.mark.parametrize("mean", [False, True])
def test_the_reference_is_each_segments_float64_sum_or_mean(mean):
    values = _values()
    got = reduce_row.reference(values, OFFSETS, mean=mean)
    for row, (a, b) in zip(got, _segments(OFFSETS)):
        want = values[a:b].double().sum(0) / ((b - a) if mean else 1)
        torch.testing.assert_close(row, want, equal_nan=True)  # an empty segment's mean is NaN (0 / 0)


def test_the_backward_reference_gives_each_row_its_segments_gradient():
    grad = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    for mean in (False, True):
        got = reduce_row.expand_reference(grad, OFFSETS, 10, mean=mean)
        for g, (a, b) in zip(grad, _segments(OFFSETS)):
            for r in range(a, b):
                torch.testing.assert_close(got[r], g.double() / ((b - a) if mean else 1))


def test_the_gpu_tests_reference_takes_absolute_values_and_zeroes_empty_means():
    values = _values()
    scale = gpu_reference(values, OFFSETS, mean=True, empty_zero=True, absolute=True)
    assert bool((scale[0] == 0).all())
    torch.testing.assert_close(scale[1:], reduce_row.reference(values.abs(), OFFSETS, mean=True)[1:])
    assert bool(torch.isnan(gpu_reference(values, OFFSETS, mean=True)[0]).all())


def test_rel_error_and_bitwise_equality():
    ref = reduce_row.reference(_values(), OFFSETS, mean=True)  # the empty segment's row is NaN
    assert reduce_row.rel_error(ref.float(), ref) < 1e-6
    assert reduce_row.rel_error(ref.nan_to_num(), ref) == float("inf")  # a NaN of the reference's not matched
    sums = reduce_row.reference(_values(), OFFSETS, mean=False)
    assert reduce_row.rel_error(torch.zeros_like(sums), sums) == pytest.approx(1.0)
    assert reduce_row.bitwise_equal(ref, ref.clone()) and not reduce_row.bitwise_equal(ref, ref.float().double() + 1)


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


def _row(ours_hinted, ours_plain, practical, *, floor=10.0, peer=20.0, mb=100e6, distribution="uniform"):
    """A measured row as ``measure_case`` leaves it, before ``judge``."""
    return {"floor_us": floor, "must_move_bytes": mb, "distribution": distribution,
            "ours_hinted": {"median_us": ours_hinted}, "ours_plain": {"median_us": ours_plain},
            "segment_reduce": {"median_us": peer}, "segment_reduce_correct": True, "practical_floor_us": practical,
            "empty_kernel_us": 4.0, "copy_us": practical - 4.0}


def test_each_bars_threshold_and_the_judgement_on_it():
    row = _row(17.0, 20.0, 12.0)
    limits = reduce_row.thresholds(row)
    assert limits["1_ours_hinted"] == pytest.approx(18.0) and limits["2_ours_plain"] == pytest.approx(11.5)
    assert limits["3"] == pytest.approx(1.15 * 17.0) and row["best_peer_us"] == 20.0
    bars = reduce_row.judge(row)
    assert bars["1_ours_hinted"] and not bars["1_ours_plain"] and not bars["2_ours_hinted"] and not bars["3"]
    small = _row(17.0, 20.0, 12.0, mb=1e6)
    assert reduce_row.thresholds(small)["2_ours_hinted"] is None  # bar 2: >= 64 MB, or power-law lengths
    assert reduce_row.thresholds(_row(17.0, 20.0, 12.0, mb=1e6, distribution="heavy"))["2_ours_hinted"] == 20.0
    near = _row(10.4, 10.4, 11.0, peer=10.2)  # a peer within 5% of the floor: the bar is 1.05x the floor
    assert reduce_row.thresholds(near)["1_ours_hinted"] == pytest.approx(10.5)


def test_a_missed_bar_is_at_the_limit_only_out_of_reach_and_within_the_practical_floors_margin():
    # bar 2 (1.15x the floor: 11.5 us) lies below the practical floor (12 us): out of reach
    row = _row(13.0, 14.0, 12.0)
    assert reduce_row.out_of_reach(row)["2_ours_hinted"] is True
    assert reduce_row.at_the_limit(row, "2_ours_hinted", 13.0)  # within 1.1x of 12
    assert not reduce_row.at_the_limit(row, "2_ours_plain", 14.0)  # past it: the design's miss
    # bar 1 (0.9x the peer: 18 us) lies above it: within reach, never at the limit however close ours is
    assert reduce_row.out_of_reach(row)["1_ours_plain"] is False
    assert not reduce_row.at_the_limit(row, "1_ours_plain", 12.5)
    assert reduce_row.out_of_reach({**row, "practical_floor_us": None})["1_ours_plain"] is None
    assert not reduce_row.at_the_limit({**row, "practical_floor_us": None}, "2_ours_hinted", 13.0)


def test_the_scalar_rule_the_device_bars_share():
    assert reduce_row.at_hardware_limit(11.5, 12.0, 13.2)  # out of reach, within 1.1x of the practical floor
    assert not reduce_row.at_hardware_limit(11.5, 12.0, 13.3)  # past 1.1x: the design's miss
    assert not reduce_row.at_hardware_limit(12.5, 12.0, 12.6)  # within reach: never at the limit


def test_the_practical_floor_is_an_empty_kernels_launch_and_the_bytes_at_the_copy_bandwidth():
    floor = reduce_row.practical_floor(1 << 20, 100.0, 40, torch.device("cpu"))  # the CPU: walls, the plumbing only
    assert floor["practical_floor_us"] == pytest.approx(floor["empty_kernel_us"] + (1 << 20) / 100e3)
    assert floor["empty_kernel_us"] > 0 and floor["copy_us"] > 0


def test_the_training_steps_limit_is_the_engines_floor_and_two_forward_calls_measured_beside_it():
    from jaggedperf.inputs import Case

    # the CPU: walls, the plumbing only (the bar is judged on the GPU)
    t = reduce_row.training_walls(Case(8, 4, 10, 0.5), rounds=1, iters=5, device=torch.device("cpu"))
    engine, f = t["engine_floor_forward_backward"]["median_us"], t["ours_forward"]["median_us"]
    assert t["backward_correct"] and 0 < engine
    assert t["limit4_us"] == pytest.approx(engine + 2 * f)
    fb, sr = t["ours_forward_backward"]["median_us"], t["segment_reduce_forward_backward"]["median_us"]
    assert t["bar4_out_of_reach"] == (t["limit4_us"] > min(3 * f, 0.5 * sr))
    assert t["bar4_at_limit"] == (t["bar4_out_of_reach"] and fb <= t["limit4_us"])


def test_the_engines_floor_node_hands_the_leaf_its_gradient_without_computing_one():
    leaf = torch.zeros(5, 3, requires_grad=True)
    grad_in = torch.randn(5, 3)
    out = reduce_row._NoKernels.apply(leaf, (2, 3), grad_in)
    assert out.shape == (2, 3) and out.requires_grad
    out.backward(torch.ones(2, 3))
    torch.testing.assert_close(leaf.grad, grad_in)
