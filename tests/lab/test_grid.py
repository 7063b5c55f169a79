import pytest

from jaggedperf.inputs import DEFAULT_SEED, Case
from jaggedperf.lab import grid


@pytest.mark.parametrize("text,expected", [
    ("100", [100]),
    ("100:1000:100", [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000]),  # STOP lands: included
    ("100:1000:300", [100, 400, 700, 1000]),
    ("100:950:300", [100, 400, 700]),  # STOP does not land: not included
    ("3:6", [3, 4, 5, 6]),  # STEP defaults to 1
    ("7:7:5", [7]),
    ("1,2,8:32:8", [1, 2, 8, 16, 24, 32]),
    ("1e3", [1000]),
    (" 4 , 8 ", [4, 8]),
])
def test_int_values(text, expected):
    assert grid.int_values(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("0.1:0.9:0.1", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]),
    ("0:1:0.25", [0.0, 0.25, 0.5, 0.75, 1.0]),
    ("0.1:0.35:0.1", [0.1, 0.2, 0.3]),
    ("0.1,0.25", [0.1, 0.25]),
    ("0.7:0.9:0.1", [0.7, 0.8, 0.9]),
])
def test_float_values_are_exact_decimals(text, expected):
    values = grid.float_values(text)
    assert values == expected  # == on floats: 0.30000000000000004 would fail
    assert [repr(v) for v in values] == [repr(v) for v in expected]


@pytest.mark.parametrize("text,match", [
    ("abc", "not a number"),
    ("1:2:3:4", "START:STOP"),
    ("10:1", "below START"),
    ("1:10:0", "positive"),
    ("1:10:-1", "positive"),
    ("nan", "finite"),
    ("", "no values"),
    ("1:1e9", "at most"),
])
def test_bad_axis_text_says_why(text, match):
    with pytest.raises(ValueError, match=match):
        grid.int_values(text)


def test_int_axis_refuses_fractions():
    with pytest.raises(ValueError, match="not an integer"):
        grid.int_values("0.5:2:0.5")


def test_explicit_axes_give_every_combination_in_order_without_repeats():
    cases = grid.expand(B=[8, 16], M=[3], seqlen=[10, 20, 10], sparsity=[0.5], dtype=["bf16", "bfloat16"])
    assert cases == [Case(8, 3, 10, 0.5, dtype="bfloat16"), Case(8, 3, 20, 0.5, dtype="bfloat16"),
                     Case(16, 3, 10, 0.5, dtype="bfloat16"), Case(16, 3, 20, 0.5, dtype="bfloat16")]


def test_without_a_preset_the_shape_axes_are_required():
    with pytest.raises(ValueError, match="--seqlen, --sparsity"):
        grid.expand(B=[8], M=[3])


def test_unknown_preset_and_axis_are_refused():
    with pytest.raises(ValueError, match="tritonbench"):
        grid.expand("huge")
    with pytest.raises(ValueError, match="unknown axis"):
        grid.expand("seed", N=[1])


def test_seed_preset_is_the_two_seed_shapes():
    assert grid.expand("seed") == [Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75)]
    assert list(grid.SEED_CASES) == grid.expand("seed")


def test_tritonbench_dim_vals_match_get_dim_vals():
    assert grid.dim_vals([2, 6, 10, 12, 15, 18, 21]) == [
        4, 64, 1024, 4096, 32768, 262144, 2097152,  # 2**n
        3, 35, 99, 143, 224, 323, 440,  # (n-1)(n+1)
    ]
    assert grid.dim_vals([1, 2, 3]) == [2, 4, 8, 3]  # n=1 gives none, n=3 gives 8: already there


def test_tritonbench_preset_is_tritonbench_default_sweep():
    cases = grid.expand("tritonbench")
    dims = grid.dim_vals([2, 6, 10, 12, 15, 18, 21])
    assert len(cases) == len(dims) ** 2 * 6 * 5
    assert sorted({c.B for c in cases}) == sorted(dims) == sorted({c.M for c in cases})
    assert sorted({c.seqlen for c in cases}) == [100, 500, 1000, 3000, 10000, 18000]
    assert sorted({c.sparsity for c in cases}) == [0.1, 0.25, 0.5, 0.75, 0.9]
    assert {(c.distribution, c.dtype, c.seed) for c in cases} == {("tritonbench", "float32", DEFAULT_SEED)}


def test_explicit_axes_override_the_preset_axis():
    cases = grid.expand("tritonbench", B=[512], M=[64, 128], dtype=["bf16"])
    assert len(cases) == 2 * 6 * 5
    assert {(c.B, c.dtype) for c in cases} == {(512, "bfloat16")} and {c.M for c in cases} == {64, 128}
    assert sorted({c.seqlen for c in cases}) == [100, 500, 1000, 3000, 10000, 18000]  # kept from the preset
    seed = grid.expand("seed", B=[8, 16], seed=[1])
    assert seed == [Case(8, 64, 100, 0.1, seed=1), Case(16, 64, 100, 0.1, seed=1),
                    Case(8, 64, 500, 0.75, seed=1), Case(16, 64, 500, 0.75, seed=1)]


def test_byte_limit_filter_uses_the_values_size():
    small, big = Case(8, 4, 100, 0.5), Case(64, 256, 1000, 0.1)
    limit = small.values_nbytes()
    fit, too_large = grid.split_by_size([small, big], limit)
    assert fit == [small]
    ((case, why),) = too_large
    assert case == big and "byte limit" in str(why)
    assert grid.split_by_size([small, big], big.values_nbytes())[1] == []


def test_byte_limit_filter_drops_the_largest_tritonbench_cases_quickly():
    cases = grid.expand("tritonbench", M=[4096])
    fit, too_large = grid.split_by_size(cases, 8 * 10**9)
    assert fit and too_large and len(fit) + len(too_large) == len(cases)
    assert all(c.values_nbytes() <= 8 * 10**9 for c in fit)
    assert max(c.B for c, _ in too_large) == 2**21


def test_kernels_preset_covers_the_kernel_classes():
    classes = grid.kernel_classes()
    cases = grid.expand("kernels")
    assert [c for cs in classes.values() for c in cs] == cases  # every case in one class, in the preset's order
    narrow = classes["narrow"]
    assert {c.M for c in narrow} == {4, 8, 12, 16, 32} and {c.B for c in narrow} == {10_000, 100_000, 1_000_000}
    assert all(c.seqlen <= 16 for c in narrow)
    widths = {c.M for c in classes["odd_width"]}
    assert min(widths) == 24 and max(widths) == 1500 and all(m & (m - 1) for m in widths)  # none a power of two
    small = [c.values_nbytes() for c in classes["powerlaw_small"] if c.dtype == "float32"]
    assert all(c.distribution == "heavy" for c in classes["powerlaw_small"] + classes["powerlaw_large"])
    assert all(10e6 <= b <= 100e6 for b in small)
    assert min(c.values_nbytes() for c in classes["powerlaw_large"]) >= 256e6
    assert all(c.B == 1 and c.seqlen >= 10**6 and c.distribution == "fixed" for c in classes["giant"])
    assert all(c.distribution == "empty" and c.sparsity >= 0.9 for c in classes["empty"])
    assert set(grid.SEED_CASES) <= set(cases) and set(grid.BAR_CASES) <= set(cases)
    assert {c.dtype for c in cases} == {"float32", "bfloat16"}
    for name, cs in classes.items():
        assert any(c.dtype == "bfloat16" for c in cs) or name in ("bars",), name
