"""jaggedperf.compile under torch.compile's ``dynamic`` settings: static shapes (``dynamic=False``), every size
symbolic (``dynamic=True``) and sizes made dynamic after they changed (the default). Each stays on the components
(no fallback) with eager mode's values, gradients and cached seqlens, and compiles no more graphs than torch.compile.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._dynamo.testing import CompileCounterWithBackend

import jaggedperf
from jaggedperf.boundary import BoundaryFallbackWarning
from tests.boundary.njts import assert_close, make_njt, seqlens, softmax_by_sequence



FUNCTIONS = {
    "scale": lambda nt: nt * 2,
    # pads to the cached max_seqlen: the crossing (n, 0) tensor is the rebuilt NJT's, and the output NJT keeps it
    "ragged_softmax": lambda nt: nt.relu().softmax(dim=1),
    "padded_sum": lambda nt: nt.to_padded_tensor(0.0).sum(dim=1),
    "scale_by_max_seqlen": lambda nt: nt * nt._get_max_seqlen(),
}


# The same function sequence by sequence on dense tensors, where torch's NJT gradient is wrong (its softmax backward
# over the ragged dim reduces over the columns: test_lowering.py): the boundary's gradient is held to it, eager mode's
# and torch.compile's to each other.
BY_SEQUENCE = {FUNCTIONS["ragged_softmax"]: lambda nt: softmax_by_sequence(nt.relu())}
# read by the NJT's methods (PyTorch's test_compile_with_dynamic_max_seq_len), each a method call in Dynamo's graph
SEQLEN_READS = {
    "add_ones_times_max_seqlen": lambda nt: nt + torch.ones_like(nt) * nt._get_max_seqlen(),
    "scale_by_min_seqlen": lambda nt: nt * nt._get_min_seqlen(),
    "scale_by_seqlen_spread": lambda nt: nt * (nt._get_max_seqlen() - nt._get_min_seqlen()),
}

_LAYER_NORM = torch.nn.LayerNorm(3)
# compare the ragged size with a size (layer_norm's normalized_shape, a mean over the last dim broadcast back): Dynamo
# cannot build that guard on the symbolic ragged size of an NJT made in the graph (with an int before torch 2.15; with a
# symbolic feature width on 2.15 too)
NORMS = {
    "layer_norm": lambda nt: F.layer_norm(nt, (3,)),
    "layer_norm_module": lambda nt: _LAYER_NORM(nt),
    "rms_norm": lambda nt: nt * torch.rsqrt(nt.pow(2).mean(-1, keepdim=True) + 1e-6),
}


def _run_all(fn, dynamic, batches, trains: bool, min_len: int = 1, live: bool = False,
             **kwargs) -> tuple[int, int]:
    """Calls ``fn`` eagerly, through the boundary and through torch.compile (both with ``kwargs``) on each
    (B, max_len, M) or (B, max_len, M, min_len) of ``batches`` (``min_len`` where a batch gives none), with any
    fallback an error; checks values, cached seqlens and (``trains``) the input
    NJT's gradient against eager mode's (the boundary's against ``BY_SEQUENCE``'s where torch's is wrong). Returns (the boundary's graphs, torch.compile's graphs): those compiled, or
    with ``live`` those Dynamo keeps (a compile whose guards could not be built, retried, is compiled but not kept)."""
    ours, theirs = CompileCounterWithBackend("aot_eager"), CompileCounterWithBackend("aot_eager")
    a = jaggedperf.compile(fn, backend=ours, dynamic=dynamic, **kwargs)
    b = torch.compile(fn, backend=theirs, dynamic=dynamic, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for i, (B, max_len, M, *low) in enumerate(batches):
            nt, _ = make_njt(B, max_len, M, seed=i, min_len=low[0] if low else min_len, requires_grad=trains)
            grads = []
            for run in (fn, a, b):
                out = run(nt)
                if trains:
                    ((out.values() if out.is_nested else out) ** 2).sum().backward()
                    grads.append(nt.grad.values().clone())
                    nt.grad = None
                if run is fn:
                    expected = out
                else:
                    assert_close(out, expected)
                    assert not out.is_nested or seqlens(out) == seqlens(expected)
            if trains and fn in BY_SEQUENCE:
                x = nt.detach().requires_grad_()
                (BY_SEQUENCE[fn](x).values() ** 2).sum().backward()
                assert_close(grads[1], x.grad.values())
                assert_close(grads[2], grads[0])
                continue
            for got in grads[1:]:
                assert_close(got, grads[0])
    assert a.last_fallback is None and not a.fallbacks
    if live:
        regions = [region._torchdynamo_orig_callable.__code__ for region in a.regions.values()]
        return (sum(len(_debug_get_cache_entry_list(code)) for code in regions),
                len(_debug_get_cache_entry_list(fn.__code__)))
    return ours.frame_count, theirs.frame_count


@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", ["scale", "ragged_softmax"])
def test_static_shapes_cross_a_max_seqlen_seen_before_without_falling_back(name, trains):
    # A max_seqlen crosses as a shared (n, 0) tensor, and an output NJT keeping it as its cached max_seqlen marks it
    # dynamic (the NJT constructor's mark_dynamic). Under dynamic=False a later batch with that max_seqlen and another
    # total length crossed with those marks, and Dynamo's guard on them failed on the very frame it was made for (a
    # fallback): the tensor must cross with the marks it was made with, whatever marked it since.
    batches = [(2, 5, 3), (2, 4, 3), (3, 5, 3), (4, 4, 3)]  # max_seqlen 5, 4, 5 again, 4 again: new total lengths
    ours, theirs = _run_all(FUNCTIONS[name], False, batches, trains)
    # the seqlens cross symbolic, as torch.compile on the NJT sees them: a graph per B (static offsets), as there
    assert ours <= theirs, (ours, theirs)


@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", ["scale", "ragged_softmax", "layer_norm"])
def test_static_shapes_take_no_graph_per_cached_seqlen(name, trains):
    # A training loop's batches under dynamic=False: B fixed, the lengths and so the cached min and max seqlens
    # changing every batch. torch.compile on the NJT sees the seqlens symbolic whatever dynamic says (the NJT
    # constructor marks them dynamic: one graph for every max_seqlen above 1, one more for a min_seqlen of 1); crossing
    # as static sizes they took a graph per (min, max) pair, and past Dynamo's recompile limit the signature fell back.
    batches = [(4, max_len, 3, min_len) for max_len, min_len in zip(range(3, 13), (1, 2, 1, 3, 2, 1, 4, 2, 3, 1))]
    ours, theirs = _run_all({**FUNCTIONS, **NORMS}[name], False, batches, trains)
    assert ours <= theirs, (ours, theirs)
    assert ours == 1


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph_breaks_allowed", "fullgraph"])
@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", list(SEQLEN_READS))
def test_static_shapes_read_a_seqlen_by_its_method_without_falling_back(name, trains, fullgraph):
    # Dynamo puts a tensor method's call in the graph and takes back only a tensor or a symbolic size: under
    # dynamic=False a seqlen crossing as a static size made _get_max_seqlen() an int, and every first call fell back.
    # The seqlens cross symbolic, as torch.compile on the NJT sees them (the NJT constructor marks them whatever
    # dynamic says): one graph for the three max seqlens, as there.
    batches = [(3, 18, 5), (3, 19, 5), (3, 25, 5)]  # new total lengths too
    ours, theirs = _run_all(SEQLEN_READS[name], False, batches, trains, min_len=2, fullgraph=fullgraph)
    assert ours <= theirs, (ours, theirs)
    assert ours == 1


@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_all_dynamic_shapes_compile_on_the_components(name, trains):
    # Under dynamic=True the values' feature width is symbolic, and so is the row stride an NJT's ragged stride is
    # the ragged size times: a constant ragged size (before torch 2.15) cannot multiply it, so every first call
    # failed while rebuilding the NJT and fell back. B, the lengths and the feature width change here.
    batches = [(2, 5, 3), (4, 7, 3), (3, 6, 5), (5, 4, 2)]
    ours, theirs = _run_all(FUNCTIONS[name], True, batches, trains)
    assert ours <= theirs, (ours, theirs)


@pytest.mark.parametrize("name", ["scale", "ragged_softmax"])
def test_a_feature_width_that_changes_becomes_dynamic_without_falling_back(name):
    # By default Dynamo recompiles a size that changed as symbolic (automatic dynamic shapes): the second feature
    # width gives the values a symbolic row stride, where a constant ragged size failed as under dynamic=True
    batches = [(3, 5, 4), (3, 5, 6), (4, 6, 8)]
    ours, theirs = _run_all(FUNCTIONS[name], None, batches, trains=True)
    assert ours <= theirs, (ours, theirs)


@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", list(NORMS))
def test_all_dynamic_shapes_compile_norms_over_the_feature_dim(name, trains):
    # Under dynamic=True the values' row stride is symbolic, and the NJT's ragged stride is the ragged size times it;
    # a norm compares the ragged size with the width, a guard Dynamo could not build on a symbolic ragged size made in
    # the graph (an IndexError: a fallback). The region's own ragged size folds that comparison and multiplies by the
    # symbolic stride: as many graphs kept as torch.compile's.
    batches = [(2, 5, 3), (4, 7, 3), (3, 6, 3)]
    ours, theirs = _run_all(NORMS[name], True, batches, trains, live=True)
    assert ours <= theirs, (ours, theirs)


# norms over whatever width the NJT has
WIDTH_NORMS = {
    "layer_norm_over_shape": lambda nt: F.layer_norm(nt, nt.shape[-1:]).relu() + nt,
    "rms_norm": NORMS["rms_norm"],
}


@pytest.mark.parametrize("dynamic", [None, True], ids=["default", "dynamic"])
@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", list(WIDTH_NORMS))
def test_norms_over_changing_feature_widths_take_torch_compiles_graphs(name, trains, dynamic):
    # Rows of widths 3 to 12 through a norm: torch.compile on the NJT recompiles the width symbolic once it changed
    # (automatic dynamic shapes), or has it symbolic from the start (dynamic=True), and keeps that graph. A symbolic
    # width gave the region's NJTs a symbolic ragged size (a constant nested int multiplies only by an int), whose
    # comparison with the width Dynamo could not guard: the widths were then guarded static, one graph each, and past
    # Dynamo's recompile limit the signature fell back (11 graphs and a warning against torch.compile's 2).
    batches = [(3, 5, M) for M in range(3, 13)]
    ours, theirs = _run_all(WIDTH_NORMS[name], dynamic, batches, trains)
    assert ours <= theirs, (ours, theirs)


@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", list(WIDTH_NORMS))
def test_static_shapes_past_the_recompile_limit_compile_no_more_than_torch_compile(name, trains):
    # Under dynamic=False each feature width is a graph of its own, for torch.compile too, and past Dynamo's recompile
    # limit (8 graphs) torch.compile runs fn as it is, compiling nothing more. The region, compiled whole, raised at
    # its limit, and its signature fell back to torch.compile(fn) with a warning, whose own frame then compiled the
    # later widths: more graphs than torch.compile's (10 against 8). Past the limit the call now runs as
    # torch.compile's does, and earlier widths keep their graphs.
    batches = [(3, 5, M) for M in range(3, 13)]
    ours, theirs = _run_all(WIDTH_NORMS[name], False, batches, trains)
    assert ours <= theirs, (ours, theirs)


def test_fullgraph_past_the_recompile_limit_raises_as_torch_compile_raises():
    # with fullgraph=True torch.compile raises at the limit instead of running fn: so does the boundary (its fallback
    # compiled the width in torch.compile(fn)'s frame instead). Each runs alone: the fallback's frame is fn's own code,
    # whose cache torch.compile's run would fill.
    fn = WIDTH_NORMS["rms_norm"]

    def outcomes(compiled):
        got = []
        for M in range(3, 13):
            nt, _ = make_njt(3, 5, M, seed=M, min_len=1)
            try:
                got.append(compiled(nt))
            except Exception as err:  # noqa: BLE001 (whatever torch.compile raises, the boundary must raise)
                got.append(type(err))
        return got

    ours = jaggedperf.compile(fn, backend="aot_eager", dynamic=False, fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        mine = outcomes(ours)
    torch._dynamo.reset()
    theirs = outcomes(torch.compile(fn, backend="aot_eager", dynamic=False, fullgraph=True))
    assert [isinstance(o, type) for o in theirs] == [False] * 8 + [True] * 2  # widths 11 and 12 raise
    for a, b in zip(mine, theirs):
        if isinstance(b, type):
            assert a is b
        else:
            assert_close(a, b)
    assert not ours.fallbacks


# ops that compare, multiply or read the ragged size of an NJT whose feature width is symbolic
WIDTH_CHANGES = {
    "ragged_size_at_least_2": lambda nt: nt * 2 if nt.shape[1] >= 2 else nt,
    "ragged_size_is_not_1": lambda nt: nt * 2 if nt.size(1) != 1 else nt,
    "ragged_size_is_not_the_width": lambda nt: nt * 2 if nt.shape[1] == nt.shape[2] else nt * 3,
    "unsqueeze_then_squeeze": lambda nt: nt.unsqueeze(-1).sin().squeeze(-1),
    "mean_broadcast_back": lambda nt: nt - nt.mean(-1, keepdim=True),
    "mean_expanded": lambda nt: nt.mean(-1, keepdim=True).expand_as(nt) * nt,
    "linear": lambda nt: F.linear(nt, torch.ones(4, nt.shape[-1])),
    "padded_sum": FUNCTIONS["padded_sum"],
    "ragged_softmax": FUNCTIONS["ragged_softmax"],
}


@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", list(WIDTH_CHANGES))
def test_a_changing_feature_width_keeps_every_ragged_size_use_on_the_components(name, trains):
    # Once the width changed it is symbolic (automatic dynamic shapes), and so is the row stride the NJT's ragged
    # stride multiplies the ragged size by: a constant nested int cannot multiply it, so the NJT kept the fake offsets'
    # symbolic ragged size, and an op comparing that with a size (a mean broadcast back in training, a branch on it)
    # took a guard Dynamo could not build; a branch on a constant nested int failed too (Dynamo reads it as an int).
    # Those fell back; the rest use the ragged size without comparing it. The region's own ragged size serves all.
    batches = [(3, 5, 4), (4, 6, 6), (2, 7, 5)]
    ours, theirs = _run_all(WIDTH_CHANGES[name], None, batches, trains)
    assert ours <= theirs, (ours, theirs)


def test_two_njts_over_one_offsets_with_widths_of_their_own():
    # Two NJT arguments share their offsets (one ragged size, as in eager mode) while only one's width changes: both
    # rebuilt NJTs take the offsets' one ragged size, whatever their row strides
    def fn(nt, other):
        return F.layer_norm(nt, nt.shape[-1:]).sum(-1, keepdim=True) * other

    ours, theirs = CompileCounterWithBackend("aot_eager"), CompileCounterWithBackend("aot_eager")
    a, b = jaggedperf.compile(fn, backend=ours), torch.compile(fn, backend=theirs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for i, M in enumerate((3, 5, 6)):
            nt, _ = make_njt(3, 5, M, seed=i, min_len=1)
            other = torch.nested.nested_tensor_from_jagged(torch.randn(nt.values().shape[0], 4), nt.offsets(),
                                                           min_seqlen=1, max_seqlen=5)
            expected = fn(nt, other)
            assert_close(a(nt, other), expected)
            assert_close(b(nt, other), expected)
    assert ours.frame_count <= theirs.frame_count, (ours.frame_count, theirs.frame_count)


# read the NJT's sizes (the ragged one among them) inside fn: each read puts a size node in Dynamo's graph
SHAPE_READS = {
    "unpack_shape": lambda nt: nt * nt.shape[2],
    "split_heads": lambda nt: nt.reshape(nt.shape[0], -1, 1, nt.shape[-1]).transpose(1, 2).sin(),
    "layer_norm_over_shape": lambda nt: F.layer_norm(nt, nt.shape[-1:]),
    "layer_norm_over_width": lambda nt: F.layer_norm(nt, (nt.shape[-1],)),
}


@pytest.mark.parametrize("dynamic", [None, False, True], ids=["default", "static", "dynamic"])
@pytest.mark.parametrize("trains", [True, False], ids=["trains", "inference"])
@pytest.mark.parametrize("name", list(SHAPE_READS))
def test_reads_of_the_njts_shape_compile_once_on_the_components(name, trains, dynamic):
    # A size node whose example value is a constant ragged size failed Dynamo's runtime-assert pass (it reads every
    # SymInt node's sympy expression, which torch's nested-int node lacks before torch 2.15): every such function
    # compiled twice, the second time with symbolic ragged sizes, and a norm over nt.shape[-1:] then fell back on the
    # guard Dynamo cannot build. Each compile must succeed the first time, under dynamic=False too: a fully static
    # NJT's sizes are constants to Dynamo, which could not take a constant nested int (a SymInt that is no symbol) as
    # one; the region's own ragged size is a symbol.
    counters = torch._dynamo.utils.counters
    counters.clear()
    batches = [(2, 5, 3), (4, 7, 3), (3, 6, 3)]
    ours, theirs = _run_all(SHAPE_READS[name], dynamic, batches, trains, live=True)
    assert ours <= max(theirs, 1), (ours, theirs)
    # every frame Dynamo started (the boundary's regions, torch.compile's and eager mode's none) compiled
    assert counters["frames"]["total"] == counters["frames"]["ok"], dict(counters["frames"])


@pytest.mark.parametrize("dynamic", [None, False, True], ids=["default", "static", "dynamic"])
def test_a_max_seqlen_read_on_an_njt_caching_none_computes_only_the_max(dynamic):
    # the boundary computes the max before crossing (a data-dependent read); under dynamic=False the next failure
    # (the static max read by its method) carried the first one as its context, was taken for data-dependent again,
    # and the min was computed and cached too, where eager mode caches only the max
    fn = SEQLEN_READS["add_ones_times_max_seqlen"]
    compiled = jaggedperf.compile(fn, backend="aot_eager", dynamic=dynamic)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundaryFallbackWarning)
        for i, (B, max_len) in enumerate([(4, 5), (5, 7)]):
            expected_nt, _ = make_njt(B, max_len, seed=i, min_len=1, cache="")
            ours_nt, _ = make_njt(B, max_len, seed=i, min_len=1, cache="")
            expected, out = fn(expected_nt), compiled(ours_nt)
            assert_close(out, expected)
            assert seqlens(out) == seqlens(expected) and seqlens(ours_nt) == seqlens(expected_nt) == (None, max_len)
