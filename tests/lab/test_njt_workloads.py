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
    # against the float64 reference sequence by sequence: the boundary's gradient is right; eager mode's and
    # torch.compile's are measured, not held (torch's NJT softmax backward over the ragged dim: test_lowering.py)
    assert set(check.held()) == {"jaggedperf.compile"} and check.held()["jaggedperf.compile"] < 1e-5
    step = njt_workloads.time_cell(njt_workloads.get("ragged_softmax"), CASE, "step", ways, built,
                                   torch.device("cpu"), n_rounds=1)
    forward = njt_workloads.time_cell(njt_workloads.get("ragged_softmax"), CASE, "forward", ways, built,
                                      torch.device("cpu"), n_rounds=1)
    assert step.ratio_floor_tc is not None and step.ratio_limit_tc is not None and step.ratio_limit_tc > 0
    assert {"engine", "engine fwd", "engine plain", "engine plain fwd", "floor", "floor + copy"} <= set(step.walls_us)
    assert njt_workloads.limit_kind(step.walls_us) == "copied"
    assert forward.ratio_limit_tc is None and "engine" not in forward.walls_us


def _step_cell(jp: list[float], tc: list[float], floor: list[float] | None, engine: tuple | None = None):
    # a step cell of these rounds' walls (µs); ``engine``: (engine, engine fwd, engine plain, engine plain fwd[,
    # floor + copy]) a round
    import statistics

    walls = {"torch.compile": tc, "jaggedperf.compile": jp}
    if floor is not None:
        walls["floor"] = floor
    if engine is not None:
        for name, value in zip(("engine", "engine fwd", "engine plain", "engine plain fwd", "floor + copy"), engine):
            walls[name] = [value] * len(jp)
    ratio = statistics.median(j / t for j, t in zip(jp, tc))
    floor_tc = None if floor is None else statistics.median(f / t for f, t in zip(floor, tc))
    limits = njt_workloads.limit_walls(walls)
    limit_tc = statistics.median(lim / t for lim, t in zip(limits, tc)) if engine is not None else None
    return njt_workloads.Cell("w", "c", "step", {}, {}, {}, ratio, ratio, ratio, None, floor_tc, limit_tc, len(jp),
                              len(jp), walls, [])


def test_the_step_verdict_holds_below_the_bar_and_is_at_the_limit_only_within_the_runs_spread():
    tc = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2]
    held = njt_workloads.step_verdict(_step_cell([70.0 + i for i in range(7)], tc, [60.0] * 7))
    assert held.outcome == "holds"
    # the floor is the whole of torch.compile's time: a step level with it is at the limit, noise either way
    level = njt_workloads.step_verdict(_step_cell([99.0, 101.5, 100.0, 98.5, 100.8, 99.7, 100.3], tc, tc))
    assert level.outcome == "at the limit" and level.over_limit.low <= 1.0 <= level.over_limit.high
    # 10% above that limit in every round: beyond the run's spread, a failure
    above = njt_workloads.step_verdict(_step_cell([t * 1.1 for t in tc], tc, tc))
    assert above.outcome == "fails" and above.over_limit.low > 1.0
    # a limit below the bar cannot excuse a miss, whatever the spread
    within_reach = njt_workloads.step_verdict(_step_cell([90.0] * 7, tc, [50.0] * 7))
    assert within_reach.outcome == "fails" and within_reach.limit_tc < njt_workloads.STEP_BAR
    # no floor measured (the calls went to torch.compile): no limit, so a miss fails
    assert njt_workloads.step_verdict(_step_cell([95.0] * 7, tc, None)).outcome == "fails"


def test_a_steps_limit_adds_the_engines_njt_crossing_to_the_floor():
    tc = [100.0] * 5
    # floor 50 + (engine 40 - engine fwd 10) - (engine plain 12 - engine plain fwd 2) = 70 a round
    cell = _step_cell([85.0] * 5, tc, [50.0] * 5, engine=(40.0, 10.0, 12.0, 2.0))
    assert njt_workloads.limit_walls(cell.walls_us) == [70.0] * 5
    assert cell.ratio_limit_tc == 0.7
    # the floor with the NJT leaf's gradient copied within its step (its plain leaf takes its gradient as it is)
    # replaces the floor: 55 + 30 - 10 = 75
    copied = _step_cell([85.0] * 5, tc, [50.0] * 5, engine=(40.0, 10.0, 12.0, 2.0, 55.0))
    assert njt_workloads.limit_walls(copied.walls_us) == [75.0] * 5
    verdict = njt_workloads.step_verdict(cell)
    assert verdict.limit_tc == 0.7 and verdict.outcome == "fails"  # the limit is below the bar: within reach
    assert njt_workloads.step_verdict(_step_cell([85.0] * 5, tc, [50.0] * 5, engine=(60.0, 10.0, 12.0, 2.0))
                                      ).outcome == "at the limit"  # limit 90 a round, above the bar: 85 within it


def test_the_limit_follows_the_definition_its_walls_measured():
    rounds = {"floor": [100.0, 110.0], "torch.compile": [200.0, 210.0]}
    assert njt_workloads.limit_kind({"torch.compile": [1.0]}) is None
    assert njt_workloads.limit_walls({"torch.compile": [1.0]}) is None
    assert njt_workloads.limit_kind(rounds) == "floor" and njt_workloads.limit_walls(rounds) == [100.0, 110.0]
    leaf = dict(rounds, engine=[30.0, 31.0], **{"engine plain": [10.0, 10.0]})
    assert njt_workloads.limit_kind(leaf) == "leaf" and njt_workloads.limit_walls(leaf) == [120.0, 131.0]
    crossing = dict(leaf, **{"engine fwd": [5.0, 6.0], "engine plain fwd": [2.0, 2.0]})
    assert njt_workloads.limit_kind(crossing) == "crossing"
    assert njt_workloads.limit_walls(crossing) == [100.0 + 25.0 - 8.0, 110.0 + 25.0 - 8.0]
    apart = dict(crossing, **{"gradient copy": [3.0, 4.0]})
    assert njt_workloads.limit_kind(apart) == "apart"
    assert njt_workloads.limit_walls(apart) == [100.0 + 25.0 - 8.0 + 3.0, 110.0 + 25.0 - 8.0 + 4.0]
    copied = dict(crossing, **{"floor + copy": [104.0, 115.0]})
    assert njt_workloads.limit_kind(copied) == "copied"
    assert njt_workloads.limit_walls(copied) == [104.0 + 25.0 - 8.0, 115.0 + 25.0 - 8.0]


def test_the_floor_of_a_step_whose_njt_trains_crosses_no_njt_and_compiles_nothing_more(monkeypatch):
    from jaggedperf import njt_autograd

    check, ways, built = njt_workloads.check(njt_workloads.get("ragged_softmax"), CASE, torch.device("cpu"),
                                             torch.float32, "default")
    assert not check.errors
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]

    def crossed(*args):  # an NJT crossing autograd would be the boundary's cost, not the floor's
        raise AssertionError("the floor crossed an NJT through Unwrap")

    monkeypatch.setattr(njt_autograd.Unwrap, "apply", crossed)
    monkeypatch.setattr(njt_autograd.Unwrap, "backward", staticmethod(crossed))
    floor = njt_workloads.region_step(ways["jaggedperf.compile"], built, "step")
    seen = []
    monkeypatch.setattr(torch.Tensor, "backward", _recording(torch.Tensor.backward, seen))
    floor()
    # one backward, on the region's own plain output; the NJT itself gets no gradient (its values crossed as a leaf)
    assert len(seen) == 1 and not seen[0].is_nested
    assert built.x.grad is None
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # the region's graph served it
    # the limit's floor copies its values leaf's gradient within the step, as autograd copies an NJT leaf's, once
    copies = []
    monkeypatch.setattr(torch.Tensor, "clone", _recording(torch.Tensor.clone, copies))
    njt_workloads.region_step(ways["jaggedperf.compile"], built, "step", copied=True)()
    assert len(copies) == 1 and copies[0].shape == built.x._values.shape and not copies[0].requires_grad
    assert built.x.grad is None and torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


def _recording(backward, seen: list):
    def record(self, *args, **kwargs):
        seen.append(self)
        return backward(self, *args, **kwargs)

    return record


def test_the_steps_built_up_from_the_floor_cross_as_the_boundary_does_and_reach_the_njt(monkeypatch):
    check, ways, built = njt_workloads.check(njt_workloads.get("ragged_softmax"), CASE, torch.device("cpu"),
                                             torch.float32, "default")
    assert not check.errors
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    steps = njt_workloads.crossing_steps(ways["jaggedperf.compile"], built)
    assert list(steps) == ["floor + Unwrap", "floor + Unwrap + Join"]
    # the NJT's gradient for the output gradient, sequence by sequence in float64 (eager mode's NJT softmax gets it
    # wrong over the ragged dim: test_lowering.py)
    x = built.x.detach().double().requires_grad_()
    njt_workloads.ragged_softmax_reference(x).backward(built.grad.double())
    expected = x.grad._values.float()
    seen = []
    monkeypatch.setattr(torch.Tensor, "backward", _recording(torch.Tensor.backward, seen))
    grads = []
    hook = built.x.register_hook(lambda g: grads.append(g._values.clone()))
    for run in steps.values():
        run()
        assert built.x.grad is None  # reset, as a step of the benchmark leaves it
    hook.remove()
    # the first backpropagates the region's plain output, the second the NJT the boundary returns (an NJT's backward
    # passes through its __torch_function__ to Tensor.backward again); each gradient reached the NJT as an NJT, equal
    # to the reference
    assert not seen[0].is_nested and len(seen) > 1 and all(t.is_nested for t in seen[1:])
    assert len(grads) == 2 and all(torch.allclose(g, expected, atol=1e-6) for g in grads)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # the region's graph served both
