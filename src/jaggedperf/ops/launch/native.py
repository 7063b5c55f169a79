"""The native launch path: an eager jagged sum/mean in one C++ call (``native.cpp``).

The Python fast path plans each call, allocates with ``torch.empty`` and launches through Triton's
launcher: ≈15 µs of host time before a 6-10 µs kernel starts at the seed shapes (host_probe, run 29).
The native module does the same work for a call it has a *plan* for, in C++: checks, output (and
workspace) allocation from the CUDA caching allocator, grids, parameter blocks, ``cuLaunchKernel``.

Plans. After the Python path has planned and launched a call (through a verified tier, ``tiers``),
``offer`` registers the plan for the call's key: the compiled kernels' CUfunctions and launch configs,
their parameter lists read from the compiled signatures, and how to size the grid: one whole-segments
launch, or the balanced chunks' two launches (reduce, combine) with their fp32 workspace, the chunking
redone per call from the config (so one plan serves every N and B when there is no ``max_seqlen``).
The first plan of each set of compiled kernels is checked: its launches, into an output poisoned with
``verification.POISON_BYTE``, must match the Python path's output bitwise (one sync, once per set); a
mismatch or error turns the native path off for the process, with the reason in ``state()``. Only
calls with a registered plan take the native path; everything else (autograd, torch.compile, dispatch
modes, other devices, forced chunk sizes) stays in Python, and the path stands aside while a benchmark
forces a launch tier or overrides the config.

The module. Built with the C++ compiler torch's own extensions use (``CXX``, else ``c++``) against the
installed torch's headers, into ``$JAGGEDPERF_CACHE`` (default ``~/.cache/jaggedperf``)/native/<hash of
source, torch, Python and flags>/, and written there atomically (a killed build leaves no lock behind).
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
from dataclasses import dataclass, field
from pathlib import Path

import torch

from jaggedperf.ops import config
from jaggedperf.ops.launch.verification import bitwise_equal, capturing, poison

SOURCE = Path(__file__).with_name("native.cpp")
MODULE_NAME = "jaggedperf_native"
BUILD_TIMEOUT_S = 600
# native.cpp's parameter sources (its Source enum, in order), which of them are pointers, and int kinds
SOURCES = ("values", "offsets", "out", "n_rows", "n_cols", "n_segments", "null", "workspace", "rows_per_chunk",
           "n_chunks")
POINTER_SOURCES = ("values", "offsets", "out", "workspace")
KINDS = {"i32": 1, "i64": 2}
GRIDS = {"segments": 0, "chunks": 1}


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
    """Where the native path stands: status, why it is off, build time, plans registered."""
    return {"status": _state.status, "reason": _state.reason, "paused": sorted(_state.paused),
            "build_seconds": _state.build_seconds,
            "module": getattr(_state.module, "__file__", None), "registered": _state.registered,
            "plans": _state.module.size() if _state.module is not None else 0,
            "served": _state.module.served() if _state.module is not None else 0,
            "verified_kernels": len(_state.verified_functions)}


def setting() -> str:
    value = os.environ.get("JAGGEDPERF_NATIVE", "auto").strip().lower()
    return "off" if value in ("0", "off", "false", "no") else ("build" if value == "build" else "auto")


# --- building and loading ---------------------------------------------------------------------


def compiler() -> str:
    return os.environ.get("CXX", "c++")


def build_command(output: Path) -> list[str]:
    """The compile-and-link command for the module (torch's headers and libraries, Python's headers)."""
    from torch.utils import cpp_extension

    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
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
    """Where the module for this source, torch and Python lives (built or not)."""
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(f"{torch.__version__}|{sys.version}|{compiler()}".encode())
    root = Path(os.environ.get("JAGGEDPERF_CACHE", Path.home() / ".cache" / "jaggedperf"))
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return root / "native" / digest.hexdigest()[:16] / f"{MODULE_NAME}{suffix}"


def build(path: Path | None = None) -> Path:
    """Compile the module into ``path`` (default ``module_path()``); atomic: a partial build never lands."""
    path = path or module_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        partial = Path(tmp) / path.name
        done = subprocess.run(build_command(partial), capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
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
    """Build (if needed) and load the module now, in this thread; returns ``state()``. Never raises."""
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
    """Whether the Python path should offer its plans (the path is on, or not yet loaded)."""
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
    """Turn the native path off for this process (a failed check)."""
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


def parameters(compiled, arg_names, sources: tuple) -> list[tuple[int, int]] | None:
    """The (source, kind) list of a compiled kernel's launch parameters, or None when it cannot be served.

    ``arg_names``: the kernel's arguments in order; ``sources``: what fills the first ones (names from
    SOURCES; the rest must be constexprs). Triton's launcher passes every non-constexpr argument, then
    the global and profile scratch pointers (null here: the kernel must need no scratch).
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
            params.append((SOURCES.index(source), 0))
        elif kind in KINDS and source in SOURCES and source not in POINTER_SOURCES + ("null",):
            params.append((SOURCES.index(source), KINDS[kind]))
        else:
            return None
    null = SOURCES.index("null")
    return [*params, (null, 0), (null, 0)]


def offer(values, offsets, max_seqlen, mean: bool, empty_zero: bool, plan: dict, kernels: list[dict], out) -> None:
    """Register the plan of a call the Python path has just served into ``out``, checking it first if its
    compiled kernels have not been checked together. ``plan``: block_m, group, programs, chunk_programs,
    block_l, min_chunk_rows; ``kernels``: per launch, in order, compiled, arg_names, sources, grid
    ("segments" or "chunks"). Never raises; a failed check disables the path."""
    if _state.status == "not loaded":
        _start()
    native = active
    if native is None:
        return
    key = native.key(values, offsets, -1 if max_seqlen is None else max_seqlen, mean, empty_zero)
    if key is None or native.has(key) or capturing():
        return
    specs = []
    for kernel in kernels:
        compiled = kernel["compiled"]
        if compiled is None or getattr(compiled, "function", None) is None:
            return
        params = parameters(compiled, kernel["arg_names"], kernel["sources"])
        if params is None:
            return
        specs.append((int(compiled.function), int(compiled.metadata.num_warps), int(compiled.metadata.shared),
                      GRIDS[kernel["grid"]], params))
    functions = tuple(spec[0] for spec in specs)
    try:
        native.register(key, values.get_device(), plan["block_m"], plan["group"], plan["programs"],
                        plan["chunk_programs"], plan["block_l"], plan["min_chunk_rows"], specs)
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


def _fail(native, reason: str) -> None:
    native.forget()
    disable(reason)


# plans run the configs they were registered with: while a config override is set, the path stands aside
config.watch_override(lambda active: pause("config override", active))
