"""jaggedperf.compile: torch.compile on an NJT's components, rebuilt inside the compiled region.

Compiles are few and small (CI stays fast): most tests use the ``aot_eager`` backend, which runs
Dynamo and AOTAutograd (where the NJT handling lives) without Inductor's code generation; one test
compares the seed implementations under Inductor against eager and torch.compile.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import jaggedperf
import jaggedperf.impls.jagged_mean  # noqa: F401  (registers the jagged_mean implementations)
from jaggedperf.boundary import BoundaryFallbackWarning, BoundaryFunction, BoundaryModule
from jaggedperf.boundary.crossing import Parts, flatten, split_args
from jaggedperf.impls.registry import get_implementation

NJT = torch.nested._internal.nested_tensor.NestedTensor


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def make_njt(B: int, max_len: int, M: int = 3, *, seed: int = 0, min_len: int = 0,
             requires_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(nt, values leaf): lengths in [min_len, max_len], one of each bound present, seqlens cached."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (B,), generator=gen)
    lengths[0] = max_len
    lengths[-1] = min_len
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    values = torch.randn(int(offsets[-1]), M, generator=gen, requires_grad=requires_grad)
    nt = torch.nested.nested_tensor_from_jagged(values, offsets, min_seqlen=min_len, max_seqlen=max_len)
    return nt, values


def assert_close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, equal_nan=True, rtol=1e-5, atol=1e-6)


def test_split_reads_components_without_copies():
    nt, values = make_njt(4, 5, min_len=2)
    (parts,), kwargs, reason = split_args((nt,), {}, mark=True)
    assert reason is None and kwargs == {}
    assert isinstance(parts, Parts)
    assert parts.values is nt._values and parts.offsets is nt._offsets
    # the NJT's own cached (max_seqlen, 0) tensor: nothing allocated; min_seqlen does not cross
    assert parts.min_seqlen is None
    assert parts.max_seqlen is nt._metadata_cache["max_seqlen"]
    for t in (parts.values, parts.offsets, parts.max_seqlen):
        assert 0 in t._dynamo_weak_dynamic_indices  # ragged dims cross marked dynamic
    (no_cache,), _, _ = split_args((torch.nested.nested_tensor_from_jagged(nt._values, nt._offsets),), {}, mark=False)
    assert no_cache.min_seqlen is None and no_cache.max_seqlen is None


def test_positional_arguments_cross_flat():
    nt, _ = make_njt(4, 5, min_len=2)
    plain = torch.randn(2)
    layout, flat, reason = flatten((nt, plain, 3), mark=True)
    assert reason is None and layout == ("n", "a", "a")
    assert flat[0] is nt._values and flat[1] is nt._offsets and flat[2] is nt._metadata_cache["max_seqlen"]
    assert flat[3] is plain and flat[4] == 3
    no_max = torch.nested.nested_tensor_from_jagged(nt._values, nt._offsets)
    assert flatten((no_max,), mark=False)[0] == ("v",)
    assert flatten(([nt],), mark=False) is None  # a container: the pytree path


@pytest.mark.parametrize("name", ["sum_padded", "nanmean_padded", "njt_mean", "unbind_mean"])
def test_seed_implementations_match_eager_and_torch_compile(name):
    impl = get_implementation("jagged_mean", name)
    extra = (7,) if impl.pads else ()
    ours, theirs = jaggedperf.compile(impl.fn), torch.compile(impl.fn)
    for seed, (B, max_len) in enumerate([(5, 6), (9, 4)]):
        nt, _ = make_njt(B, max_len, seed=seed)
        expected = impl.fn(nt, *extra)
        got = ours(nt, *extra)
        assert_close(got, expected)
        assert_close(got, theirs(nt, *extra))


def _padded_mean(nt):
    return nt.sin().to_padded_tensor(0.0).sum(dim=1) / nt.offsets().diff().unsqueeze(1)


def _softmax_values(nt):
    return torch.softmax(nt, dim=1).values() * 3


@pytest.mark.parametrize("fn", [_padded_mean, _softmax_values], ids=["padded_mean", "softmax"])
def test_gradients_reach_the_leaf_values_as_in_eager(fn):
    # Not the seed's functions: their padding op has no eager derivative, and torch.compile cannot
    # differentiate NJT mean/sum over the ragged dim (NotImplemented, with or without the boundary).
    nt, leaf = make_njt(5, 6, min_len=1, requires_grad=True)
    weights = torch.randn(fn(nt).shape)
    (fn(nt) * weights).sum().backward()
    expected, leaf.grad = leaf.grad.clone(), None
    out = jaggedperf.compile(fn, backend="aot_eager")(nt)
    assert out.requires_grad
    (out * weights).sum().backward()
    assert_close(leaf.grad, expected)


def test_no_grad_crosses_values_without_autograd():
    nt, _ = make_njt(4, 5, requires_grad=True)
    with torch.no_grad():
        (parts,), _, _ = split_args((nt,), {}, mark=False)
        assert parts.values is nt._values  # the attribute, not the dispatching accessor
        out = jaggedperf.compile(lambda x: x.values().sum(0), backend="aot_eager")(nt)
    assert not out.requires_grad


def test_njt_output_round_trips_with_its_offsets_and_seqlens():
    def double(nt):
        return nt * 2

    nt, leaf = make_njt(6, 5, min_len=2, requires_grad=True)
    out = jaggedperf.compile(double, backend="aot_eager")(nt)
    assert isinstance(out, NJT)
    assert out._offsets is nt._offsets  # the same nested int: it combines with the input
    assert (out._maybe_min_seqlen, out._maybe_max_seqlen) == (None, 5)  # min_seqlen does not cross
    assert_close(out.values(), nt.values() * 2)
    assert_close((out + nt).values(), nt.values() * 3)
    out.values().sum().backward()  # the rebuilt NJT is a differentiable view of the region's output
    assert_close(leaf.grad, torch.full_like(leaf, 2.0))


def test_module_is_compiled_through_the_boundary():
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(3, 4)

        def forward(self, nt, scale):
            return self.proj(nt).to_padded_tensor(0.0).sum(dim=1) * scale

    torch.manual_seed(0)
    head = Head()
    compiled = jaggedperf.compile(head, backend="aot_eager")
    assert isinstance(compiled, BoundaryModule)
    assert compiled.proj is head.proj and list(compiled.parameters()) == list(head.parameters())
    nt, _ = make_njt(5, 4, min_len=1)
    expected = head(nt, 0.5)
    expected.sum().backward()
    grad, head.proj.weight.grad = head.proj.weight.grad.clone(), None
    got = compiled(nt, 0.5)
    assert_close(got, expected)
    got.sum().backward()
    assert_close(head.proj.weight.grad, grad)


def test_no_recompile_across_calls_of_varying_b_total_and_max_seqlen():
    def mean_plus(nt, bias):
        # to_padded_tensor pads to the NJT's max_seqlen: the graph depends on it
        return nt.to_padded_tensor(0.0).sum(dim=1) / nt.offsets().diff().unsqueeze(1) + bias

    counter = CompileCounterWithBackend("aot_eager")
    compiled = jaggedperf.compile(mean_plus, backend=counter)
    shapes = set()
    for i in range(22):
        # min_seqlen moves between 0, 1 and >= 2: it does not cross, so it cannot specialise
        B, max_len = 3 + (i * 5) % 17, 3 + (i * 7) % 13
        nt, _ = make_njt(B, max_len, seed=i, min_len=i % 3)
        shapes.add((B, nt._values.shape[0], max_len))
        bias = torch.randn(3)
        assert_close(compiled(nt, bias), mean_plus(nt, bias))
    assert len(shapes) == 22
    assert counter.frame_count == 1


def test_torch_compile_on_the_njt_recompiles_where_the_boundary_does_not():
    # The comparison the boundary exists for: B changing recompiles torch.compile on the NJT once
    # (automatic dynamic), not the boundary (B crosses marked dynamic).
    def fn(nt):
        return nt.mean(dim=1)

    theirs, ours = CompileCounterWithBackend("aot_eager"), CompileCounterWithBackend("aot_eager")
    a, b = torch.compile(fn, backend=theirs), jaggedperf.compile(fn, backend=ours)
    for i in range(3):
        nt, _ = make_njt(4 + i, 5, seed=i)
        a(nt), b(nt)
    assert (theirs.frame_count, ours.frame_count) == (2, 1)


def test_a_function_reading_the_lengths_compiles_once_per_batch_size_without_falling_back():
    # The seed's unbind_mean reads every length (nt.unbind()): on symbolic components Dynamo fails on the
    # data-dependent values, so the boundary compiles it again with them as unbacked symbols; then the lengths
    # change freely and only a new B (the number of unrolled means) compiles a graph.
    impl = get_implementation("jagged_mean", "unbind_mean")
    counter = CompileCounterWithBackend("aot_eager")
    compiled = jaggedperf.compile(impl.fn, backend=counter)
    frames = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for seed, (B, max_len) in enumerate([(5, 6), (5, 4), (5, 8), (7, 3), (7, 9), (5, 2)]):
            nt, _ = make_njt(B, max_len, seed=seed, min_len=1)
            assert_close(compiled(nt), impl.fn(nt))
            frames.append(counter.frame_count)
    assert compiled.dynamo_config and compiled.broken is None
    # the first call compiles (the failed attempt's graph before the lengths, then the retry's); after it
    # only B = 7 adds a graph
    assert [f - frames[0] for f in frames] == [0, 0, 0, 1, 1, 1]
    assert not torch._dynamo.config.capture_scalar_outputs  # the settings are the boundary's, not global


def test_njt_with_holes_falls_back_with_one_warning():
    def double_sum(nt):
        return (nt * 2).sum()

    values = torch.randn(10, 3)
    offsets = torch.tensor([0, 4, 7, 10])
    lengths = torch.tensor([2, 3, 1])
    compiled = jaggedperf.compile(double_sum, backend="aot_eager")
    with pytest.warns(BoundaryFallbackWarning, match="lengths") as record:
        for _ in range(3):
            nt = torch.nested.nested_tensor_from_jagged(values, offsets, lengths)
            got = compiled(nt)
    warned = [w for w in record if issubclass(w.category, BoundaryFallbackWarning)]
    assert len(warned) == 1
    assert warned[0].filename == __file__  # the user's call, not the boundary's frames
    assert_close(got, double_sum(nt))


def test_a_module_falling_back_warns_at_the_users_call():
    class Double(torch.nn.Module):
        def forward(self, nt):
            return (nt * 2).sum()

    nt = torch.nested.nested_tensor_from_jagged(torch.randn(10, 3), torch.tensor([0, 4, 7, 10]),
                                                torch.tensor([2, 3, 1]))
    compiled = jaggedperf.compile(Double(), backend="aot_eager")
    with pytest.warns(BoundaryFallbackWarning, match="lengths") as record:
        compiled(nt)
    warned = [w for w in record if issubclass(w.category, BoundaryFallbackWarning)]
    assert len(warned) == 1 and warned[0].filename == __file__


def test_transposed_njt_falls_back_and_its_njt_output_passes_through():
    nt, _ = make_njt(4, 5, min_len=1)
    compiled = jaggedperf.compile(lambda x: x * 2, backend="aot_eager")
    with pytest.warns(BoundaryFallbackWarning, match="ragged dim is 2"):
        out = compiled(nt.transpose(1, 2))
    assert isinstance(out, NJT) and out._ragged_idx == 2
    assert_close(out.transpose(1, 2).values(), nt.values() * 2)


def test_compile_failure_on_components_falls_back_once():
    # A backend that refuses graphs without an NJT input (the boundary's) but accepts the NJT itself
    # (torch.compile's): the fallback path for a compile on the components that fails.
    def picky(gm, example_inputs):
        if not any(isinstance(t, torch.Tensor) and t.is_nested for t in example_inputs):
            raise RuntimeError("picky backend: no NJT input")
        return gm.forward

    def fn(nt):
        return nt.values().sum(0)

    compiled = jaggedperf.compile(fn, backend=picky)
    with pytest.warns(BoundaryFallbackWarning, match="picky backend") as record:
        for i in range(3):
            nt, _ = make_njt(4, 5, seed=i, min_len=2)
            assert_close(compiled(nt), fn(nt))
    warned = [w for w in record if issubclass(w.category, BoundaryFallbackWarning)]
    assert len(warned) == 1 and warned[0].filename == __file__  # after a failed compile: the user's line too
    assert compiled.broken is not None


def test_user_errors_are_raised_as_torch_compile_raises_them():
    def bad(nt, w):
        return nt.values() @ w  # (total, 3) @ (4, 2): a shape error

    compiled = jaggedperf.compile(bad, backend="aot_eager")
    nt, _ = make_njt(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        with pytest.raises(Exception, match="shape|size|mat"):
            compiled(nt, torch.randn(4, 2))
    assert compiled.broken is None


def test_kwargs_and_nested_containers():
    def combine(nt, *, batch, scale=1.0):
        a = batch["a"].mean(dim=1)
        b_nt, weight = batch["b"]
        return {"mean": (a + b_nt.values().sum(0)) * scale, "scaled": b_nt * weight, "weight": weight}

    nt_a, _ = make_njt(4, 5, seed=1)
    nt_b, _ = make_njt(3, 6, seed=2, min_len=2)
    weight = torch.tensor(3.0)
    compiled = jaggedperf.compile(combine, backend="aot_eager")
    assert isinstance(compiled, BoundaryFunction) and compiled.__name__ == "combine"
    for _ in range(2):
        got = compiled(nt_a, batch={"a": nt_a, "b": [nt_b, weight]}, scale=2.0)
    expected = combine(nt_a, batch={"a": nt_a, "b": [nt_b, weight]}, scale=2.0)
    assert set(got) == {"mean", "scaled", "weight"}
    assert_close(got["mean"], expected["mean"])
    assert isinstance(got["scaled"], NJT) and got["scaled"]._offsets is nt_b._offsets
    assert_close(got["scaled"].values(), expected["scaled"].values())
    assert_close(got["weight"], weight)


def test_decorator_form_and_non_callable():
    @jaggedperf.compile(backend="aot_eager", dynamic=False)
    def f(nt):
        return nt.values() + 1

    nt, _ = make_njt(3, 4)
    assert_close(f(nt), nt.values() + 1)
    assert not f._mark  # dynamic=False: nothing is marked dynamic
    with pytest.raises(TypeError, match="function or nn.Module"):
        jaggedperf.compile(3)
