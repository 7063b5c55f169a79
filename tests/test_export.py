"""torch.export of a module calling our ops, and its AOTInductor package on the CPU.

One export here and one AOTInductor compile in a subprocess (~40 s). On the CPU the package calls our opaque pure-torch
kernel (``jaggedperf::_reduce_torch``) through AOTInductor's proxy executor, which needs jaggedperf
imported in the loading process (it is, here); the kernel checks the offsets there too.
"""


import torch

import jaggedperf
from helpers.aoti import aoti_round_trip


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
    result = aoti_round_trip("cpu")  # in a fresh interpreter: see tests/helpers/aoti.py
    assert result["max_error"] == 0
    assert "offsets must be non-decreasing; offsets[3]=6 < offsets[2]=9" in result["bad_offsets_error"]


def _fake_round_trips(monkeypatch, ours_dies: bool, twin_dies: bool) -> list:
    from helpers import aoti as aoti_check

    ran = []

    def fake(which, device):
        ran.append(which)
        if (ours_dies if which == "ours" else twin_dies):
            raise AssertionError(f"the subprocess died (rc -11): {which}")
        return {"max_error": 0.0, "which": which}

    monkeypatch.setattr(aoti_check, "_round_trip", fake)
    return ran


def test_on_cuda_the_torch_only_twin_runs_beside_ours_and_judges_its_death(monkeypatch):
    import pytest

    ran = _fake_round_trips(monkeypatch, ours_dies=True, twin_dies=True)
    with pytest.raises(pytest.xfail.Exception, match="torch-only module dies on this machine too"):
        aoti_round_trip("cuda")
    assert sorted(ran) == ["ours", "torch-only"]
    _fake_round_trips(monkeypatch, ours_dies=True, twin_dies=False)
    with pytest.raises(AssertionError, match="our package died where a torch-only one runs"):
        aoti_round_trip("cuda")
    ran = _fake_round_trips(monkeypatch, ours_dies=False, twin_dies=True)
    assert aoti_round_trip("cuda")["which"] == "ours"  # the twin waited for, its death ignored
    assert sorted(ran) == ["ours", "torch-only"]


def test_on_the_cpu_the_twin_runs_only_after_ours_died(monkeypatch):
    ran = _fake_round_trips(monkeypatch, ours_dies=False, twin_dies=False)
    assert aoti_round_trip("cpu")["which"] == "ours" and ran == ["ours"]
