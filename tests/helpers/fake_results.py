"""Synthetic but plausible results for the tests that read results (store, plot, compare, report, CLI).

A grid of tritonbench cases (seqlen × sparsity) for B=512, M=64, float32, plus two bf16 cases of a
second shape; every implementation in every mode; wall and device time from a simple model of an
H200 (bytes / effective bandwidth + launch overhead), so the numbers have the right shape. A few cells
are not ok, the way real runs fail.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np

from jaggedperf.inputs import Case
from jaggedperf.lab.modes import BOUNDARY_MODES, COMPILE_MODES, EAGER, GRAPH
from jaggedperf.lab.result import ERROR, OK, SKIPPED, WRONG, DeviceTime, Result, RunRecord, Stability, WallStats

# The record's modes: eager, torch.compile's four and graph (the counts the tests check are of these);
# ``make_results(modes=ALL_MODES)`` adds jaggedperf.compile's four.
MODES = (EAGER, *COMPILE_MODES, GRAPH)
ALL_MODES = (EAGER, *COMPILE_MODES, *BOUNDARY_MODES, GRAPH)
IMPLEMENTATIONS = ("unbind_mean", "nanmean_padded", "sum_padded", "njt_mean", "segment_reduce", "jaggedperf")
SEQLENS = (100, 1000, 10000)
SPARSITIES = (0.1, 0.5, 0.9)
COPY_GBPS = 3900.0

ENVIRONMENT = {
    "torch": "2.13.0+cu130",
    "triton": "3.6.0",
    "cuda": "13.0",
    "driver": "580.82.07",
    "gpu": "NVIDIA H200",
    "python": "3.12.3",
    "git_commit": "8cc3b2c",
    "command": "jaggedperf sweep --op jagged_mean -o sweep.jsonl",
    "platform": "Linux-6.8.0-x86_64",
    "hostname": "h200-node-1",
    "date": "2026-12-01T10:00:00+00:00",
}

# how far each implementation is from the copy floor in eager mode, and its launches per call
_EFFICIENCY = {"unbind_mean": 0.02, "nanmean_padded": 0.25, "sum_padded": 0.35, "njt_mean": 0.3,
               "segment_reduce": 0.45, "jaggedperf": 0.85}
_KERNELS = {"unbind_mean": 1024.0, "nanmean_padded": 4.0, "sum_padded": 3.0, "njt_mean": 5.0,
            "segment_reduce": 2.0, "jaggedperf": 1.0}
# compiled / eager time factor per mode (max-autotune-no-cudagraphs slower than eager, as in #160355)
_MODE_FACTOR = {"eager": 1.0, "compile:default": 0.8, "compile:reduce-overhead": 0.6,
                "compile:max-autotune": 0.7, "compile:max-autotune-no-cudagraphs": 1.6, "graph": 0.9,
                # the boundary: the same kernels, without the NJT's per-call host work
                "jagged-compile:default": 0.75, "jagged-compile:reduce-overhead": 0.6,
                "jagged-compile:max-autotune": 0.7, "jagged-compile:max-autotune-no-cudagraphs": 0.7}


def cases() -> list[Case]:
    grid = [Case(512, 64, L, s) for L in SEQLENS for s in SPARSITIES]
    return grid + [Case(1024, 128, 200, 0.2, dtype="bfloat16"), Case(1024, 128, 200, 0.7, dtype="bfloat16")]


def bytes_moved(case: Case) -> int:
    size = 2 if case.dtype == "bfloat16" else 4
    total_len = case.B * max(1, math.floor(case.seqlen * (1 - case.sparsity)))
    return total_len * case.M * size + (case.B + 1) * 8 + case.B * case.M * size


def _status(impl: str, mode: str, case: Case) -> tuple[str, str | None, float | None]:
    if impl == "nanmean_padded" and case.seqlen == 10000 and case.sparsity == 0.9:
        return SKIPPED, "padded (B, seqlen, M) tensor is 1.3 GB, over the 1 GB limit", None
    if impl == "unbind_mean" and mode == "compile:max-autotune" and case.seqlen == 10000:
        return ERROR, "compile timed out after 600 s", None
    if impl == "njt_mean" and mode == "graph":
        return ERROR, "RuntimeError: operation not permitted when stream is capturing | capture failed", None
    if impl == "segment_reduce" and mode == "compile:max-autotune-no-cudagraphs" and case.seqlen == 100 and case.sparsity == 0.5:
        return WRONG, "rel_error 0.31 > tolerance 1e-05", 0.31
    return OK, None, 1e-7


def make_result(impl: str, mode: str, case: Case, rng: random.Random, op: str = "jagged_mean") -> Result:
    status, reason, rel_error = _status(impl, mode, case)
    nbytes = bytes_moved(case)
    if status != OK:
        return Result(op, impl, mode, case, "cuda", status, reason, rel_error,
                      compile_s=None if status == SKIPPED else 12.0, bytes_moved=nbytes)
    efficiency = min(0.92, _EFFICIENCY[impl] / _MODE_FACTOR[mode])  # never above the copy floor
    device_us = nbytes / (COPY_GBPS * 1e9 * efficiency) * 1e6 + 3.0 * _MODE_FACTOR[mode]
    device_us *= 1 + 0.02 * rng.random()
    launches = _KERNELS[impl] if mode in ("eager", "graph") else max(1.0, _KERNELS[impl] / 3)
    host_us = 0.0 if mode in ("graph", "compile:reduce-overhead", "jagged-compile:reduce-overhead") else 6.0 * launches
    if mode == "compile:max-autotune-no-cudagraphs":
        host_us = 9.0 * _KERNELS[impl]  # guards and a launch per generated kernel: slower than eager
    median_ms = (device_us + host_us + 4.0) / 1000
    wall = WallStats.from_samples(_samples(median_ms, 0.03, 200, rng))
    dev = DeviceTime.from_samples(_samples(device_us, 0.01, 100, rng), "graph", True)
    device_us = dev.median_us
    gbps = nbytes / (device_us * 1e-6) / 1e9
    return Result(
        op, impl, mode, case, "cuda", OK, None, rel_error,
        compile_s=None if mode in ("eager", "graph") else 8.0 + rng.random(),
        wall=wall, device_time=dev, host_us=median_ms * 1000 - device_us, kernels_per_call=launches,
        kernel_names=[f"{impl}_kernel_{i}" for i in range(min(int(launches), 3))],
        bytes_moved=nbytes, gbps=gbps, pct_of_copy=100 * gbps / COPY_GBPS,
        extra={"total_len": nbytes // (case.M * 4)},
        stability=Stability(True, 0.04, 0.0, 1, 0.1, 0.1), threads=1,
    )


def _samples(median: float, spread: float, n: int, rng: random.Random) -> np.ndarray:
    """``n`` per-call times around ``median``: normal with a relative σ of ``spread``, clipped to stay positive,
    shifted so that their median is ``median`` (float32, as stored)."""
    g = np.random.default_rng(rng.randrange(2**32))
    x = median * (1 + spread * np.clip(g.standard_normal(n), -3, 3))
    return (x - np.median(x) + median).astype(np.float32)


def fill_speedups(results: list[Result]) -> list[Result]:
    """speedup_vs_eager as the runner fills it: eager wall median / this wall median, same impl and case."""
    eager = {(r.op, r.implementation, r.case): r for r in results if r.mode == "eager" and r.status == OK}
    out = []
    for r in results:
        e = eager.get((r.op, r.implementation, r.case))
        if r.status == OK and e is not None:
            r = replace(r, speedup_vs_eager=e.wall.median_ms / r.wall.median_ms)
        out.append(r)
    return out


def make_results(seed: int = 0, modes: tuple[str, ...] = MODES) -> list[Result]:
    rng = random.Random(seed)
    results = [make_result(impl, mode, case, rng) for case in cases() for impl in IMPLEMENTATIONS for mode in modes]
    return fill_speedups(results)


def make_record(seed: int = 0, modes: tuple[str, ...] = MODES) -> RunRecord:
    return RunRecord(dict(ENVIRONMENT), make_results(seed, modes), COPY_GBPS)


def scaled(record: RunRecord, factor: float, select) -> RunRecord:
    """A copy of ``record`` whose ok cells for which ``select(result)`` is true are ``factor`` times slower
    (wall and device alike, every sample), keeping their relative spread."""
    out = []
    for r in record.results:
        if r.status == OK and select(r):
            d = r.device_time
            r = replace(
                r,
                wall=WallStats.from_samples(r.wall.samples_ms() * factor),
                device_time=DeviceTime.from_samples(d.samples_us() * factor, d.method, d.l2_flushed),
            )
        out.append(r)
    return RunRecord(dict(record.environment), out, record.copy_gbps)
