"""Gathering evidence: what the doctor runs for one compiled cell and its eager twin.

For implementation × compiled mode × case, ``gather`` runs these callables through
``runner.run_cell`` (so each is checked against the float64 reference and timed the lab's one way,
``measure.cell``: wall = the seed's method; device = CUDA-graph replay, else the profiler's kernel sum; kernels
from ``torch.profiler``):

1. **eager** — the implementation as written;
2. **compiled** — the same in the compiled mode, while Dynamo is watched (``watch_dynamo``:
   graphs, graph breaks, recompiles, from ``torch._dynamo.utils.counters`` and Dynamo's
   compilation metrics); after it ran, the guard check of the cache entry its inputs hit is timed
   (``guard_cost``);
3. **compiled plain** — the implementation's ``plain`` twin (the same computation on
   ``(values, offsets)`` tensors) compiled in the same mode and watched the same way: it separates
   NestedTensor overhead from the computation;
4. for an implementation that takes an NJT, in a ``compile:`` mode, **the boundary**: the same implementation
   through ``jaggedperf.compile`` in the same torch mode (mode ``jagged-compile:<torch mode>``): the
   remedy for NJT host work, measured, so that the verdict can recommend it with its numbers;
5. on CUDA only, **eager in a CUDA graph** (mode ``graph``) and the compiled mode's **CUDA-graph
   counterpart** (``max-autotune-no-cudagraphs`` ↔ ``max-autotune``, ``default`` ↔
   ``reduce-overhead``), while a logging handler catches Inductor's "skipping cudagraphs due to …".

From those results it fills in the sections of an ``Evidence`` (``evidence``): host overhead, input form, kernels,
jagged handling (the padding model, from shapes), CUDA graphs and compile cost. A section that
cannot be measured here carries ``available=False`` and the reason (on the CPU: no device time,
kernels or CUDA graphs — "needs CUDA"), so that every JSON has every section.

The parts' sum: right after the compiled cell, before anything else compiles (a compile resets Dynamo, and the
kept compiled call would compile again), ``reconcile`` times the eager and compiled calls again side by side when
their measured parts do not add up to Δ; ``Evidence.reconcile`` and a note record what it did.

Frugality: when the compiled call takes longer than ``compile_budget_s`` to compile, the three
extra compiles (plain twin, boundary, CUDA-graph counterpart) are skipped and their sections say so; and
``gather_all`` does not compile that implementation in that mode again at a later case: the later cells are
recorded as not tried (``Evidence.not_tried``), with the compile time, the case it was measured at and the budget,
as ``repro`` records a cell after a cut.

The probes into Dynamo and Inductor (guards, counters, cudagraph messages) live in ``probes``.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Callable, Iterable

import torch

from jaggedperf.batch import JaggedBatch
from jaggedperf.impls.registry import Batch, Implementation, get_implementation, get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import modes as modes_mod
from jaggedperf.lab import input_size, runner
from jaggedperf.lab.measure import timing
from jaggedperf.lab.doctor import reconcile as reconcile_mod
from jaggedperf.lab.doctor.evidence import (
    Boundary,
    CudaGraphs,
    Evidence,
    EvidenceRun,
    HostOverhead,
    InputForm,
    Kernels,
    NotTried,
    PaddingModel,
    batch_padding_model,
    compile_cost,
    host_call_us,
    host_us,
    kernel_infos,
    not_tried_reason,
    sync_wait_us,
)
from jaggedperf.lab.doctor.probes import (
    CompileStats,
    GuardCost,
    catch_cudagraph_messages,
    fill_recompiles,
    guard_cost,
    skip_reason,
    watch_dynamo,
)
from jaggedperf.lab.measure.env import environment
from jaggedperf.lab.result import OK, SKIPPED, Result

NEEDS_CUDA = "needs CUDA"

# The torch mode with CUDA graphs for each torch mode without, and back.
_TORCH_CUDAGRAPH_COUNTERPART = {
    "max-autotune-no-cudagraphs": "max-autotune",
    "max-autotune": "max-autotune-no-cudagraphs",
    "default": "reduce-overhead",
    "reduce-overhead": "default",
}
# The same for each compiled mode, within its family (compile:, jagged-compile:).
CUDAGRAPH_COUNTERPART = {
    **{m: modes_mod.TORCH_COMPILE_PREFIX + _TORCH_CUDAGRAPH_COUNTERPART[t] for m, t in modes_mod.COMPILE_MODES.items()},
    **{m: modes_mod.BOUNDARY_PREFIX + _TORCH_CUDAGRAPH_COUNTERPART[t] for m, t in modes_mod.BOUNDARY_MODES.items()},
}

BOUNDARY_METHOD = (
    "the implementation run through jaggedperf.compile(fn, mode=<the cell's torch mode>, dynamic=<as the cell>) "
    "from a reset Dynamo state (mode jagged-compile:<torch mode>), checked and timed like the cell"
)
HOST_METHOD = ("host = wall median − device median per call (µs); the host timer (each call until it returns, "
               "device idle before it, no sync) measures it on its own")
HOST_METHOD_WALL_ONLY = ("no device time on the CPU (needs CUDA): host = wall median, which includes the computation; "
                         "the host timer measures it again on its own")
CUDAGRAPH_METHOD = (
    "the same cell in mode 'graph' (eager captured once in a CUDA graph, replayed) and in the compiled mode's "
    "CUDA-graph counterpart; Inductor's skip message caught by a logging.Handler on the torch._inductor "
    "'cudagraphs' and 'perf_hints' artifact loggers while the cells ran, else the compilation metrics' "
    "cudagraph_skip_reason"
)

DEFAULT_COMPILE_BUDGET_S = 30.0


def over_compile_budget(compiled: Result, compile_budget_s: float | None) -> bool:
    """Whether the compiled call's first call (its compile) took longer than the budget (None: no limit). A call
    with no first-call time (it failed before one was taken) is not over: nothing says its compile was slow."""
    return compile_budget_s is not None and compiled.compile_s is not None and compiled.compile_s > compile_budget_s


def gather(op: str, implementation: str, mode: str, case: Case, batch: Batch, reference: torch.Tensor,
           options: runner.Options, copy_gbps: float | None, *, cudagraphs: bool = True,
           compile_budget_s: float | None = DEFAULT_COMPILE_BUDGET_S,
           on_stage: Callable[[str], None] | None = None) -> Evidence:
    """Measure one compiled cell and its eager twin (see the module docstring for what runs).

    Frugality: when the compiled call's first call (its compile) took longer than ``compile_budget_s``,
    the three extra compiles (plain twin, boundary, CUDA-graph counterpart) are skipped and the sections say so.
    Eager is put in a CUDA graph only when the lab could capture it for its device time
    (``device_time.method == "graph"``).

    Args:
        op, implementation, mode, case: the cell; ``mode`` must be compiled.
        batch, reference: the case's batch and the op's float64 result (``runner.prepare_case``).
        options: how each callable is measured.
        copy_gbps: the run's copy bandwidth, or None.
        cudagraphs: run the CUDA-graph comparison (CUDA only).
        compile_budget_s: see above (None: no limit).
        on_stage: called with the name of each stage as it starts.

    Returns:
        The evidence; a callable that fails is recorded in its section, not raised.

    Raises:
        ValueError: ``mode`` is not a compiled mode.
        KeyError: an unknown op or implementation.
    """
    if not modes_mod.is_compiled(mode):
        raise ValueError(f"the doctor explains a compiled mode; got {mode!r}")
    options = replace(options, host_timer=True)  # the host parts are measured, not left over (attribution)
    impl = get_implementation(op, implementation)
    cuda = options.device.type == "cuda"
    notes: list[str] = []
    stage_s: dict[str, float] = {}
    clock = {"name": None, "at": time.perf_counter()}

    def stage(name: str | None) -> None:
        now = time.perf_counter()
        if clock["name"] is not None:
            stage_s[clock["name"]] = stage_s.get(clock["name"], 0.0) + now - clock["at"]
        clock["name"], clock["at"] = name, now
        if name is not None and on_stage:
            on_stage(name)

    def cell(m: str) -> runner.Cell:
        return runner.Cell(op, implementation, m, case)

    calls = reconcile_mod.Calls()  # the warm eager and compiled calls, let go before anything else compiles
    try:
        stage("eager")
        measured = runner.measure_cell(cell(modes_mod.EAGER), batch, reference, options, copy_gbps)
        eager, calls.eager = measured.result, measured.call
        stage(mode)
        with watch_dynamo() as dynamo, catch_cudagraph_messages() as compiled_messages:
            measured = runner.measure_cell(cell(mode), batch, reference, options, copy_gbps)
        compiled, calls.compiled = measured.result, measured.call
        measured = None
        stage("guards")
        guards = _guards(impl.fn, impl.prepare(batch), mode, compiled, "compiled call")
        fill_recompiles(dynamo, guards)
        # before the next compile: its Dynamo reset would make the kept compiled call compile again
        reconciled = reconcile_mod.reconcile(eager, compiled, calls, options,
                                             device_time=not _wall_only(options, eager, compiled)[0], on_stage=stage)
    finally:
        calls.release(options.device)
    reconciled_note = reconcile_mod.describe(reconciled)
    if reconciled_note is not None:
        notes.append(reconciled_note)
    over_budget = None
    if over_compile_budget(compiled, compile_budget_s):
        over_budget = (f"skipped to stay frugal: the compiled call took {compiled.compile_s:.0f} s to compile "
                       f"(> compile budget {compile_budget_s:g} s; raise --compile-budget to run it)")
        notes.append(over_budget)

    if impl.takes == "dense":
        input_form = InputForm(False, "not applicable: the implementation already takes (values, offsets) tensors",
                               "")
    elif impl.plain is None:
        input_form = InputForm(False, f"{implementation} has no plain twin: NestedTensor overhead cannot be "
                                      "separated", "")
    elif over_budget:
        input_form = InputForm(False, f"plain twin {over_budget}", "")
    else:
        stage(f"{mode} · plain twin")
        with watch_dynamo() as plain_dynamo:
            plain = runner.run_cell(cell(mode), batch, reference, options, copy_gbps, plain=True)
        stage("guards")
        plain_guards = _guards(impl.plain, impl.prepare_plain(batch), mode, plain, "plain twin")
        fill_recompiles(plain_dynamo, plain_guards)
        input_form = InputForm(True, None, f"the plain twin {impl.plain.__name__}(values, offsets, padded_len) "
                                           f"compiled in {mode} and timed like the cell", plain, None, plain_guards,
                               plain_dynamo)
        if plain.status != OK:
            input_form.available, input_form.reason = False, f"plain twin {plain.status}: {plain.reason}"

    boundary = _boundary_section(impl, mode, compiled, over_budget)
    if boundary.mode is not None and boundary.reason is None:
        stage(boundary.mode)
        boundary.result = runner.run_cell(cell(boundary.mode), batch, reference, options, copy_gbps)
        if boundary.result.status != OK:
            boundary.available = False
            boundary.reason = f"{boundary.mode} {boundary.result.status}: {boundary.result.reason}"

    graphs = CudaGraphs(False, None, CUDAGRAPH_METHOD, mode, CUDAGRAPH_COUNTERPART.get(mode))
    if not cuda:
        graphs.reason = f"{NEEDS_CUDA}: CUDA graphs (mode 'graph', Inductor cudagraphs) run only on the GPU"
    elif not cudagraphs:
        graphs.reason = "not asked for (--no-cudagraphs)"
    else:
        reasons = []
        if eager.device_time is not None and eager.device_time.method == "graph":
            stage("graph")
            graphs.eager_graph = runner.run_cell(cell(modes_mod.GRAPH), batch, reference, options, copy_gbps)
        else:
            reasons.append("eager could not be captured in a CUDA graph (timing.capture_graph refused it: a host "
                           "sync or a CPU op), so mode 'graph' was not run")
        if over_budget:
            reasons.append(f"{graphs.counterpart_mode} {over_budget}")
        else:
            stage(graphs.counterpart_mode)
            with watch_dynamo() as cg_dynamo, catch_cudagraph_messages() as cg_messages:
                graphs.counterpart = runner.run_cell(cell(graphs.counterpart_mode), batch, reference, options,
                                                     copy_gbps)
            with_graphs = modes_mod.uses_cuda_graphs(graphs.counterpart_mode)
            messages = cg_messages if with_graphs else compiled_messages
            watched = cg_dynamo if with_graphs else dynamo
            graphs.skip_messages = list(messages)
            graphs.skip_reason = skip_reason(messages) or (watched.cudagraph_skip_reasons[0]
                                                           if watched.cudagraph_skip_reasons else None)
            graphs.skips_counted = watched.cudagraph_skips
        graphs.available = graphs.eager_graph is not None or graphs.counterpart is not None
        graphs.reason = "; ".join(reasons) or None
    stage(None)

    wall_only, why = _wall_only(options, eager, compiled)
    host = HostOverhead(not wall_only, why, HOST_METHOD_WALL_ONLY if wall_only else HOST_METHOD,
                        host_us(eager, wall_only=wall_only), host_us(compiled, wall_only=wall_only), guards, dynamo,
                        host_call_us(eager), host_call_us(compiled), sync_wait_us(eager), sync_wait_us(compiled))
    input_form.plain_host_us = host_us(input_form.plain, wall_only=wall_only)
    input_form.plain_call_us = host_call_us(input_form.plain)
    must_move = get_op(op).must_move_bytes(batch)
    kernels = _kernels(cuda, options, must_move, copy_gbps, eager, compiled, input_form.plain)
    cost = compile_cost(eager, compiled)
    if wall_only:
        notes.append(why)
    if options.device_time and cuda and not options.flush_l2:
        notes.append("device time measured without an L2 flush, as the wall loop runs (warm L2)")
    return Evidence(op, implementation, mode, case, options.device.type, impl.takes, eager, compiled, host, input_form,
                    kernels, _padding_model(batch, impl), graphs, cost, notes,
                    {k: round(v, 3) for k, v in stage_s.items()}, boundary, reconciled)


def _padding_model(batch: Batch, impl: Implementation) -> PaddingModel | None:
    """The padding model of a ``JaggedBatch`` (values are the rows a padded program pads); None for another
    op's batch (e.g. a model's ids), whose bytes the model does not describe."""
    return batch_padding_model(batch, pads=impl.pads) if isinstance(batch, JaggedBatch) else None


def _boundary_section(impl: Implementation, mode: str, compiled: Result, over_budget: str | None) -> Boundary:
    """The boundary section before it is measured: ``available`` with ``reason`` None when the cell is to be
    run in ``mode``'s ``jagged-compile:`` twin, else unavailable with the reason."""
    twin = modes_mod.boundary_twin(mode)
    section = Boundary(twin is not None, None, BOUNDARY_METHOD, twin, modes_mod.torch_mode(mode))
    if impl.takes != "njt":
        section.reason = "not applicable: the implementation takes (values, offsets) tensors, not an NJT"
    elif twin is None:
        section.reason = f"not applicable: {mode} already compiles on the NJT's components"
    elif compiled.status != OK:
        section.reason = f"compiled call {compiled.status}: {compiled.reason}"
    elif over_budget:
        section.reason = f"{twin} {over_budget}"
    section.available = section.reason is None
    return section


def _guards(fn: Callable, args: tuple, mode: str, result: Result, what: str) -> GuardCost:
    """The guard cost of ``fn(*args)`` compiled in ``mode`` (``result`` is that call's), or why it is not measured."""
    if result.status != OK:
        return GuardCost(False, f"{what} {result.status}: {result.reason}")
    if modes_mod.is_boundary(mode):
        # Dynamo guards the boundary's compiled region (its own code object, called on the NJT's components),
        # not fn's frame: guard_cost, which reads the cache entries of fn's code, has nothing to read.
        return GuardCost(False, f"not probed in {mode}: Dynamo guards jaggedperf.compile's region on the NJT's "
                                "components, not the function's own frame")
    return guard_cost(fn, args)


def _wall_only(options: runner.Options, *results: Result) -> tuple[bool, str | None]:
    if options.device.type != "cuda":
        return True, f"{NEEDS_CUDA}: no device time on the CPU; host overhead uses wall time only"
    if not options.device_time:
        return True, "device time not asked for: host overhead uses wall time only"
    missing = [r.mode for r in results if r.status == OK and r.device_time is None]
    if missing:
        return True, f"no device time for {', '.join(missing)}: host overhead uses wall time only"
    return False, None


def _kernels(cuda: bool, options: runner.Options, must_move: int, copy_gbps: float | None, eager: Result,
             compiled: Result, plain: Result | None) -> Kernels:
    method = ("torch.profiler over {n} calls per callable (timing.profile_kernels): kernels per call, each kernel's "
              "device µs per call; bandwidth = bytes the op must move / the kernel's time, vs the copy bandwidth "
              "measured in this run").format(n=options.profile_calls)
    if not cuda:
        return Kernels(False, f"{NEEDS_CUDA}: torch.profiler kernel times need a CUDA device", method,
                       must_move_bytes=must_move)
    if not options.device_time:
        return Kernels(False, "device time not asked for", method, must_move_bytes=must_move)
    k = Kernels(True, None, method, copy_gbps, must_move,
                kernel_infos(eager, must_move, copy_gbps), kernel_infos(compiled, must_move, copy_gbps),
                kernel_infos(plain, must_move, copy_gbps),
                eager.kernels_per_call, compiled.kernels_per_call, plain.kernels_per_call if plain else None)
    k.inductor_kernels = [x.name for x in k.compiled if x.inductor]
    if compiled.kernels_per_call is None:
        k.available, k.reason = False, f"compiled call {compiled.status}: {compiled.reason}"
    return k


def unavailable_evidence(op: str, implementation: str, mode: str, case: Case, device: str, status: str,
                         reason: str) -> Evidence:
    """An ``Evidence`` whose cells never ran (the case's input could not be made): every section says why.

    Args:
        op, implementation, mode, case: the cell.
        device: the device type it would have run on.
        status: the cells' status (``input_size.input_status``).
        reason: why, as the results say it.

    Returns:
        The evidence, every section unavailable with ``reason``.

    Raises:
        KeyError: an unknown op or implementation.
    """
    impl = get_implementation(op, implementation)

    def result(m: str) -> Result:
        return Result(op, implementation, m, case, device, status=status, reason=reason)

    eager, compiled = result(modes_mod.EAGER), result(mode)
    no = GuardCost(False, reason)
    return Evidence(
        op, implementation, mode, case, device, impl.takes, eager, compiled,
        HostOverhead(False, reason, "", None, None, no, CompileStats(False, reason)),
        InputForm(False, reason, ""), Kernels(False, reason, ""), None,
        CudaGraphs(False, reason, CUDAGRAPH_METHOD, mode, CUDAGRAPH_COUNTERPART.get(mode)),
        compile_cost(eager, compiled), [reason], boundary=Boundary(False, reason, BOUNDARY_METHOD),
    )


def not_tried_evidence(op: str, implementation: str, mode: str, case: Case, device: str,
                       not_tried: NotTried, eager: Result | None = None) -> Evidence:
    """An ``Evidence`` for a cell not gathered for the compile budget (``NotTried``): its compiled result is skipped
    and every section is unavailable, each with ``not_tried_reason``; no note repeats it (the verdict says it).

    Args:
        eager: the case's eager cell, measured (it compiles nothing, so the budget does not skip it); None: skipped
            with the same reason.

    Raises:
        KeyError: an unknown op or implementation.
    """
    ev = unavailable_evidence(op, implementation, mode, case, device, SKIPPED, not_tried_reason(not_tried))
    ev.notes, ev.not_tried = [], not_tried
    if eager is not None:
        ev.eager = eager
    return ev


def gather_all(op: str, cases: Iterable[Case], implementations: list[str], mode: str, options: runner.Options, *,
               cudagraphs: bool = True, compile_budget_s: float | None = DEFAULT_COMPILE_BUDGET_S,
               on_start: Callable[[str, Case], None] | None = None,
               on_stage: Callable[[str], None] | None = None,
               on_evidence: Callable[[Evidence], None] | None = None) -> EvidenceRun:
    """Evidence for every implementation × case (each case's batch made once), with the run's environment.

    A case whose batch cannot be made gives each implementation an ``unavailable_evidence``: skipped when
    the case is over the byte limit, else an error. An implementation whose compiled call passed
    ``compile_budget_s`` at one case is not gathered at the later ones: ``not_tried_evidence`` names that case.

    Args:
        op: a registered op.
        cases: the cases.
        implementations: names of ``op``'s implementations.
        mode: the compiled mode to explain.
        options: how each callable is measured; with ``cold_compile`` the run's compiles are cold
            (``modes.cold_compile``, restored after the run).
        cudagraphs, compile_budget_s: as for ``gather``; the budget also decides which later cells are not tried.
        on_start: called with (implementation, case) before each cell.
        on_stage: called with each stage's name (see ``gather``).
        on_evidence: called with each cell's evidence when it is complete.

    Returns:
        The environment, the copy bandwidth and the evidence, case by case.

    Raises:
        KeyError: an unknown op or implementation.
        ValueError: an unknown mode, or one that is not compiled.
    """
    get_op(op)
    for name in implementations:
        get_implementation(op, name)
    modes_mod.check_modes([mode])
    copy_gbps = timing.measure_copy_bandwidth(options.device)
    out: list[Evidence] = []
    # implementation → the first measurement of its compiled call (in ``mode``) over the budget; once there, the
    # implementation is not compiled again in this run: a compile that passed the budget at one case costs about as
    # much again at the next (the seed's unbind_mean unrolls one mean per sequence, B of them at every case). Its
    # eager cell is still measured at the later cases: it compiles nothing, and a table of the run shows it.
    slow: dict[str, NotTried] = {}
    with modes_mod.cold_compile() if options.cold_compile else contextlib.nullcontext():
        for case in cases:
            batch, reference = runner.prepare_case(op, case, options)
            for name in implementations:
                if on_start:
                    on_start(name, case)
                if name in slow:
                    eager = (None if isinstance(batch, Exception) else
                             runner.run_cell(runner.Cell(op, name, modes_mod.EAGER, case), batch, reference,
                                             replace(options, host_timer=True), copy_gbps))
                    ev = not_tried_evidence(op, name, mode, case, options.device.type, slow[name], eager)
                elif isinstance(batch, Exception):
                    ev = unavailable_evidence(op, name, mode, case, options.device.type,
                                              input_size.input_status(batch), f"input: {batch}")
                else:
                    ev = gather(op, name, mode, case, batch, reference, options, copy_gbps, cudagraphs=cudagraphs,
                                compile_budget_s=compile_budget_s, on_stage=on_stage)
                    if over_compile_budget(ev.compiled, compile_budget_s):
                        slow[name] = NotTried(ev.compiled.compile_s, case.label, compile_budget_s)
                out.append(ev)
                if on_evidence:
                    on_evidence(ev)
            batch = reference = None
    return EvidenceRun(environment(), copy_gbps, out)
