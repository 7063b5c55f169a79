"""lab.measure.rounds: interleaved rounds with the host's speed beside each, and the quiet-round judgement (scripted
probes, walls and clock: nothing here depends on this machine's speed)."""

import itertools

import pytest
import torch

from jaggedperf.lab.measure import rounds

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(rounds, "_fastest_probe_us", None)


def scripted(probes, walls=None, step_s=1.0):
    """probe/wall_us/clock stand-ins: probes in order; each callable's wall from ``walls[name]`` (an iterator)
    or 100 µs; the clock advances ``step_s`` a round (read once a round after the calls)."""
    probe_it = iter(probes)
    walls = {k: iter(v) for k, v in (walls or {}).items()}
    order, t = [], itertools.count()

    def wall_us(fn, device):
        name = fn()
        order.append(name)
        return next(walls[name]) if name in walls else 100.0

    return dict(probe=lambda: next(probe_it), wall_us=wall_us, clock=lambda: next(t) * step_s), order


def fns(*names):
    return {n: (lambda n=n: n) for n in names}


def test_every_round_times_each_callable_once_alternating_order_between_two_probes():
    kw, order = scripted([3.0] * 8)
    r = rounds.run(fns("a", "b"), CPU, rounds=4, **kw)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert len(r.rounds) == 4 and all(set(x.walls_us) == {"a", "b"} for x in r.rounds)
    assert not r.deadline_hit


def test_a_round_keeps_the_slower_of_its_two_probes_and_quiet_is_against_the_fastest():
    # probes (before, after) per round: (3, 3.2), (3, 4), (2.9, 3)
    kw, _ = scripted([3.0, 3.2, 3.0, 4.0, 2.9, 3.0])
    r = rounds.run(fns("a", "b"), CPU, rounds=3, slack=0.15, **kw)
    assert [x.probe_us for x in r.rounds] == [3.2, 4.0, 3.0]
    assert r.reference_us == 2.9
    assert [r.is_quiet(x) for x in r.rounds] == [True, False, True]  # 3.2 <= 1.15 * 2.9 = 3.335 < 4.0


def test_ratios_and_the_judged_rounds_use_the_quiet_ones_when_there_are_enough():
    # rounds 2 and 3 slow (probe 5 against 3): their ratio is 1.3, the quiet rounds' 1.1
    probes = [3, 3, 5, 5, 5, 5, 3, 3, 3, 3]
    walls = {"a": iter([110, 130, 130, 110, 110]), "b": iter([100] * 5)}
    kw, _ = scripted(probes, walls)
    r = rounds.run(fns("a", "b"), CPU, rounds=5, alternate=False, **kw)
    assert [round(x, 2) for x in r.ratios("a", "b")] == [1.1, 1.3, 1.3, 1.1, 1.1]
    assert [round(x, 2) for x in r.ratios("a", "b", quiet_only=True)] == [1.1, 1.1, 1.1]
    ratio, n = rounds.median_ratio(r, "a", "b", min_quiet=3)
    assert n == 3 and ratio == pytest.approx(1.1)
    # too few quiet rounds for the caller's minimum: every round is judged (the caller sees n == all)
    ratio, n = rounds.median_ratio(r, "a", "b", min_quiet=4)
    assert n == 5 and ratio == pytest.approx(1.1)
    assert r.walls("a", quiet_only=True) == [110, 110, 110]


def test_runs_on_until_enough_quiet_rounds():
    # the process has seen its host at 3 µs; this run's first four rounds are slow, then quiet: asked for 3 quiet
    # rounds, it runs 7
    kw, _ = scripted([3, 3])
    rounds.run(fns("a"), CPU, rounds=1, **kw)
    probes = [5, 5] * 4 + [3, 3] * 10
    kw, _ = scripted(probes)
    r = rounds.run(fns("a", "b"), CPU, rounds=2, quiet=3, deadline_s=100, **kw)
    assert len(r.rounds) == 7 and len(r.quiet) == 3 and not r.deadline_hit


def test_stops_at_the_deadline_when_the_host_stays_slow_and_says_so():
    # an earlier run saw the host at 3 µs; this whole run is at 5: no round is quiet, the deadline ends it
    kw, _ = scripted([3, 3])
    rounds.run(fns("a"), CPU, rounds=1, **kw)
    kw, _ = scripted([5] * 100, step_s=1.0)
    r = rounds.run(fns("a", "b"), CPU, rounds=3, quiet=3, deadline_s=10, **kw)
    assert r.deadline_hit and r.reference_us == 3 and not r.quiet
    assert 3 <= len(r.rounds) <= 12
    ratio, n = rounds.median_ratio(r, "a", "b", min_quiet=3)
    assert n == len(r.rounds)  # judged on every round: the caller must report the host as never quiet


def test_a_uniformly_slow_first_run_is_quiet_against_itself_but_not_once_the_process_has_seen_faster():
    kw, _ = scripted([5] * 6)
    first = rounds.run(fns("a"), CPU, rounds=3, **kw)
    assert len(first.quiet) == 3 and rounds.fastest_probe_us() == 5
    kw, _ = scripted([3] * 2 + [5] * 4)
    second = rounds.run(fns("a"), CPU, rounds=3, **kw)
    assert rounds.fastest_probe_us() == 3 and len(second.quiet) == 1


def test_refuses_no_callables_or_no_rounds():
    with pytest.raises(ValueError):
        rounds.run({}, CPU, rounds=3)
    with pytest.raises(ValueError):
        rounds.run(fns("a"), CPU, rounds=0)


def test_the_real_probe_and_wall_on_the_cpu():
    x = torch.randn(64)
    r = rounds.run({"sum": lambda: x.sum(), "mean": lambda: x.mean()}, CPU, rounds=2)
    assert len(r.rounds) == 2 and all(w > 0 for x_ in r.rounds for w in x_.walls_us.values())
    assert r.reference_us > 0 and rounds.fastest_probe_us() == r.reference_us
