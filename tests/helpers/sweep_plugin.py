"""A plugin for the sweep's tests (``--plugin helpers.sweep_plugin``): implementations of jagged_mean that hang,
kill their process, raise, break their device, change their inputs, fail until told not to, or are merely slow. Importing it registers them; ``unregister`` takes them out."""

import os
import time

import torch

from jaggedperf.impls.jagged_mean import segment_reduce
from jaggedperf.impls.registry import get_op, implementation

HANGS, EXITS, RAISES, POISONS, SLOW = "test_hangs", "test_exits", "test_raises", "test_poisons", "test_slow"
DEVICE_ASSERT, MUTATES, FLAKY = "test_device_assert", "test_mutates", "test_flaky"
NAMES = (HANGS, EXITS, RAISES, POISONS, SLOW, DEVICE_ASSERT, MUTATES, FLAKY)
FLAKY_ENV = "JAGGEDPERF_TEST_FLAKY"  # "fail": test_flaky raises (workers inherit the environment)
SLOW_CALL_S = 0.2


@implementation("jagged_mean", HANGS, takes="dense", description="test: sleeps for an hour")
def hangs(values, offsets):
    time.sleep(3600)


@implementation("jagged_mean", EXITS, takes="dense", description="test: ends its process with exit code 3")
def exits(values, offsets):
    os._exit(3)


@implementation("jagged_mean", RAISES, takes="dense", description="test: raises")
def raises(values, offsets):
    raise ValueError("plugin refuses this batch")


@implementation("jagged_mean", POISONS, takes="dense", description="test: fails and leaves its device unusable")
def poisons(values, offsets):
    # What a sticky CUDA error does, simulated on any device: from now on, this worker's device check fails.
    from jaggedperf.lab.sweep import worker

    worker._device_unusable = lambda device: "simulated sticky error"
    raise RuntimeError("simulated illegal memory access")


@implementation("jagged_mean", DEVICE_ASSERT, takes="dense", description="test: indexes out of bounds")
def device_assert(values, offsets):
    # On a GPU: a device-side assert, a sticky error that leaves the process's CUDA context unusable.
    return values[torch.full((offsets.numel() - 1,), values.shape[0] + 10**6, device=values.device)]


@implementation("jagged_mean", SLOW, takes="dense", description=f"test: segment_reduce after {SLOW_CALL_S} s")
def slow(values, offsets):
    time.sleep(SLOW_CALL_S)
    return segment_reduce(values, offsets)


@implementation("jagged_mean", MUTATES, takes="dense", description="test: doubles its values in place")
def mutates(values, offsets):
    values.mul_(2)
    return segment_reduce(values, offsets)


@implementation("jagged_mean", FLAKY, takes="dense", description=f"test: raises while ${FLAKY_ENV} is 'fail'")
def flaky(values, offsets):
    if os.environ.get(FLAKY_ENV) == "fail":
        raise RuntimeError("flaky failure")
    return segment_reduce(values, offsets)


def unregister():
    impls = get_op("jagged_mean").implementations
    for name in NAMES:
        impls.pop(name, None)
