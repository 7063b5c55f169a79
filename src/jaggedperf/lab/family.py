"""The row-wise family's benchmark row (``benchmarks/family_bench.py`` and the family's bars,
``tests/gpu/test_family_bars_gpu.py``): every contender of jagged_softmax or jagged_layer_norm at one case,
checked against float64 first, then timed on the device (``harness.device_time``), beside the bandwidth floor;
Inductor's compiled padded program and our backward in the same row.

The shapes: the seed's (512, 64, 100, 0.1) and (512, 64, 500, 0.75) in fp32 and bf16, and three of >= 64 MB in
fp32 (many mid-length sequences, many short ones, a few very long ones: the looping passes).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

import jaggedperf
from jaggedperf.impls.registry import get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import harness
from jaggedperf.lab.measure import timing
from jaggedperf.lab.measure.correctness import check_output

OPS = ("jagged_softmax", "jagged_layer_norm")  # the default; --ops adds jagged_mean / jagged_sum (forward only)
ROWWISE = OPS
NOT_TORCH = ("jaggedperf", "inductor", "helion")  # contenders that are not torch eager
SEED = [Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75)]
LARGE = [Case(1024, 256, 1000, 0.5), Case(65536, 64, 64, 0.2), Case(8, 4096, 4000, 0.0, "fixed")]
# the family's bars' shapes (tests/gpu/test_family_bars_gpu.py): the seed's, the first in bf16 too, the large ones
BAR_CASES = [*SEED, Case(512, 64, 100, 0.1, dtype="bfloat16"), *LARGE]
DEVICE = torch.device("cuda")
EPS = 1e-5  # the lab's layer norm eps (impls.jagged_layer_norm.EPS)
SLOW_US = 50_000  # a contender slower than this a call is recorded by one call's wall, not timed (it is no peer)


def cells(large_dtypes: tuple[str, ...] = ("float32",)):
    """The seed shapes in fp32 and bf16, then the large ones in ``large_dtypes`` (the bars' cells: fp32)."""
    for case in SEED:
        for dtype in ("float32", "bfloat16"):
            yield Case(case.B, case.M, case.seqlen, case.sparsity, case.distribution, dtype=dtype)
    for case in LARGE:
        for dtype in large_dtypes:
            yield Case(case.B, case.M, case.seqlen, case.sparsity, case.distribution, dtype=dtype)


def padded_compiled(op: str):
    # Inductor's program for the padded round trip on plain tensors (no NJT at the boundary)
    from jaggedperf.impls import jagged_layer_norm, jagged_softmax
    from jaggedperf.impls.rowwise import padded_round_trip

    dense_op, padding = ((jagged_softmax._masked_softmax, float("-inf")) if op == "jagged_softmax" else
                         (jagged_layer_norm._masked_layer_norm, 0.0))
    return torch.compile(lambda v, o, n: padded_round_trip(v, o, n, dense_op, padding),
                         mode="max-autotune-no-cudagraphs", dynamic=False)


def check_inductor_padded(op: str, case: Case) -> tuple[bool, float, str]:
    """Inductor's padded program of ``op`` at ``case`` compiled as ``row`` compiles it, and its output against the
    float64 reference: (ok, relative error, reason). Untimed; it fills the Inductor cache (the FX graph, keyed by the
    graph and its input shapes), so a later ``row`` in a process sharing the cache directory loads the program
    instead of compiling it (``scripts/test.sh`` drops the autotuners' picks in between: the timed pass tunes the
    kernels again alone)."""
    torch._dynamo.reset()
    spec = get_op(op)
    batch = spec.make_batch(case, DEVICE)
    compiled = padded_compiled(op)
    return check_output(compiled(batch.values, batch.offsets, batch.padded_len), _on(DEVICE, spec.reference(batch)),
                        case.dtype)


def row(op: str, case: Case, copy_gbps: float, *, skip: tuple[str, ...] = (),
        device: torch.device = DEVICE) -> dict:
    """Every contender of ``op`` at ``case`` but those named in ``skip``: correctness, device time and × floor each;
    the best torch eager contender; Helion over ours; our backward against its floor (row-wise ops).

    ``seconds``: where the row's time went, the parts adding up to the row: ``inputs`` (the batch and the backward's
    gradient), ``reference`` (float64, on the device), each contender by name (its checked first call, one wall call
    and its device time), ``inductor_compile`` (the first call of Inductor's padded program: its compile or cache
    load and its kernels' autotuning, apart from ``inductor_padded``, the rest of that contender) and ``backward``.
    """
    clock = _Clock(timing.synchronizer(device))
    # each case compiles Inductor's padded program anew (dynamic=False): without a reset the shared code object
    # passes Dynamo's recompile limit after 8 shapes and then runs eager under the compiled name
    torch._dynamo.reset()
    spec = get_op(op)
    batch = spec.make_batch(case, device)
    # the backward's output gradient, drawn before any capture from a private generator: a capture that fails
    # mid-way (a contender that syncs) leaves torch 2.11's default CUDA generator registered with the dead graph,
    # and its next draw raises "Offset increment outside graph capture"
    grad = torch.randn(batch.values.shape, generator=torch.Generator(device).manual_seed(0), device=device,
                       dtype=torch.float32).to(batch.values.dtype)
    floor_us = spec.must_move_bytes(batch) / (copy_gbps * 1e3)
    row = {"op": op, "case": case.label, "dtype": case.dtype, "values_mb": batch.values.numel() *
           batch.values.element_size() / 1e6, "floor_us": floor_us, "contenders": {}, "seconds": {}}
    row["seconds"]["inputs"] = clock.lap()
    reference = _on(device, spec.reference(batch))
    row["seconds"]["reference"] = clock.lap()
    calls = {name: (lambda impl=impl: impl.fn(*impl.prepare(batch))) for name, impl in spec.implementations.items()
             if device.type in impl.devices}
    ours = getattr(jaggedperf, op)
    calls["jaggedperf_no_max_seqlen"] = lambda: ours(batch.values, batch.offsets)
    if op in ROWWISE:
        compiled = padded_compiled(op)
        calls["inductor_padded"] = lambda: compiled(batch.values, batch.offsets, batch.padded_len)
    for name, call in calls.items():
        if name in skip:
            continue
        entry = row["contenders"][name] = _measure(call, reference, case.dtype, floor_us, device)
        row["seconds"][name] = clock.lap()
        if name == "inductor_padded" and "first_call_s" in entry:
            row["seconds"]["inductor_compile"] = entry["first_call_s"]
            row["seconds"][name] = round(row["seconds"][name] - entry["first_call_s"], 3)
    torch_eager = [c["median_us"] for n, c in row["contenders"].items()
                   if "median_us" in c and not n.startswith(NOT_TORCH)]
    row["best_torch_eager_us"] = min(torch_eager) if torch_eager else None
    helion, mine = row["contenders"].get("helion", {}), row["contenders"].get("jaggedperf", {})
    if "median_us" in helion and "median_us" in mine:
        row["helion_over_ours"] = helion["median_us"] / mine["median_us"]
    if op in ROWWISE:
        row["backward"] = backward(ours, batch, grad, copy_gbps, device)
        row["seconds"]["backward"] = clock.lap()
    return row


def _measure(call, reference: torch.Tensor, dtype: str, floor_us: float, device: torch.device) -> dict:
    """One contender: its first call's seconds (``first_call_s``: a compiled program's compile and autotuning) and
    output against float64, then (when correct) its device time and × floor, or, for a call slower than
    ``SLOW_US``, one call's wall; a failure recorded, never raised."""
    entry: dict = {}
    try:
        start = time.perf_counter()
        out = call()
        timing.synchronizer(device)()
        entry["first_call_s"] = round(time.perf_counter() - start, 3)
        ok, rel, reason = check_output(out, reference, dtype)
        del out
        entry.update(ok=ok, rel_error=rel, reason=reason)
        # one call by the seed's method (the correctness call warmed it); a slow one once more, its faster call
        # kept: the first cells of a process may still build a fast tier (ours at a process's first cell was
        # once taken for slow and went untimed)
        one_call_us = timing.wall_samples(call, device, warmup=0, iters=1)[0] * 1e3 if ok else None
        if ok and one_call_us > SLOW_US:
            one_call_us = min(one_call_us, timing.wall_samples(call, device, warmup=0, iters=1)[0] * 1e3)
        if ok and one_call_us > SLOW_US:  # e.g. unbind over 65536 sequences: seconds to capture or profile
            entry["untimed_one_call_us"] = one_call_us
        elif ok:
            entry.update(harness.device_time(call, device))
            entry["x_floor"] = entry["median_us"] / floor_us
    except Exception as exc:  # noqa: BLE001 - one contender's failure never loses the rest
        entry["error"] = f"{type(exc).__name__}: {exc}"
        if device.type == "cuda":
            torch.cuda.synchronize()
    return entry


def _on(device: torch.device, reference: torch.Tensor) -> torch.Tensor:
    """The float64 reference on the contenders' device, where each output is compared with it (on the CPU a
    806 MB shape's comparison took seconds a contender). It is computed there (``impls.reference``) unless the
    device ran out of memory for its work: then moved if the result alone fits, else left on the CPU."""
    try:
        return reference.to(device)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return reference


class _Clock:
    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync  # the device's queue is waited for at each lap: its work counts in the part that queued it
        self.at = time.perf_counter()

    def lap(self) -> float:
        """Seconds since the last lap (or the start), to the ms."""
        self.sync()
        now = time.perf_counter()
        seconds, self.at = now - self.at, now
        return round(seconds, 3)


def backward(ours, batch, grad: torch.Tensor, copy_gbps: float, device: torch.device = DEVICE) -> dict:
    """Our backward's device time against its floor (read y or x and the gradient, write the values' gradient)."""
    values = batch.values.detach().requires_grad_(True)
    out = ours(values, batch.offsets, max_seqlen=batch.max_seqlen)
    floor_us = 3 * out.numel() * out.element_size() / (copy_gbps * 1e3)  # read y (or x) and grad, write dx

    def call():
        torch.autograd.grad(out, values, grad, retain_graph=True)

    t = harness.device_time(call, device)
    return {**t, "floor_us": floor_us, "x_floor": t["median_us"] / floor_us}
