"""benchmarks/merge_kernels_ab.py's judging and table (no run): a kernel or a call moves only where the ratio of the
runs' medians passes the minimum change and the two trees' values over every run do not overlap."""

from helpers.scripts import load

ab = load("benchmarks/merge_kernels_ab.py")


def _run(reduce_us: float, combine_us: float, call_us: float, spread: float = 0.2, error: float = 1e-7) -> list[dict]:
    calls = {name: [call_us, call_us - spread, call_us + spread] for name in ab.CALLS}
    return [{"case": "B512-M64-L100-s0.1", "errors": {name: error for name in ab.CALLS}, "calls": calls,
             "kernels": {"reduce": reduce_us, "combine": combine_us}}]


def test_a_measure_moves_past_the_minimum_with_the_trees_apart():
    runs = {"before": [_run(12.1, 4.8, 19.5), _run(12.0, 4.9, 19.6)],
            "after": [_run(12.0, 3.5, 18.4), _run(12.1, 3.5, 18.5, error=3e-7)]}
    (row,) = ab.summarize(runs, 0.03)
    got = {m["name"]: m for m in row["measures"]}
    assert got["combine"]["moved"] and round(got["combine"]["ratio"], 2) == 0.72
    assert not got["reduce"]["moved"]  # level: the same values in both trees
    assert got["sum"]["moved"] and got["sum"]["before_us"] == 19.55  # the median of the runs' medians
    assert row["max_error"] == 3e-7
    table = ab.render([row], "94d490f", "b07e8ea", 0.03)
    line = next(x for x in table.splitlines() if x.startswith("| B512"))
    assert "| 4.8 | **3.5 (0.72×)** |" in line and "| 12.1 | 12.1 (1.00×) |" in line


def test_overlapping_runs_never_move_and_a_smoke_run_has_no_times():
    runs = {"before": [_run(10.0, 4.0, 20.0, spread=3.0)], "after": [_run(10.0, 4.0, 22.0, spread=3.0)]}
    (row,) = ab.summarize(runs, 0.03)
    call = next(m for m in row["measures"] if m["name"] == "mean")
    assert round(call["ratio"], 2) == 1.1 and not call["moved"]
    smoke = [{"case": "B6-M64-L40-s0.2", "errors": {"sum": 0.0}, "calls": {}, "kernels": {}}]
    (empty,) = ab.summarize({"before": [smoke], "after": [smoke]}, 0.03)
    assert empty["measures"] == [] and "| — | — |" in ab.render([empty], "a", "b", 0.03)
