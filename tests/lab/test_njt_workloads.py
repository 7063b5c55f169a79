"""NJT workloads: every way checked against eager mode, and a training step's limits measured beside it."""

from __future__ import annotations

import torch

from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import njt_workloads

CASE = Case(8, 8, 10, 0.5)


def test_engine_steps_cross_an_njt_node_into_the_leaf_and_a_plain_one_and_reset_them():
    built = njt_workloads.get("ragged_softmax").build(make_batch(CASE, "cpu"), torch.float32)
    steps = njt_workloads.engine_steps(built)
    assert set(steps) == {"engine", "engine fwd", "engine plain", "engine plain fwd"}
    seen = []
    hook = built.x.register_hook(lambda g: seen.append(g))
    steps["engine"]()
    hook.remove()
    # the gradient reached the NJT leaf through a node (an NJT, the leaf's shape), and the leaf was reset
    assert len(seen) == 1 and seen[0].is_nested and seen[0]._values.shape == built.x._values.shape
    assert built.x.grad is None
    # the forwards record nothing; the plain node's step (on a leaf of its own) leaves the NJT's gradient alone
    assert steps["engine fwd"]().grad_fn is None and steps["engine plain fwd"]().grad_fn is None
    steps["engine plain"]()
    assert built.x.grad is None


def test_a_training_step_whose_njt_trains_carries_its_limit_and_a_forward_none():
    check, ways, built = njt_workloads.check(njt_workloads.get("ragged_softmax"), CASE, torch.device("cpu"),
                                             torch.float32, "default")
    assert not check.errors and check.fell_back is None
    assert max(check.max_rel_error.values()) < 1e-5
    step = njt_workloads.time_cell(njt_workloads.get("ragged_softmax"), CASE, "step", ways, built,
                                   torch.device("cpu"), n_rounds=1)
    forward = njt_workloads.time_cell(njt_workloads.get("ragged_softmax"), CASE, "forward", ways, built,
                                      torch.device("cpu"), n_rounds=1)
    assert step.ratio_floor_tc is not None and step.ratio_limit_tc is not None and step.ratio_limit_tc > 0
    assert {"engine", "engine fwd", "engine plain", "engine plain fwd", "floor"} <= set(step.walls_us)
    assert forward.ratio_limit_tc is None and "engine" not in forward.walls_us
