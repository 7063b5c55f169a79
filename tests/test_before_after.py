"""benchmarks/before_after.py's judging (no run): an ops row moves only where the ratio passes the minimum change and
the two trees' ranges over every round do not overlap; rows are the medians of the rounds' medians. And
benchmarks/merge_tiles_bench.py's table from a row (no run)."""

import json
from pathlib import Path

from helpers.scripts import load

before_after = load("benchmarks/before_after.py")
merge_tiles = load("benchmarks/merge_tiles_bench.py")


def _ops(median: float, spread: float = 0.5, correct: bool = True) -> dict:
    timing = {"median_us": median, "p20_us": median - spread, "p80_us": median + spread}
    return {"forward": [{"case": "B8-M4-L3-s0", "dtype": "fp32", "correct": correct, "device": timing,
                         "device_hinted": dict(timing)}],
            "backward": [], "host": [{"case": "B8-M4-L3-s0",
                                      "wall_us": {"fast_path": {"median_us": 20.0, "min_us": 19.0, "max_us": 30.0}}}]}


def _raw(tmp_path: Path, before: list[dict], after: list[dict]) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    for name, runs in (("before", before), ("after", after)):
        for i, run in enumerate(runs):
            (raw / f"ops-{name}-{i}.json").write_text(json.dumps(run))
    return raw


def test_a_row_moves_when_its_ratio_passes_the_minimum_and_the_ranges_part(tmp_path):
    rows = before_after.ops_rows(_raw(tmp_path, [_ops(100.0), _ops(102.0)], [_ops(130.0), _ops(128.0)]))
    forward = [r for r in rows if r.table == "forward"]
    assert {r.measure for r in forward} == {"no max_seqlen", "max_seqlen given"}
    row = forward[0]
    assert row.before_us == 101.0 and row.after_us == 129.0  # the medians of the rounds' medians
    assert row.before_range == (99.5, 102.5) and row.after_range == (127.5, 130.5)
    assert row.moved(0.05) and not row.moved(0.5) and row.correct


def test_overlapping_ranges_never_move_and_a_wrong_round_is_kept(tmp_path):
    rows = before_after.ops_rows(_raw(tmp_path, [_ops(100.0, spread=20.0)], [_ops(112.0, correct=False)]))
    row = next(r for r in rows if r.table == "forward")
    assert round(row.ratio, 2) == 1.12 and not row.moved(0.05) and not row.correct
    host = next(r for r in rows if r.table == "host")
    assert host.measure == "fast_path wall" and not host.moved(0.05)


def test_the_tiles_table_names_the_best_variant_and_a_wrong_one():
    timing = {"median_us": 10.0, "p20_us": 9.9, "p80_us": 10.1}
    row = {"class": "chunks led", "case": "B512-M64-L100-s0.1", "dtype": "float32", "MB": 10.6, "floor_us": 2.5,
           "times": {"merge sum": timing, "merge mean": timing, "chunks sum": timing,
                     "merge mean 1024/1/64/12": dict(timing, median_us=8.0),
                     "merge mean 2048/2/64/8": dict(timing, median_us=12.0, p80_us=14.0)},
           "errors": {"chunks mean": 1.0, "merge mean 1024/1/64/16": 1.0},
           "merge_mean_kernels": {"_merge_reduce_kernel": 7.0, "_merge_combine_kernel": 3.0}}
    table = merge_tiles.render([row])
    line = next(x for x in table.splitlines() if x.startswith("| chunks led"))
    assert "| wrong |" in line and "mean 1024/1/64/12: 8.0 |" in line
    assert "mean 2048/2/64/8 12.0*" in line and "mean 1024/1/64/16 wrong" in line
    assert "merge_reduce 7.0; merge_combine 3.0" in line


def test_the_tiles_table_adds_the_odd_backward_aims_with_a_wrong_one_named():
    timing = {"median_us": 10.0, "p20_us": 9.9, "p80_us": 10.1}
    row = {"class": "odd", "case": "B10000-M5-L16-s0.5", "dtype": "float32", "MB": 0.4, "floor_us": 0.2,
           "times": {"merge mean": timing}, "errors": {},
           "backward": {"expand aim 8 (production)": timing, "expand aim 12": "wrong"}}
    table = merge_tiles.render([row]).splitlines()
    assert "| case | dtype | expand aim 8 (production) | expand aim 12 |" in table
    assert "| B10000-M5-L16-s0.5 | float32 | 10.0 | wrong |" in table
    # a run without the backward (every mode but --odd) has no such table
    assert not any("expand aim" in x for x in merge_tiles.render([dict(row, backward={})]).splitlines())
