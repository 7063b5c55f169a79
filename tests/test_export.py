"""torch.export of a module calling our ops, and its AOTInductor package on the CPU (issue 15, item 5).

One export here and one AOTInductor compile in a subprocess (~40 s). On the CPU the package calls our opaque pure-torch
kernel (``jaggedperf::_reduce_torch``) through AOTInductor's proxy executor, which needs jaggedperf
imported in the loading process (it is, here); the kernel checks the offsets there too.
"""

import sys
from pathlib import Path

import torch

import jaggedperf

sys.path.insert(0, str(Path(__file__).resolve().parent / "ops"))
from aoti_check import aoti_round_trip  # noqa: E402


class SumAndMean(torch.nn.Module):
    def forward(self, values, offsets):
        return jaggedperf.jagged_sum(values, offsets) * 2 + jaggedperf.jagged_mean(values, offsets, empty="zero",
                                                                                      max_seqlen=4)


def test_export_and_aot_inductor_package_match_eager():
    values, offsets = torch.randn(7, 3), torch.tensor([0, 2, 2, 6, 7])
    module = SumAndMean()
    eager = module(values, offsets)
    exported = torch.export.export(module, (values, offsets))
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert {"jaggedperf.jagged_sum.default", "jaggedperf.jagged_mean.default"} <= targets  # kept as our operators
    torch.testing.assert_close(exported.module()(values, offsets), eager, rtol=0, atol=0)
    result = aoti_round_trip("cpu")  # in a fresh interpreter: see tests/ops/aoti_check.py
    assert result["max_error"] == 0
    assert "offsets must be non-decreasing; offsets[3]=6 < offsets[2]=9" in result["bad_offsets_error"]
