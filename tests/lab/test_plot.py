import math
import random
from dataclasses import replace

import numpy as np
import pytest

from jaggedperf.lab.result import ERROR, OK, DeviceTime, RunRecord, WallStats
from jaggedperf.lab.results.figures import heatmap_data, latency_data, roofline_data
from jaggedperf.lab.results.plot import latency, roofline, speedup_heatmaps
from helpers.fake_results import IMPLEMENTATIONS, MODES, SEQLENS, SPARSITIES, cases, make_record, make_result


@pytest.fixture(scope="module")
def record() -> RunRecord:
    return make_record()


@pytest.fixture(scope="module")
def small() -> RunRecord:
    """Few figures to draw: the bf16 shape, three modes (njt_mean fails under graph)."""
    full = make_record()
    keep = [r for r in full.results if r.case.dtype == "bfloat16" and r.mode in ("eager", "compile:default", "graph")]
    return RunRecord(full.environment, keep, full.copy_gbps)


def find(record, impl, mode, seqlen, sparsity, dtype="float32"):
    (r,) = [r for r in record.results if (r.implementation, r.mode, r.case.seqlen, r.case.sparsity, r.case.dtype)
            == (impl, mode, seqlen, sparsity, dtype)]
    return r


def test_heatmap_figures_per_shape_and_mode(record):
    maps = heatmap_data(record)
    # two shapes; five non-eager modes each, plus ours vs best torch by wall time and by device time
    versus = [("ours_vs_best", None), ("ours_vs_best_device", None)]
    assert [(h.kind, h.mode) for h in maps] == 2 * ([("speedup", m) for m in MODES[1:]] + versus)
    assert [h.shape.dtype for h in maps] == ["float32"] * 7 + ["bfloat16"] * 7
    h = maps[0]
    assert h.seqlens == list(SEQLENS) and h.sparsities == list(SPARSITIES)
    assert [p.name for p in h.panels] == list(IMPLEMENTATIONS)
    assert all(p.values.shape == (3, 3) for p in h.panels)
    assert len({h.name for h in maps}) == len(maps)  # one file name each


def test_heatmap_values_are_the_speedups_over_eager(record):
    h = next(h for h in heatmap_data(record) if h.mode == "compile:max-autotune-no-cudagraphs" and h.shape.dtype == "float32")
    panel = {p.name: p.values for p in h.panels}
    for impl in ("sum_padded", "jaggedperf"):
        for i, L in enumerate(SEQLENS):
            for j, s in enumerate(SPARSITIES):
                eager = find(record, impl, "eager", L, s).wall.median_ms
                compiled = find(record, impl, "compile:max-autotune-no-cudagraphs", L, s).wall.median_ms
                assert panel[impl][i, j] == pytest.approx(eager / compiled, rel=1e-12)
    assert panel["sum_padded"][0, 0] < 1  # the shape: this mode is slower than eager
    # not ok cells are holes: segment_reduce is wrong at (100, 0.5); nanmean_padded is skipped at (10000, 0.9)
    assert math.isnan(panel["segment_reduce"][0, 1]) and math.isnan(panel["nanmean_padded"][2, 2])
    assert np.isfinite(panel["segment_reduce"]).sum() == 8
    assert h.left_out == {"wrong": 1, "skipped": 2}  # nanmean_padded skipped in eager and in this mode


def test_missing_eager_cell_falls_back_to_recorded_speedup(record):
    r = find(record, "sum_padded", "compile:default", 100, 0.1)
    rest = [x for x in record.results if x.key != find(record, "sum_padded", "eager", 100, 0.1).key]
    maps = heatmap_data(RunRecord(record.environment, rest, record.copy_gbps))
    h = next(h for h in maps if h.mode == "compile:default" and h.shape.dtype == "float32")
    (p,) = [p for p in h.panels if p.name == "sum_padded"]
    assert p.values[0, 0] == pytest.approx(r.speedup_vs_eager)


def test_ours_vs_best_torch_values(record):
    h = next(h for h in heatmap_data(record) if h.kind == "ours_vs_best" and h.shape.dtype == "float32")
    assert [p.name for p in h.panels] == list(MODES)
    panel = {p.name: p.values for p in h.panels}
    L, s = 1000, 0.5
    torch_best = min(r.wall.median_ms for r in record.results if r.implementation != "jaggedperf" and r.status == OK
                     and (r.case.seqlen, r.case.sparsity, r.case.dtype) == (L, s, "float32"))
    ours = find(record, "jaggedperf", "compile:reduce-overhead", L, s).wall.median_ms
    assert panel["compile:reduce-overhead"][1, 1] == pytest.approx(torch_best / ours, rel=1e-12)


def test_ours_vs_best_device_on_the_fake_grid(record):
    """Every cell of the device map is best torch device / ours device, which is not the wall ratio."""
    maps = [h for h in heatmap_data(record) if h.shape.dtype == "float32" and h.kind.startswith("ours_vs_best")]
    wall, device = ({p.name: p.values for p in h.panels} for h in maps)
    assert maps[1].kind == "ours_vs_best_device" and list(device) == list(MODES)
    for mode in MODES:
        for i, L in enumerate(SEQLENS):
            for j, s in enumerate(SPARSITIES):
                torch_best = min(r.device_time.median_us for r in record.results if r.implementation != "jaggedperf"
                                 and r.status == OK and (r.case.seqlen, r.case.sparsity, r.case.dtype) == (L, s, "float32"))
                ours = find(record, "jaggedperf", mode, L, s).device_time.median_us
                assert device[mode][i, j] == pytest.approx(torch_best / ours, rel=1e-12)
                assert device[mode][i, j] != pytest.approx(wall[mode][i, j], rel=1e-3)
    assert maps[1].left_out == maps[0].left_out == {} and maps[1].unmeasured == 0


def timed(impl, mode, case, wall_ms, device_us, status=OK):
    """A fake cell with the given wall and device medians (``device_us=None``: no device time)."""
    r = make_result(impl, mode, case, random.Random(0))
    if status != OK:
        return replace(r, status=status, reason="x", wall=None, device_time=None)
    dev = None if device_us is None else DeviceTime(device_us, device_us, device_us, "graph", True)
    return replace(r, wall=WallStats(wall_ms, 0.0, wall_ms, wall_ms, wall_ms, 10), device_time=dev)


@pytest.fixture(scope="module")
def hand() -> RunRecord:
    """One shape, seqlen 100 × sparsity 0.1 / 0.5, known numbers. At s0.1 the best torch by wall
    (sum_padded) is not the best by device (segment_reduce); at s0.5 ours lacks device time in eager
    and failed under graph."""
    a, b = cases()[:2]
    results = [
        timed("sum_padded", "eager", a, 10.0, 8000.0),
        timed("segment_reduce", "eager", a, 12.0, 4000.0),
        timed("segment_reduce", "graph", a, 11.0, 5000.0),
        timed("jaggedperf", "eager", a, 5.0, 1600.0),
        timed("jaggedperf", "graph", a, 4.0, 500.0),
        timed("sum_padded", "eager", b, 6.0, 3000.0),
        timed("segment_reduce", "eager", b, 9.0, None),  # torch cell without device time: not a contender
        timed("segment_reduce", "graph", b, 7.0, 2400.0),
        timed("jaggedperf", "eager", b, 3.0, None),
        timed("jaggedperf", "graph", b, 0.0, 0.0, status=ERROR),
    ]
    return RunRecord(make_record().environment, results, None)


def test_ours_vs_best_device_values_on_a_known_grid(hand):
    wall, device = [h for h in heatmap_data(hand) if h.kind != "speedup"]
    assert (wall.kind, device.kind) == ("ours_vs_best", "ours_vs_best_device")
    assert (device.seqlens, device.sparsities) == ([100], [0.1, 0.5])
    values = {p.name: p.values for p in device.panels}
    assert list(values) == ["eager", "graph"]
    np.testing.assert_allclose(values["eager"], [[4000 / 1600, np.nan]], rtol=1e-12)
    np.testing.assert_allclose(values["graph"], [[4000 / 500, np.nan]], rtol=1e-12)
    # the wall map of the same grid: best torch wall / ours wall, ours eager at s0.5 still there
    np.testing.assert_allclose({p.name: p.values for p in wall.panels}["eager"], [[10 / 5, 6 / 3]], rtol=1e-12)
    assert device.left_out == wall.left_out == {"error": 1}
    assert (device.unmeasured, wall.unmeasured) == (1, 0)  # ours eager at s0.5 has no device time
    assert "device time" in device.title and "device time" not in wall.title
    assert device.name == "ours-vs-best-device_jagged_mean-B512-M64-float32-tritonbench"
    assert wall.name == "ours-vs-best_jagged_mean-B512-M64-float32-tritonbench"


def test_no_device_map_without_device_time(hand):
    bare = RunRecord(hand.environment, [replace(r, device_time=None) for r in hand.results], None)
    assert [h.kind for h in heatmap_data(bare) if h.kind != "speedup"] == ["ours_vs_best"]


def test_device_map_is_drawn_with_its_labels(tmp_path, hand):
    files = {f.name: f for f in speedup_heatmaps(hand, tmp_path)}
    f = files["ours-vs-best-device_jagged_mean-B512-M64-float32-tritonbench"]
    assert_files([f])
    assert f.title.startswith("jaggedperf vs best torch") and "best torch device time / jaggedperf device time" in f.title
    svg = f.svg.read_text()
    assert "best torch device time / jaggedperf device time" in svg  # title and colorbar label
    assert "(&gt;1: jaggedperf faster)" in svg
    assert "1 ok cell without device time left out" in svg and "1 cell not ok left out (1 error)" in svg
    wall_svg = files["ours-vs-best_jagged_mean-B512-M64-float32-tritonbench"].svg.read_text()
    assert "device time" not in wall_svg


def test_roofline_and_latency_data(record):
    (roof,) = roofline_data(record)
    assert roof.metric == "pct_of_copy" and roof.copy_gbps == record.copy_gbps
    ok = [r for r in record.results if r.status == OK]
    assert sum(len(s.x) for s in roof.series) == len(ok)
    assert roof.left_out == {"error": 14, "skipped": 6, "wrong": 1}
    assert {(s.implementation, s.mode) for s in roof.series} == {(r.implementation, r.mode) for r in ok}
    s = next(s for s in roof.series if (s.implementation, s.mode) == ("jaggedperf", "eager"))
    assert s.x == sorted(s.x)
    r = next(r for r in ok if (r.implementation, r.mode) == ("jaggedperf", "eager") and r.bytes_moved == s.x[0])
    assert s.y[0] == r.pct_of_copy
    (lat,) = latency_data(record)
    assert lat.metric == "device_us"
    s = next(s for s in lat.series if (s.implementation, s.mode) == ("jaggedperf", "eager"))
    assert s.y[0] == r.device_time.median_us


def test_fallbacks_when_numbers_are_missing(record):
    # no copy bandwidth -> GB/s; one cell without device time -> wall for all
    rs = [replace(r, pct_of_copy=None) for r in record.results]
    rs[0] = replace(rs[0], device_time=None, gbps=None)
    rec = RunRecord(record.environment, rs, None)
    (roof,) = roofline_data(rec)
    assert roof.metric == "gbps" and roof.unmeasured == 1
    (lat,) = latency_data(rec)
    assert lat.metric == "wall_us"
    s = next(s for s in lat.series if (s.implementation, s.mode) == (rs[0].implementation, rs[0].mode))
    assert rs[0].wall.median_ms * 1000 in s.y


def assert_files(files):
    assert files
    for f in files:
        png, svg = f.paths
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        text = svg.read_text()
        assert text.startswith("<?xml") and "<svg" in text and len(text) > 10_000


def test_drawing_writes_png_and_svg(tmp_path, small):
    maps = speedup_heatmaps(small, tmp_path)
    assert [f.name for f in maps] == [h.name for h in heatmap_data(small)]
    assert len(maps) == 4  # compile:default, graph, ours vs best by wall and by device time
    assert [f.name.split("_")[0] for f in maps[2:]] == ["ours-vs-best", "ours-vs-best-device"]
    assert_files(maps)
    assert_files(roofline(small, tmp_path))
    assert_files(latency(small, tmp_path))
    assert len(list(tmp_path.iterdir())) == 2 * 6
    svg = (tmp_path / f"{maps[1].name}.svg").read_text()
    assert "NVIDIA H200" in svg and "torch 2.13.0+cu130" in svg and "triton 3.6.0" in svg  # title names the setup
    assert "not ok left out (2 error)" in svg  # njt_mean under graph, both cases


def test_no_pyplot_state_is_left(tmp_path, small):
    import sys

    roofline(small, tmp_path)
    plt = sys.modules.get("matplotlib.pyplot")
    assert plt is None or plt.get_fignums() == []


def test_nothing_ok_still_draws_and_nothing_at_all_draws_nothing(tmp_path, small):
    failed = RunRecord(small.environment, [replace(r, status=ERROR, reason="x") for r in small.results[:12]], None)
    assert_files(roofline(failed, tmp_path))
    assert speedup_heatmaps(RunRecord({}, [], None), tmp_path) == []
    assert roofline(RunRecord({}, [], None), tmp_path) == []


# --- robust colour scales, unstable cells, bars, no empty roofline --------------------------------

from jaggedperf.lab.results.figures import NO_ROOFLINE  # noqa: E402
from jaggedperf.lab.results.plot import ratio_limit, ratio_ticks  # noqa: E402
from jaggedperf.lab.result import UNSTABLE  # noqa: E402


def test_one_outlier_cannot_flatten_the_colour_scale():
    near_one = np.array([0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 0.8])
    assert ratio_limit(near_one) == pytest.approx(1.25 * 1.05)
    with_outlier = np.append(near_one, 0.0015)  # the 0.0015×
    assert ratio_limit(with_outlier) < 1.6
    spread = np.array([0.25, 0.5, 1.0, 2.0, 4.0])  # evenly spread: the scale covers all of it
    assert ratio_limit(spread) == pytest.approx(4 * 1.05)
    assert ratio_limit(np.array([np.nan, -1.0])) == 1.25
    assert ratio_ticks(1.6) == [0.8, 1.0, 1.25] and ratio_ticks(4.2) == [0.5, 0.8, 1.0, 1.25, 2.0]
    assert all(f"{t:g}" == f"{t:.3g}" for t in ratio_ticks(1000))  # round numbers only


def _unstable_at(record, impl, mode, seqlen, sparsity):
    target = find(record, impl, mode, seqlen, sparsity).key
    rs = [replace(r, status=UNSTABLE, reason="wall IQR is 85% of the median (> 10%); after 3 attempts")
          if r.key == target else r for r in record.results]
    return RunRecord(record.environment, rs, record.copy_gbps)


def test_unstable_cells_are_hatched_not_valued(record, tmp_path):
    rec = _unstable_at(record, "sum_padded", "compile:max-autotune-no-cudagraphs", 100, 0.1)
    h = next(h for h in heatmap_data(rec) if h.mode == "compile:max-autotune-no-cudagraphs" and h.shape.dtype == "float32")
    panel = next(p for p in h.panels if p.name == "sum_padded")
    assert panel.unstable_mask()[0, 0] and math.isnan(panel.values[0, 0])  # no "× slower" drawn from it
    assert h.unstable == 1 and "unstable" not in h.left_out
    eager = _unstable_at(record, "jaggedperf", "eager", 1000, 0.5)  # an unstable eager hatches every mode's cell
    for h in (h for h in heatmap_data(eager) if h.kind == "speedup" and h.shape.dtype == "float32"):
        panel = next(p for p in h.panels if p.name == "jaggedperf")
        assert panel.unstable_mask()[1, 1] and math.isnan(panel.values[1, 1])
    small = RunRecord(rec.environment, [r for r in rec.results if r.case.dtype == "float32"
                                         and r.mode in ("eager", "compile:max-autotune-no-cudagraphs")], None)
    files = speedup_heatmaps(small, tmp_path)
    svg = (tmp_path / f"{files[0].name}.svg").read_text()
    assert "1 cell unstable (hatched" in svg


def test_a_grid_with_one_point_on_an_axis_is_drawn_as_bars(record, tmp_path):
    one = RunRecord(record.environment, [r for r in record.results if r.case.seqlen == 1000 and r.case.dtype == "float32"
                                         and r.mode in ("eager", "compile:default")], record.copy_gbps)
    (h, *_) = heatmap_data(one)
    assert h.bars and h.seqlens == [1000] and len(h.sparsities) == 3
    files = speedup_heatmaps(one, tmp_path)
    assert_files(files[:1])
    assert "sparsity 0.5" in (tmp_path / f"{files[0].name}.svg").read_text()


def test_no_roofline_without_device_time_and_the_latency_figure_says_so(record, tmp_path):
    cpu = RunRecord({}, [replace(r, device_time=None, gbps=None, pct_of_copy=None, host_us=None)
                         for r in record.results if r.case.dtype == "bfloat16"], None)
    assert roofline_data(cpu) == [] and roofline(cpu, tmp_path) == []
    (lat,) = latency_data(cpu)
    assert lat.metric == "wall_us" and lat.note == NO_ROOFLINE
    (f,) = latency(cpu, tmp_path)
    assert "no roofline: no cell has device time" in f.svg.read_text()
