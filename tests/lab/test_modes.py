"""The mode families: compile:<torch mode> and jagged-compile:<torch mode> (jaggedperf.compile)."""

import pytest
import torch

from jaggedperf.boundary import BoundaryFunction
from jaggedperf.inputs import Case
from jaggedperf.lab import modes, runner
from jaggedperf.lab.result import OK, SKIPPED

CPU = torch.device("cpu")


def test_every_torch_compile_mode_has_a_jagged_compile_twin_listed_with_a_description():
    for mode, torch_mode in modes.COMPILE_MODES.items():
        twin = modes.boundary_twin(mode)
        assert twin == f"jagged-compile:{torch_mode}" and twin in modes.MODES
        assert modes.is_compiled(twin) and modes.is_boundary(twin) and not modes.is_boundary(mode)
        assert modes.torch_mode(twin) == torch_mode
        assert modes.uses_cuda_graphs(twin) == modes.uses_cuda_graphs(mode)
        assert "jaggedperf.compile" in modes.DESCRIPTIONS[twin]
    assert modes.boundary_twin("eager") is None and not modes.is_compiled("graph")
    with pytest.raises(ValueError, match="not a compiled mode"):
        modes.torch_mode("eager")


def test_jagged_compile_builds_through_the_boundary_with_the_torch_mode_and_dynamic(monkeypatch):
    seen = {}
    real_compile, real_optimize = torch.compile, torch._dynamo.optimize

    def fake_compile(fn, **kwargs):  # records what the boundary asks torch.compile for; compiles cheaply
        seen.update(kwargs)
        return real_compile(fn, backend="eager")

    def fake_optimize(*args, **kwargs):  # the same where the regions are compiled by Dynamo's optimize (``backend``)
        seen.update(kwargs)
        return real_optimize(*args, **dict(kwargs, backend="eager"))

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch._dynamo, "optimize", fake_optimize)
    call = modes.build(lambda nt: nt.values().sum(), (torch.nested.nested_tensor_from_jagged(
        torch.ones(5, 2), torch.tensor([0, 2, 5])),), "jagged-compile:max-autotune-no-cudagraphs", CPU, dynamic=True)
    assert float(call()) == 10.0
    assert call.compiled.compile_kwargs == {"mode": "max-autotune-no-cudagraphs", "dynamic": True}
    # the regions' backend is the one torch.compile builds for that mode (inside the boundary's wrapper)
    assert seen["dynamic"] is True and "mode" not in seen
    backend = getattr(seen["backend"], "compiler_fn", seen["backend"])  # optimize's: wrapped as torch.compile wraps it
    assert backend.inner.config.get("max_autotune") is True
    compiled = modes.compile_fn(lambda x: x, "jagged-compile:default")
    assert isinstance(compiled, BoundaryFunction)


def test_jagged_compile_with_cuda_graphs_is_unavailable_on_the_cpu():
    cell = runner.Cell("jagged_mean", "sum_padded", "jagged-compile:reduce-overhead", Case(4, 2, 6, 0.3))
    record = runner.run([cell], runner.Options(device=CPU, warmup=1, iters=2))
    assert record.results[0].status == SKIPPED and "CUDA graphs" in record.results[0].reason


def test_a_jagged_compile_default_cell_of_sum_padded_runs_and_is_correct():
    cells = runner.plan("jagged_mean", [Case(8, 3, 12, 0.3)], ["sum_padded"], ["eager", "jagged-compile:default"])
    record = runner.run(cells, runner.Options(device=CPU, warmup=1, iters=3))
    eager, boundary = record.results
    assert boundary.status == OK, boundary.reason
    assert boundary.rel_error < 1e-5 and boundary.compile_s > 0 and boundary.speedup_vs_eager is not None


def test_a_jagged_compile_cell_whose_boundary_fell_back_is_an_error_not_a_torch_compile_timing(monkeypatch):
    class Broken(BoundaryFunction):  # a boundary whose compile on the components failed: every call falls back
        def __call__(self, *args, **kwargs):
            return self._fall_back("compiling on the NJT's components failed (test)", args, kwargs)

    def broken(fn, **kwargs):
        return Broken(fn, {"backend": "eager"})

    monkeypatch.setattr(modes, "jagged_compile", broken)
    cell = runner.Cell("jagged_mean", "sum_padded", "jagged-compile:default", Case(4, 2, 6, 0.3))
    result = runner.run([cell], runner.Options(device=CPU, warmup=1, iters=2)).results[0]
    assert result.status == "error" and "fell back to torch.compile" in result.reason and "(test)" in result.reason


def _caches() -> tuple[bool, bool]:
    import torch._functorch.config
    import torch._inductor.config

    return torch._inductor.config.fx_graph_cache, torch._functorch.config.enable_autograd_cache


def test_cold_compile_turns_the_caches_off_inside_and_restores_them_after():
    before = _caches()
    with modes.cold_compile():
        assert _caches() == (False, False)
    assert _caches() == before
    with pytest.raises(RuntimeError), modes.cold_compile():
        raise RuntimeError("a failing cell")
    assert _caches() == before


@pytest.mark.parametrize("cold", [True, False])
def test_the_runner_compiles_cold_inside_each_compiled_cell_only(monkeypatch, cold):
    """With ``cold_compile`` a compiled cell runs with the caches off; its eager cells and whatever runs after the
    run see them as they were (the GPU suite's timed pass loads what its parallel pass compiled)."""
    seen = {}
    real_build = modes.build

    def build(fn, args, mode, device, **kw):
        seen[mode] = _caches()
        return real_build(fn, args, mode, device, **kw)

    monkeypatch.setattr(modes, "build", build)
    before = _caches()
    cells = runner.plan("jagged_mean", [Case(4, 2, 6, 0.3)], ["segment_reduce"], ["eager", "jagged-compile:default"])
    runner.run(cells, runner.Options(device=CPU, warmup=1, iters=2, cold_compile=cold))
    assert seen["eager"] == before and _caches() == before
    assert seen["jagged-compile:default"] == ((False, False) if cold else before)
