"""torch.export of a module calling our ops, and its AOTInductor package on the CPU (issue 15, item 5).

One export and one AOTInductor compile (~40 s here). On the CPU the package calls our opaque pure-torch
kernel (``jaggedperf::_reduce_torch``) through AOTInductor's proxy executor, which needs jaggedperf
imported in the loading process (it is, here); the kernel checks the offsets there too.
"""

import pytest
import torch

import jaggedperf


class SumAndMean(torch.nn.Module):
    def forward(self, values, offsets):
        return jaggedperf.jagged_sum(values, offsets) * 2 + jaggedperf.jagged_mean(values, offsets, empty="zero",
                                                                                      max_seqlen=4)


def test_export_and_aot_inductor_package_match_eager(tmp_path):
    values, offsets = torch.randn(7, 3), torch.tensor([0, 2, 2, 6, 7])
    module = SumAndMean()
    eager = module(values, offsets)
    exported = torch.export.export(module, (values, offsets))
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert {"jaggedperf.jagged_sum.default", "jaggedperf.jagged_mean.default"} <= targets  # kept as our operators
    torch.testing.assert_close(exported.module()(values, offsets), eager, rtol=0, atol=0)
    with torch._inductor.config.patch(force_disable_caches=True):
        path = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "sum_and_mean.pt2"))
    loaded = torch._inductor.aoti_load_package(path)
    torch.testing.assert_close(loaded(values, offsets), eager, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="offsets must be non-decreasing; offsets\\[3\\]=6 < offsets\\[2\\]=9"):
        loaded(values, torch.tensor([0, 2, 9, 6, 7]))
