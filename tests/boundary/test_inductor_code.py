"""The code Inductor writes for a region is no worse than the code it writes for ``torch.compile`` on the NJT."""

from __future__ import annotations

import re

import torch
from torch._inductor.utils import run_and_get_code

import jaggedperf
from tests.boundary.njts import assert_close, make_njt


def _allocations(code: list[str]) -> int:
    """Buffers allocated with elements (a cached seqlen is a (n, 0) tensor: no memory, no write)."""
    sizes = [m for c in code for m in re.findall(r"\bempty_strided_\w+\(\((.*?)\), \(", c)]
    return sum(not size.replace(" ", "").endswith(",0") for size in sizes)


def test_a_softmax_over_the_ragged_dim_allocates_no_more_buffers_than_torch_compile():
    # The softmax pads to max_seqlen: with strides M * max_seqlen that Inductor knows are positive it reuses the
    # padded buffer in place; a max_seqlen it must take as possibly 0 made it allocate and write one more (1.5x
    # torch.compile's time on a CPU at the seed's second shape)
    def softmax(nt):
        return torch.softmax(nt, dim=1) * 2.0

    nt, _ = make_njt(6, 9, M=8, min_len=1)
    torch._dynamo.reset()
    out, ours = run_and_get_code(jaggedperf.compile(softmax, dynamic=True), nt)
    torch._dynamo.reset()
    ref, theirs = run_and_get_code(torch.compile(softmax, dynamic=True), nt)
    assert_close(out, softmax(nt))
    assert_close(ref, softmax(nt))
    assert "max(1," not in "".join(ours).replace(" ", "")
    assert _allocations(ours) <= _allocations(theirs), (_allocations(ours), _allocations(theirs))
