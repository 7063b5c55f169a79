"""The torch.compile bars, measured on the GPU the suite runs on (set for the H200).

- Wall per call: the seed's method (``lab.measure.timing.wall_stats``: 50 warm-up calls, 200 timed, sync after
  each), median of three interleaved rounds, so that each ratio compares numbers taken side by side.
- Device time: the profiler's kernel sums, no L2 flush (host time = wall − device, as the lab does).
- Every compiled output is checked against float64 before it is timed.

A missed bar within a limit measured beside it is an xfail naming both (``helpers.limits``), else a failure; every
measured number goes into the junit XML (``--junitxml``) as a property of its test (``python -m jaggedperf.lab.junit
--bars`` renders it).
"""

import functools
import statistics

import pytest
import torch
from torch._dynamo.utils import counters
from helpers.gpu import check, record
from helpers.limits import at_limit

import jaggedperf
from jaggedperf.impls.registry import get_implementation
from jaggedperf.inputs import Case, make_batch
from jaggedperf.lab import modes
from jaggedperf.lab.measure import timing
from jaggedperf.lab.measure import rounds as lab_rounds
from jaggedperf.lab.grid import SEED_CASES

# The bars (``bars``: timed, run alone after the untimed tests) and, untimed beside them, what counts rather than times
# (CUDA-graph skips and launches, graphs compiled) and the bars' programs compiled and checked against float64: in
# ``scripts/test.sh`` the timed pass loads them from the run's Inductor cache instead of compiling them again.
pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
SEED_MODE = "max-autotune-no-cudagraphs"
SEED_NJT_IMPLS = ("nanmean_padded", "sum_padded", "njt_mean")


def round_walls_us(fns: dict, rounds: int, alternate: bool = False) -> dict:
    """Each callable's wall per call (µs, the seed's method) in each of ``rounds`` interleaved rounds; with
    ``alternate`` the callables' order is reversed every other round. Every round's host probe feeds the
    process's fastest, the reference the NJT boundary bar's quiet rounds are judged against."""
    timed = lab_rounds.run(fns, CUDA, rounds=rounds, alternate=alternate)
    return {name: timed.walls(name) for name in fns}


def walls_us(fns: dict, rounds: int = 3) -> dict:
    """Median wall per call (µs) of each callable, over interleaved rounds of the seed's method."""
    return {name: statistics.median(w) for name, w in round_walls_us(fns, rounds).items()}


def kernels(fn) -> timing.KernelProfile:
    return timing.profile_kernels(fn, CUDA, calls=20, flush=False)


def checked_batch(case):
    return make_batch(case, CUDA)


def boundary_programs(name: str, case: Case) -> dict:
    """A seed NJT implementation's calls at ``case``: eager, through jaggedperf.compile, and its plain twin compiled
    (each compiled output checked against float64 first)."""
    batch = checked_batch(case)
    impl = get_implementation("jagged_mean", name)
    args, plain_args = impl.prepare(batch), impl.prepare_plain(batch)
    torch._dynamo.reset()
    through = jaggedperf.compile(impl.fn, mode=SEED_MODE)
    # dynamic=None, as the boundary: its ragged dims cross marked dynamic. (dynamic=True also makes M
    # symbolic, and Inductor's tiling analysis then asserts on these padded programs on torch 2.11.)
    plain = torch.compile(impl.plain, mode=SEED_MODE)
    check(through(*args), batch.values, batch.offsets, mean=True, what="through the boundary")
    check(plain(*plain_args), batch.values, batch.offsets, mean=True, what="plain compiled")
    return {"eager": lambda: impl.fn(*args), "boundary": lambda: through(*args), "plain": lambda: plain(*plain_args)}


@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
@pytest.mark.parametrize("name", SEED_NJT_IMPLS)
def test_the_boundary_cells_compile_and_match_float64(name, case):
    """The boundary bars' programs, compiled and checked in the parallel pass: the timed pass loads them from the
    run's Inductor cache (``scripts/test.sh``) instead of compiling them with max-autotune there."""
    boundary_programs(name, case)  # compiles both and checks their outputs


@functools.lru_cache(maxsize=None)
def boundary_cell(name: str, case: Case) -> dict:
    """Wall and host µs per call of a seed NJT implementation eager, through jaggedperf.compile, and its
    plain twin compiled, measured side by side once for both tests below (outputs checked first)."""
    calls = boundary_programs(name, case)
    wall = walls_us(calls)
    device = {k: kernels(fn).median_us for k, fn in calls.items()}
    return {"wall": wall, "host": {k: wall[k] - device[k] for k in calls}}


@pytest.mark.bars
@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
@pytest.mark.parametrize("name", SEED_NJT_IMPLS)
def test_boundary_compiled_faster_than_eager(name, case, record_property):
    """Through jaggedperf.compile the seed's NJT implementations beat eager (torch.compile on the NJT did not)."""
    wall = boundary_cell(name, case)["wall"]
    record(record_property, **{f"{k} wall_us": v for k, v in wall.items()}, speedup=wall["eager"] / wall["boundary"])
    assert wall["boundary"] < wall["eager"], f"boundary {wall['boundary']:.1f} µs, eager {wall['eager']:.1f} µs"


@pytest.mark.bars
def test_boundary_host_within_15_percent_of_plain_compiled(record_property):
    """At every seed cell the compiled NJT call's host time through the boundary is within 1.15× that of the
    same computation compiled on plain tensors. One test over the six cells, judged on the worst: a cell
    or two within the bar on a quiet host does not make it hold. No limit is measured beside it (a twin of these
    padded programs compiled with dynamic sizes, the boundary's own, does not compile on torch 2.11), so a miss is a
    failure: the boundary's dynamic sizes, crossing and rebuilt NJT are its own cost."""
    ratios = {}
    for name in SEED_NJT_IMPLS:
        for case in SEED_CASES:
            host = boundary_cell(name, case)["host"]
            ratios[f"{name}-{case.label}"] = host["boundary"] / host["plain"]
            record(record_property, **{f"{name}-{case.label} {k} host_us": v for k, v in host.items()})
    record(record_property, **{f"{cell} ratio": r for cell, r in ratios.items()})
    worst = max(ratios, key=ratios.get)
    assert ratios[worst] <= 1.15, f"worst cell {worst}: {ratios[worst]:.2f}x"


# The boundary marks the ragged sizes dynamic (one graph for every batch), so its compiled region checks symbolic-size
# guards on four tensors a call where the static twin checks fixed sizes. Its limit is that twin compiled with
# dynamic sizes, measured in the same rounds.
DYNAMIC_SIZES = ("the boundary's compiled region runs on dynamic sizes, so that B, the total length and the seqlens never "
                 "recompile; the static twin checks fixed sizes: held to within 1.2× the twin compiled with "
                 "dynamic=True, measured in the same rounds (the suite's runs: benchmarks/results/*/gpu-suite-one-call.md). "
                 "What exceeds 1.2× the static twin: the boundary's own per-call cost (the crossing's Python, ~5 µs "
                 "on the CPU as it runs between compiled calls, and ~2.5 more for each cached seqlen crossing) and "
                 "the dynamic sizes' guards")


def our_njt_programs(case: Case) -> tuple:
    """Our NJT op through jaggedperf.compile, our (values, offsets) op compiled, and the same with dynamic sizes, at
    ``case``: (their arguments, the three compiled callables), each output checked against float64 first."""
    batch = checked_batch(case)
    njt, ours = get_implementation("jagged_mean", "jaggedperf_njt"), get_implementation("jagged_mean", "jaggedperf")
    njt_args, ours_args = njt.prepare(batch), ours.prepare(batch)
    torch._dynamo.reset()
    through = jaggedperf.compile(njt.fn, mode=SEED_MODE)
    compiled = torch.compile(ours.fn, mode=SEED_MODE)
    dynamic = torch.compile(ours.fn, mode=SEED_MODE, dynamic=True)
    check(through(*njt_args), batch.values, batch.offsets, mean=True, what="NJT through the boundary")
    check(compiled(*ours_args), batch.values, batch.offsets, mean=True, what="our op compiled")
    check(dynamic(*ours_args), batch.values, batch.offsets, mean=True, what="the dynamic twin")
    return njt_args, ours_args, through, compiled, dynamic


@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
def test_our_njt_through_the_boundary_and_its_twins_compile_and_match_float64(case):
    """The NJT boundary bar's three programs, compiled and checked in the parallel pass (the timed pass loads them)."""
    our_njt_programs(case)  # compiles the three and checks their outputs


@pytest.mark.bars
@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
def test_our_njt_through_the_boundary_near_our_plain_compiled_and_one_kernel(case, record_property):
    njt_args, ours_args, through, compiled, dynamic = our_njt_programs(case)
    # The boundary's extra sits near this bar's 20% of the call, and the shared host's speed moves by more than that
    # between rounds: the ratio is taken within each round, the calls back to back in alternating order, and judged
    # by its median over the rounds. A slowed host stretches the boundary's extra (dynamic sizes: Python work) more
    # than the twin's call, so the ratio itself moves with the host's speed (docs/decisions/quiet-rounds.md): the
    # median is taken over quiet rounds (``lab.measure.rounds``: the host probe beside the round at the level of the fastest
    # this process has seen), measuring on for up to 30 s until 11 are quiet; with fewer than 6 quiet rounds by then
    # the host was never quiet and the bar is not judged held.
    timed = lab_rounds.run({"njt boundary": lambda: through(*njt_args), "plain compiled": lambda: compiled(*ours_args),
                            "dynamic twin": lambda: dynamic(*ours_args)},
                           CUDA, rounds=11, quiet=11, deadline_s=30.0)
    ratio, judged = lab_rounds.median_ratio(timed, "njt boundary", "plain compiled", min_quiet=6)
    limit, _ = lab_rounds.median_ratio(timed, "njt boundary", "dynamic twin", min_quiet=6)
    every_ratio = timed.ratios("njt boundary", "plain compiled")  # every round's, in order, for the record
    quiet_walls = {name: statistics.median(timed.walls(name, quiet_only=True) or timed.walls(name))
                   for name in ("njt boundary", "plain compiled", "dynamic twin")}
    n_kernels = kernels(lambda: through(*njt_args)).kernels_per_call
    record(record_property, **{f"{k} wall_us": v for k, v in quiet_walls.items()}, kernels=n_kernels, ratio=ratio,
           ratio_to_dynamic_twin=limit, rounds=len(timed.rounds), quiet_rounds=len(timed.quiet),
           host_probe_reference_us=timed.reference_us, ratio_all_rounds=statistics.median(every_ratio),
           round_ratios=" ".join(f"{r:.3f}" for r in every_ratio),
           round_probes_us=" ".join(f"{r.probe_us:.2f}" for r in timed.rounds),
           round_plain_us=" ".join(f"{w:.1f}" for w in timed.walls("plain compiled")))
    rounds_said = ", ".join(f"{x:.3f} at probe {r.probe_us:.2f}" for x, r in zip(every_ratio, timed.rounds))
    assert len(timed.quiet) >= 6, (f"host never quiet: {len(timed.quiet)} of {len(timed.rounds)} rounds within "
                                   f"{timed.slack:.0%} of the fastest probe ({timed.reference_us:.2f} µs) in 30 s; "
                                   f"rounds: {rounds_said}")
    assert n_kernels == 1, f"{n_kernels} kernels per call"
    if ratio > 1.2:
        at_limit(limit <= 1.2, f"median of the {judged} quiet rounds' ratios {ratio:.3f} to the static twin, {limit:.3f} "
                               f"to the dynamic twin (rounds: {rounds_said})", DYNAMIC_SIZES)


def _graph_launches(fn, calls: int = 10) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.name == "cudaGraphLaunch")


def _reduce_overhead(fn, args):
    """``fn`` compiled with mode="reduce-overhead", warmed up, recorded and replayed once; the
    cudagraph skips Inductor counted while compiling it."""
    counters.clear()
    torch._dynamo.reset()
    compiled = torch.compile(fn, mode="reduce-overhead")
    for _ in range(3):  # warm-up, record, replay
        out = compiled(*args)
    return compiled, out, counters["inductor"]["cudagraph_skips"]


@pytest.mark.parametrize("with_max_seqlen", [True, False], ids=["max_seqlen", "no-max_seqlen"])
@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
def test_our_op_under_reduce_overhead_replays_graphs_without_skips(case, with_max_seqlen, record_property):
    """No cudagraph skip for a graph holding our op (Inductor took the offsets for written before), and
    the graph is replayed on every call."""
    batch = checked_batch(case)
    hint = batch.max_seqlen if with_max_seqlen else None

    def fn(values, offsets):
        return jaggedperf.jagged_mean(values, offsets, max_seqlen=hint)

    args = (batch.values, batch.offsets)
    compiled, out, skips = _reduce_overhead(fn, args)
    check(out.clone(), batch.values, batch.offsets, mean=True, what="reduce-overhead")
    launches = _graph_launches(lambda: compiled(*args))
    record(record_property, cudagraph_skips=skips, graph_launches=launches)
    assert skips == 0, f"Inductor skipped CUDA graphs {skips} times"
    assert launches >= 10, f"{launches} cudaGraphLaunch in 10 calls"


REDUCE_OVERHEAD_FLOOR = (
    "reduce-overhead's own per-call cost, measured in the same rounds on a trivial function of the same inputs "
    "(`values[:1] + offsets[:1, None]`, graphs replayed): our op under reduce-overhead within that cost + the "
    "graph-mode call is at the limit of any op compiled in that mode")


@pytest.mark.bars
@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
def test_our_op_under_reduce_overhead_within_10_percent_of_graph_mode(case, record_property):
    batch = checked_batch(case)

    def fn(values, offsets):
        return jaggedperf.jagged_mean(values, offsets, max_seqlen=batch.max_seqlen)

    def trivial(values, offsets):
        return values[:1] + offsets[:1, None]

    args = (batch.values, batch.offsets)
    compiled, _, _ = _reduce_overhead(fn, args)
    floor, _, _ = _reduce_overhead(trivial, args)
    graph = modes.build(fn, args, modes.GRAPH, CUDA)
    wall = walls_us({"reduce-overhead": lambda: compiled(*args), "graph": graph, "floor": lambda: floor(*args)})
    record(record_property, **{f"{k} wall_us": v for k, v in wall.items()}, ratio=wall["reduce-overhead"] / wall["graph"])
    if wall["reduce-overhead"] > 1.10 * wall["graph"]:
        at_limit(wall["reduce-overhead"] <= wall["floor"] + wall["graph"],
                 f"reduce-overhead {wall['reduce-overhead']:.1f} µs, graph {wall['graph']:.1f} µs, "
                 f"reduce-overhead's floor {wall['floor']:.1f} µs", REDUCE_OVERHEAD_FLOOR)


def test_no_recompile_over_20_calls_of_varying_batches(record_property):
    """The boundary (NJT in) and our op (values, offsets, max_seqlen) under dynamic=True: 20 calls whose B,
    total length and max_seqlen all change compile one graph."""
    cases = [Case(64 + 37 * i, 64, 40 + 23 * i, 0.1 + 0.03 * i) for i in range(20)]
    batches = [make_batch(c, CUDA) for c in cases]

    def ours(values, offsets, max_seqlen):
        return jaggedperf.jagged_mean(values, offsets, max_seqlen=max_seqlen)

    graphs = {}
    for label, fn, args_of in (
        ("boundary", jaggedperf.compile(get_implementation("jagged_mean", "njt_mean").fn),
         lambda b: (b.to_nested(),)),
        ("ops", torch.compile(ours, dynamic=True), lambda b: (b.values, b.offsets, b.max_seqlen)),
    ):
        torch._dynamo.reset()
        counters.clear()
        for b in batches:
            check(fn(*args_of(b)), b.values, b.offsets, mean=True, what=label)
        graphs[label] = counters["stats"]["unique_graphs"]
    record(record_property, **{f"{k} graphs": v for k, v in graphs.items()})
    assert graphs == {"boundary": 1, "ops": 1}, graphs


MODEL_MODES = ["eager", "compile:default", "compile:max-autotune-no-cudagraphs", "compile:reduce-overhead",
               "jagged-compile:max-autotune-no-cudagraphs", "jagged-compile:reduce-overhead"]


# The least a compiled block's call can cost: torch.compile's own call in the same mode, measured in the same run on a
# one-kernel function. Where eager / 1.3 is below it, no compiled block holds the bar.
COMPILER_CALL = ("torch.compile's own per-call cost in the block's best mode (a compiled `x + 1`, one kernel, timed "
                 "beside it): where eager's wall / 1.3 is below it no compiled block can hold the bar, and the block "
                 "is at that limit while its compiled call costs at most that call + eager's")


def compiler_call_us(mode: str) -> float:
    """Wall µs of torch.compile's own call in ``mode``: a one-kernel function of one small tensor, timed now."""
    x = torch.randn(64, device=CUDA)
    call = modes.build(lambda t: t + 1, (x,), mode, CUDA)
    for _ in range(3):  # compiled (and, under reduce-overhead, recorded) before the timing
        call()
    return walls_us({"compiler": call})["compiler"]


MODEL_IMPLEMENTATIONS = ("jaggedperf", "jaggedperf_njt")


@pytest.mark.parametrize("case", SEED_CASES, ids=lambda c: c.label)
@pytest.mark.parametrize("mode", [m for m in MODEL_MODES if modes.is_compiled(m)])
@pytest.mark.parametrize("implementation", MODEL_IMPLEMENTATIONS)
def test_model_block_compiles_and_matches_float64_in_every_bar_mode(implementation, mode, case):
    """The model bar's compiled cells, compiled (into the run's Inductor cache: the bar below loads them, its
    max-autotune compiles are the timed pass's longest otherwise) and checked against float64 by the lab. One seed
    case a test (both in one took up to 53 s beside the other workers), so that the workers compile them side by
    side."""
    from jaggedperf.lab import runner
    from jaggedperf.lab.measure import stats
    from jaggedperf.lab.result import TIMED

    cells = runner.plan("rec_block", [case], [implementation], [mode])
    ran = runner.run(cells, runner.Options(device=CUDA, warmup=1, iters=3, device_time=False, cold_compile=False,
                                           stability=stats.Policy(attempts=1, cpu_slack=None)))
    for r in ran.results:
        assert r.status in TIMED, (r.case.label, r.reason)


@pytest.mark.bars
@pytest.mark.parametrize("implementation", MODEL_IMPLEMENTATIONS)
def test_model_block_compiled_at_least_1_3x_faster_than_eager(implementation, record_property):
    """The recommendation block (embedding of jagged ids → our jagged mean → two-layer MLP) at the seed's
    sizes: its best compiled mode runs ≥ 1.3× faster than eager, as measured by the lab (every cell
    checked against float64 first). Its compiles load what the parallel pass compiled (the bar reads walls, not
    compile times)."""
    from jaggedperf.lab import runner
    from jaggedperf.lab.result import OK, TIMED

    cells = runner.plan("rec_block", list(SEED_CASES), [implementation], MODEL_MODES)
    ran = runner.run(cells, runner.Options(device=CUDA, cold_compile=False))
    failures, limited = [], []
    for case in SEED_CASES:
        walls, probes, stable = {}, {}, True
        for r in ran.results:
            if r.case == case:
                assert r.status in TIMED, (r.mode, r.reason)
                walls[r.mode] = r.wall
                probes[r.mode] = r.extra.get("host_speed_us")
                stable &= r.status == OK
        best = min((m for m in walls if m != "eager"), key=lambda m: walls[m].median_ms)
        # A cell whose timing did not settle (the lab retried it) is judged on the far ends of the spread:
        # eager's 20th percentile against the compiled mode's 80th, so noise cannot make the bar hold.
        eager_ms = walls["eager"].median_ms if stable else walls["eager"].p20_ms
        best_ms = walls[best].median_ms if stable else walls[best].p80_ms
        speedup = eager_ms / best_ms
        # the host probe before and after each cell: whether a slowed host, not the compiled code, set a verdict
        record(record_property, **{f"{case.label} {m} wall_us": w.median_ms * 1e3 for m, w in walls.items()},
               **{f"{case.label} {m} host_probe_us": " ".join(f"{p:.2f}" for p in ps)
                  for m, ps in probes.items() if ps},
               **{f"{case.label} best": best, f"{case.label} speedup": speedup,
                  f"{case.label} judged on": "medians" if stable else "p20 eager / p80 compiled (unstable)"})
        if speedup < 1.3:
            said = (f"{case.label}: best compiled {best} {best_ms * 1e3:.1f} µs, eager {eager_ms * 1e3:.1f} µs "
                    f"({speedup:.2f}×)")
            floor_us = compiler_call_us(best)
            record(record_property, **{f"{case.label} compiler call_us": floor_us})
            if eager_ms * 1e3 / 1.3 < floor_us and best_ms * 1e3 <= floor_us + eager_ms * 1e3:
                limited.append(f"{said}, torch.compile's own call {floor_us:.1f} µs")
            else:
                failures.append(f"{said}, torch.compile's own call {floor_us:.1f} µs: within reach")
    assert not failures, "; ".join(failures)
    if limited:
        at_limit(True, "; ".join(limited), COMPILER_CALL)
