"""jaggedperf.compile's behaviour: same results, gradients, aliasing and seqlens as eager mode and torch.compile,
fewer graphs, and a fallback to torch.compile(fn) decided once per signature where the components fail.

Compiles are few and small (CI stays fast): most tests use the ``aot_eager`` backend, which runs Dynamo and
AOTAutograd (where the NJT handling lives) without Inductor's code generation.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import jaggedperf
import jaggedperf.boundary.function as boundary_function
import jaggedperf.impls.jagged_mean  # noqa: F401  (registers the jagged_mean implementations)
from jaggedperf.boundary import BoundaryFallbackWarning, BoundaryFunction, BoundaryModule
from jaggedperf.impls.registry import get_implementation
from tests.boundary.njts import NJT, assert_close, make_njt, seqlens, softmax_by_sequence



def fallbacks(record) -> list:
    return [w for w in record if issubclass(w.category, BoundaryFallbackWarning)]


@pytest.mark.parametrize("name", ["sum_padded", "nanmean_padded", "njt_mean", "unbind_mean"])
def test_seed_implementations_match_eager_and_torch_compile(name):
    impl = get_implementation("jagged_mean", name)
    extra = (7,) if impl.pads else ()
    ours, theirs = jaggedperf.compile(impl.fn), torch.compile(impl.fn)
    for seed, (B, max_len) in enumerate([(5, 6), (9, 4)]):
        nt, _ = make_njt(B, max_len, seed=seed)
        got = ours(nt, *extra)
        assert_close(got, impl.fn(nt, *extra))
        assert_close(got, theirs(nt, *extra))


VIEWS = {
    "unsqueeze": lambda nt: nt.unsqueeze(-1),
    "select": lambda nt: nt.select(2, 1),
    "narrow": lambda nt: nt.narrow(2, 0, 2),
    "values": lambda nt: nt.values(),
    "view_values": lambda nt: nt.values().view(-1),
    "identity": lambda nt: nt,
    "unflatten": lambda nt: nt.unflatten(-1, (2, 2)),
}


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_decomp_partition"])
@pytest.mark.parametrize("name", list(VIEWS))
def test_view_outputs_keep_eager_modes_gradients(name, backend):
    # AOTAutograd returns an output that aliases an input through an NJT's view ops detached from the autograd
    # graph: the boundary gives it back its edge, so training through it updates what eager mode updates. Where
    # torch.compile(fn) raises (select and narrow's backward on an NJT caching its seqlens), the boundary may raise
    # too, never return something else.
    fn = VIEWS[name]
    nt, _ = make_njt(4, 5, M=4, min_len=1, requires_grad=True)
    expected = fn(nt)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        try:
            got = jaggedperf.compile(fn, backend=backend)(nt)
        except Exception:  # noqa: BLE001
            got = None
    if got is None:
        torch._dynamo.reset()  # a compile of fn that failed leaves Dynamo's state for fn's code behind
        with pytest.raises(Exception):  # noqa: B017
            torch.compile(fn, backend=backend, dynamic=True)(nt)
        return
    assert got.requires_grad and (got.grad_fn is not None or got is nt)
    assert_close(got, expected)
    weights = torch.randn(expected.values().shape if expected.is_nested else expected.shape)
    grads = []
    for out in (expected, got):
        try:
            (out.values() if out.is_nested else out).mul(weights).sum().backward()
        except (RuntimeError, ValueError):  # narrow's and select's NJT backward raise in eager mode
            grads.append(None)
        else:
            grads.append(nt.grad.values().clone())
        nt.grad = None
    if grads[0] is None and grads[1] is not None:
        # ours may compute the gradient eager mode cannot (as_strided's backward), never another one: a view's
        # gradient is the output's gradient written through the same view into zeros
        grads[0] = torch.zeros_like(nt._values)
        view = fn(torch.nested.nested_tensor_from_jagged(grads[0], nt._offsets))
        (view.values() if view.is_nested else view).copy_(weights)
    if grads[1] is not None:
        assert_close(grads[1], grads[0])


def test_returning_an_argument_returns_that_very_object():
    nt, _ = make_njt(4, 5, requires_grad=True)
    other = torch.randn(3)
    a, b, c = jaggedperf.compile(lambda x, y: (x, y, x * 2), backend="aot_eager")(nt, other)
    assert a is nt and b is other and c.requires_grad


def test_aliased_arguments_stay_aliased_inside():
    def attention_like(query, key, value):
        if query is key and key is value:  # the tutorial's MultiHeadAttention branches on this
            return query * 3
        return query + key + value

    nt, _ = make_njt(4, 5)
    other = nt * 2  # the same ragged structure (offsets), another NJT
    compiled = jaggedperf.compile(attention_like, backend="aot_eager")
    assert_close(compiled(nt, nt, nt), nt * 3)
    assert_close(compiled(nt, nt, other), attention_like(nt, nt, other))


def test_an_njt_returned_in_several_places_is_one_object_as_in_eager_mode():
    def fn(nt):
        doubled = nt * 2
        return doubled, {"again": doubled, "input": nt, "other": nt + 1, "dense": nt.values()}, doubled

    nt, _ = make_njt(4, 5, requires_grad=True)
    first, inner, last = jaggedperf.compile(fn, backend="aot_eager")(nt)
    assert first is inner["again"] is last and inner["input"] is nt and inner["other"] is not first
    assert_close(first, nt * 2)
    assert_close(inner["other"], nt + 1)
    (first.values().sum() + last.values().sum()).backward()
    assert_close(nt.grad.values(), torch.full_like(nt.values(), 4.0))


@pytest.mark.parametrize("cache", ["minmax", "max", "min", ""])
def test_output_njts_cache_the_seqlens_eager_mode_caches(cache):
    def fn(nt):
        return nt.sin() * 2, nt.cos()

    nt, _ = make_njt(5, 6, min_len=2, cache=cache)
    got, eager = jaggedperf.compile(fn, backend="aot_eager")(nt), fn(nt)
    theirs = torch.compile(fn, backend="aot_eager", dynamic=True)(nt)
    for out, ref, tc in zip(got, eager, theirs):
        assert seqlens(out) == seqlens(ref) == seqlens(tc)
        assert out._offsets is nt._offsets  # the input's ragged dim: outputs combine with it
        for key in ("min_seqlen", "max_seqlen"):  # the input's own seqlen tensors, as eager's and torch.compile's
            held = [o._metadata_cache.get(key) for o in (out, ref, tc)]
            assert all(h is nt._metadata_cache.get(key) for h in held), key
        assert_close(out, ref)


def test_an_output_over_an_arguments_structure_leaves_the_region_as_its_values_alone():
    # The region returns no offsets or seqlen tensors for an NJT output over the first argument's offsets with that
    # argument's cached seqlens (AOTAutograd's runtime pays for each tensor returned): joining takes the argument's
    # own, as it took them from the returned ones. An output over an argument that shares its offsets tensor with an
    # earlier one caching other seqlens leaves with its tensors, as before.
    def fn(first, second):
        return first.sin() * 2, second.cos()

    first, _ = make_njt(5, 6, min_len=2, cache="")
    second = torch.nested.nested_tensor_from_jagged(torch.randn_like(first._values), first._offsets, min_seqlen=2,
                                                    max_seqlen=6)
    compiled = jaggedperf.compile(fn, backend="aot_eager")
    got, eager = compiled(first, second), fn(first, second)
    (region,) = compiled.regions.values()
    records = region(*jaggedperf.boundary.crossing.flatten((first, second), {}, mark=True).flat)
    assert records[0].source == 0 and records[0][1:4] == (None, None, None)
    assert records[1].source is None and records[1].offsets is first._offsets and records[1].max_seqlen is not None
    for out, ref in zip(got, eager):
        assert out._offsets is first._offsets and seqlens(out) == seqlens(ref)
        assert_close(out, ref)
    one, _ = make_njt(5, 6, min_len=2)
    alone = compiled.fn(one, one)
    out = compiled(one, one)[0]
    assert all(out._metadata_cache[k] is one._metadata_cache[k] for k in ("min_seqlen", "max_seqlen"))
    assert_close(out, alone[0])


READS_MIN_SEQLEN = {
    "get_methods": lambda nt: nt * nt._get_min_seqlen() + nt._get_max_seqlen(),
    "scale": lambda nt: nt * nt._min_seqlen,
    "return_it": lambda nt: (nt.sin(), nt._min_seqlen),
    "rebuild_with_it": lambda nt: torch.nested.nested_tensor_from_jagged(
        nt.values() * 2.0, nt.offsets(), min_seqlen=nt._min_seqlen, max_seqlen=nt._max_seqlen),
}


@pytest.mark.parametrize("name", list(READS_MIN_SEQLEN))
def test_reading_min_seqlen_inside_keeps_the_boundary_and_compiles_no_more_graphs_than_torch_compile(name):
    # By method or by property. Dynamo answers nt._min_seqlen (a property) only from a graph input's size: the
    # min_seqlen that crossed shifted by 2 failed it, and the signature fell back. It now crosses as its own size
    # after that failure: no fallback, eager mode's values and cached seqlens, no more graphs than torch.compile
    # (min_seqlen 0, 1, more; back to 0).
    fn = READS_MIN_SEQLEN[name]
    ours, theirs = CompileCounterWithBackend("aot_eager"), CompileCounterWithBackend("aot_eager")
    a, b = jaggedperf.compile(fn, backend=ours), torch.compile(fn, backend=theirs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for i, min_len in enumerate([0, 2, 1, 3, 0, 4]):
            nt, _ = make_njt(4 + i, 6 + i, seed=i, min_len=min_len)
            expected, got, theirs_out = fn(nt), a(nt), b(nt)
            if isinstance(expected, tuple):
                assert got[1] == theirs_out[1] == expected[1] == min_len
                expected, got, theirs_out = expected[0], got[0], theirs_out[0]
            assert_close(got, expected)
            assert_close(theirs_out, expected)
            assert seqlens(got) == seqlens(expected)
    assert ours.frame_count <= theirs.frame_count, (ours.frame_count, theirs.frame_count)


def test_no_recompile_across_b_total_and_max_seqlen_and_one_more_only_for_empty_sequences():
    def mean_plus(nt, bias):
        # to_padded_tensor pads to the NJT's max_seqlen: the graph depends on it
        return nt.to_padded_tensor(0.0).sum(dim=1) / nt.offsets().diff().clamp(min=1).unsqueeze(1) + bias

    counter = CompileCounterWithBackend("aot_eager")
    compiled = jaggedperf.compile(mean_plus, backend=counter)
    shapes = set()
    for i in range(22):
        # min_seqlen moves between 0, 1 and more, max_seqlen between 3 and 15: before torch 2.15 a graph for
        # min_seqlen 0 and one for the rest (building the NJT inside guards on a seqlen of 0), one graph from 2.15;
        # torch.compile on the NJT takes more (4 on 2.15)
        B, max_len = 3 + (i * 5) % 17, 3 + (i * 7) % 13
        nt, _ = make_njt(B, max_len, seed=i, min_len=i % 3)
        shapes.add((B, nt._values.shape[0], max_len))
        bias = torch.randn(3)
        assert_close(compiled(nt, bias), mean_plus(nt, bias))
    assert len(shapes) == 22
    assert counter.frame_count == (2 if torch.torch_version.TorchVersion(torch.__version__) < (2, 15) else 1)


def test_torch_compile_on_the_njt_recompiles_where_the_boundary_does_not():
    def fn(nt):
        return nt.mean(dim=1)

    theirs, ours = CompileCounterWithBackend("aot_eager"), CompileCounterWithBackend("aot_eager")
    a, b = torch.compile(fn, backend=theirs), jaggedperf.compile(fn, backend=ours)
    for i in range(3):
        nt, _ = make_njt(4 + i, 5, seed=i, min_len=1)
        a(nt), b(nt)
    assert (theirs.frame_count, ours.frame_count) == (2, 1)


def test_gradients_reach_leaf_njts_and_module_parameters():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(3, 4)

        def forward(self, nt, scale):
            return torch.softmax(self.proj(nt), dim=1) * scale

    torch.manual_seed(0)
    block = Block()
    compiled = jaggedperf.compile(block, backend="aot_eager")
    assert isinstance(compiled, BoundaryModule)
    assert compiled.proj is block.proj and list(compiled.parameters()) == list(block.parameters())
    nt, _ = make_njt(5, 4, min_len=1, requires_grad=True)
    grads = []
    # eager mode's softmax over the ragged dim has a wrong gradient (test_lowering.py): the reference computes it
    # sequence by sequence
    for run in (lambda x, scale: softmax_by_sequence(block.proj(x)) * scale, compiled):
        out = run(nt, 0.5)
        assert out.is_nested and out.requires_grad
        (out.values() ** 2).sum().backward()
        grads.append((nt.grad.values().clone(), block.proj.weight.grad.clone()))
        nt.grad, block.proj.weight.grad, block.proj.bias.grad = None, None, None
    for got, expected in zip(grads[1], grads[0]):
        assert_close(got, expected)


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf-njt", "njt-of-values-that-train"])
def test_a_softmax_over_the_ragged_dim_without_a_cached_max_seqlen_trains(leaf):
    # The softmax computes the max_seqlen (a host read eager mode caches on the NJT): Dynamo breaks the graph there
    # unless the region is compiled whole, and the NJT handed between the two graphs came back in the backward with
    # that cached seqlen, which the first graph's backward rejected (an AssertionError in backward(), no fallback).
    # Compiled whole, the read fails once; the boundary then computes the max_seqlen before crossing, as eager mode
    # computes it, and compiles on the components with no fallback.
    def fn(nt):
        return torch.softmax(nt, dim=1) * 3.0

    boundary = jaggedperf.compile(fn, backend="aot_eager")
    grads, caches = [], []
    # torch's gradient of it is wrong (test_lowering.py): the boundary's is held to the sequence-by-sequence one,
    # torch.compile's to eager mode's
    for run in (fn, torch.compile(fn, backend="aot_eager"), boundary, lambda nt: softmax_by_sequence(nt) * 3.0):
        nt, values = make_njt(5, 4, min_len=1, cache="", requires_grad=leaf)
        source = nt if leaf else values.requires_grad_()
        if not leaf:
            nt = torch.nested.nested_tensor_from_jagged(source, nt.offsets())
        out = run(nt)
        (out.values() * torch.arange(out.values().numel()).view_as(out.values())).sum().backward()
        grads.append((out.values().detach(), (source.grad.values() if leaf else source.grad).clone()))
        caches.append((seqlens(nt), seqlens(out)))
    for got, expected in ((grads[1], grads[0]), (grads[2], grads[3])):
        for g, want in zip(got, expected):
            assert_close(g, want)
    assert boundary.last_fallback is None and not boundary.fallbacks and boundary.seqlens_first == ("max",)
    assert caches[2] == caches[1] == caches[0] == ((None, 4), (None, 4))  # the max cached on the NJT and its output


def test_seqlens_computed_before_crossing_reach_njts_in_containers_and_keywords():
    def fn(pair, *, scale):
        return [torch.softmax(nt, dim=1) * scale for nt in pair]

    boundary = jaggedperf.compile(fn, backend="aot_eager")
    for seed in range(3):
        pair = [make_njt(4, 5, seed=seed, min_len=1, cache="")[0] for _ in range(2)]
        expected = fn([make_njt(4, 5, seed=seed, min_len=1, cache="")[0] for _ in range(2)], scale=2.0)
        for got, want in zip(boundary(pair, scale=2.0), expected):
            assert_close(got, want)
            assert seqlens(got) == seqlens(want)
        assert [seqlens(nt) for nt in pair] == [(None, 5)] * 2  # eager mode's softmax caches the max on its input
    assert boundary.last_fallback is None and not boundary.fallbacks and boundary.seqlens_first == ("max",)


def test_a_region_is_compiled_whole_so_data_dependent_reads_compile_once_per_b():
    # Reading the lengths as Python numbers inside: one graph for each B, not a graph break and a recompile a call
    def per_segment_sum(nt):
        return torch.stack([p.sum(0) for p in torch.split(nt.values(), nt.offsets().diff().tolist())])

    counter = CompileCounterWithBackend("aot_eager")
    compiled = jaggedperf.compile(per_segment_sum, backend=counter)
    frames = []
    for seed, (B, max_len) in enumerate([(5, 6), (5, 4), (5, 8), (7, 3)]):
        nt, _ = make_njt(B, max_len, seed=seed, min_len=1)
        assert_close(compiled(nt), per_segment_sum(nt))
        frames.append(counter.frame_count)
    assert compiled.last_fallback is None and [f - frames[0] for f in frames] == [0, 0, 0, 1]


def test_a_function_that_breaks_the_graph_on_the_components_falls_back_with_a_warning():
    def noisy(nt):
        torch._dynamo.graph_break()
        return nt.values().sum(0)

    compiled = jaggedperf.compile(noisy, backend="aot_eager")
    nt, _ = make_njt(4, 5)
    with pytest.warns(BoundaryFallbackWarning, match="graph_break|graph break|Unsupported"):
        assert_close(compiled(nt), noisy(nt))
    assert compiled.last_fallback is not None


@pytest.mark.parametrize("trains", ["leaf-njt", "parameters"])
def test_a_gradient_penalty_keeps_its_history_and_raises_as_torch_compile_does(trains):
    # grad(..., create_graph=True) through the boundary: the gradient keeps its edges (requires_grad, a grad_fn), so
    # differentiating it again reaches the compiled backward, which raises as torch.compile's does; the penalty is
    # never dropped from a loss where torch.compile keeps it. (torch 2.11's compiled backward keeps the history of
    # what it returns only where one of its inputs requires grad: where torch.compile's returns a gradient without
    # history, its penalty silently adds nothing; ours may keep it there and raise, never the reverse.)
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 3)

    def fn(nt):
        return linear(nt).tanh() if trains == "parameters" else nt.sin() * 2.0

    outcomes = []
    for run in (torch.compile(fn, backend="aot_eager"), jaggedperf.compile(fn, backend="aot_eager")):
        nt, _ = make_njt(4, 5, min_len=1, requires_grad=trains == "leaf-njt")
        wrt = nt if trains == "leaf-njt" else linear.weight
        out = run(nt)
        (grad,) = torch.autograd.grad(out.values().sum(), wrt, create_graph=True)
        state = (grad.requires_grad, grad.grad_fn is not None)
        penalty = ((grad.values() if grad.is_nested else grad) ** 2).sum()
        try:
            (out.values().sum() + penalty).backward()
        except RuntimeError as err:
            ended = str(err).splitlines()[0]
        else:  # a gradient returned without history (torch 2.11): the penalty added nothing
            leaves = (linear.weight, linear.bias) if trains == "parameters" else (nt,)
            ended = [(leaf.grad.values() if leaf.grad.is_nested else leaf.grad).clone() for leaf in leaves]
        outcomes.append((state, ended))
        linear.zero_grad()
    (state, ended), (our_state, ours) = outcomes
    if our_state != state:
        # only better: torch 2.11's torch.compile on an NJT leaf returns the gradient without history (the penalty
        # silently adds nothing), where ours keeps it and the second backward raises
        assert state == (False, False) and our_state == (True, True) and isinstance(ours, str), outcomes
        return
    if isinstance(ended, str):
        assert ours == ended and state == (True, True)  # torch 2.13+: the history kept, the second backward raises
    else:
        torch.testing.assert_close(ours, ended)


IN_PLACE = {
    "mul_then_use": lambda x, w: (x.mul_(2.0), x.sin())[1],
    "mul_and_return": lambda x, w: x.mul_(2.0),
    "relu_and_return": lambda x, w: torch.relu_(x),
    "add_a_parameter": lambda x, w: (x.add_(w), x.cos())[1],
}


def _in_place_run(run, name: str, trains: str) -> tuple:
    """The outcome of ``run`` on an NJT modified in place by ``IN_PLACE[name]``, the NJT used again after the call:
    (raised, the NJT's values, out's values, x.requires_grad, the gradients of the values under x and of w)."""
    gen = torch.Generator().manual_seed(3)
    under = torch.randn(12, 4, generator=gen, dtype=torch.float64).requires_grad_(trains == "non-leaf")
    w = torch.randn(4, generator=gen, dtype=torch.float64).requires_grad_()
    offsets = torch.tensor([0, 3, 7, 12])
    x = torch.nested.nested_tensor_from_jagged(under * 1.0 if trains == "non-leaf" else under.clone(), offsets)
    if trains == "leaf":
        x = x.detach().requires_grad_()
    try:
        out = run(lambda nt: IN_PLACE[name](nt, w))(x)
    except RuntimeError:
        return (True, x.values().detach().clone())
    loss = out.values().sum() + (x.values() ** 2).sum()  # x used again: its history must hold the change
    grads = torch.autograd.grad(loss, [t for t in (under, w) if t.requires_grad], allow_unused=True)
    return (False, x.values().detach().clone(), out.values().detach().clone(), x.requires_grad, grads)


@pytest.mark.parametrize(("name", "trains"), [(name, trains) for name in IN_PLACE for trains in ("leaf", "non-leaf")]
                         + [("add_a_parameter", "a-parameter-only")])  # (else nothing requires grad: the next test)
def test_an_njt_argument_modified_in_place_keeps_eager_modes_gradients(name, trains):
    # Its values cross as a detached alias (or as the NJT's own inner tensor): the compiled runtime would write the
    # change there, with the alias's history, never the caller's NJT's, so its later uses missed the change's
    # gradient. Such a change (one autograd records) is found while tracing, before any data changes, and the
    # signature goes to torch.compile(fn): eager mode's values, gradients and errors (a leaf NJT: both raise, the
    # NJT unchanged).
    expected = _in_place_run(lambda fn: fn, name, trains)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        got = _in_place_run(lambda fn: jaggedperf.compile(fn, backend="aot_eager"), name, trains)
    assert got[0] is expected[0]
    torch.testing.assert_close(got[1:3], expected[1:3])
    if not expected[0]:
        assert got[3] is expected[3] is True
        for mine, eager in zip(got[4], expected[4]):
            torch.testing.assert_close(mine, eager)
        (warning,) = fallbacks(record)
        assert "in place" in str(warning.message)


def test_an_in_place_change_autograd_does_not_record_stays_on_the_boundary():
    # Nothing requires grad (or grad mode is off): the change writes through the alias into the caller's values, as
    # eager mode's does, and the call keeps the boundary.
    def fn(x):
        x.mul_(2.0)
        return x.sin()

    for no_grad in (False, True):
        nt, values = make_njt(4, 5, min_len=1, requires_grad=no_grad)
        expected_nt = nt.detach().clone()
        expected = fn(expected_nt)
        compiled = jaggedperf.compile(fn, backend="aot_eager")
        with torch.no_grad() if no_grad else torch.enable_grad():
            out = compiled(nt)
        assert compiled.last_fallback is None and not compiled.fallbacks
        assert_close(out, expected)
        assert_close(nt.detach(), expected_nt)


@pytest.mark.parametrize("how", ["TORCHDYNAMO_DISABLE=1", "disable=True", "config.disable"])
def test_with_dynamo_disabled_every_call_is_fns_own(how, monkeypatch):
    # torch.compile then returns fn itself (or runs it without Dynamo), and so does the boundary, on the caller's own
    # NJTs: the region run without Dynamo ran fn on NJTs rebuilt from the parts, where a leaf NJT changed in place
    # did not raise and a non-leaf one's later uses missed the change's gradient.
    kwargs = {"backend": "aot_eager", "disable": True} if how == "disable=True" else {"backend": "aot_eager"}
    if how == "TORCHDYNAMO_DISABLE=1":
        monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    with torch._dynamo.config.patch(disable=how == "config.disable"):
        for trains in ("leaf", "non-leaf"):
            expected = _in_place_run(lambda fn: fn, "mul_then_use", trains)
            got = _in_place_run(lambda fn: jaggedperf.compile(fn, **kwargs), "mul_then_use", trains)
            assert got[0] is expected[0]
            torch.testing.assert_close(got[1:], expected[1:])
        seen = []
        compiled = jaggedperf.compile(lambda x: seen.append(x) or x * 2.0, **kwargs)
        nt, _ = make_njt(3, 4, min_len=1)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        assert_close(compiled(nt), nt * 2.0)
    assert len(seen) == 1 and seen[0] is nt
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs and compiled.disabled
    assert not compiled.regions and compiled.last_fallback is None


class _JaggedAttention(torch.nn.Module):
    """The PyTorch tutorial's NJT multi-head attention, small: projections, SDPA over (B, H, j, D), out projection."""

    def __init__(self, width: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.project = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(4))

    def forward(self, query, key, value):
        q, k, v = (p(t).unflatten(-1, (self.heads, -1)).transpose(1, 2)
                   for p, t in zip(self.project, (query, key, value)))
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.project[3](attended.transpose(1, 2).flatten(-2))


@pytest.mark.parametrize("attention", ["self", "cross"])
def test_jagged_attention_trains_as_in_eager_mode(attention):
    # SDPA on NJTs, the most common NJT workload: outputs, the input NJT's gradient and the parameters' gradients are
    # eager mode's, over two batches of other lengths (on a CPU its math path unbinds the NJTs, which no region can
    # trace whole: the calls go to torch.compile(fn), with its warning).
    torch.manual_seed(0)
    module = _JaggedAttention()
    compiled = jaggedperf.compile(module, backend="aot_eager")
    for seed in (1, 2):
        x, _ = make_njt(3, 5, M=8, seed=seed, min_len=1, requires_grad=True)
        memory = make_njt(3, 4, M=8, seed=seed + 10, min_len=1)[0] if attention == "cross" else x
        outcomes = []
        for run in (module, compiled):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BoundaryFallbackWarning)
                out = run(x, memory, memory)
            out.values().square().sum().backward()
            outcomes.append((out.values().detach(), x.grad.values().clone(), [p.grad.clone() for p in module.parameters()]))
            x.grad = None
            module.zero_grad()
        (out, grad, params), (expected_out, expected_grad, expected_params) = outcomes[1], outcomes[0]
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(grad, expected_grad)
        for mine, eager in zip(params, expected_params):
            torch.testing.assert_close(mine, eager)


def test_no_grad_calls_cross_without_autograd():
    nt, _ = make_njt(4, 5, requires_grad=True)
    with torch.no_grad():
        out = jaggedperf.compile(lambda x: x.values().sum(0), backend="aot_eager")(nt)
    assert not out.requires_grad and out.grad_fn is None


def test_a_function_reading_the_lengths_compiles_once_per_batch_size_without_falling_back():
    # The seed's unbind_mean reads every length (nt.unbind()): compiled whole on the components, the lengths
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
    assert compiled.last_fallback is None and not compiled.fallbacks
    assert [f - frames[0] for f in frames] == [0, 0, 0, 1, 1, 1]
    assert not torch._dynamo.config.capture_scalar_outputs  # the settings are the boundary's, not global


def test_njt_with_holes_falls_back_with_one_warning_at_the_users_line():
    def double_sum(nt):
        return (nt * 2).sum()

    values, offsets, lengths = torch.randn(10, 3), torch.tensor([0, 4, 7, 10]), torch.tensor([2, 3, 1])
    compiled = jaggedperf.compile(double_sum, backend="aot_eager")
    with pytest.warns(BoundaryFallbackWarning, match="lengths") as record:
        for _ in range(3):
            nt = torch.nested.nested_tensor_from_jagged(values, offsets, lengths)
            got = compiled(nt)
    assert len(fallbacks(record)) == 1 and fallbacks(record)[0].filename == __file__
    assert_close(got, double_sum(nt))
    assert "lengths" in compiled.last_fallback


def test_a_module_falling_back_warns_at_the_users_call():
    class Double(torch.nn.Module):
        def forward(self, nt):
            return (nt * 2).sum()

    nt = torch.nested.nested_tensor_from_jagged(torch.randn(10, 3), torch.tensor([0, 4, 7, 10]),
                                                torch.tensor([2, 3, 1]))
    with pytest.warns(BoundaryFallbackWarning, match="lengths") as record:
        jaggedperf.compile(Double(), backend="aot_eager")(nt)
    assert len(fallbacks(record)) == 1 and fallbacks(record)[0].filename == __file__


def test_transposed_njt_falls_back_and_its_njt_output_passes_through():
    nt, _ = make_njt(4, 5, min_len=1)
    compiled = jaggedperf.compile(lambda x: x * 2, backend="aot_eager")
    with pytest.warns(BoundaryFallbackWarning, match="ragged dim is 2"):
        out = compiled(nt.transpose(1, 2))
    assert isinstance(out, NJT) and out._ragged_idx == 2
    assert_close(out.transpose(1, 2).values(), nt.values() * 2)


class PickyBackend:
    """Refuses graphs without an NJT input (the boundary's) but takes the NJT itself (torch.compile's): a compile
    on the components that fails where torch.compile(fn) does not. Counts the graphs it refused."""

    def __init__(self, refuse=RuntimeError):
        self.refuse, self.refused = refuse, 0

    def __call__(self, gm, example_inputs):
        if not any(isinstance(t, torch.Tensor) and t.is_nested for t in example_inputs):
            self.refused += 1
            raise self.refuse("picky backend: no NJT input")
        return gm.forward


def test_a_signature_that_fails_on_components_falls_back_once_and_is_not_retried():
    def fn(nt):
        return nt.values().sum(0)

    backend = PickyBackend()
    compiled = jaggedperf.compile(fn, backend=backend)
    with pytest.warns(BoundaryFallbackWarning, match="picky backend") as record:
        for i in range(4):
            nt, _ = make_njt(4, 5, seed=i, min_len=2)
            assert_close(compiled(nt), fn(nt))
    assert len(fallbacks(record)) == 1 and fallbacks(record)[0].filename == __file__
    assert backend.refused == 1  # decided on the first call; never compiled on the components again
    assert list(compiled.fallbacks) == [(None, ("jmx",))] and "picky backend" in compiled.last_fallback


def test_a_failure_outside_dynamos_exceptions_falls_back_too():
    # e.g. an IndexError from Dynamo's guard building, or a RuntimeError from the compiled code at run time
    backend = PickyBackend(refuse=IndexError)
    compiled = jaggedperf.compile(lambda nt: nt.values().sum(0), backend=backend)
    nt, _ = make_njt(4, 5, min_len=2)
    with pytest.warns(BoundaryFallbackWarning, match="IndexError"):
        assert_close(compiled(nt), nt.values().sum(0))


def test_only_the_failing_signature_falls_back():
    def fn(nt):
        if nt._min_seqlen_tensor is None:  # a branch only one signature's graph takes
            return nt.values().sum(0)
        return nt.values().mean(0)

    class NoSumOnComponents(PickyBackend):
        def __call__(self, gm, example_inputs):
            if "sum" in str(gm.code) and not any(t.is_nested for t in example_inputs if isinstance(t, torch.Tensor)):
                self.refused += 1
                raise RuntimeError("no sums here")
            return gm.forward

    compiled = jaggedperf.compile(fn, backend=NoSumOnComponents())
    with_min, _ = make_njt(4, 5, min_len=2)
    without_min, _ = make_njt(4, 5, min_len=2, cache="max")
    with pytest.warns(BoundaryFallbackWarning, match="no sums"):
        assert_close(compiled(without_min), fn(without_min))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        assert_close(compiled(with_min), fn(with_min))
    assert compiled.last_fallback is None and list(compiled.fallbacks) == [(None, ("j-x",))]


def test_user_errors_are_raised_as_torch_compile_raises_them():
    def bad(nt, w):
        return nt.values() @ w  # (total, 3) @ (4, 2): a shape error

    compiled = jaggedperf.compile(bad, backend="aot_eager")
    nt, _ = make_njt(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for _ in range(2):
            with pytest.raises(Exception, match="shape|size|mat"):
                compiled(nt, torch.randn(4, 2))
    assert not compiled.fallbacks


@pytest.mark.parametrize("own_from_the_start", [True, False])
@pytest.mark.parametrize("norm", ["layer_norm", "rms_by_hand"])
def test_norms_compile_on_the_components_with_eagers_values_and_gradients(norm, own_from_the_start, monkeypatch):
    # Both compare the ragged size of an NJT made in the graph with an int: before torch 2.15 Dynamo cannot build
    # that guard (an IndexError on every compile). The boundary rebuilds NJTs with ragged sizes of its own there from
    # the start, or compiles again so after that failure
    monkeypatch.setattr(boundary_function, "_OWN_RAGGED", own_from_the_start)
    layer = torch.nn.LayerNorm(4)

    def rms_by_hand(nt):
        return nt * torch.rsqrt(nt.pow(2).mean(-1, keepdim=True) + 1e-6)

    fn = layer if norm == "layer_norm" else rms_by_hand
    compiled = jaggedperf.compile(fn, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for seed in range(3):
            nt, _ = make_njt(5 + seed, 6, M=4, seed=seed, min_len=1, requires_grad=True)
            out, ref = compiled(nt), fn(nt)
            assert_close(out, ref)
            assert out.requires_grad and out._offsets is nt._offsets
            grad = torch.nested.nested_tensor_from_jagged(torch.randn_like(out.values()), out.offsets())
            out.backward(grad)
            got = [nt.grad.values().clone()] + [p.grad.clone() for p in layer.parameters() if p.grad is not None]
            nt.grad = None
            layer.zero_grad(set_to_none=True)
            ref.backward(grad)
            want = [nt.grad.values()] + [p.grad for p in layer.parameters() if p.grad is not None]
            assert len(got) == len(want) == (3 if norm == "layer_norm" else 1)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b)
            layer.zero_grad(set_to_none=True)
    boundary = compiled.boundary if norm == "layer_norm" else compiled
    assert not boundary.fallbacks
    if own_from_the_start:
        assert boundary.own_ragged


def test_kwargs_and_nested_containers():
    def combine(nt, *, batch, scale=1.0):
        a = batch["a"].mean(dim=1)
        b_nt, weight = batch["b"]
        return {"mean": (a + b_nt.values().sum(0)) * scale, "scaled": b_nt * weight, "weight": weight, "a": batch["a"]}

    nt_a, _ = make_njt(4, 5, seed=1, min_len=1)
    nt_b, _ = make_njt(3, 6, seed=2, min_len=2)
    weight = torch.tensor(3.0)
    compiled = jaggedperf.compile(combine, backend="aot_eager")
    assert isinstance(compiled, BoundaryFunction) and compiled.__name__ == "combine"
    for _ in range(2):
        got = compiled(nt_a, batch={"a": nt_a, "b": [nt_b, weight]}, scale=2.0)
    expected = combine(nt_a, batch={"a": nt_a, "b": [nt_b, weight]}, scale=2.0)
    assert set(got) == {"mean", "scaled", "weight", "a"}
    assert_close(got["mean"], expected["mean"])
    assert isinstance(got["scaled"], NJT) and got["scaled"]._offsets is nt_b._offsets
    assert_close(got["scaled"], expected["scaled"])
    assert got["weight"] is weight and got["a"] is nt_a


def test_decorator_form_and_non_callable():
    @jaggedperf.compile(backend="aot_eager", dynamic=False)
    def f(nt):
        return nt.values() + 1

    nt, _ = make_njt(3, 4)
    assert_close(f(nt), nt.values() + 1)
    assert not f._mark  # dynamic=False: nothing is marked dynamic
    with pytest.raises(TypeError, match="function or nn.Module"):
        jaggedperf.compile(3)


def test_a_function_returning_its_inputs_compiles_no_graph_and_then_passes_through():
    # the region's rebuild of an NJT nobody uses is all its graph holds: not compiled (torch.compile compiles none
    # either), and the signature's later calls go to torch.compile(fn), whose call costs less than the region's
    counter = CompileCounterWithBackend("aot_eager")
    compiled = jaggedperf.compile(lambda nt, scale: (nt, scale), backend=counter)
    nt, _ = make_njt(4, 5, min_len=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)  # not a failure: no warning
        for _ in range(3):
            out, scale = compiled(nt, 2.0)
            assert out is nt and scale == 2.0
    assert counter.frame_count == 0
    assert list(compiled.pass_through) == [(None, ("jmx", "a"))] and compiled.last_fallback is None
    (region,) = compiled.regions.values()
    assert region(*jaggedperf.boundary.crossing.flatten((nt, 2.0), {}, mark=True).flat)[0].index == 0
    doubled = jaggedperf.compile(lambda nt: nt * 2, backend="aot_eager")
    doubled(nt), doubled(nt)
    assert not doubled.pass_through  # a region that computes keeps the components


def test_an_ops_check_of_its_inputs_is_raised_as_eager_raises_it_with_no_fallback():
    # the compiled code raises the jagged op's ValueError as it runs on bad offsets: the caller's error, not a
    # failure of the components, so nothing is compiled on the NJT for it and the signature keeps its region
    def softmax(nt):
        return jaggedperf.jagged_softmax(nt)

    compiled = jaggedperf.compile(softmax, backend="aot_eager")
    good, _ = make_njt(3, 4, min_len=1)
    assert_close(compiled(good), softmax(good))
    bad = torch.nested.nested_tensor_from_jagged(good.values(), torch.tensor([0, 5, 3, good.values().shape[0]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for _ in range(2):
            with pytest.raises(ValueError, match="offsets"):
                softmax(bad)
            with pytest.raises(ValueError, match="offsets"):
                compiled(bad)
    assert compiled._fallback is None and not compiled.fallbacks
    assert_close(compiled(good), softmax(good))


def test_a_call_with_no_njt_argument_is_torch_compiles_without_a_warning():
    # nothing crosses: the region would be torch.compile(fn) with fullgraph, so a graph break inside fn (here a
    # data-dependent narrow) fell back with a warning where torch.compile(fn) just breaks the graph
    def fn(values, lengths):
        return torch.nested.narrow(values, 1, 0, lengths, layout=torch.jagged).values().sum()

    compiled = jaggedperf.compile(fn, backend="aot_eager")
    values = torch.randn(3, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for lengths in (torch.tensor([2, 5, 1]), torch.tensor([3, 1, 4])):
            assert_close(compiled(values, lengths), fn(values, lengths))
    assert not compiled.regions and not compiled.fallbacks and compiled.last_fallback is None


def test_a_deep_copy_of_a_compiled_module_runs_and_trains_its_own_weights():
    # the copied regions called the original module: a copy (an EMA or teacher model) ran the original's weights
    torch.manual_seed(0)
    compiled = jaggedperf.compile(torch.nn.Linear(3, 3), backend="aot_eager")
    nt, _ = make_njt(4, 5)
    compiled(nt)
    copied = copy.deepcopy(compiled)
    with torch.no_grad():
        for p in copied.parameters():
            p.zero_()
    assert copied(nt).values().abs().sum() == 0
    copied(nt.detach().requires_grad_()).values().sum().backward()
    assert all(p.grad is not None for p in copied.parameters())
    assert all(p.grad is None for p in compiled.parameters()) and compiled(nt).values().abs().sum() > 0
