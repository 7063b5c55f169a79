"""Bad inputs: no crash and no silent wrong answer on any entry point (the public functions and
``torch.ops.jaggedperf.*``), one test per item. Crash-prone calls run in a subprocess, so that a crash
fails the test instead of killing pytest."""

import pytest
import torch
from helpers.interpret import needs_interpreter
from helpers.isolated import error_text, run_isolated
from helpers.reference import assert_matches, lengths_to_offsets, reference_expand, reference_reduce
from torch.autograd import forward_ad

import jaggedperf
from jaggedperf import checks
from jaggedperf.ops.reduce import op

OPS = torch.ops.jaggedperf


# 1. unchecked bad offsets on the CPU: an error, never a crash

def test_bad_offsets_on_the_cpu_raise_instead_of_crashing():
    result = run_isolated("""
        OPS = torch.ops.jaggedperf
        calls = {
            "sum-2**40": lambda: jaggedperf.jagged_sum(torch.randn(6, 3), torch.tensor([0, 2**40, 6])),
            "mean-past-end": lambda: jaggedperf.jagged_mean(torch.randn(6, 3), torch.tensor([0, 10, 6])),
            "int32-max": lambda: jaggedperf.jagged_mean(torch.randn(6, 3), torch.tensor([0, 2**31 - 1, 6], dtype=torch.int32)),
            "expand": lambda: OPS.jagged_expand(torch.randn(2, 3), torch.tensor([0, 10, 6]), 6, True),
            "ops-sum-negative": lambda: OPS.jagged_sum(torch.randn(6, 3), torch.tensor([0, -4, 6])),
            "ops-mean-short": lambda: OPS.jagged_mean(torch.randn(6, 3), torch.tensor([0, 2, 5]), False),
            "expand-n-rows": lambda: OPS.jagged_expand(torch.randn(2, 3), torch.tensor([0, 2, 6]), 9, False),
        }
        for name, call in calls.items():
            try:
                call()
                result[name] = "returned"
            except Exception as e:
                result[name] = f"{type(e).__name__}: {e}"
    """)
    assert result == {
        "sum-2**40": "ValueError: offsets must be non-decreasing; offsets[2]=6 < offsets[1]=1099511627776",
        "mean-past-end": "ValueError: offsets must be non-decreasing; offsets[2]=6 < offsets[1]=10",
        "int32-max": "ValueError: offsets must be non-decreasing; offsets[2]=6 < offsets[1]=2147483647",
        "expand": "ValueError: offsets must be non-decreasing; offsets[2]=6 < offsets[1]=10",
        "ops-sum-negative": "ValueError: offsets must be non-decreasing; offsets[1]=-4 < offsets[0]=0",
        "ops-mean-short": "ValueError: offsets[-1] must equal values.shape[0]=6; got 5",
        "expand-n-rows": "ValueError: offsets[-1] must equal n_rows=9; got 6",
    }


# 2. the operators run the public functions' checks, with the same messages

V, O = torch.randn(6, 3), lengths_to_offsets([2, 4])

OPERATOR_ERRORS = [
    ("int-values", lambda: OPS.jagged_sum(torch.tensor([[2**40 + 1]]), torch.tensor([0, 1])), TypeError,
     "values dtype torch.int64 is not supported"),
    ("bool-values", lambda: OPS.jagged_mean(V > 0, O, False), TypeError, "values dtype torch.bool is not supported"),
    ("float-offsets", lambda: OPS.jagged_sum(V, O.float()), TypeError, "offsets must be int32 or int64; got torch.float32"),
    ("int16-offsets", lambda: OPS.jagged_sum(V, O.to(torch.int16)), TypeError, "offsets must be int32 or int64"),
    ("uint8-offsets", lambda: OPS.jagged_mean(V, O.to(torch.uint8), True), TypeError, "offsets must be int32 or int64"),
    ("max-seqlen-negative", lambda: OPS.jagged_sum(V, O, -5), ValueError,
     "jagged_sum: max_seqlen must be None or an int in \\[0, 2\\*\\*63 - 1\\]; got -5"),
    ("mean-max-seqlen-negative", lambda: OPS.jagged_mean(V, O, True, -5), ValueError, "jagged_mean: max_seqlen"),
    ("3d-values", lambda: OPS.jagged_sum(torch.randn(6, 3, 1), O), ValueError, "values must be 2-D \\(total_len, M\\); got 3-D"),
    ("2d-offsets", lambda: OPS.jagged_sum(V, O[None]), ValueError, "offsets must be 1-D"),
    ("empty-offsets", lambda: OPS.jagged_sum(V, O[:0]), ValueError, "offsets must hold B\\+1 >= 1"),
    ("two-devices", lambda: OPS.jagged_sum(V, O.to("meta")), ValueError, "offsets must be on the same device"),
    ("expand-int-grad", lambda: OPS.jagged_expand(torch.ones(2, 3, dtype=torch.int32), O, 6, False), TypeError,
     "grad dtype torch.int32 is not supported"),
    ("expand-b-mismatch", lambda: OPS.jagged_expand(torch.randn(3, 3), O, 6, False), ValueError,
     "grad must have B = offsets.shape\\[0\\] - 1 = 2 rows; got 3"),
    ("expand-3d", lambda: OPS.jagged_expand(torch.randn(2, 3, 1), O, 6, False), ValueError, "grad must be 2-D"),
    ("expand-negative-rows", lambda: OPS.jagged_expand(torch.randn(2, 3), O, -1, False), ValueError,
     "n_rows must be >= 0; got -1"),
    ("expand-max-seqlen", lambda: OPS.jagged_expand(torch.randn(2, 3), O, 6, False, -2), ValueError,
     "jagged_expand: max_seqlen"),
]


@pytest.mark.parametrize("name,call,exc,match", OPERATOR_ERRORS, ids=[e[0] for e in OPERATOR_ERRORS])
def test_operators_check_like_the_public_functions(name, call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_operator_checks_are_traced_too():
    # metadata checks in the body: torch.compile (fake tensors) raises the same error
    f = torch.compile(lambda v, o: OPS.jagged_sum(v, o), backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception) as caught:
        f(torch.randn(6, 3, 1), O)
    assert "values must be 2-D (total_len, M); got 3-D" in error_text(caught.value)


# 3. non-contiguous values through the operators' Triton branch

@needs_interpreter
@pytest.mark.parametrize("max_seqlen", [None, 4], ids=["chunks", "segments"])
def test_triton_branch_takes_any_strides(max_seqlen):
    lengths = [2, 0, 4, 1]
    offsets = lengths_to_offsets(lengths)
    values = torch.randn(7, 10)[:, ::2]  # (7, 5), stride 10
    assert not values.is_contiguous()
    for mean, empty_zero in ((False, False), (True, True)):
        out = op.reduce_triton(values, offsets, mean=mean, empty_zero=empty_zero, max_seqlen=max_seqlen)
        ref = reference_reduce(values, offsets, mean=mean, empty_zero=empty_zero)
        assert_matches(out, ref, torch.float32, scale=reference_reduce(values, offsets, mean=mean, empty_zero=True,
                                                                       absolute=True))
    grad = torch.randn(4, 10)[:, ::2]
    out = op.expand_triton(grad, offsets, 7, mean=True, max_seqlen=max_seqlen)
    torch.testing.assert_close(out.double(), reference_expand(grad, offsets, 7, mean=True))


# 4. validate=True (and JAGGEDPERF_VALIDATE) under torch.compile checks: never a silent skip

@pytest.fixture
def no_compile_caches():
    # a cached graph compiled from older code would not run this code's checks
    with torch._inductor.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        yield
        torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_validate_under_compile_asserts_in_the_graph(dynamic, no_compile_caches, monkeypatch):
    validated = torch.compile(lambda v, o: jaggedperf.jagged_sum(v, o, validate=True), fullgraph=True, dynamic=dynamic)
    torch.testing.assert_close(validated(V, O), reference_reduce(V, O, mean=False).float())
    # the opaque CPU kernel checks too: the graph's assert must come first to show it is there
    for bad, message in (([1, 3, 6], "offsets\\[0\\] must be 0$"), ([0, 4, 2, 6], "non-decreasing$"),
                         ([0, 3, 7], "must equal values.shape\\[0\\]$")):
        with pytest.raises(RuntimeError, match=message):
            validated(V, torch.tensor(bad))
    monkeypatch.setenv("JAGGEDPERF_VALIDATE", "on")
    by_env = torch.compile(lambda v, o: jaggedperf.jagged_mean(v, o), fullgraph=True, dynamic=dynamic)
    with pytest.raises(RuntimeError, match="offsets\\[0\\] must be 0$"):
        by_env(V, torch.tensor([1, 3, 6]))


def test_assert_offsets_async_checks_each_rule():
    good = lengths_to_offsets([0, 2, 4])
    checks.assert_offsets_async(V, good)
    checks.assert_offsets_async(torch.randn(0, 3), torch.zeros(1, dtype=torch.int32))
    for bad, message in (([1, 3, 6], "offsets\\[0\\] must be 0"), ([0, 4, 2, 6], "non-decreasing"),
                         ([0, 3, 7], "values.shape\\[0\\]")):
        with pytest.raises(RuntimeError, match=message):
            checks.assert_offsets_async(V, torch.tensor(bad))


# 5. forward-mode AD: the jvp is the operator applied to the tangent

FORWARD_CASES = {
    "sum": (lambda x, o: jaggedperf.jagged_sum(x, o), False, False),
    "mean": (lambda x, o: jaggedperf.jagged_mean(x, o, empty="zero"), True, True),
    "ops.sum": (lambda x, o: OPS.jagged_sum(x, o, 4), False, False),
    "ops.mean": (lambda x, o: OPS.jagged_mean(x, o, True), True, True),
}


@pytest.mark.parametrize("name", list(FORWARD_CASES))
def test_forward_mode_ad_carries_the_tangent(name):
    fn, mean, empty_zero = FORWARD_CASES[name]
    offsets = lengths_to_offsets([2, 0, 4, 1])
    primal, tangent = torch.randn(7, 3), torch.randn(7, 3)
    ref = reference_reduce(tangent, offsets, mean=mean, empty_zero=empty_zero).float()
    out, jvp = torch.func.jvp(lambda x: fn(x, offsets), (primal,), (tangent,))
    torch.testing.assert_close(jvp, ref)
    torch.testing.assert_close(out, reference_reduce(primal, offsets, mean=mean, empty_zero=empty_zero).float())
    with forward_ad.dual_level():
        dual_out = fn(forward_ad.make_dual(primal, tangent), offsets)
        torch.testing.assert_close(forward_ad.unpack_dual(dual_out).tangent, ref)


def test_expand_forward_mode_and_jacobians_agree():
    offsets = lengths_to_offsets([2, 0, 4])
    grad, tangent = torch.randn(3, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    _, jvp = torch.func.jvp(lambda g: OPS.jagged_expand(g, offsets, 6, True), (grad,), (tangent,))
    torch.testing.assert_close(jvp, reference_expand(tangent, offsets, 6, mean=True))
    values = torch.randn(6, 2, dtype=torch.float64)
    f = lambda x: OPS.jagged_mean(x, offsets, True)  # noqa: E731
    torch.testing.assert_close(torch.func.jacfwd(f)(values), torch.func.jacrev(f)(values))
    assert torch.autograd.gradcheck(f, (values.requires_grad_(),), check_forward_ad=True)


# 6. our message for each of the unclear errors

def test_max_seqlen_past_int64_and_through_the_operator():
    with pytest.raises(ValueError, match="max_seqlen must be None or an int in \\[0, 2\\*\\*63 - 1\\]; got 2361183241434822606848"):
        jaggedperf.jagged_sum(V, O, max_seqlen=2**71)
    with pytest.raises(ValueError, match="max_seqlen must be None or an int"):
        jaggedperf.jagged_mean(V, O, max_seqlen=2**63)


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph-breaks", "fullgraph"])
def test_negative_max_seqlen_under_dynamic_compile(fullgraph, no_compile_caches):
    f = torch.compile(lambda v, o, m: jaggedperf.jagged_sum(v, o, max_seqlen=m), dynamic=True, fullgraph=fullgraph)
    f(V, O, 5)  # max_seqlen is a SymInt from here on
    with pytest.raises(Exception) as caught:
        f(V, O, -1)
    assert "jagged_sum: max_seqlen must be None or an int in [0, 2**63 - 1]; got -1" in error_text(caught.value)


def test_nested_tensor_whose_offsets_do_not_span_its_values():
    nt = torch.nested.nested_tensor_from_jagged(torch.randn(10, 3), torch.tensor([0, 2, 6]))
    with pytest.raises(ValueError, match="offsets\\[-1\\] must equal values.shape\\[0\\]=10; got 6"):
        jaggedperf.jagged_sum(nt)


# 7. JAGGEDPERF_VALIDATE parsed as users expect

@pytest.mark.parametrize("raw,on", [("1", True), ("true", True), ("YES", True), (" On ", True), ("0", False),
                                    ("false", False), ("No", False), ("off", False), ("", False)])
def test_validate_switch_values(raw, on, monkeypatch):
    monkeypatch.setenv("JAGGEDPERF_VALIDATE", raw)
    assert checks.validation_requested(None) is on
    assert checks.validation_requested(None) is on  # the parsed value is cached per raw value
    assert checks.validation_requested(False) is False and checks.validation_requested(True) is True


@pytest.mark.parametrize("raw", ["2", "maybe", "enable"])
def test_anything_else_is_an_error(raw, monkeypatch):
    monkeypatch.setenv("JAGGEDPERF_VALIDATE", raw)
    with pytest.raises(ValueError, match=f"JAGGEDPERF_VALIDATE='{raw}' is not a switch"):
        jaggedperf.jagged_sum(V, O)
    assert isinstance(jaggedperf.jagged_sum(V, O, validate=False), torch.Tensor)  # the argument wins
