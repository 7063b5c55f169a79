"""The jagged sum/mean's benchmark row (``benchmarks/kernel_grid_bench.py``, ``benchmarks/merge_path_bench.py`` and
the kernel bars, ``tests/gpu/test_kernel_bars_gpu.py``): ours with and without max_seqlen against every peer at one
case, each checked against float64 first, then timed on the device (``harness.device_time``, every sample kept),
beside the bandwidth floor; and the seed's training step by its wall method.

The bars (``judge``): 1 ahead of the best correct peer (≤ 0.9× it, or both within 5% of the floor); 2 near the floor
(≤ 1.15× it at ≥ 64 MB, ≤ 2× on power-law lengths); 3 without max_seqlen ≤ 1.15× the call with it; 5 bitwise
repeats; 4 (``training_walls``) forward + backward ≤ 3× our forward and ≤ 0.5× ``segment_reduce``'s.

The limit each bar is judged against, measured beside it (``practical_floor``): an empty kernel's graph replay + the
same bytes at the run's copy bandwidth. A bar whose threshold lies below it cannot hold on this hardware
(``out_of_reach``); a call within ``AT_LIMIT`` of it is at that limit (``at_the_limit``), and one past it misses the bar
by its own design.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import harness
from jaggedperf.lab.measure import timing

DEVICE = torch.device("cuda")
PEERS = ("segment_reduce", "inductor_padded")
# A call at the practical floor measured beside it, within this factor: room for the empty kernel's own spread (4.4-5.0
# µs over the kernel bars' shapes in one H200 run), none for a second launch or a dependent round trip more
AT_LIMIT = 1.10


def must_move_bytes(values: torch.Tensor, offsets: torch.Tensor) -> int:
    """Bytes a reduction must move: the values and offsets read once, the (B, M) output written once."""
    n_segments = offsets.numel() - 1
    return values.numel() * values.element_size() + offsets.numel() * offsets.element_size() + \
        n_segments * values.shape[1] * values.element_size()


def floor_us(nbytes: float, copy_gbps: float) -> float:
    """The bandwidth floor (µs): bytes that must move / the copy bandwidth measured in the same run."""
    return nbytes / (copy_gbps * 1e9) * 1e6


def tolerance(dtype: torch.dtype) -> float:
    """Relative error allowed against float64: fp32 1e-5, 2-byte types 1e-2."""
    return 1e-5 if dtype == torch.float32 else 1e-2


def reference(values: torch.Tensor, offsets: torch.Tensor, *, mean: bool) -> torch.Tensor:
    """(B, M) float64 on the values' device, by index_add over segment ids."""
    offsets = offsets.long()
    lengths = offsets.diff()
    seg = torch.repeat_interleave(torch.arange(lengths.numel(), device=values.device), lengths,
                                  output_size=values.shape[0])
    out = torch.zeros(lengths.numel(), values.shape[1], dtype=torch.float64, device=values.device)
    out.index_add_(0, seg, values.double())
    return out / lengths.unsqueeze(1).double() if mean else out


def expand_reference(grad: torch.Tensor, offsets: torch.Tensor, n_rows: int, *, mean: bool) -> torch.Tensor:
    """(n_rows, M) float64 on the gradient's device: each row its segment's gradient (/ its length for mean), the
    backward's reference."""
    lengths = offsets.long().diff()
    g = grad.double()
    if mean:
        g = g / lengths.clamp_min(1).unsqueeze(1).double()
    return g.repeat_interleave(lengths, dim=0, output_size=n_rows)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative L2 error over the reference's finite elements; inf where NaNs differ."""
    out = out.double()
    finite = torch.isfinite(ref)
    if not bool(torch.equal(torch.isnan(out), torch.isnan(ref))):
        return float("inf")
    den = ref[finite].norm()
    num = (out[finite] - ref[finite]).norm()
    return float(num / den) if float(den) > 0 else float(num)


def elementwise_error(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor) -> float:
    """The largest |out - ref| / scale over the elements (ref and scale float64, scale the error's scale: Σ|x| of
    the element's rows, or |ref|); where scale is 0 the element must equal ref exactly. inf where NaNs or infinities
    differ, or an element past a zero scale differs: unlike ``rel_error``, one wrong element among millions shows."""
    got = out.detach().to(ref.device, torch.float64)
    nan = torch.isnan(ref)
    infinite = ~torch.isfinite(ref) & ~nan
    if not torch.equal(torch.isnan(got), nan) or not torch.equal(got[infinite], ref[infinite]):
        return float("inf")
    finite = torch.isfinite(ref)
    diff, scale = (got - ref).abs()[finite], scale[finite]
    if bool((diff[scale == 0] > 0).any()) or not bool(torch.isfinite(diff).all()):
        return float("inf")
    return float((diff / scale.clamp_min(1e-300)).max()) if diff.numel() else 0.0


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bits (so NaN == NaN when its bits are)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.uint8),
                                                                      b.contiguous().view(torch.uint8))


def sample_stats(samples_us) -> dict:
    """Median and quantiles of per-call µs, the samples kept."""
    a = np.asarray(samples_us, dtype=float)
    q = np.quantile(a, [0.1, 0.2, 0.5, 0.8, 0.9])
    return {"median_us": float(q[2]), "p10_us": float(q[0]), "p20_us": float(q[1]), "p80_us": float(q[3]),
            "p90_us": float(q[4]), "n": int(a.size), "samples_us": [round(float(x), 3) for x in a]}


def device_time(fn, rep_ms: int, device: torch.device = DEVICE) -> dict:
    """Device µs per call (``harness.device_time``: CUDA-graph replay, L2 flushed; no profiler fallback), every
    sample kept; on the CPU, the wall (plumbing checks only). Warms ``fn`` first."""
    for _ in range(3):  # compile, verify the launch path, settle
        fn()
    if device.type != "cuda":
        return {**sample_stats([t * 1e3 for t in timing.wall_samples(fn, device, warmup=2, iters=20)]),
                "method": "cpu-wall"}
    torch.cuda.synchronize()
    t = harness.device_time(fn, device, rep_ms=rep_ms, profiler_fallback=False, samples=True)
    return {**sample_stats(t["samples_us"]), "method": t["method"], "l2_flushed": t["l2_flushed"]}


def padded_fn(op: str, padded_len: int):
    """Inductor's peer: the padded tensor (``_jagged_to_padded_dense_forward``), then its sum (or mean)."""
    from jaggedperf.impls.jagged_mean import _padded

    def fn(values, offsets):
        out = torch.sum(_padded(values, offsets, padded_len), dim=1)
        return out / offsets.diff().unsqueeze(1) if op == "mean" else out

    return fn


def ours_us(row: dict) -> dict:
    """Ours with and without max_seqlen (µs, median), None where not timed."""
    return {v: row[v]["median_us"] if isinstance(row.get(v), dict) else None for v in ("ours_hinted", "ours_plain")}


def thresholds(row: dict) -> dict:
    """Each bar's threshold (µs) by key (``1_ours_hinted`` ... ``3``), None where the bar does not apply or a number it
    needs is missing; sets ``row["best_peer_us"]``. Bar 1: 0.9× the best correct peer, or 1.05× the floor where that
    peer is within 5% of it; bar 2: 1.15× the floor at ≥ 64 MB, 2× on power-law lengths; bar 3: 1.15× ours with
    max_seqlen."""
    floor, t = row["floor_us"], ours_us(row)
    peers = [row[p]["median_us"] for p in PEERS if isinstance(row.get(p), dict) and row.get(f"{p}_correct")]
    best = min(peers) if peers else None
    row["best_peer_us"] = best
    bar2 = 1.15 if row["must_move_bytes"] >= 64e6 else 2.0 if row["distribution"] == "heavy" else None
    out: dict = {}
    for v, us in t.items():
        out[f"1_{v}"] = None if us is None or best is None else max(
            0.9 * best, 1.05 * floor if best <= 1.05 * floor else 0.0)
        out[f"2_{v}"] = None if us is None or bar2 is None else bar2 * floor
    out["3"] = None if None in t.values() else 1.15 * t["ours_hinted"]
    return out


def judge(row: dict) -> dict:
    """Bars 1, 2, 3 and 5 for one row: True / False, or None where the bar does not apply or a number it needs is
    missing (sets ``row["best_peer_us"]``)."""
    t = ours_us(row)
    bars = {k: None if limit is None else t["ours_plain" if k == "3" else k[2:]] <= limit
            for k, limit in thresholds(row).items()}
    bars["5"] = row.get("deterministic")
    return bars


def practical_floor(nbytes: int, copy_gbps: float, rep_ms: int, device: torch.device = DEVICE) -> dict:
    """The practical floor of one launch moving ``nbytes`` (µs), measured now: an empty kernel's graph replay (the
    launch) + the bytes at the copy bandwidth of the run (``floor_us``). For the record, ``copy_us``: an elementwise
    kernel reading nbytes / 2 and writing as many, by its own replay, which counts a launch again (on the seed's
    bytes it exceeds our one-launch reduction's own time, so it is no floor). Both by CUDA-graph replay, L2 flushed."""
    empty = torch.empty(1, device=device)
    src = torch.randn(max(nbytes // 8, 4), device=device)
    dst = torch.empty_like(src)
    empty_us = device_time(lambda: empty.add_(0), 40, device)["median_us"]
    copy_us = device_time(lambda: torch.neg(src, out=dst), rep_ms, device)["median_us"]
    return {"empty_kernel_us": empty_us, "copy_us": copy_us,
            "practical_floor_us": empty_us + floor_us(nbytes, copy_gbps)}


def out_of_reach(row: dict) -> dict:
    """Per bar key: True where its threshold lies below the practical floor measured beside it (no one-launch kernel
    holds it on this hardware), False where it does not, None where the bar does not apply."""
    practical = row.get("practical_floor_us")
    return {k: None if limit is None or practical is None else limit < practical
            for k, limit in thresholds(row).items()}


def at_the_limit(row: dict, key: str, us: float) -> bool:
    """Whether a call of ``us`` missing bar ``key`` is at the hardware's limit (``at_hardware_limit``)."""
    threshold, practical = thresholds(row).get(key), row.get("practical_floor_us")
    return threshold is not None and practical is not None and at_hardware_limit(threshold, practical, us)


def at_hardware_limit(threshold: float, practical: float, us: float) -> bool:
    """Whether a call of ``us`` missing a bar at ``threshold`` is at the hardware's limit: the threshold below the
    ``practical`` floor measured beside it (out of reach) and the call within ``AT_LIMIT`` of that floor."""
    return threshold < practical and us <= AT_LIMIT * practical


def measure_case(cls: str, case: Case, copy_gbps: float, *, op: str = "sum", padded_max_bytes: float = 8e9,
                 inductor_left: list | None = None, extra: dict | None = None,
                 device: torch.device = DEVICE) -> dict:
    """One case's row: ours with max_seqlen (``ours_hinted``) and without (``ours_plain``), ``segment_reduce``,
    Inductor's compiled padded sum (where the padded tensor fits under ``padded_max_bytes`` and while
    ``inductor_left[0]`` seconds of compile remain), and ``extra`` (name -> a function of (values, offsets, max_seqlen)
    returning a zero-argument call: more contenders of ours, timed and checked the same way); then ``judge``.

    An incorrect contender of ours is not timed; an incorrect peer is timed but not counted as a peer.
    """
    import jaggedperf

    inductor_left = [float("inf")] if inductor_left is None else inductor_left
    fn_op = getattr(jaggedperf, f"jagged_{op}")
    batch = make_batch(case, device)
    values, offsets, hint = batch.values, batch.offsets, batch.max_seqlen
    off64 = offsets.long()
    must = must_move_bytes(values, offsets)
    row = {"class": cls, "case": case.label, "case_fields": case.to_dict(), "dtype": case.dtype,
           "distribution": case.distribution, "B": batch.B, "M": batch.M, "total_len": values.shape[0],
           "max_seqlen": hint, "must_move_bytes": must, "copy_gbps": copy_gbps, "floor_us": floor_us(must, copy_gbps)}
    ref = reference(values, offsets, mean=op == "mean")
    tol = tolerance(values.dtype)
    rep = 25 if must > 500e6 else 40
    row.update(practical_floor(must, copy_gbps, rep, device))
    calls = {"ours_hinted": lambda: fn_op(values, offsets, max_seqlen=hint),
             "ours_plain": lambda: fn_op(values, offsets),
             "segment_reduce": lambda: torch.segment_reduce(values, op, offsets=off64, axis=0)}
    for name, make in (extra or {}).items():
        calls[name] = make(values, offsets, hint)
    padded_bytes = batch.B * max(hint, 1) * batch.M * values.element_size()
    if padded_bytes > padded_max_bytes:
        row["inductor_padded"] = f"skipped: the padded tensor would take {padded_bytes / 1e9:.1f} GB " \
                                 f"(> {padded_max_bytes / 1e9:.1f})"
    elif inductor_left[0] <= 0:
        row["inductor_padded"] = "skipped: the Inductor compile budget is spent"
    else:
        torch._dynamo.reset()
        compiled = torch.compile(padded_fn(op, max(hint, 1)), dynamic=False)
        t = time.time()
        try:
            compiled(values, offsets)
            calls["inductor_padded"] = lambda: compiled(values, offsets)
        except Exception as exc:  # noqa: BLE001 - a peer that does not compile is recorded, not fatal
            row["inductor_padded"] = f"compile failed: {type(exc).__name__}: {str(exc)[:300]}"
        row["inductor_compile_s"] = time.time() - t
        inductor_left[0] -= row["inductor_compile_s"]
    ours = {"ours_hinted", "ours_plain", *(extra or {})}
    for name, fn in calls.items():
        try:
            out = fn()
            err = rel_error(out, ref)
            row[f"{name}_rel_error"] = err
            row[f"{name}_correct"] = err <= tol
            if name in ours:
                repeats = [fn() for _ in range(3)]
                row[f"{name}_deterministic"] = all(bitwise_equal(out, r) for r in repeats)
        except Exception as exc:  # noqa: BLE001 - a contender that fails is recorded, not fatal
            row[name] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            row[f"{name}_correct"] = False
            continue
        if not row[f"{name}_correct"] and name in ours:
            row[name] = f"not timed: relative error {err:.2e} > {tol:g}"
            continue
        try:
            row[name] = device_time(fn, rep, device)
        except Exception as exc:  # noqa: BLE001
            row[name] = f"timing failed: {type(exc).__name__}: {str(exc)[:300]}"
    row["deterministic"] = bool(row.get("ours_hinted_deterministic") and row.get("ours_plain_deterministic"))
    row["bars"] = judge(row)
    return row


class _NoKernels(torch.autograd.Function):
    """The autograd engine's own floor for a training step: a Python autograd node whose forward and backward launch
    no kernel (an empty output; the leaf's gradient handed back as made beforehand)."""

    @staticmethod
    def forward(ctx, leaf: torch.Tensor, out_shape: tuple, grad_in: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.grad_in = grad_in
        return leaf.new_empty(out_shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:  # noqa: D102
        return ctx.grad_in, None, None


def training_walls(case: Case, rounds: int, iters: int, device: torch.device = DEVICE) -> dict:
    """Wall per call by the seed's method (interleaved rounds): forward + backward of ours and of ``segment_reduce``
    (jagged_mean), our forward alone, and the autograd engine's floor (``_NoKernels`` stepped: a Python node with no
    kernel either way); every sample kept; bar 4 judged, and its limit: the engine's floor + two of our forward calls
    (a forward and a backward launch). Bar 4 is out of reach where that limit exceeds its threshold, and a step within
    the limit is then at it (``bar4_at_limit``)."""
    import jaggedperf

    batch = make_batch(case, device)
    values, offsets, hint = batch.values, batch.offsets, batch.max_seqlen
    off64 = offsets.long()
    leaf = values.detach().clone().requires_grad_()
    grad = torch.randn(batch.B, batch.M, device=device, dtype=values.dtype)
    grad_in = torch.randn_like(values)

    def ours_fb():
        leaf.grad = None
        jaggedperf.jagged_mean(leaf, offsets, max_seqlen=hint).backward(grad)

    def sr_fb():
        leaf.grad = None
        torch.segment_reduce(leaf, "mean", offsets=off64, axis=0).backward(grad)

    def engine_fb():
        leaf.grad = None
        _NoKernels.apply(leaf, (batch.B, batch.M), grad_in).backward(grad)

    fns = {"ours_forward": lambda: jaggedperf.jagged_mean(values, offsets, max_seqlen=hint),
           "ours_forward_backward": ours_fb, "segment_reduce_forward_backward": sr_fb,
           "engine_floor_forward_backward": engine_fb}
    ours_fb()
    err = rel_error(leaf.grad, expand_reference(grad, offsets, values.shape[0], mean=True))
    samples: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name] += [t * 1e3 for t in timing.wall_samples(fn, device, warmup=50, iters=iters)]
    out = {"case": case.label, "backward_rel_error": err, "backward_correct": err <= tolerance(values.dtype)}
    out.update({name: sample_stats(s) for name, s in samples.items()})
    fb, f, sr, engine = (out[k]["median_us"] for k in ("ours_forward_backward", "ours_forward",
                                                         "segment_reduce_forward_backward",
                                                         "engine_floor_forward_backward"))
    out["fb_over_forward"], out["fb_over_segment_reduce"] = fb / f, fb / sr
    out["bar4"] = bool(out["backward_correct"] and fb <= 3 * f and fb <= 0.5 * sr)
    out["limit4_us"] = engine + 2 * f
    out["bar4_out_of_reach"] = out["limit4_us"] > min(3 * f, 0.5 * sr)
    out["bar4_at_limit"] = bool(out["backward_correct"] and out["bar4_out_of_reach"] and fb <= out["limit4_us"])
    return out
