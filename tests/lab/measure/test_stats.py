import numpy as np
import pytest

from jaggedperf.lab.measure import stats


def test_encode_decode_round_trips_at_float32_precision():
    x = np.random.default_rng(0).lognormal(0, 1, 500)
    text = stats.encode(x)
    assert text.startswith(stats.CODEC_PREFIX)
    back = stats.decode(text)
    assert back.dtype == np.float64 and back.shape == x.shape
    np.testing.assert_allclose(back, x.astype(np.float32), rtol=0, atol=0)
    assert len(text) < 4 * 500 * 1.4 + 20  # compact: float32 + base64, no JSON list of decimals


@pytest.mark.parametrize("bad", ["", "1,2,3", "f32z:not base64!", "f32z:" + "AAAA"])
def test_decode_refuses_what_it_did_not_write(bad):
    with pytest.raises(ValueError):
        stats.decode(bad)


def test_summarize_quantiles_of_known_values():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (s.n, s.mean, s.median, s.min, s.max) == (5, 4.0, 3.0, 1.0, 10.0)
    assert s.p20 == pytest.approx(1.8) and s.p80 == pytest.approx(5.2)
    assert s.iqr == pytest.approx(2.0)
    with pytest.raises(ValueError):
        stats.summarize([])
    with pytest.raises(ValueError):
        stats.summarize([1.0, float("nan")])


def test_outliers_move_the_std_but_not_the_quantiles():
    steady = [1.0 + 0.01 * (i % 5) for i in range(200)]
    spiked = list(steady)
    spiked[::20] = [400.0] * 10  # 5% of the calls preempted
    a, b = stats.summarize(steady), stats.summarize(spiked)
    assert b.std > 80 * a.std  # what "± std" printed
    assert b.median == pytest.approx(a.median, rel=0.01) and b.iqr < 0.05
    assert stats.stability(spiked).stable


def test_stability_flags_spread_and_drift():
    noisy = [100.0, 200.0, 50.0, 180.0, 60.0, 150.0] * 30  # µs
    j = stats.stability(noisy)
    assert not j.stable and j.iqr_rel > 0.5 and "IQR" in j.reasons[0]
    drift = [100.0] * 160 + [125.0] * 40  # µs: a tight IQR, but load arrived near the end
    j = stats.stability(drift)
    assert j.iqr_rel == 0 and j.drift_rel == pytest.approx(0.25)
    assert not j.stable and j.reasons == ["wall drifted: the last third's median rose 25% from the first third's (> 10%)"]
    assert stats.stability(drift, drift=False).stable
    few = stats.stability([1.0, 5.0, 0.1])  # three calls: too few to call unstable
    assert few.stable and not few.judged and few.drift_rel is None and few.reasons == []
    assert stats.stability([2.0, 1.0] * 5 + [2.0], stats.Policy(max_iqr_rel=2.0, max_drift_rel=2.0)).stable


def test_policy_refuses_nonsense():
    with pytest.raises(ValueError):
        stats.Policy(attempts=0)
    with pytest.raises(ValueError):
        stats.Policy(max_iqr_rel=0)


def test_bootstrap_ratio_brackets_a_real_change_and_not_noise():
    rng = np.random.default_rng(1)
    a = rng.normal(100, 2, 200)
    b = rng.normal(72, 2, 200)  # 0.72×
    r = stats.bootstrap_ratio(a, b)
    assert r.ratio == pytest.approx(0.72, rel=0.01) and r.low < r.ratio < r.high < 0.75
    same = stats.bootstrap_ratio(a, rng.normal(100, 2, 200))
    assert same.low < 1 < same.high
    assert stats.bootstrap_ratio(a, b) == r  # seeded
    # one enormous outlier on either side does not hide the change (what k·(σA+σB) did)
    b_out = b.copy()
    b_out[0] = 1e6
    assert stats.bootstrap_ratio(a, b_out).high < 0.75
    with pytest.raises(ValueError):
        stats.bootstrap_ratio([], b)
    with pytest.raises(ValueError):
        stats.bootstrap_ratio(a, b, confidence=1.0)


def test_intervals_overlap():
    assert stats.intervals_overlap((1, 2), (2, 3)) and not stats.intervals_overlap((1, 2), (2.1, 3))


def test_the_exact_median_distribution_matches_resampling():
    rng = np.random.default_rng(5)
    x = np.sort(rng.lognormal(0, 0.3, 61))
    cdf = stats.median_distribution(x.size)
    assert cdf[-1] == 1.0 and np.all(np.diff(cdf) >= 0)
    resampled = np.median(x[rng.integers(0, x.size, size=(20000, x.size))], axis=1)
    for q in (0.025, 0.5, 0.975):
        exact = x[np.searchsorted(cdf, q)]
        assert exact == pytest.approx(np.quantile(resampled, q), rel=0.02)
    assert stats.median_distribution(1).tolist() == [1.0]


def test_spreads_and_drifts_under_the_floor_never_count():
    tiny = [4.0, 4.5, 4.0, 5.0, 4.5, 4.0, 5.0, 4.5, 4.0, 5.0, 4.5, 4.0]  # µs: IQR 0.9 µs = 20% of the median
    assert stats.stability(tiny).stable
    assert not stats.stability(tiny, stats.Policy(floor_us=0.5)).stable
    ms = [x / 1e3 for x in tiny]  # the same in ms: the floor is in µs whatever the unit
    assert stats.stability(ms, to_us=1e3).stable
    assert not stats.stability(ms, stats.Policy(floor_us=0.5), to_us=1e3).stable


def test_moved_needs_both_the_ratio_and_apart_ranges():
    assert stats.moved(10.0, 8.0, (9.5, 10.5), (7.5, 8.5), 0.03)
    assert not stats.moved(10.0, 8.0, (9.5, 10.5), (7.5, 9.6), 0.03)  # ranges share a point: noise can explain it
    assert not stats.moved(10.0, 9.9, (9.99, 10.01), (9.89, 9.91), 0.03)  # apart, but within the minimum change
    assert stats.moved(10.0, 11.0, (9.9, 10.1), (10.9, 11.1), 0.03)  # slower moves too
