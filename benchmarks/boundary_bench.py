"""Does jaggedperf.compile remove the NestedTensor cost? The seed's implementations, four ways, side by side.

For each case and each NJT implementation of jagged_mean (default: the seed's ``nanmean_padded``,
``sum_padded``, and ``njt_mean``; ``--impls`` adds e.g. ``unbind_mean``, whose compile takes
minutes, or ``jaggedperf_njt``), in one process:

- ``eager``: the implementation on the NJT;
- ``torch.compile``: ``torch.compile(fn, mode=MODE)`` on the NJT;
- ``jaggedperf.compile``: ``jaggedperf.compile(fn, mode=MODE)`` on the NJT (the boundary);
- ``plain twin``: the implementation's plain twin (the same ops on values/offsets) compiled with
  ``torch.compile(twin, mode=MODE)``: what the computation costs with no NJT at all.

Each variant's result is first checked against the float64 reference (NaN where a sequence is
empty; relative error ≤ 1e-4 in float32, the lab's rule), then timed by the seed's method (50
warm-up calls, 200 timed calls, a device sync after each; every sample kept; median, p20, p80).
Compiled variants then run on ``--vary`` more batches of other B / total length / max_seqlen and
report the graphs Dynamo compiled in all (1 = no recompile). Finally the boundary's own per-call
host overhead on a trivial function (``nt.values() + 1``): the boundary call against the compiled
region called directly with pre-split components, and the pieces (split, join) timed alone.

With ``--rounds R`` each implementation with a plain twin is also timed the compile bars' way: the boundary and the
twin compiled, both alive, then R rounds alternating between them (``--only-side-by-side``: that alone).

    PYTHONPATH=src python3 benchmarks/boundary_bench.py --out DIR [--mode M] [--small] [--impls a,b] [--rounds 5]

Mode: ``max-autotune-no-cudagraphs`` on CUDA, ``default`` on the CPU, unless ``--mode``. ``--small``
uses B=64, M=16 at the seed's seqlens and sparsities (CPU-sized). Writes DIR/boundary_bench.json
(every raw sample, the environment) and DIR/boundary_bench.md (the table).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

import jaggedperf
import jaggedperf.impls.jagged_mean  # noqa: F401  (registers jagged_mean's implementations)
from jaggedperf.batch import JaggedBatch
from jaggedperf.boundary.crossing import flatten
from jaggedperf.boundary.joining import join_output
from jaggedperf.impls.registry import Implementation, get_implementation, get_op
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab.measure.correctness import check_output

SEED_CASES = (Case(512, 64, 100, 0.1), Case(512, 64, 500, 0.75))  # pytorch/pytorch#160355's two shapes
SMALL_CASES = (Case(64, 16, 100, 0.1), Case(64, 16, 500, 0.75))
DEFAULT_IMPLS = ("nanmean_padded", "sum_padded", "njt_mean")
VARIANTS = ("eager", "torch.compile", "jaggedperf.compile", "plain twin")


@dataclass
class Timing:
    samples_ms: list[float]
    median_ms: float
    p20_ms: float
    p80_ms: float

    @classmethod
    def of(cls, samples_ms: list[float]) -> "Timing":
        s = sorted(samples_ms)
        return cls(samples_ms, statistics.median(s), _percentile(s, 0.2), _percentile(s, 0.8))


@dataclass
class VariantResult:
    case: str
    implementation: str
    variant: str
    ok: bool
    rel_error: float | None = None
    reason: str | None = None
    first_call_s: float | None = None  # compile time, for the compiled variants
    wall: Timing | None = None
    graphs: int | None = None  # graphs Dynamo compiled over the first call and the --vary calls
    vary_calls: int = 0


@dataclass
class SideBySide:
    """``jaggedperf.compile`` and the plain twin compiled, both alive, timed in interleaved rounds (the compile bars'
    method, ``tests/gpu/test_compile_bars_gpu.py``): the round medians of each, and the ratio of their medians."""

    case: str
    implementation: str
    boundary_ms: list[float]
    twin_ms: list[float]
    ratio: float


@dataclass
class Overhead:
    """µs per call on a trivial function; medians of ``rounds`` interleaved rounds of ``calls`` calls."""

    calls: int
    rounds: int
    us: dict[str, float] = field(default_factory=dict)


def _percentile(sorted_values: list[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _sync(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def wall(fn: Callable[[], object], device: torch.device, warmup: int, iters: int) -> Timing:
    """The seed's method: ``warmup`` calls, then ``iters`` calls each followed by a device sync."""
    sync = _sync(device)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return Timing.of(samples)


def check(out: object, reference: torch.Tensor, dtype: str) -> tuple[bool, float | None, str | None]:
    """The lab's check (NaN exactly where the reference has NaN, relative error within its tolerance); an NJT
    output is refused first (jagged_mean's result is dense)."""
    if isinstance(out, torch.Tensor) and out.is_nested:
        return False, None, "returned a NestedTensor, not a dense tensor"
    return check_output(out, reference, dtype)


def _graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _args(impl: Implementation, batch: JaggedBatch, variant: str) -> tuple:
    return impl.prepare_plain(batch) if variant == "plain twin" else impl.prepare(batch)


def _callable(impl: Implementation, variant: str, mode: str) -> Callable:
    if variant == "eager":
        return impl.fn
    if variant == "torch.compile":
        return torch.compile(impl.fn, mode=mode)
    if variant == "jaggedperf.compile":
        return jaggedperf.compile(impl.fn, mode=mode)
    return torch.compile(impl.plain, mode=mode)


def vary_cases(case: Case, n: int) -> list[Case]:
    """``n`` cases of other B (and so other total length and max_seqlen), same M, seqlen, sparsity."""
    return [Case(max(2, case.B - 7 * (k + 1) + 13 * (k % 2)), case.M, case.seqlen, case.sparsity, seed=case.seed + k + 1)
            for k in range(n)]


def run_variant(impl: Implementation, variant: str, case: Case, batch: JaggedBatch, reference: torch.Tensor,
                args: argparse.Namespace) -> VariantResult:
    result = VariantResult(case.label, impl.name, variant, ok=False)
    if variant == "plain twin" and impl.plain is None:
        result.reason = "no plain twin"
        return result
    if variant == "plain twin" and impl.name in args.skip_twin:
        result.reason = "skipped (--skip-twin)"
        return result
    torch._dynamo.reset()
    graphs0 = _graphs()
    try:
        fn = _callable(impl, variant, args.mode)
        call_args = _args(impl, batch, variant)
        start = time.perf_counter()
        out = fn(*call_args)
        _sync(batch.device)()
        if variant != "eager":
            result.first_call_s = time.perf_counter() - start
        result.ok, result.rel_error, result.reason = check(out, reference, case.dtype)
        if not result.ok:
            return result
        result.wall = wall(lambda: fn(*call_args), batch.device, args.warmup, args.iters)
        if variant != "eager":
            for other in vary_cases(case, args.vary):
                other_batch = make_batch(other, batch.device)
                other_batch = JaggedBatch(other_batch.values, other_batch.offsets, other_batch.max_seqlen,
                                          other_batch.min_seqlen, batch.padded_len)  # same padded length
                fn(*_args(impl, other_batch, variant))
            result.graphs, result.vary_calls = _graphs() - graphs0, args.vary
    except Exception as exc:  # a cell that fails is recorded, the run goes on
        result.ok, result.reason = False, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    return result


def overhead(device: torch.device, mode: str, calls: int, rounds: int) -> Overhead:
    """The boundary's own host cost per call, on ``nt.values() + 1`` (and ``nt * 2``: an NJT result)."""
    batch = make_batch(Case(8, 4, 16, 0.1), device)
    nt = batch.to_nested()

    def trivial(x):
        return x.values() + 1

    def trivial_njt(x):
        return x * 2

    def plain(values, offsets):
        return values + 1

    torch._dynamo.reset()
    ours, theirs, twin = jaggedperf.compile(trivial, mode=mode), torch.compile(trivial, mode=mode), torch.compile(plain, mode=mode)
    ours_njt, theirs_njt = jaggedperf.compile(trivial_njt, mode=mode), torch.compile(trivial_njt, mode=mode)
    out, njt_out = ours(nt), ours_njt(nt)  # compiles each one's flat region (positional arguments)
    crossing = flatten((nt,), {}, mark=True)
    flat = crossing.flat
    region, njt_region = ours.regions[crossing.key], ours_njt.regions[crossing.key]
    out, njt_out = region(*flat), njt_region(*flat)
    probes: dict[str, Callable[[], object]] = {
        "jaggedperf.compile(trivial)(nt)": lambda: ours(nt),
        "its compiled region, called directly on pre-split parts": lambda: region(*flat),
        "split: NJT -> parts (one NJT arg)": lambda: flatten((nt,), {}, mark=True),
        "join: dense output (pass-through)": lambda: join_output(out, crossing),
        "torch.compile(trivial)(nt)": lambda: theirs(nt),
        "torch.compile(plain values + 1)(values, offsets)": lambda: twin(batch.values, batch.offsets),
        "eager trivial(nt)": lambda: trivial(nt),
        "jaggedperf.compile(nt * 2)(nt)": lambda: ours_njt(nt),
        "its compiled region (nt * 2), directly": lambda: njt_region(*flat),
        "join: NJT output -> NJT": lambda: join_output(njt_out, crossing),
        "torch.compile(nt * 2)(nt)": lambda: theirs_njt(nt),
    }
    samples: dict[str, list[float]] = {k: [] for k in probes}
    sync = _sync(device)
    for f in probes.values():
        for _ in range(min(calls, 200)):
            f()
    for _ in range(rounds):  # interleaved, so that a busy moment of the machine hits every probe alike
        for name, f in probes.items():
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                f()
            sync()
            samples[name].append((time.perf_counter() - start) / calls * 1e6)
    result = Overhead(calls, rounds, {k: statistics.median(v) for k, v in samples.items()})
    result.us["boundary overhead = call - region (trivial)"] = (
        result.us["jaggedperf.compile(trivial)(nt)"] - result.us["its compiled region, called directly on pre-split parts"])
    result.us["boundary overhead = call - region (nt * 2)"] = (
        result.us["jaggedperf.compile(nt * 2)(nt)"] - result.us["its compiled region (nt * 2), directly"])
    return result


def side_by_side(impl: Implementation, batch: JaggedBatch, case: Case, args: argparse.Namespace) -> SideBySide:
    """The boundary against the plain twin as the compile bars time them: both compiled first, then ``args.rounds``
    rounds of the seed's method alternating between them; a fresh process, so a difference from the test's figures
    is the test process's own."""
    torch._dynamo.reset()
    through, twin = jaggedperf.compile(impl.fn, mode=args.mode), torch.compile(impl.plain, mode=args.mode)
    njt_args, plain_args = impl.prepare(batch), impl.prepare_plain(batch)
    through(*njt_args)  # both compiled before any round
    twin(*plain_args)
    rounds: dict[str, list[float]] = {"boundary": [], "twin": []}
    for _ in range(args.rounds):
        rounds["boundary"].append(wall(lambda: through(*njt_args), batch.device, args.warmup, args.iters).median_ms)
        rounds["twin"].append(wall(lambda: twin(*plain_args), batch.device, args.warmup, args.iters).median_ms)
    ratio = statistics.median(rounds["boundary"]) / statistics.median(rounds["twin"])
    return SideBySide(case.label, impl.name, rounds["boundary"], rounds["twin"], ratio)


def environment(device: torch.device) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "torch": torch.__version__, "triton": triton_version, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "python": platform.python_version(), "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(), "git_commit": commit,
        "command": shlex.join(["python3", *sys.argv]),
    }


def _ms(t: Timing | None) -> str:
    return "—" if t is None else f"{t.median_ms:.3f} ({t.p20_ms:.3f}–{t.p80_ms:.3f})"


def markdown(results: list[VariantResult], ovh: Overhead | None, env: dict, mode: str,
             pairs: list[SideBySide] = ()) -> str:
    lines = [f"# jaggedperf.compile vs torch.compile on NJTs (mode `{mode}`)", "",
             f"{env['device']}, torch {env['torch']}, triton {env['triton']}, Python {env['python']}, "
             f"commit `{(env['git_commit'] or '?')[:7]}`. Command: `{env['command']}`", "",
             "Wall per call in ms, median (p20–p80), by the seed's method; speedup = eager median / variant "
             "median; graphs = graphs compiled over the first call and the calls on batches of other B / total / "
             "max_seqlen (1 = no recompile).", "",
             "| case | implementation | eager | torch.compile | jaggedperf.compile | plain twin compiled | "
             "speedup tc / jp / twin | graphs tc / jp / twin | compile s tc / jp / twin |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    by_cell: dict[tuple[str, str], dict[str, VariantResult]] = {}
    for r in results:
        by_cell.setdefault((r.case, r.implementation), {})[r.variant] = r
    for (case, impl), cell in by_cell.items():
        def cellwall(v: str) -> str:
            r = cell.get(v)
            if r is None:
                return "—"
            return _ms(r.wall) if r.ok else f"✗ {r.reason}"

        eager = cell.get("eager")
        base = eager.wall.median_ms if eager is not None and eager.wall else None
        compiled = ("torch.compile", "jaggedperf.compile", "plain twin")

        def speed(v: str) -> str:
            r = cell.get(v)
            return f"{base / r.wall.median_ms:.2f}×" if base and r is not None and r.wall else "—"

        def graphs(v: str) -> str:
            r = cell.get(v)
            return str(r.graphs) if r is not None and r.graphs is not None else "—"

        def comp(v: str) -> str:
            r = cell.get(v)
            return f"{r.first_call_s:.1f}" if r is not None and r.first_call_s is not None else "—"

        lines.append(f"| {case} | {impl} | {' | '.join(cellwall(v) for v in VARIANTS)} | "
                     f"{' / '.join(speed(v) for v in compiled)} | {' / '.join(graphs(v) for v in compiled)} | "
                     f"{' / '.join(comp(v) for v in compiled)} |")
    if pairs:
        lines += ["", "## Side by side (the compile bars' method: both alive, interleaved rounds; ms per call, round "
                      "medians)", "", "| case | implementation | jaggedperf.compile | plain twin compiled | ratio |",
                  "|---|---|---|---|---:|"]
        lines += [f"| {p.case} | {p.implementation} | {' '.join(f'{x:.3f}' for x in p.boundary_ms)} | "
                  f"{' '.join(f'{x:.3f}' for x in p.twin_ms)} | {p.ratio:.2f} |" for p in pairs]
    if ovh is not None:
        lines += ["", f"## The boundary's own host overhead (µs per call; median of {ovh.rounds} interleaved rounds "
                      f"of {ovh.calls} calls)", "", "| probe | µs |", "|---|---:|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in ovh.us.items()]
    return "\n".join(lines) + "\n"


def parse_cases(text: str) -> tuple[Case, ...]:
    cases = []
    for item in text.split(";"):
        B, M, seqlen, sparsity = item.split(",")
        cases.append(Case(int(B), int(M), int(seqlen), float(sparsity)))
    return tuple(cases)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for boundary_bench.json and .md")
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: max-autotune-no-cudagraphs "
                                                     "on CUDA, default on the CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--impls", default=",".join(DEFAULT_IMPLS), help="NJT implementations of jagged_mean")
    parser.add_argument("--small", action="store_true", help="B=64, M=16 at the seed's seqlens/sparsities")
    parser.add_argument("--cases", default=None, help="'B,M,seqlen,sparsity;...' instead of the seed's shapes")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--vary", type=int, default=5, help="calls on batches of other B for the graph count")
    parser.add_argument("--overhead-calls", type=int, default=2000)
    parser.add_argument("--overhead-rounds", type=int, default=7)
    parser.add_argument("--no-overhead", action="store_true")
    parser.add_argument("--rounds", type=int, default=0, help="also time the boundary against the plain twin side by "
                                                              "side, both alive, in this many interleaved rounds")
    parser.add_argument("--only-side-by-side", action="store_true", help="skip the four variants' table")
    parser.add_argument("--skip-twin", default="", help="implementations whose plain twin is not compiled (njt_mean's "
                                                        "twin, an NJT without max_seqlen, compiled > 5 min on a CPU)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (on a shared CPU, 1 keeps Inductor's OpenMP kernels from "
                             "waiting on busy cores)")
    args = parser.parse_args(argv)
    args.skip_twin = set(filter(None, args.skip_twin.split(",")))
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    args.mode = args.mode or ("max-autotune-no-cudagraphs" if device.type == "cuda" else "default")
    cases = parse_cases(args.cases) if args.cases else (SMALL_CASES if args.small else SEED_CASES)
    op = get_op("jagged_mean")
    impls = [get_implementation("jagged_mean", name) for name in args.impls.split(",")]
    for impl in impls:
        if impl.takes != "njt":
            parser.error(f"{impl.name} takes {impl.takes}, not an NJT")
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment(device)
    results: list[VariantResult] = []
    pairs: list[SideBySide] = []
    for case in cases:
        batch = make_batch(case, device)
        reference = op.reference(batch)
        for impl in impls:
            if args.rounds and impl.plain is not None:
                pairs.append(side_by_side(impl, batch, case, args))
                print(f"{case.label} {impl.name:15s} side by side: ratio {pairs[-1].ratio:.2f}", flush=True)
            for variant in (() if args.only_side_by_side else VARIANTS):
                r = run_variant(impl, variant, case, batch, reference, args)
                results.append(r)
                status = _ms(r.wall) if r.ok else (str(r.reason) if r.wall is None and r.rel_error is None
                                                     and variant == "plain twin" else f"FAILED: {r.reason}")
                print(f"{case.label} {impl.name:15s} {variant:19s} {status} graphs={r.graphs}", flush=True)
    ovh = None if args.no_overhead else overhead(device, args.mode, args.overhead_calls, args.overhead_rounds)
    (args.out / "boundary_bench.json").write_text(json.dumps(
        {"environment": env, "mode": args.mode, "cases": [c.to_dict() for c in cases],
         "results": [asdict(r) for r in results], "side_by_side": [asdict(p) for p in pairs],
         "overhead": None if ovh is None else asdict(ovh)}, indent=1))
    text = markdown(results, ovh, env, args.mode, pairs)
    (args.out / "boundary_bench.md").write_text(text)
    print(text)
    skipped = ("no plain twin", "skipped (--skip-twin)")
    return 0 if all(r.ok for r in results if not (r.variant == "plain twin" and r.reason in skipped)) else 1


if __name__ == "__main__":
    sys.exit(main())
