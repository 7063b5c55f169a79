"""Fast eager launch: call an already-compiled Triton kernel without the per-call JIT binder.

``kernel[grid](*args)`` binds and specialises every argument on every call (host time several times the
kernels' device time at the seed shapes). Here the first call for a
*key* launches through the JIT as usual and keeps the ``CompiledKernel`` it returns; later calls
with the same key launch that compiled kernel directly.

The key must capture everything the JIT specialises on: the kernel, its constexprs and
``num_warps``, the dtypes, the device, the specialised integer arguments (all varying integers are
``do_not_specialize``), whether each pointer is 16-byte aligned and whether every integer fits in
int32. The caller builds it (cheaply: it knows its own arguments).

The tiers, tried in order; a tier is used only after it has *verified itself* on the second call
for a key (the JIT launch and the tier's launch, each into outputs poisoned with a fixed byte
pattern, must agree bitwise: one sync, once per key; a check in which the kernel wrote nothing
counts only for a tier already proven by one in which it did):

- ``launch``: the compiled C launcher itself (``compiled.run.launch``), past the Python wrapper
  around it: that wrapper allocates scratch (these kernels need none) and hands the launch hook chains
  to C even when they are empty. A kernel that needs scratch, or any launch while a hook is set, goes
  through ``run`` instead (the argument layout of triton 3.3–3.7's launcher);
- ``run``: ``compiled.run(gx, gy, gz, stream, function, packed_metadata, ...)``, the launcher call
  the JIT itself makes in triton 3.3–3.7 (hooks and launch metadata filled in as the JIT does);
- ``getitem``: ``compiled[grid](*args)``, the CompiledKernel's own runner (triton ≥ 3.0);
- ``jit``: the normal ``kernel[grid](...)`` (always correct, slow on the host).

A tier that raises or disagrees is dropped for good (for every key) and the next one is tried; the
active tier and the reasons are in ``launch_path()``. Verification never runs while a CUDA graph is
being captured (the JIT launches instead), and nothing on the fast path syncs.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import torch

from jaggedperf.ops.launch.verification import POISON_BYTE, bitwise_equal, capturing, poison

TIERS = ("launch", "run", "getitem", "jit")


@dataclass
class _Entry:
    compiled: object
    verified: bool = False


@dataclass
class _State:
    tier: str = TIERS[0]  # best tier not yet ruled out
    verified_tier: str | None = None  # tier that last passed verification
    reasons: list[str] = field(default_factory=list)  # why tiers were dropped
    counts: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TIERS})
    verifications: int = 0
    trusted: set[str] = field(default_factory=set)  # tiers that passed a check in which the kernel wrote


_state = _State()
_cache: dict[tuple, _Entry] = {}
_lock = threading.Lock()
_forced: str | None = None


def state() -> dict:
    """What the Python launch tiers are doing: active tier, launches per tier, why tiers were dropped.

    Returns:
        a JSON-ready dict (``jaggedperf.ops.launch_path()`` adds the native path's state to it).
    """
    return {
        "tier": _forced or _state.tier,
        "forced": _forced,
        "verified_tier": _state.verified_tier,
        "verifications": _state.verifications,
        "trusted": sorted(_state.trusted),
        "launches": dict(_state.counts),
        "compiled_kernels_cached": len(_cache),
        "dropped": list(_state.reasons),
    }


def force(tier: str | None) -> None:
    """Launch through ``tier`` only (``"jit"`` for the normal path); None restores.

    Args:
        tier: one of TIERS, or None.

    Raises:
        ValueError: for another tier name.
    """
    if tier is not None and tier not in TIERS:
        raise ValueError(f"force_tier: tier must be one of {TIERS} or None; got {tier!r}")
    global _forced
    _forced = tier


def reset() -> None:
    """Forget compiled kernels and verdicts, and every dropped tier (tests)."""
    global _state
    with _lock:
        _cache.clear()
        _state = _State()


def launch(kernel, grid: tuple, args: tuple, num_warps: int, key: tuple, written: tuple) -> None:
    """Launch ``kernel`` through the best verified tier (the JIT on a key's first call and while verifying).

    Args:
        kernel: a triton JITFunction.
        grid: 3 ints.
        args: positional arguments, constexprs included.
        num_warps: the launch's warps.
        key: everything the JIT specialises on for this launch (see the module's docstring).
        written: the tensors the kernel writes, all of them (verification poisons and compares them).
    """
    tier = _forced or _state.tier
    entry = _cache.get(key)
    if entry is not None and tier != "jit" and (entry.verified or _forced):
        try:
            _FAST[tier](entry.compiled, grid, args)
            _state.counts[tier] += 1
            return
        except Exception as exc:  # noqa: BLE001 - any failure demotes the tier; the JIT still works
            if _forced:
                raise
            _drop(tier, f"{type(exc).__name__}: {exc}")
            _jit(kernel, grid, args, num_warps)
            return
    if entry is None:
        compiled = _jit(kernel, grid, args, num_warps)
        if not hasattr(compiled, "run") and hasattr(compiled, "result"):  # versions that compile asynchronously
            compiled = compiled.result()
        if hasattr(compiled, "run"):  # a CompiledKernel (the interpreter returns none)
            with _lock:
                _cache[key] = _Entry(compiled)
        return
    if tier == "jit" or capturing():
        _jit(kernel, grid, args, num_warps)
        return
    _verify(kernel, grid, args, num_warps, entry, written)


def launch_all(launches, device: torch.device, key_extra: tuple) -> None:
    """Launch each of ``launches`` (``jaggedperf.ops.launch.plan.Launch``) through the fast tiers, on ``device``.

    Args:
        launches: the plan's launches, in order.
        device: the CUDA device of their tensors (made current for the launches when it is not).
        key_extra: ``eager_key`` of the call's tensors: with each launch's own key, what the JIT specialises on.
    """
    if device.index is not None and device.index != torch._C._cuda_getDevice():
        with torch.cuda.device(device):
            return launch_all(launches, device, key_extra)
    for step in launches:
        launch(step.kernel, step.grid, step.args, step.num_warps, (step.key, step.num_warps, key_extra), step.written)


def eager_key(values: torch.Tensor, offsets: torch.Tensor, n_rows: int | None = None) -> tuple:
    """The part of a launch's cache key that comes from the call's tensors.

    Args:
        values: the (rows, M) tensor the kernels read (the backward's grad).
        offsets: the (B + 1,) offsets.
        n_rows: the row count passed to the kernel when it is not values' (the backward's output rows).

    Returns:
        dtypes, 16-byte alignment of the inputs (the JIT specialises on it), the row width (specialised),
        whether the varying integers fit in int32 (their type in the compiled signature) and the device.
    """
    rows, n_cols = values.shape
    if n_rows is not None:
        rows = max(rows, n_rows)
    return (values.dtype, offsets.dtype, values.data_ptr() % 16 == 0, offsets.data_ptr() % 16 == 0, n_cols,
            max(rows, offsets.shape[0]) < 2**31 - 1, values.get_device())


def plain_eager(values, offsets) -> bool:
    """Whether a call may take the fast tiers: eager, CUDA, plain tensors, no dispatch mode (fake, functional
    and user modes must see the operator or ``wrap_triton``).

    Args:
        values, offsets: the call's tensors (anything: a subclass or a non-tensor answers False).

    Returns:
        True when the fast tiers may launch the call's kernels.
    """
    # is_compiling first: Dynamo cannot trace _len_torch_dispatch_stack (a graph break under fullgraph).
    return (
        not torch.compiler.is_compiling()
        and type(values) is torch.Tensor
        and type(offsets) is torch.Tensor
        and values.is_cuda
        and not torch._C._len_torch_dispatch_stack()
    )


def prebuilt(step, key_extra: tuple):
    """A zero-argument callable that launches ``step``'s cached compiled kernel through the active fast tier,
    its arguments built once (benchmarks: the Python path's floor, with no planning and no checks).

    Args:
        step: a ``Launch`` already launched (and verified) through ``launch_all`` with ``key_extra``.
        key_extra: the ``eager_key`` it was launched with.

    Returns:
        the callable.

    Raises:
        LookupError: no compiled kernel is cached for it, or the active tier is the JIT.
    """
    entry = _cache.get((step.key, step.num_warps, key_extra))
    tier = _forced or _state.tier
    if entry is None or tier == "jit":
        raise LookupError(f"prebuilt: no compiled kernel cached for {step.key} or no fast tier (tier {tier})")
    fast, kernel, grid, args = _FAST[tier], entry.compiled, step.grid, step.args
    return lambda: fast(kernel, grid, args)


def compiled(key: tuple):
    """The compiled kernel cached for ``key``.

    Args:
        key: a launch's key, as passed to ``launch``.

    Returns:
        the CompiledKernel, or None before its first launch (or in the interpreter, which compiles none).
    """
    entry = _cache.get(key)
    return None if entry is None else entry.compiled


def _jit(kernel, grid, args, num_warps):
    _state.counts["jit"] += 1
    return kernel[grid](*args, num_warps=num_warps)


def _verify(kernel, grid, args, num_warps, entry: _Entry, written: tuple) -> None:
    """Check the best remaining tier on this call, then launch for real (outputs end up correct).

    JIT and tier each run into outputs poisoned with POISON_BYTE; they must agree bitwise. A check in
    which the kernel wrote nothing (all poison: e.g. a combine with no split segment) proves nothing
    about a tier: it verifies the key only once the tier has passed a check that wrote something.
    """
    _state.verifications += 1
    before = [w.clone() for w in written]  # a kernel may write only part of a tensor another one filled
    while _state.tier != "jit":
        tier = _state.tier
        try:
            poison(written)
            _jit(kernel, grid, args, num_warps)
            expected = [w.clone() for w in written]
            poison(written)
            _FAST[tier](entry.compiled, grid, args)
            same = all(bitwise_equal(a, b) for a, b in zip(expected, written))
            wrote = any(bool((e.view(torch.uint8) != POISON_BYTE).any()) for e in expected)
        except Exception as exc:  # noqa: BLE001
            _drop(tier, f"{type(exc).__name__}: {exc}")
            continue
        if not same:
            _drop(tier, "output differs from the JIT launch")
            continue
        if wrote:
            _state.trusted.add(tier)
        _restore(written, before)
        if tier in _state.trusted:
            entry.verified = True
            _state.verified_tier = tier
            _FAST[tier](entry.compiled, grid, args)
            _state.counts[tier] += 1
        else:
            _jit(kernel, grid, args, num_warps)  # nothing proven yet: check again next call
        return
    _restore(written, before)
    _jit(kernel, grid, args, num_warps)


def _restore(written, before) -> None:
    for w, b in zip(written, before):
        w.copy_(b)


def _drop(tier: str, reason: str) -> None:
    with _lock:
        if _state.tier != tier:
            return
        _state.reasons.append(f"{tier}: {reason}")
        _state.tier = TIERS[TIERS.index(tier) + 1]
        _state.verified_tier = None
        _state.trusted.discard(tier)
        for e in _cache.values():
            e.verified = False


# --- the tiers -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _hook_holder():
    # where this triton keeps the launch hooks: triton.knobs.runtime (3.4+) or CompiledKernel (older)
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return knobs.runtime
    from triton.compiler.compiler import CompiledKernel

    return CompiledKernel


def _hook_active(hook) -> bool:
    return bool(getattr(hook, "calls", hook))


def _current_stream() -> int:
    # torch's raw stream handle is what triton's own driver returns, at a fraction of the cost (the caller
    # has made the tensors' device current; _cuda_getDevice skips torch.cuda.current_device's lazy-init checks)
    return torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())


def _run_tier(compiled, grid, args) -> None:
    stream = _current_stream()
    holder = _hook_holder()
    enter, leave = holder.launch_enter_hook, holder.launch_exit_hook
    metadata = compiled.launch_metadata(grid, stream, *args) if _hook_active(enter) else None
    compiled.run(grid[0], grid[1], grid[2], stream, compiled.function, compiled.packed_metadata, metadata,
                 enter, leave, *args)


def _launch_tier(compiled, grid, args) -> None:
    launcher = compiled.run
    holder = _hook_holder()
    if (launcher.global_scratch_size or launcher.profile_scratch_size or _hook_active(holder.launch_enter_hook)
            or _hook_active(holder.launch_exit_hook)):
        _run_tier(compiled, grid, args)
        return
    launcher.launch(grid[0], grid[1], grid[2], _current_stream(), compiled.function, launcher.launch_cooperative_grid,
                    launcher.launch_pdl, None, None, compiled.packed_metadata, None, None, None, *args)


def _getitem_tier(compiled, grid, args) -> None:
    compiled[grid](*args)


_FAST = {"launch": _launch_tier, "run": _run_tier, "getitem": _getitem_tier}
