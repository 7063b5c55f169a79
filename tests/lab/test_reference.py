"""Where an op's float64 reference is computed (``impls.reference``): on the batch's device, again on the CPU when
that device is out of memory; out of memory on the CPU is an error."""

from types import SimpleNamespace

import pytest
import torch

from jaggedperf.impls.reference import on_batch_device


def _reference(fail_on: str, seen: list[str]):
    @on_batch_device
    def reference(batch, device):
        seen.append(device.type)
        if device.type == fail_on:
            raise torch.OutOfMemoryError(f"no room on {device.type}")
        return torch.zeros(batch.values.shape, dtype=torch.float64, device=device)

    return reference


def test_a_reference_is_computed_on_the_batch_device():
    seen = []
    batch = SimpleNamespace(values=torch.ones(2, 3))
    out = _reference("meta", seen)(batch)
    assert seen == ["cpu"] and out.device.type == "cpu" and out.dtype == torch.float64


def test_a_reference_out_of_device_memory_is_computed_again_on_the_cpu():
    seen = []
    batch = SimpleNamespace(values=torch.empty(2, 3, device="meta"))  # a device other than the CPU
    out = _reference("meta", seen)(batch)
    assert seen == ["meta", "cpu"] and out.device.type == "cpu" and out.shape == (2, 3)


def test_out_of_memory_on_the_cpu_is_raised():
    seen = []
    with pytest.raises(torch.OutOfMemoryError):
        _reference("cpu", seen)(SimpleNamespace(values=torch.ones(2, 3)))
    assert seen == ["cpu"]
