"""The row-wise families (softmax, layer norm) on the CPU under torch.compile: invalid offsets raise the eager
call's ValueError (the CPU kernels are opaque operators that check them), a valid batch compiles with
``dynamic=True`` whatever its length, and forward-mode AD carries the tangent (the Jacobian applied to it)."""

import pytest
import torch

import jaggedperf

FAMILIES = {"softmax": jaggedperf.jagged_softmax, "layer_norm": jaggedperf.jagged_layer_norm}
BAD_OFFSETS = {
    "decreasing": ([0, 5, 3, 10], "non-decreasing"),
    "first-not-0": ([1, 3, 3, 10], r"offsets\[0\] must be 0"),
    "short": ([0, 3, 3, 8], r"offsets\[-1\] must equal"),
    "long": ([0, 3, 3, 12], r"offsets\[-1\] must equal"),
    "past-the-rows": ([0, 1000, 1000, 10], "non-decreasing"),
}


@pytest.fixture(autouse=True)
def _fresh_compiles():
    torch._dynamo.reset()
    with torch.compiler.config.patch(force_disable_caches=True):  # an on-disk graph of another source tree
        yield
    torch._dynamo.reset()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compiled_call_raises_on_invalid_offsets(family, dynamic):
    fn = FAMILIES[family]
    compiled = torch.compile(lambda v, o: fn(v, o), dynamic=dynamic)
    values = torch.randn(10, 3)
    for offsets, message in BAD_OFFSETS.values():
        with pytest.raises(ValueError, match=message):
            compiled(values, torch.tensor(offsets))
    good = torch.tensor([0, 3, 3, 10])
    torch.testing.assert_close(compiled(values, good), fn(values, good))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rows", [1, 5])
def test_dynamic_compile_of_one_sequence(family, rows):
    fn = FAMILIES[family]
    compiled = torch.compile(fn, dynamic=True)
    values, offsets = torch.randn(rows, 4), torch.tensor([0, rows])
    torch.testing.assert_close(compiled(values, offsets), fn(values, offsets))


def _reference(family, x, offsets):
    pieces = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        s = x[a:b]
        if family == "softmax":
            pieces.append(torch.softmax(s, 0))
        elif b > a:
            pieces.append((s - s.mean()) / torch.sqrt(s.var(unbiased=False) + 1e-5))
    return torch.cat(pieces) if pieces else x[:0]


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_mode_ad_carries_the_tangent(family):
    fn = FAMILIES[family]
    offsets = torch.tensor([0, 2, 2, 7])
    x, t = torch.randn(7, 3), torch.randn(7, 3)
    _, tangent = torch.func.jvp(lambda v: fn(v, offsets), (x,), (t,))
    _, expected = torch.func.jvp(lambda v: _reference(family, v, offsets), (x.double(),), (t.double(),))
    torch.testing.assert_close(tangent.double(), expected, rtol=1e-4, atol=1e-5)
    with torch.autograd.forward_ad.dual_level():
        out = fn(torch.autograd.forward_ad.make_dual(x, t), offsets)
        dual = torch.autograd.forward_ad.unpack_dual(out).tangent
    assert dual is not None
    torch.testing.assert_close(dual.double(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_operator_checks_its_layout_like_the_public_function(family):
    op = getattr(torch.ops.jaggedperf, f"jagged_{family}")
    extra = (1e-5,) if family == "layer_norm" else ()
    with pytest.raises(TypeError, match="offsets must be int32 or int64"):
        op(torch.randn(3, 2), torch.tensor([0.0, 3.0]), *extra)
    with pytest.raises(ValueError, match="values must be 2-D"):
        op(torch.randn(3), torch.tensor([0, 3]), *extra)
