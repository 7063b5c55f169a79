"""The code Inductor writes for a region is no worse than the code it writes for ``torch.compile`` on the NJT."""

from __future__ import annotations

import torch
from torch._inductor.utils import run_and_get_code

import jaggedperf
from tests.boundary.njts import assert_close, make_njt


def test_a_softmax_over_the_ragged_dim_pads_nothing_where_torch_compile_pads():
    # torch.compile pads the values to (B, max_seqlen, M) with -inf, runs a dense softmax and cuts the padding off;
    # the region computes it on the segments (boundary/lowering.py): no padding op, no stride of the max_seqlen (one
    # Inductor took as possibly 0, ``max(1, ...)``, once made it allocate and write one more padded buffer: 1.5x
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
    assert "jagged_to_padded" in "".join(theirs) and "jagged_to_padded" not in "".join(ours)
    assert "max(1," not in "".join(ours).replace(" ", "")
