"""``jaggedperf.njt.wrap``: the NJT its constructor builds, without the constructor's dispatches, or the constructor."""

from __future__ import annotations

import pytest
import torch

from jaggedperf import njt


def _parts(width: tuple[int, ...] = (4,), seqlens: tuple[str, ...] = ("min", "max")):
    offsets = torch.tensor([0, 3, 3, 7])
    values = torch.randn(7, *width)
    sizes = {"min": 0, "max": 4}
    return values, offsets, {f"{k}_seqlen": torch.empty(sizes[k], 0) for k in seqlens}


def _state(nt: torch.Tensor) -> dict:
    # sizes and strides as text: two builds' nested-int multiples (``4*j0``) need not compare equal as SymInts (2.11)
    return {"type": type(nt), "shape": str(tuple(nt.shape)), "stride": str(nt.stride()), "dtype": nt.dtype,
            "requires_grad": nt.requires_grad, "keys": str(torch._C._dispatch_keys(nt)),
            "dict": {k: str(v) if isinstance(v, tuple) else v for k, v in nt.__dict__.items()
                     if not isinstance(v, (torch.Tensor, dict)) and not njt._is_cache(v)},
            "values": _own(nt._values),
            "seqlens": {k: _own(t) for k, t in nt._metadata_cache.items()}}


def _own(t: torch.Tensor) -> dict:
    # a tensor's attributes less the C++ caches of its own sizes (torch 2.11's capsule, one per tensor, made on a read)
    return {k: v for k, v in t.__dict__.items() if not njt._is_cache(v)}


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_this_torch_has_its_constructor_learned(ndim):
    marks = njt._marks(ndim)
    assert marks is not False, "the fast build differs from the constructor's on this torch: wrap is the constructor"
    assert marks.own and marks.values  # the constructor marks the NJT's ragged dim and its values' dim 0 dynamic


@pytest.mark.parametrize("width", [(4,), (2, 3), ()])
@pytest.mark.parametrize("seqlens", [("min", "max"), ("max",), ("min",), ()])
def test_wrap_leaves_what_the_constructor_leaves(width, seqlens):
    a_values, offsets, a_cache = _parts(width, seqlens)
    b_values, b_cache = a_values.clone(), {k: torch.empty(t.shape[0], 0) for k, t in a_cache.items()}
    built = njt._constructed(a_values, offsets, a_cache)
    wrapped = njt.wrap(b_values, offsets, b_cache)
    assert _state(wrapped) == _state(built)
    assert wrapped._values is b_values and wrapped._offsets is offsets and wrapped._metadata_cache == b_cache
    assert wrapped._lengths is None and wrapped._ragged_idx == 1
    # one ragged structure: the two combine elementwise, and the cached seqlens read as the constructor's
    assert torch.equal((wrapped - built).values(), torch.zeros_like(a_values))
    assert (wrapped._maybe_min_seqlen, wrapped._maybe_max_seqlen) == (built._maybe_min_seqlen, built._maybe_max_seqlen)


def test_a_seqlen_marked_with_a_range_of_its_own_fares_as_under_the_constructor():
    values, offsets, cache = _parts()
    twin = {k: torch.empty(t.shape[0], 0) for k, t in cache.items()}
    for t in (cache["max_seqlen"], twin["max_seqlen"]):
        torch._dynamo.mark_dynamic(t, 0, min=2, max=9)
    njt._constructed(values, offsets, cache)
    njt.wrap(values.clone(), offsets, twin)
    assert twin["max_seqlen"].__dict__ == cache["max_seqlen"].__dict__


def test_repeated_wraps_over_one_values_tensor_leave_the_constructor_s_marks():
    values, offsets, cache = _parts()
    twin_values = values.clone()
    for _ in range(3):
        njt._constructed(values, offsets, dict(cache))
        njt.wrap(twin_values, offsets, dict(cache))
    assert twin_values.__dict__ == values.__dict__


@pytest.mark.parametrize("earlier", ["constructor", "wrap", "mark_dynamic"])
def test_a_seqlen_marked_before_is_left_as_the_constructor_leaves_it(earlier):
    # an output NJT keeping its input's seqlens is built over seqlens already marked: wrap may skip a mark that would
    # change nothing, never one that would
    values, offsets, cache = _parts()
    twin = {k: torch.empty(t.shape[0], 0) for k, t in cache.items()}
    for c in (cache, twin):
        if earlier == "mark_dynamic":
            for t in c.values():
                torch._dynamo.mark_dynamic(t, 0)
        elif earlier == "constructor":
            njt._constructed(values.clone(), offsets, c)
        else:
            njt.wrap(values.clone(), offsets, c)
    twin["min_seqlen"].__dict__["_specialize_on"] = {0: ["kept only by a skipped mark"]}  # a mark would reset it
    cache["min_seqlen"].__dict__["_specialize_on"] = {0: ["kept only by a skipped mark"]}
    for _ in range(2):
        njt._constructed(values, offsets, cache)
        njt.wrap(values.clone(), offsets, twin)
    for key in cache:
        assert _own(twin[key]) == _own(cache[key]), key


def test_compiled_code_on_wrapped_njts_takes_the_graphs_it_takes_on_constructed_ones():
    def graphs(make) -> int:
        torch._dynamo.reset()
        fn = torch.compile(lambda nt: (nt * 2).sin(), backend="eager")
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        for total in (7, 9, 12):  # other total lengths and batch sizes: the ragged dims are dynamic either way
            offsets = torch.tensor([0, 3, total - 2, total]) if total != 12 else torch.tensor([0, 5, 12])
            fn(make(torch.randn(total, 4), offsets, {"max_seqlen": torch.empty(5, 0)}))
        return torch._dynamo.utils.counters["stats"]["unique_graphs"] - before

    assert graphs(njt.wrap) == graphs(njt._constructed)


def test_where_the_builds_differ_the_constructor_serves(monkeypatch):
    monkeypatch.setattr(njt, "_MARKS", {})
    monkeypatch.setattr(njt, "_same_builds", lambda marks, ndim: False)
    values, offsets, cache = _parts()
    calls = []
    real = njt._constructed
    monkeypatch.setattr(njt, "_constructed", lambda *a: calls.append(a) or real(*a))
    wrapped = njt.wrap(values, offsets, cache)
    assert njt._MARKS == {2: False} and calls[-1][0] is values and wrapped._values is values


def test_wraps_over_one_offsets_tensor_share_the_constructor_s_nested_int():
    values, offsets, _ = _parts()
    first, second = njt.wrap(values, offsets), njt.wrap(values.clone(), offsets)
    built = njt._constructed(values.clone(), offsets, {})
    # the one nested int torch keeps for ``offsets`` (named by its id: "j4")
    assert str(first.shape[1]) == str(second.shape[1]) == str(built.shape[1])
    assert str(first.stride()) == str(built.stride())


def test_an_offsets_tensor_at_a_freed_one_s_address_gets_a_nested_int_of_its_own():
    values = torch.randn(7, 4)
    seen = set()
    for _ in range(20):  # CPython reuses a freed tensor's address: the cache must tell the new tensor from the old
        offsets = torch.tensor([0, 3, 3, 7])
        wrapped = njt.wrap(values, offsets)
        assert str(wrapped.shape[1]) == str(njt._constructed(values, offsets, {}).shape[1])
        seen.add(str(wrapped.shape[1]))
        del offsets, wrapped
    assert len(seen) == 20


def test_fake_offsets_take_the_constructor_s_own_lookup():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        values, offsets = torch.randn(7, 4), mode.from_tensor(torch.tensor([0, 3, 3, 7]))
        wrapped = njt.wrap(values, offsets)
        assert str(wrapped.shape[1]) == str(offsets.get_nested_int(coeff=1))  # the fake offsets' own memo
        assert not njt._RAGGED or all(ref() is not offsets for ref, _, _ in njt._RAGGED.values())
