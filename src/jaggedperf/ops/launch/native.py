"""The native launch path: an eager jagged sum/mean, or its backward, in one C++ call (``native.cpp``).

The Python fast path plans each call, allocates with ``torch.empty`` and launches through Triton's
launcher: more host time before the kernel starts than the kernel takes on the device at the seed shapes.
The native module does the same work for a call it has a *plan* for, in C++: checks, output (and
workspace) allocation from the CUDA caching allocator, grids, parameter blocks, ``cuLaunchKernel``.

Plans. After the Python path has planned and launched a call (through a verified tier, ``tiers``),
``offer_plan`` registers the plan for the call's key: the compiled kernels' CUfunctions and launch configs,
their parameter lists read from the compiled signatures, and how to size the grid: one whole-segments
launch, or the balanced chunks' two launches (reduce, combine) with their fp32 workspace, the chunking
redone per call from the config (so one plan serves every N and B when there is no ``max_seqlen``). The
backward (``expand``: the (N, M) gradient of the values from the (B, M) one) registers its one launch the same
way, under a key of its own (``layout.Op``), when ``api.EagerReduce``'s backward has run it through the tiers.
The first plan of each set of compiled kernels is checked: its launches, into an output poisoned with
``verification.POISON_BYTE``, must match the Python path's output bitwise (one sync, once per set); a
mismatch or error turns the native path off for the process, with the reason in ``state()``. Only
calls with a registered plan take the native path; everything else (autograd, torch.compile, dispatch
modes, other devices, forced chunk sizes) stays in Python, and the path stands aside while a benchmark
forces a launch tier or overrides the config.

The module. Built with the C++ compiler torch's own extensions use (``CXX``, else ``c++``) against the
installed torch's headers and ``layout.header()``, into ``$JAGGEDPERF_CACHE`` (default
``~/.cache/jaggedperf``)/native/<hash of source, layout header, torch, Python and compiler>/, and written there atomically (a killed build leaves no lock behind).
``JAGGEDPERF_NATIVE``: ``auto`` (default) loads a built module and, on the first eligible CUDA call,
starts the build in a background thread (the Python path serves until it is ready); ``build`` builds
in the calling thread at that first call; ``0`` turns the path off. ``ensure()`` builds and loads now
(the CLI and the benchmarks call it before timing).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

from jaggedperf.ops import config
from jaggedperf.ops.launch import layout
from jaggedperf.ops.launch.layout import INTEGER_KINDS, POINTER_SOURCES, Kind, Source
from jaggedperf.ops.launch.plan import NativeKernel, NativePlan, Plan
from jaggedperf.ops.launch.tiers import compiled as compiled_kernel
from jaggedperf.ops.launch.verification import bitwise_equal, capturing, poison

SOURCE = Path(__file__).with_name("native.cpp")
MODULE_NAME = "jaggedperf_native"
BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class OfferedKernel:
    """One launch of a plan the Python path has just run, as the native path registers it."""

    compiled: object  # the triton CompiledKernel the fast tiers launched (None: not compiled, e.g. interpreted)
    arg_names: tuple  # the kernel's arguments, in order
    native: NativeKernel  # what fills its runtime arguments and how its grid is sized


@dataclass
class _State:
    status: str = "not loaded"  # not loaded | building | ready | off | failed | disabled
    reason: str = ""
    module: object = None
    paused: set = field(default_factory=set)  # why the path stands aside: a forced launch tier, a config override
    build_seconds: float | None = None
    verified_functions: set = field(default_factory=set)  # CUfunction tuples whose native launches matched
    registered: int = 0


_state = _State()
_lock = threading.Lock()
_thread: threading.Thread | None = None
active = None  # the module while the path is on (ready, not paused): the one thing the hot path reads


def _refresh() -> None:
    global active
    active = _state.module if _state.status == "ready" and not _state.paused else None  # an empty set: not paused


def state() -> dict:
    """Where the native path stands.

    Returns:
        status (not loaded | building | ready | off | failed | disabled), why it is off, what pauses it,
        build time, the module's file, plans registered / held, calls served (forward; backward), kernel sets
        verified.
    """
    module = _state.module
    return {"status": _state.status, "reason": _state.reason, "paused": sorted(_state.paused),
            "build_seconds": _state.build_seconds,
            "module": getattr(module, "__file__", None), "registered": _state.registered,
            "plans": module.size() if module is not None else 0,
            "served": module.served() if module is not None else 0,
            "served_backward": module.served_expand() if module is not None else 0,
            "verified_kernels": len(_state.verified_functions)}


def setting() -> str:
    """``JAGGEDPERF_NATIVE``, read now.

    Returns:
        ``"off"``, ``"build"`` or ``"auto"``.
    """
    value = os.environ.get("JAGGEDPERF_NATIVE", "auto").strip().lower()
    return "off" if value in ("0", "off", "false", "no") else ("build" if value == "build" else "auto")


# --- building and loading ---------------------------------------------------------------------


def compiler() -> str:
    """The C++ compiler command (``CXX``, else ``c++``).

    Returns:
        a command line, split by ``build_command``.
    """
    return os.environ.get("CXX", "c++")


def build_command(output: Path, layout_dir: Path) -> list[str]:
    """The compile-and-link command for the module (torch's headers and libraries, Python's headers).

    Args:
        output: where the linker writes the module.
        layout_dir: the folder holding ``layout.HEADER_NAME`` (written by ``build``).

    Returns:
        the command, as an argument list.
    """
    from torch.utils import cpp_extension

    includes = [str(layout_dir), *cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    libdirs = cpp_extension.library_paths()
    return [
        *shlex.split(compiler()), "-shared", "-fPIC", "-O2", "-std=c++17", "-w",
        f"-DTORCH_EXTENSION_NAME={MODULE_NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *(f"-I{p}" for p in includes), str(SOURCE), "-o", str(output),
        *(f"-L{p}" for p in libdirs), *(f"-Wl,-rpath,{p}" for p in libdirs),
        "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python", "-ldl",
    ]


def module_path() -> Path:
    """Where the module for this source, layout, torch, Python and compiler lives (built or not).

    Returns:
        the module's path under ``$JAGGEDPERF_CACHE``.
    """
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(layout.header().encode())
    digest.update(f"{torch.__version__}|{sys.version}|{compiler()}".encode())
    root = Path(os.environ.get("JAGGEDPERF_CACHE", Path.home() / ".cache" / "jaggedperf"))
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return root / "native" / digest.hexdigest()[:16] / f"{MODULE_NAME}{suffix}"


def build(path: Path | None = None) -> Path:
    """Compile the module into ``path``; atomic: a partial build never lands.

    Args:
        path: where to put it (default ``module_path()``).

    Returns:
        the path.

    Raises:
        RuntimeError: the compiler failed (its stderr's tail in the message); subprocess.TimeoutExpired.
    """
    path = path or module_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        partial = Path(tmp) / path.name
        (Path(tmp) / layout.HEADER_NAME).write_text(layout.header())
        done = subprocess.run(build_command(partial, Path(tmp)), capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"building {SOURCE.name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
        os.replace(partial, path)
    return path


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure() -> dict:
    """Build (if needed) and load the module now, in this thread. Never raises.

    Returns:
        ``state()``.
    """
    if setting() == "off":
        _off()
        return state()
    thread = _thread
    if thread is not None:
        thread.join()
    if _state.module is None and _state.status not in ("disabled",):
        _load_or_build()
    return state()


def _load_or_build() -> None:
    try:
        path = module_path()
        if not path.exists():
            _state.status = "building"
            started = time.perf_counter()
            build(path)
            _state.build_seconds = round(time.perf_counter() - started, 1)
        module = _import(path)
    except Exception as exc:  # noqa: BLE001 - no compiler, no headers, a failed build: the Python path stays
        with _lock:
            _state.status, _state.reason = "failed", f"{type(exc).__name__}: {exc}"
            _refresh()
        return
    with _lock:
        _state.module = module
        if _state.status != "disabled":
            _state.status = "ready"
        _refresh()


def _off() -> None:
    with _lock:
        _state.status, _state.reason = "off", "JAGGEDPERF_NATIVE=0"
        _refresh()


def _start() -> None:
    # the first eligible CUDA call: load a built module now; else build (in the background unless asked)
    global _thread
    with _lock:
        if _state.status != "not loaded":
            return
        mode = setting()
        if mode != "off":
            _state.status = "building"
    if mode == "off":
        _off()
        return
    if mode == "build" or module_path().exists():
        _load_or_build()
        return
    _thread = threading.Thread(target=_load_or_build, name="jaggedperf-native-build", daemon=True)
    _thread.start()


# --- the fast call and its plans ---------------------------------------------------------------


def offering() -> bool:
    """Whether the Python path should offer its plans.

    Returns:
        True while the path is on, or not yet loaded (the first offer starts loading it).
    """
    return _state.status in ("not loaded", "ready") and not _state.paused


def pause(reason: str, paused: bool) -> None:
    """Stand aside (``paused``) or come back, for ``reason``: a benchmark timing a forced launch tier
    (``jaggedperf.ops.launch.force_tier``), a config override (``config.set_override``: plans would run the
    old config).

    Args:
        reason: why; the path comes back once no reason is left.
        paused: True to stand aside for ``reason``, False to drop it.
    """
    with _lock:
        (_state.paused.add if paused else _state.paused.discard)(reason)
        _refresh()


def disable(reason: str) -> None:
    """Turn the native path off for this process (a failed check).

    Args:
        reason: shown in ``state()``.
    """
    with _lock:
        _state.status, _state.reason = "disabled", reason
        _refresh()


def reset() -> None:
    """Forget plans and verdicts and re-enable a disabled path; keep a loaded module (tests)."""
    with _lock:
        if _state.module is not None:
            _state.module.forget()
        _state.verified_functions.clear()
        _state.registered = 0
        if _state.status == "disabled":
            _state.status, _state.reason = ("ready", "") if _state.module is not None else ("not loaded", "")
        _refresh()


def parameters(compiled, arg_names, sources: tuple[Source, ...]) -> list[tuple[int, int]] | None:
    """The (Source, Kind) list of a compiled kernel's launch parameters, or None when it cannot be served.

    Triton's launcher passes every non-constexpr argument, then the global and profile scratch pointers
    (null here: the kernel must need no scratch).

    Args:
        compiled: the triton CompiledKernel (its ``src.signature`` and ``metadata`` are read).
        arg_names: the kernel's arguments in order.
        sources: what fills the first of them (the rest must be constexprs).

    Returns:
        (source, kind) int pairs in the kernel's parameter order, scratch pointers included; None when
        the launcher would do something this path does not (clusters, cooperative or PDL launches,
        scratch, tensor descriptors, a type or argument it cannot fill).
    """
    metadata = compiled.metadata
    if (getattr(metadata, "num_ctas", 1) != 1 or getattr(metadata, "launch_cooperative_grid", False)
            or getattr(metadata, "launch_pdl", False) or getattr(metadata, "global_scratch_size", 0)
            or getattr(metadata, "profile_scratch_size", 0) or getattr(metadata, "tensordesc_meta", None)):
        return None
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(signature, dict):
        return None
    params = []
    for position, name in enumerate(arg_names):
        kind = signature.get(name, signature.get(position))
        if kind == "constexpr":
            continue
        if position >= len(sources) or not isinstance(kind, str):
            return None
        source = sources[position]
        if kind.startswith("*") and source in POINTER_SOURCES:
            params.append((int(source), int(Kind.POINTER)))
        elif kind in INTEGER_KINDS and source not in POINTER_SOURCES and source != Source.NULL_POINTER:
            params.append((int(source), int(INTEGER_KINDS[kind])))
        else:
            return None
    null = (int(Source.NULL_POINTER), int(Kind.POINTER))
    return [*params, null, null]


def offer_plan(plan: Plan, key_extra: tuple, values, offsets, max_seqlen, mean: bool, empty_zero: bool,
               n_rows: int | None = None) -> None:
    """Offer the plan of a call the Python path has just launched through the fast tiers (``offer``).

    Args:
        plan: the call's Plan (its launches have run; ``plan.out`` holds the result).
        key_extra: the call's ``tiers.eager_key``, under which the tiers cached the compiled kernels.
        values, offsets, max_seqlen, mean, empty_zero: the call (a NestedTensor's call offers the plain one);
            for a backward, values is the (B, M) gradient and empty_zero False.
        n_rows: None for a reduction; for a backward, the rows of its output.
    """
    native_plan = plan.native_plan()
    if native_plan is None or (type(max_seqlen) is not int and max_seqlen is not None) or type(native_plan.grid_z) \
            is not int:
        return
    kernels = [OfferedKernel(compiled_kernel((step.key, step.num_warps, key_extra)), step.kernel.arg_names, step.native)
               for step in plan.launches]
    offer(values, offsets, max_seqlen, mean, empty_zero, native_plan, kernels, plan.out, n_rows)


def offer(values, offsets, max_seqlen, mean: bool, empty_zero: bool, plan: NativePlan, kernels: list[OfferedKernel],
          out, n_rows: int | None = None) -> None:
    """Register the plan of a call the Python path has just served into ``out``, checking it first if its
    compiled kernels have not been checked together. Never raises; a failed check disables the path.

    Args:
        values, offsets, max_seqlen, mean, empty_zero: the call.
        plan: how the native module sizes the grids per call.
        kernels: the plan's launches, in order.
        out: the Python path's output for this call (the check's expected bytes).
        n_rows: None for a reduction; for a backward (values: its gradient), the rows of its output.
    """
    if _state.status == "not loaded":
        _start()
    native = active
    if native is None:
        return
    key = native.key(values, offsets, -1 if max_seqlen is None else max_seqlen, mean, empty_zero,
                     -1 if n_rows is None else n_rows)
    if key is None or native.has(key) or capturing():
        return
    specs = []
    for kernel in kernels:
        compiled = kernel.compiled
        if compiled is None or getattr(compiled, "function", None) is None or kernel.native is None:
            return
        params = parameters(compiled, kernel.arg_names, kernel.native.sources)
        if params is None:
            return
        specs.append((int(compiled.function), int(compiled.metadata.num_warps), int(compiled.metadata.shared),
                      int(kernel.native.grid), params))
    functions = tuple(spec[0] for spec in specs)
    try:
        register(native, key, values.get_device(), plan, specs)
        _state.registered += 1
        if functions in _state.verified_functions:
            return
        if out.numel() == 0:
            native.forget()  # nothing written, nothing proven: check again on a call that writes
            return
        trial = torch.empty_like(out)
        poison((trial,))
        native.launch(key, values, offsets, trial)
        same = bitwise_equal(trial, out)
    except Exception as exc:  # noqa: BLE001
        _fail(native, f"{type(exc).__name__}: {exc}")
        return
    if not same:
        _fail(native, "output differs from the Python path's launch")
        return
    _state.verified_functions.add(functions)


def register(module, key: list[int], device: int, plan: NativePlan, specs: list[tuple]) -> None:
    """Register ``plan`` for ``key`` in the built ``module`` (its fields pass by name: a field the module does
    not know raises TypeError).

    Args:
        module: the built native module.
        key: ``module.key(...)`` of the call.
        device: the CUDA device index of the call's tensors.
        plan: the grid sizing.
        specs: per kernel, (CUfunction, num_warps, shared bytes, GridKind, [(Source, Kind), ...]).

    Raises:
        ValueError: a plan or spec the module refuses; TypeError: a NativePlan field it does not take.
    """
    module.register(key, device, kernels=specs, **dataclasses.asdict(plan))


def _fail(native, reason: str) -> None:
    native.forget()
    disable(reason)


# plans run the configs they were registered with: while a config override is set, the path stands aside
config.watch_override(lambda active: pause("config override", active))
