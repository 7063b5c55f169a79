"""The fast eager launch path's bookkeeping, with stand-in kernels (the real one needs a GPU):
first call through the JIT, self-check on the second, permanent fallback when a tier fails."""

import pytest
import torch

from jaggedperf.ops.launch import tiers


class FakeLauncher:
    """Stands in for triton's CudaLauncher: called the way the JIT calls it (the ``run`` tier), with the
    C launcher as its ``launch`` attribute (the ``launch`` tier)."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid = launch_pdl = False

    def __init__(self, owner, ok, launch_ok):
        self.owner, self.ok, self.launch_ok = owner, ok, launch_ok

    def __call__(self, gx, gy, gz, stream, function, packed, metadata, enter, leave, *args):
        if not self.ok:
            raise TypeError("launcher signature changed")
        self.owner.calls.append("run")
        self.owner.body(*args)

    def launch(self, gx, gy, gz, stream, function, coop, pdl, scratch, profile_scratch, packed, metadata, enter,
               leave, *args):
        if not self.launch_ok:
            raise TypeError("C launcher signature changed")
        assert enter is None and leave is None and scratch is None
        self.owner.calls.append("launch")
        self.owner.body(*args)


class FakeCompiled:
    """Stands in for a triton CompiledKernel: `run` (launcher, with the C `launch`) and `[grid]` (runner)."""

    function = "fn"
    packed_metadata = "meta"

    def __init__(self, body, run_ok=True, getitem_body=None, launch_ok=None):
        self.body, self.getitem_body = body, getitem_body or body
        self.run = FakeLauncher(self, run_ok, run_ok if launch_ok is None else launch_ok)
        self.calls = []

    def launch_metadata(self, grid, stream, *args):
        return None

    def __getitem__(self, grid):
        def runner(*args):
            self.calls.append("getitem")
            self.getitem_body(*args)

        return runner


class FakeKernel:
    """Stands in for a JITFunction: kernel[grid](*args, num_warps=...) runs `body`, returns the compiled one."""

    def __init__(self, compiled):
        self.compiled, self.launches = compiled, 0

    def __getitem__(self, grid):
        def call(*args, num_warps):
            self.launches += 1
            self.compiled.body(*args)
            return self.compiled

        return call


def double(src, dst, scale):
    dst.copy_(src * 2 * scale)


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    tiers.reset()
    tiers.force(None)
    monkeypatch.setattr(tiers, "_current_stream", lambda: 0)
    yield
    tiers.reset()
    tiers.force(None)


def call(kernel, src, key=("k",)):
    dst = torch.empty_like(src)
    tiers.launch(kernel, (1, 1, 1), (src, dst, 1), 4, key, (dst,))
    return dst


def test_jit_then_verified_fast_launch_tier():
    compiled = FakeCompiled(double)
    kernel = FakeKernel(compiled)
    src = torch.arange(6.0)
    for _ in range(4):
        assert torch.equal(call(kernel, src), src * 2)
    state = tiers.state()
    assert state["tier"] == "launch" and state["verified_tier"] == "launch" and state["verifications"] == 1
    # call 1: JIT; call 2: JIT (check) + launch (check) + launch (real); calls 3, 4: launch only
    assert kernel.launches == 2 and compiled.calls == ["launch"] * 4
    assert state["launches"]["launch"] == 3 and state["dropped"] == []


def doubled_three_times(compiled):
    """Three calls of a doubling kernel (each result checked); the launch path's state after them."""
    kernel = FakeKernel(compiled)
    src = torch.arange(4.0)
    for _ in range(3):
        assert torch.equal(call(kernel, src), src * 2)
    return tiers.state()


def test_a_changed_c_launcher_falls_back_to_the_run_tier():
    compiled = FakeCompiled(double, launch_ok=False)
    state = doubled_three_times(compiled)
    assert state["tier"] == "run" and state["dropped"][0].startswith("launch: TypeError")
    assert compiled.calls[-1] == "run"


@pytest.mark.parametrize("why", ["scratch", "hook"])
def test_the_launch_tier_leaves_scratch_and_hooks_to_the_run_tier(monkeypatch, why):
    compiled = FakeCompiled(double)
    if why == "scratch":
        compiled.run.global_scratch_size = 128
    else:
        class Holder:
            launch_enter_hook = type("Chain", (), {"calls": [print]})()
            launch_exit_hook = None

        monkeypatch.setattr(tiers, "_hook_holder", lambda: Holder)
    state = doubled_three_times(compiled)
    assert compiled.calls == ["run"] * 3 and state["tier"] == "launch"


def test_raising_tier_falls_back_to_the_next_for_good():
    compiled = FakeCompiled(double, run_ok=False)
    state = doubled_three_times(compiled)
    assert state["tier"] == "getitem" and [r.split(":")[0] for r in state["dropped"]] == ["launch", "run"]
    assert compiled.calls[-1] == "getitem"


def test_wrong_output_drops_every_fast_tier_and_results_stay_right():
    wrong = lambda src, dst, scale: dst.copy_(src)  # noqa: E731
    compiled = FakeCompiled(double, run_ok=False, getitem_body=wrong)
    kernel = FakeKernel(compiled)
    src = torch.arange(5.0) + 1
    for _ in range(3):
        assert torch.equal(call(kernel, src), src * 2)
    state = tiers.state()
    assert state["tier"] == "jit"
    assert any("differs" in r for r in state["dropped"])


def test_a_check_where_nothing_was_written_does_not_trust_a_tier():
    nothing = lambda src, dst, scale: None  # noqa: E731  (like a combine with no split segment)
    compiled = FakeCompiled(nothing)
    kernel = FakeKernel(compiled)
    src = torch.arange(3.0)
    call(kernel, src, key=("empty",))
    call(kernel, src, key=("empty",))
    assert tiers.state()["verified_tier"] is None and compiled.calls == ["launch"]
    # once the tier has proven itself on a kernel that writes, the silent one is accepted too
    writer = FakeKernel(FakeCompiled(double))
    call(writer, src, key=("writer",))
    call(writer, src, key=("writer",))
    assert "launch" in tiers.state()["trusted"]
    call(kernel, src, key=("empty",))
    call(kernel, src, key=("empty",))
    assert compiled.calls[-1] == "launch" and compiled.calls.count("launch") >= 3


def test_partially_written_outputs_keep_what_was_there():
    def half(src, dst, scale):
        dst[: dst.shape[0] // 2] = src[: dst.shape[0] // 2] * 2

    kernel = FakeKernel(FakeCompiled(half))
    src = torch.arange(6.0)
    for _ in range(3):
        dst = torch.full_like(src, 7.0)
        tiers.launch(kernel, (1, 1, 1), (src, dst, 1), 4, ("half",), (dst,))
        assert torch.equal(dst, torch.tensor([0.0, 2.0, 4.0, 7.0, 7.0, 7.0]))


def test_forced_tier_and_bad_tier_name():
    tiers.force("jit")
    kernel = FakeKernel(FakeCompiled(double))
    for _ in range(3):
        call(kernel, torch.ones(2))
    assert kernel.launches == 3 and tiers.state()["forced"] == "jit"
    with pytest.raises(ValueError, match="tier must be one of"):
        tiers.force("warp")


def test_interpreter_kernels_are_not_cached():
    class Interpreted:
        def __getitem__(self, grid):
            return lambda *args, num_warps: None

    tiers.launch(Interpreted(), (1, 1, 1), (), 4, ("i",), ())
    assert tiers.state()["compiled_kernels_cached"] == 0
