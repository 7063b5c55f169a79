"""Where one call's host time goes at the seed shapes: the pieces timed alone, then cProfile.

Wall per call by the seed's method (50 warm-up, 200 calls, a sync after each; median µs) of:
the sync alone, ``torch.empty`` of the output, the cached compiled kernel launched with prebuilt
arguments (the Python launch path's floor), our eager calls (hinted: the native path, and the same call
on the Python path; unhinted, NestedTensor, the operator
through the dispatcher, the lab's registered ``jaggedperf``), ``torch.segment_reduce``, the seed's
``sum_padded`` (bar 3's other reference), the compiled function the lab times, in two
modes, and torch.compile's own floor (a compiled ``offsets + 1``). Then the top of cProfile for our
eager call, the NestedTensor call and the compiled call, and
the code Inductor generated for the compiled one.

    PYTHONPATH=src python3 benchmarks/host_probe.py --out DIR [--case 1024,256,1000,0.5 ...]

Writes DIR/host_probe.json, DIR/host_probe_profiles.txt and DIR/host_probe_inductor_code_<case>.py.txt
(Inductor's code as text: no tool takes it for project code).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
from pathlib import Path

import torch

import jaggedperf
from jaggedperf.impls.registry import get_implementation
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab.env import triton_version
from jaggedperf.lab.grid import SEED_CASES
from jaggedperf.lab.timing import wall_stats
from jaggedperf.ops import testing

MODES = ("max-autotune-no-cudagraphs", "default")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile-calls", type=int, default=2000)
    parser.add_argument("--case", action="append", default=None, metavar="B,M,SEQLEN,SPARSITY[,DISTRIBUTION]",
                        help="a case instead of the seed shapes (repeatable)")
    args = parser.parse_args()
    cases = [_case(spec) for spec in args.case] if args.case else SEED_CASES
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    native = jaggedperf.ops.prepare_native_launch()  # built (or loaded) before anything is timed
    report = {"torch": torch.__version__, "triton": triton_version(), "native_build": native, "cases": {}}
    profiles = io.StringIO()
    for case in cases:
        walls, text, code = probe_case(case, device, args.profile_calls)
        report["cases"][case.label] = walls
        profiles.write(f"#### {case.label}\n{text}\n")
        (args.out / f"host_probe_inductor_code_{case.label}.py.txt").write_text(code)
    report["launch_path"] = jaggedperf.ops.launch_path()
    (args.out / "host_probe.json").write_text(json.dumps(report, indent=2))
    (args.out / "host_probe_profiles.txt").write_text(profiles.getvalue())
    for label, walls in report["cases"].items():
        print(label)
        for name, us in walls.items():
            print(f"  {name:<40} {us:8.1f} us")
    return 0


def probe_case(case: Case, device: torch.device, profile_calls: int):
    batch = make_batch(case, device)
    values, offsets, longest = batch.values, batch.offsets, batch.max_seqlen
    nt = batch.to_nested()
    ref = torch.ops.jaggedperf.jagged_mean(values.double().cpu(), offsets.cpu(), False)  # the CPU kernel, in fp64

    def hinted():
        return jaggedperf.jagged_mean(values, offsets, max_seqlen=longest)

    testing.python_path(values, offsets, mean=True, max_seqlen=longest)
    testing.python_path(values, offsets, mean=True, max_seqlen=longest)  # the second call verifies the fast tier
    launch_only = testing.prebuilt_launch(values, offsets, mean=True, max_seqlen=longest)  # through the active tier

    def lab_fn(v, o):
        return jaggedperf.jagged_mean(v, o, max_seqlen=longest)

    compiled = {mode: torch.compile(lab_fn, mode=mode) for mode in MODES}
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, codes = run_and_get_code(compiled[MODES[0]], values, offsets)
    callables = {
        "sync only": lambda: None,
        "torch.empty(B, M)": lambda: torch.empty((case.B, case.M), device=device),
        "compiled kernel launched, args prebuilt": launch_only,
        "jagged_mean(max_seqlen=...)": hinted,
        "jagged_mean(max_seqlen=...), Python path": lambda: testing.python_path(values, offsets, mean=True,
                                                                                max_seqlen=longest),
        "jagged_mean (no hint)": lambda: jaggedperf.jagged_mean(values, offsets),
        "jagged_mean(nt)": lambda: jaggedperf.jagged_mean(nt),
        "torch.ops.jaggedperf.jagged_mean": lambda: torch.ops.jaggedperf.jagged_mean(values, offsets, False),
        "torch.segment_reduce": lambda: torch.segment_reduce(values, "mean", offsets=offsets, axis=0),
    }
    for name in ("jaggedperf", "sum_padded"):  # as the lab and the bars' test call them (the registry)
        impl = get_implementation("jagged_mean", name)
        args = impl.prepare(batch)
        callables[f"lab implementation {name}"] = lambda impl=impl, args=args: impl.fn(*args)
    for mode, fn in compiled.items():
        callables[f"compiled {mode}"] = lambda fn=fn: fn(values, offsets)
    # torch.compile's own per-call floor in the same mode: a graph of one tiny Inductor kernel
    floor_fn = torch.compile(lambda o: o + 1, mode=MODES[0])
    callables[f"compiled {MODES[0]}: offsets + 1"] = lambda: floor_fn(offsets)
    for name, fn in callables.items():
        got = fn()
        if isinstance(got, torch.Tensor) and got.shape == ref.shape and name != "torch.empty(B, M)":
            err = ((got.double().cpu() - ref).abs().max() / ref.abs().max()).item()
            if not err < 1e-5:
                raise AssertionError(f"{case.label} {name}: relative error {err:.3g}")
    walls = {}
    for _ in range(3):  # interleaved rounds: the median of three medians per callable
        for name, fn in callables.items():
            walls.setdefault(name, []).append(wall_stats(fn, device).median_ms * 1e3)
    walls = {name: statistics.median(ms) for name, ms in walls.items()}
    text = []
    for name in ("jagged_mean(max_seqlen=...)", "jagged_mean(max_seqlen=...), Python path", "jagged_mean(nt)",
                 f"compiled {MODES[0]}"):
        text.append(f"--- {name}: cProfile over {profile_calls} calls (sync after each), by own time\n")
        text.append(_profile(callables[name], profile_calls))
    return walls, "".join(text), "\n\n".join(codes)


def _case(spec: str) -> Case:
    B, M, seqlen, sparsity, *dist = spec.split(",")
    return Case(int(B), int(M), int(seqlen), float(sparsity), *dist)


def _profile(fn, calls: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
        torch.cuda.synchronize()
    prof.disable()
    stream = io.StringIO()
    pstats.Stats(prof, stream=stream).sort_stats("tottime").print_stats(35)
    return stream.getvalue()


if __name__ == "__main__":
    sys.exit(main())
