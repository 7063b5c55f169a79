"""Hand-built doctor evidence for the doctor's tests, and the CLI's tiny CPU case."""

from jaggedperf.inputs import Case
from jaggedperf.lab import modes
from jaggedperf.lab.doctor import evidence, probes
from jaggedperf.lab.result import OK, DeviceTime, Result, WallStats

SEED = Case(512, 64, 100, 0.1)
MODE = modes.SEED_COMPILED_MODE
TINY = ["--B", "8", "--M", "4", "--seqlen", "20", "--sparsity", "0.5", "--impls", "sum_padded", "--warmup", "1",
        "--iters", "5", "--device", "cpu"]


def result(mode, wall_us, device_us=None, kernels=None, compile_s=None, status=OK, form=None):
    r = Result("jagged_mean", "sum_padded", mode, SEED, "cuda" if device_us is not None else "cpu", status=status)
    if status == OK:
        r.wall = WallStats(wall_us / 1e3, 0.0, wall_us / 1e3, wall_us / 1e3, wall_us / 1e3, 200)
    else:
        r.reason = "boom"
    if device_us is not None:
        r.device_time = DeviceTime(device_us, device_us, device_us, "graph", False)
        r.host_us = wall_us - device_us
    r.kernels_per_call = kernels
    r.compile_s = compile_s
    if form:
        r.extra["input_form"] = form
    return r


def guards(us, count):
    return probes.GuardCost(True, None, "test", "f", 1, 0, count, {}, us)


def make_evidence(*, eager, compiled, plain=None, njt_guard_us=None, plain_guard_us=None, compile_s=5.0,
                  takes="njt", eager_kernels=4, compiled_kernels=1, boundary=None, host_calls=None, waits=None):
    """eager/compiled/plain/boundary: (wall µs, device µs or None); boundary: the jagged-compile twin's;
    host_calls: the host timer's (eager, compiled, plain) µs, or None for evidence without it; waits: the same
    loop's (eager, compiled) waits at the sync (CUDA), or None for evidence without them."""
    wall_only = eager[1] is None
    e = result("eager", eager[0], eager[1], None if wall_only else eager_kernels, 0.001)
    c = result(MODE, compiled[0], compiled[1], None if wall_only else compiled_kernels, compile_s)
    p = result(MODE, plain[0], plain[1], None if wall_only else 1, 1.0, form="plain") if plain else None
    g = guards(njt_guard_us, 33) if njt_guard_us is not None else probes.GuardCost(False, "not measured")
    pg = guards(plain_guard_us, 21) if plain_guard_us is not None else None
    host = evidence.HostOverhead(not wall_only, "needs CUDA" if wall_only else None, "test",
                                 evidence.host_us(e, wall_only=wall_only), evidence.host_us(c, wall_only=wall_only),
                                 g, probes.CompileStats(True, graphs=1, graph_breaks=0, recompiles=0))
    if host_calls is not None:
        for r, us in zip((e, c, p), host_calls):
            if r is not None and us is not None:
                r.host_call = WallStats(us / 1e3, 0.0, us / 1e3, us / 1e3, us / 1e3, 200)
        host.eager_call_us, host.compiled_call_us = host_calls[0], host_calls[1]
    if waits is not None:
        for r, us in zip((e, c), waits):
            r.sync_wait = WallStats(us / 1e3, 0.0, us / 1e3, us / 1e3, us / 1e3, 200)
        host.eager_wait_us, host.compiled_wait_us = waits
    if plain:
        form = evidence.InputForm(True, None, "test", p, evidence.host_us(p, wall_only=wall_only), pg,
                                  probes.CompileStats(True))
        form.plain_call_us = host_calls[2] if host_calls is not None else None
    else:
        form = evidence.InputForm(False, "not applicable: the implementation already takes (values, offsets)", "")
    kernels = evidence.Kernels(False, "needs CUDA", "test")
    graphs = evidence.CudaGraphs(False, "needs CUDA", "test", MODE, "compile:max-autotune")
    pad = evidence.padding_model(512, 64, 100, 46000, 4)
    twin = modes.boundary_twin(MODE)
    if boundary:
        b = evidence.Boundary(True, None, "test", twin, modes.torch_mode(MODE),
                              result(twin, boundary[0], boundary[1], None if wall_only else 1, 4.0))
    else:
        b = evidence.Boundary(False, "not measured", "test")
    return evidence.Evidence("jagged_mean", "sum_padded", MODE, SEED, "cuda", takes, e, c, host, form, kernels, pad,
                             graphs, evidence.compile_cost(e, c), boundary=b)
