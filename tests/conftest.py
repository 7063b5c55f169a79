import functools
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


# scripts/test.sh with 2+ cores and pytest-xdist runs the suite in two passes: everything but the serial tests
# in parallel (pytest-xdist), then the serial ones alone: those that assert on measured time (no other test may
# share the GPU or the cores while they measure) and those that need much of the GPU's memory (ten workers'
# tensors beside them leave too little: out of memory on a 140 GB H200). JAGGEDPERF_TIMED_TESTS=defer | only
# selects a pass.
TIMED_TESTS = os.environ.get("JAGGEDPERF_TIMED_TESTS", "")
# scripts/test.sh names a file here: the parallel pass writes into it the test files that hold the serial tests it left
# out, and the serial pass collects only those (collecting every file took ~20 s of the H200's serial pass).
SERIAL_FILES = os.environ.get("JAGGEDPERF_SERIAL_FILES", "")
_SERIAL_HEADER = "# the test files that hold serial tests\n"


def _share_the_cores() -> None:
    """On the GPU machine's parallel pass, each xdist worker takes its share of the cores for torch's CPU threads (and
    its subprocesses', through OMP_NUM_THREADS): a CPU float64 reference run with every core in each of the workers
    oversubscribes them (3.1 M rows of softmax took 9.6 s with 16 threads a worker against 0.8 s with one)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not HAS_CUDA or workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    share = max(1, (os.cpu_count() or 1) // workers)
    os.environ["OMP_NUM_THREADS"] = str(share)
    torch.set_num_threads(share)


_share_the_cores()


def _check_interpreted_kernels() -> None:
    """Under TRITON_INTERPRET=1 every unmasked load and store of every kernel the tests run must lie inside a tensor
    argument of its launch (``helpers.bounds``): the interpreter reads host memory where a GPU would fault. Each xdist
    worker imports this conftest, so each checks its own launches; subprocesses check their own where they call it."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        from helpers import bounds

        bounds.check_bounds()


_check_interpreted_kernels()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # Each pass writes its own --junitxml (NAME.untimed.xml, NAME.timed.xml): the second would overwrite the first.
    xmlpath = getattr(config.option, "xmlpath", None)
    if TIMED_TESTS in ("defer", "only") and xmlpath:
        root, ext = os.path.splitext(xmlpath)
        config.option.xmlpath = f"{root}.{'timed' if TIMED_TESTS == 'only' else 'untimed'}{ext}"


def _serial(item) -> bool:
    # by its marks, not its keywords: a parameter's id is a keyword too (the kernel bars' shape class "bars")
    return any(item.get_closest_marker(name) is not None for name in ("bars", "timed", "memory"))


def _write_serial_files(serial_items) -> None:
    """The files of ``serial_items`` into ``SERIAL_FILES``, whole (each xdist worker writes the same list)."""
    text = _SERIAL_HEADER + "".join(f"{path}\n" for path in sorted({str(item.path) for item in serial_items}))
    partial = f"{SERIAL_FILES}.{os.getpid()}"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, SERIAL_FILES)


@functools.cache
def _serial_files() -> frozenset | None:
    """The files the parallel pass listed, or None where it listed none (the serial pass run on its own)."""
    try:
        with open(SERIAL_FILES) as f:
            text = f.read()
    except OSError:
        return None
    return frozenset(text.splitlines()[1:]) if text.startswith(_SERIAL_HEADER) else None


def pytest_ignore_collect(collection_path, config):
    if TIMED_TESTS != "only" or not SERIAL_FILES or not collection_path.name.startswith("test_") \
            or collection_path.suffix != ".py":
        return None
    listed = _serial_files()
    return None if listed is None or str(collection_path) in listed else True


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs: the order is of what runs
def pytest_collection_modifyitems(config, items):
    if TIMED_TESTS in ("defer", "only"):
        keep_timed = TIMED_TESTS == "only"
        kept = [item for item in items if _serial(item) == keep_timed]
        dropped = [item for item in items if _serial(item) != keep_timed]
        if TIMED_TESTS == "defer" and SERIAL_FILES:
            _write_serial_files(dropped)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
        if TIMED_TESTS == "defer" and workers >= 2:  # the parallel pass: its longest tests first (helpers/schedule.py)
            from helpers.schedule import longest_first

            items[:] = longest_first(items, workers)
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch):
    # Tests never depend on a user's validation switch.
    monkeypatch.delenv("JAGGEDPERF_VALIDATE", raising=False)
    yield


def interpret_mode() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


@pytest.fixture
def sweep_plugin():
    """The module name of the sweep's test plugin (misbehaving implementations). It registers them in this
    process when imported (by the sweep); they are taken out again after the test, so that no other test
    meets an implementation that hangs."""
    import sys

    yield "helpers.sweep_plugin"
    module = sys.modules.pop("helpers.sweep_plugin", None)
    if module is not None:
        module.unregister()
