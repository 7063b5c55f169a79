import math
from dataclasses import replace

import numpy as np
import pytest

from jaggedperf.lab.plot import heatmap_data, latency, latency_data, roofline, roofline_data, speedup_heatmaps
from jaggedperf.lab.result import ERROR, OK, RunRecord
from lab.fake_results import IMPLEMENTATIONS, MODES, SEQLENS, SPARSITIES, make_record


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
    # two shapes; five non-eager modes each, plus ours vs best torch
    assert [(h.kind, h.shape.dtype, h.mode) for h in maps] == [
        ("speedup", "float32", m) for m in MODES[1:]] + [("ours_vs_best", "float32", None)] + [
        ("speedup", "bfloat16", m) for m in MODES[1:]] + [("ours_vs_best", "bfloat16", None)]
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
    assert len(maps) == 3  # compile:default, graph, ours vs best
    assert_files(maps)
    assert_files(roofline(small, tmp_path))
    assert_files(latency(small, tmp_path))
    assert len(list(tmp_path.iterdir())) == 2 * 5
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
