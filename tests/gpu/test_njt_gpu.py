"""``jaggedperf.njt.wrap`` on the GPU machine's torch: the NJT its constructor builds, at no more host cost.

The boundary builds an NJT per output and per gradient (``boundary.differentiable``) through ``wrap``. Torch 2.11's
constructor reads the new NJT's ``dim()`` through its Python dispatch (~95 µs of ~125 on the H200 machine's host),
which ``wrap`` skips; on torch 2.13+ the two are level. The bar: ``wrap`` no dearer than the constructor (a 10% band
for the host's noise), both timed in the same interleaved rounds; the ratio is recorded.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from jaggedperf import njt

pytestmark = pytest.mark.gpu

ROUNDS, CALLS = 9, 500


def _per_call_us(build) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        build()
    return (time.perf_counter() - start) / CALLS * 1e6


@pytest.mark.timed
def test_wrap_costs_no_more_host_time_than_the_constructor(record_property):
    lengths = torch.randint(1, 100, (512,))
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)]).cuda()
    values = torch.randn(int(lengths.sum()), 64, device="cuda", dtype=torch.float16)
    seqlens = {"max_seqlen": torch.empty(int(lengths.max()), 0), "min_seqlen": torch.empty(int(lengths.min()), 0)}
    ways = {"wrap": lambda: njt.wrap(values, offsets, dict(seqlens)),
            "constructor": lambda: njt._constructed(values, offsets, dict(seqlens))}
    for build in ways.values():  # warm: the marks learned, Dynamo imported
        _per_call_us(build)
    samples = {name: [] for name in ways}
    for _ in range(ROUNDS):
        for name, build in ways.items():
            samples[name].append(_per_call_us(build))
    ratio = statistics.median(w / c for w, c in zip(samples["wrap"], samples["constructor"], strict=True))
    for name, values_us in samples.items():
        record_property(f"{name} us", round(statistics.median(values_us), 2))
    record_property("ratio", round(ratio, 3))
    record_property("torch", torch.__version__)
    assert ratio <= 1.1, f"wrap takes {ratio:.2f}x the constructor's host time ({samples})"
