#!/usr/bin/env python3
"""Where a training step's wall time goes (issue #16, bar 4): jagged_mean forward + backward at the seed shapes.

Bar 4 asks for forward + backward ≤ 3× our forward alone and ≤ 0.5× ``segment_reduce``'s forward + backward.
Before changing the backward path, this measures the parts of a step side by side, in one process, by the
seed's wall method (a sync after each call; median and p20/p80 of ``--iters`` calls, every sample kept), in
interleaved rounds so that a slow spell of the host touches every part alike:

- ``sync``: an empty call (the method's own cost);
- ``forward``, ``forward_requires_grad``: our forward with values that do not / do require grad;
- ``step``, ``step_no_max_seqlen``, ``step_autograd_grad``: forward + ``.backward(grad)`` (and without max_seqlen,
  and through ``torch.autograd.grad``);
- ``backward_op``: the backward's kernel alone through its public operator (``torch.ops.jaggedperf.jagged_expand``);
- ``engine_floor``: a Python ``autograd.Function`` with no kernels (forward allocates the (B, M) output, backward
  allocates the values' gradient): what the autograd engine and a Python Function cost around any backward;
- ``segment_reduce_forward``, ``segment_reduce_step``: torch's own peer.

Besides the walls: the syncs one step makes (``torch.cuda.set_sync_debug_mode``), the Python time of a step by
function (cProfile) and torch.profiler's table of a step. All of it under ``--out``: ``training_probe.json``,
``training_probe.md``, ``cprofile-<case>.txt``, ``profiler-<case>.txt``, ``syncs-<case>.txt``.

Run (GPU machine):  PYTHONPATH=src python3 benchmarks/training_probe.py --out $OUT/training
CPU plumbing only:  PYTHONPATH=src python3 benchmarks/training_probe.py --device cpu --iters 5 --out /tmp/tp
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_grid_bench import sample_stats  # noqa: E402  (median and quantiles of per-call µs, samples kept)

import jaggedperf  # noqa: E402
from jaggedperf.inputs import Case, make_batch  # noqa: E402
from jaggedperf.lab import timing  # noqa: E402
from jaggedperf.lab.grid import SEED_CASES  # noqa: E402


class _EngineFloor(torch.autograd.Function):
    """No kernels either way: the autograd engine's and a Python Function's cost around a backward."""

    @staticmethod
    def forward(ctx, values, batch: int):
        ctx.rows = values.shape[0]
        return values.new_empty(batch, values.shape[1])

    @staticmethod
    def backward(ctx, grad):
        return grad.new_empty(ctx.rows, grad.shape[1]), None


def parts_of(case: Case, device: torch.device) -> dict:
    """The calls to time at ``case``: name → zero-argument callable."""
    batch = make_batch(case, device)
    values, offsets, hint = batch.values, batch.offsets, batch.max_seqlen
    off64 = offsets.long()
    leaf = values.detach().clone().requires_grad_()
    grad = torch.randn(batch.B, batch.M, device=device, dtype=values.dtype)
    rows = values.shape[0]

    def step(**kw):
        leaf.grad = None
        jaggedperf.jagged_mean(leaf, offsets, **kw).backward(grad)

    def step_grad():
        torch.autograd.grad(jaggedperf.jagged_mean(leaf, offsets, max_seqlen=hint), leaf, grad)

    def engine_floor():
        leaf.grad = None
        _EngineFloor.apply(leaf, batch.B).backward(grad)

    def sr_step():
        leaf.grad = None
        torch.segment_reduce(leaf, "mean", offsets=off64, axis=0).backward(grad)

    return {
        "sync": lambda: None,
        "forward": lambda: jaggedperf.jagged_mean(values, offsets, max_seqlen=hint),
        "forward_requires_grad": lambda: jaggedperf.jagged_mean(leaf, offsets, max_seqlen=hint),
        "step": lambda: step(max_seqlen=hint),
        "step_no_max_seqlen": step,
        "step_autograd_grad": step_grad,
        "backward_op": lambda: torch.ops.jaggedperf.jagged_expand(grad, offsets, rows, True, hint),
        "engine_floor": engine_floor,
        "segment_reduce_forward": lambda: torch.segment_reduce(values, "mean", offsets=off64, axis=0),
        "segment_reduce_step": sr_step,
    }


def probe_case(case: Case, device: torch.device, out: Path, rounds: int, iters: int, profile_steps: int) -> dict:
    parts = parts_of(case, device)
    samples: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(rounds):  # interleaved: every part sees the same spells of the host
        for name, fn in parts.items():
            samples[name] += [t * 1e3 for t in timing.wall_samples(fn, device, warmup=20, iters=iters)]
    label = case.label
    step = parts["step"]
    sync = timing.synchronizer(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode(0)
    # the mode's own notice ("Synchronization debug mode is a prototype feature ...", once per process) is no sync:
    # run 51 counted it as the first shape's one sync
    syncs = [f"{w.filename}:{w.lineno}: {str(w.message)[:300]}" for w in caught
             if "synchroniz" in str(w.message) and "debug mode is a prototype" not in str(w.message)]
    (out / f"syncs-{label}.txt").write_text("\n".join(syncs) + "\n")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(profile_steps):
        step()
    sync()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(40)
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    (out / f"cprofile-{label}.txt").write_text(text.getvalue())
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                          if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as tp:
        for _ in range(min(profile_steps, 50)):
            step()
        sync()
    (out / f"profiler-{label}.txt").write_text(tp.key_averages().table(sort_by="cpu_time_total", row_limit=40,
                                                                       max_name_column_width=70))
    return {"case": label, "syncs_in_a_step": len(syncs),
            "parts": {name: sample_stats(s) for name, s in samples.items()}}


def markdown(result: dict) -> str:
    names = list(result["cases"][0]["parts"])
    head = "| part | " + " | ".join(c["case"] for c in result["cases"]) + " |"
    lines = [f"# Training step at the seed shapes ({result['device_name']}, torch {result['torch']})", "",
             f"`{result['command']}`; wall µs per call by the seed's method, median [p20, p80], "
             f"{result['rounds']} interleaved rounds of {result['iters']} calls.", "", head,
             "|---|" + "---:|" * len(result["cases"])]
    for name in names:
        cells = [f"{c['parts'][name]['median_us']:.1f} [{c['parts'][name]['p20_us']:.1f}, "
                 f"{c['parts'][name]['p80_us']:.1f}]" for c in result["cases"]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| syncs in a step | " + " | ".join(str(c["syncs_in_a_step"]) for c in result["cases"]) + " |")
    native = result.get("native") or {}
    lines += ["", f"Native launch path: {native.get('status')} {native.get('reason') or ''}".rstrip()
              + f"; calls served: forward {native.get('served')}, backward {native.get('served_backward')}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for the JSON, Markdown and profiles")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the parts")
    p.add_argument("--iters", type=int, default=100, help="timed calls per part and round")
    p.add_argument("--profile-steps", type=int, default=200, help="steps under cProfile (and up to 50 profiled)")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    if device.type == "cuda":
        jaggedperf.ops.prepare_native_launch()  # the native forward ready before timing, as in a warm process
    cases = [probe_case(c, device, out, args.rounds, args.iters, args.profile_steps) for c in SEED_CASES]
    native = jaggedperf.ops.launch_path()["native"]  # which halves of the step the native path served
    result = {"command": "python3 benchmarks/training_probe.py " + " ".join(argv), "torch": torch.__version__,
              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "rounds": args.rounds, "iters": args.iters, "cases": cases,
              "native": {k: native.get(k) for k in ("status", "reason", "served", "served_backward")}}
    (out / "training_probe.json").write_text(json.dumps(result))
    (out / "training_probe.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
