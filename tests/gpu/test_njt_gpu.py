"""``jaggedperf.njt.wrap`` on the GPU machine's torch: the NJT its constructor builds, at no more host cost.

The boundary builds an NJT per output and per gradient (``jaggedperf.njt_autograd``) through ``wrap``. Torch 2.11's
constructor reads the new NJT's ``dim()`` through its Python dispatch (~95 µs of ~125 on the H200 machine's host),
which ``wrap`` skips; on torch 2.13+ the two are level. The bar: ``wrap`` no dearer than the constructor (a 10% band
for the host's noise), both timed by the seed's method in the same interleaved rounds
(``lab.measure.rounds``, judged on the quiet ones); the ratio is recorded.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from jaggedperf import njt
from jaggedperf.lab.measure import rounds as lab_rounds

pytestmark = pytest.mark.gpu

ROUNDS, MIN_QUIET = 9, 5


@pytest.mark.timed
def test_wrap_costs_no_more_host_time_than_the_constructor(record_property):
    lengths = torch.randint(1, 100, (512,))
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).cuda()
    values = torch.randn(int(lengths.sum()), 64, device="cuda", dtype=torch.float16)
    seqlens = {"max_seqlen": torch.empty(int(lengths.max()), 0), "min_seqlen": torch.empty(int(lengths.min()), 0)}
    timed = lab_rounds.run({"wrap": lambda: njt.wrap(values, offsets, dict(seqlens)),
                            "constructor": lambda: njt._constructed(values, offsets, dict(seqlens))},
                           torch.device("cuda"), rounds=ROUNDS)
    ratio, judged = lab_rounds.median_ratio(timed, "wrap", "constructor", min_quiet=MIN_QUIET)
    for name in ("wrap", "constructor"):
        record_property(f"{name} us", round(statistics.median(timed.walls(name)), 2))
    record_property("ratio", round(ratio, 3))
    record_property("rounds judged", judged)
    record_property("torch", torch.__version__)
    assert ratio <= 1.1, f"wrap takes {ratio:.2f}x the constructor's wall per call ({timed.ratios('wrap', 'constructor')})"
