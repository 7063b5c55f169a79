"""How arguments cross: layouts, the flat list, the seqlen tensors, the differentiable path only where needed."""

from __future__ import annotations

import torch

from jaggedperf.boundary.crossing import MIN_SEQLEN_SHIFT, flatten, seqlen_tensor
from jaggedperf.njt_autograd import Join, Unwrap, join, unwrap
from tests.boundary.njts import make_njt


def test_positional_njts_cross_as_their_own_tensors_with_their_seqlens_as_sizes():
    nt, _ = make_njt(4, 5, min_len=2)
    plain = torch.randn(2)
    crossing = flatten((nt, plain, 3), {}, mark=True)
    assert crossing.reason is None and crossing.spec is None
    assert crossing.layout == ("jmx", "a", "a")
    values, offsets, low, high, *rest = crossing.flat
    assert values is nt._values and offsets is nt._offsets  # attributes: nothing copied or dispatched
    assert (low.shape, high.shape) == ((2 + MIN_SEQLEN_SHIFT, 0), (5, 0))
    assert rest[0] is plain and rest[1] == 3
    for t in (values, offsets, low, high):
        assert 0 in t._dynamo_weak_dynamic_indices  # ragged sizes cross marked dynamic
    assert seqlen_tensor(5, 3) is high  # one tensor per place and size, shared between calls


def test_each_cached_seqlen_has_its_code():
    for cache, code in [("minmax", "jmx"), ("max", "j-x"), ("min", "jm-"), ("", "j--")]:
        nt, _ = make_njt(3, 4, cache=cache)
        crossing = flatten((nt,), {}, mark=False)
        assert crossing.layout == (code,) and len(crossing.flat) == 2 + len(cache) // 3
        # static shapes too see the seqlens symbolic, as torch.compile on the NJT does (its constructor marks them)
        assert all(0 in t._dynamo_weak_dynamic_indices for t in crossing.flat[2:])


def test_the_same_njt_twice_crosses_once():
    nt, _ = make_njt(3, 4)
    other, _ = make_njt(3, 4, seed=1)
    crossing = flatten((nt, other, nt, nt), {}, mark=False)
    assert crossing.layout == ("jmx", "jmx", "=0", "=0")
    assert len(crossing.flat) == 8


def test_containers_and_keywords_take_the_pytree_path_with_aliases_across_it():
    nt, _ = make_njt(3, 4)
    crossing = flatten(([nt, 2],), {"again": nt, "scale": 0.5}, mark=False)
    assert crossing.spec is not None and crossing.key[0] == crossing.spec
    assert crossing.layout == ("jmx", "a", "=0", "a")
    assert crossing.leaves[0] is nt


def test_values_cross_with_an_autograd_edge_only_where_grad_must_flow():
    nt, _ = make_njt(4, 5, requires_grad=True)
    crossing = flatten((nt,), {}, mark=False)
    values = crossing.flat[0]
    assert values is not nt._values and values.requires_grad and type(values.grad_fn).__name__ == "UnwrapBackward"
    assert values.data_ptr() == nt._values.data_ptr()  # an alias, no copy
    with torch.no_grad():
        assert flatten((nt,), {}, mark=False).flat[0] is nt._values
    frozen, _ = make_njt(4, 5)
    assert flatten((frozen,), {}, mark=False).flat[0] is frozen._values


def test_njts_that_cannot_cross_give_a_reason():
    values, offsets = torch.randn(10, 3), torch.tensor([0, 4, 7, 10])
    holes = torch.nested.nested_tensor_from_jagged(values, offsets, torch.tensor([2, 3, 1]))
    assert "lengths (holes)" in flatten((holes,), {}, mark=False).reason
    nt, _ = make_njt(3, 4, min_len=1)
    assert "ragged dim is 2" in flatten((nt.transpose(1, 2),), {}, mark=False).reason


def test_unwrap_and_join_carry_gradients_both_ways():
    nt, _ = make_njt(4, 5, min_len=1, requires_grad=True)
    values = Unwrap.apply(nt)
    (values * 3).sum().backward()
    assert isinstance(nt.grad, torch.Tensor) and nt.grad._offsets is nt._offsets
    torch.testing.assert_close(nt.grad.values(), torch.full_like(nt._values, 3.0))

    leaf = torch.randn(nt._values.shape, requires_grad=True)
    out = Join.apply(leaf * 2, nt._offsets, {})
    assert out.is_nested and out.requires_grad and out._offsets is nt._offsets
    out.values().sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full_like(leaf, 2.0))


def test_no_two_places_of_the_flat_list_hold_one_seqlen_tensor():
    # Dynamo guards on inputs that are one object: a min_seqlen equal to the max_seqlen, or two NJTs with equal
    # seqlens, must cross as distinct tensors or a batch where they differ compiles a graph of its own
    even, _ = make_njt(4, 3, min_len=3)
    other, _ = make_njt(5, 3, min_len=3, seed=1)
    crossing = flatten((even, other), {}, mark=True)
    seqlens = [t for t in crossing.flat if t.dim() == 2 and t.shape[1] == 0]
    assert len(seqlens) == 4 and len({id(t) for t in seqlens}) == 4
    assert [t.shape[0] for t in seqlens] == [3 + MIN_SEQLEN_SHIFT, 3] * 2


def test_a_shared_seqlen_tensor_crosses_with_the_marks_it_was_made_with():
    # An output NJT that keeps a crossing seqlen tensor as its cached seqlen marks it with mark_dynamic; Dynamo guards
    # on such marks, so the next call that shares the tensor must see it as the compile did
    t = seqlen_tensor(6, 2)
    made = {name: set(v) if isinstance(v, set) else v for name, v in t.__dict__.items()}
    torch._dynamo.mark_dynamic(t, 0)
    assert seqlen_tensor(6, 2) is t
    assert t.__dict__ == made


def test_a_seqlen_tensor_returned_by_the_region_crosses_with_the_marks_it_was_made_with():
    # AOTAutograd's runtime marks a compiled function's output that is one of its inputs (a crossing seqlen an output
    # NJT caches) with its unguarded propagated mark on every call: removed, the tensor is as it was made
    t = seqlen_tensor(7, 2)
    made = {name: set(v) if isinstance(v, set) else v for name, v in t.__dict__.items()}
    t._dynamo_propagated_dynamic_indices = {0}
    assert seqlen_tensor(7, 2) is t and t.__dict__ == made
    t._dynamo_propagated_dynamic_indices = {0}
    torch._dynamo.mark_dynamic(t, 0)  # and marks Dynamo guards on besides: made again
    assert seqlen_tensor(7, 2) is t and t.__dict__ == made


def test_unwrap_and_join_are_the_nodes_apply_makes():
    nt, _ = make_njt(4, 5, min_len=1, requires_grad=True)
    for values in (Unwrap.apply(nt), unwrap(nt)):
        assert type(values.grad_fn).__name__ == "UnwrapBackward" and values.data_ptr() == nt._values.data_ptr()
        assert values.__dict__ == Unwrap.apply(nt).__dict__  # the NJT constructor's marks
        (values * 3).sum().backward()
        torch.testing.assert_close(nt.grad.values(), torch.full_like(nt._values, 3.0))
        nt.grad = None
    leaf = torch.randn(nt._values.shape, requires_grad=True)
    for out in (Join.apply(leaf * 2, nt._offsets, dict(nt._metadata_cache)),
                join(leaf * 2, nt._offsets, dict(nt._metadata_cache))):
        assert type(out.grad_fn).__name__ == "JoinBackward" and out._offsets is nt._offsets
        assert out._metadata_cache == nt._metadata_cache
        out.values().sum().backward()
        torch.testing.assert_close(leaf.grad, torch.full_like(leaf, 2.0))
        leaf.grad = None
    with torch.no_grad():
        assert join(leaf, nt._offsets, {}).grad_fn is None and not unwrap(nt).requires_grad
