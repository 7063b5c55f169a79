"""The Ray back end on a local Ray cluster on the CPU (2 CPUs, 2 actors): a small grid, a killed actor, a lost
node, a resume; and the one clear error without Ray. Skipped where Ray is not installed (the error test runs
everywhere). Starting the cluster takes ~10 s and each actor imports torch, so the tests share one cluster.

``ray.kill`` lands asynchronously: an actor killed mid-cell can still finish that cell and have its result
returned by the poll already outstanding. The tests that kill an actor therefore kill it in a cell that cannot
end before the test opens its gate (``GATED``, from a plugin written beside the cluster), and open the gate only
once the sweep has seen the death, so that the cell in flight is the same one on every run."""

import builtins
import importlib.util
import os
import platform
import sys
from pathlib import Path

import pytest
import torch

from jaggedperf.impls.registry import get_op
from jaggedperf.inputs import Case
from jaggedperf.lab import runner, sweep
from jaggedperf.lab.plugins import import_plugins
from jaggedperf.lab.result import ERROR, OK
from jaggedperf.lab.results import store

HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="needs ray (pip install 'jaggedperf[ray]')")
ROOT = Path(__file__).resolve().parents[2]
OPTIONS = runner.Options(device=torch.device("cpu"), warmup=1, iters=2)
C1, C2, C3 = Case(8, 3, 20, 0.5), Case(6, 2, 10, 0.3), Case(5, 2, 12, 0.4)

GATE_PLUGIN, GATED = "ray_gate_plugin", "test_gated"
GATED_TIMEOUT_S = 120.0  # per cell where GATED runs: a gate left shut fails the test as a timed-out cell, not a hang
# The plugin with GATED: segment_reduce, started only while no process holds an exclusive lock on the file
# ``gate`` beside it (each call takes a shared lock first, so it blocks while the test holds the gate shut).
GATE_PLUGIN_SOURCE = f'''"""{GATED}: segment_reduce once the test's gate (the file ``gate`` here) is open."""

import fcntl
from pathlib import Path

from jaggedperf.impls.jagged_mean import segment_reduce
from jaggedperf.impls.registry import implementation

GATE = Path(__file__).with_name("gate")


@implementation("jagged_mean", {GATED!r}, takes="dense", description="test: segment_reduce once the gate opens")
def gated(values, offsets):
    with GATE.open("rb") as gate:
        fcntl.flock(gate, fcntl.LOCK_SH)  # blocks while the test holds LOCK_EX; released on close
    return segment_reduce(values, offsets)
'''


@pytest.fixture(scope="module")
def gate_dir(tmp_path_factory):
    """A folder holding the gate plugin and its gate file, on the actors' path (see ``cluster``)."""
    folder = tmp_path_factory.mktemp("ray_gate")
    (folder / f"{GATE_PLUGIN}.py").write_text(GATE_PLUGIN_SOURCE)
    (folder / "gate").touch()
    return folder


@pytest.fixture(scope="module")
def cluster(gate_dir):
    from jaggedperf.lab.sweep import ray_backend

    # The actors import the test plugins by name: the workers Ray starts inherit this PYTHONPATH (fixed when the
    # cluster starts, hence the gate plugin's folder is on it from the start).
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"), str(gate_dir),
                                                *([old] if old else [])])
    try:
        with ray_backend.connect(num_cpus=2) as c:
            yield c
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


class _Gate:
    """Holds every ``GATED`` cell on this host until ``open``: until then this process holds an exclusive
    lock on the gate file, which each gated call must share before it computes."""

    def __init__(self, path: Path):
        import fcntl

        self._file = path.open("rb")
        fcntl.flock(self._file, fcntl.LOCK_EX)

    def open(self) -> None:
        self._file.close()  # closing the file drops the lock; idempotent


@pytest.fixture
def gate(gate_dir, monkeypatch):
    """The gate, shut; ``GATED`` registered here as the sweep's plugin ``GATE_PLUGIN`` (taken out again after the
    test, and the gate opened, so that no actor stays blocked and no other test meets ``GATED``)."""
    monkeypatch.syspath_prepend(str(gate_dir))
    shut = _Gate(gate_dir / "gate")
    try:
        import_plugins([GATE_PLUGIN])
        yield shut
    finally:
        shut.open()
        sys.modules.pop(GATE_PLUGIN, None)
        get_op("jagged_mean").implementations.pop(GATED, None)


class _Recording:
    """The Ray back end, keeping each slot's latest handle so that a test can kill its actor."""

    def __init__(self):
        from jaggedperf.lab.sweep import ray_backend

        self.inner = ray_backend.RayActors(cpus_per_worker=1.0)
        self.handles = {}

    def start(self, slot, options, plugins, log_path):
        self.handles[slot.name] = self.inner.start(slot, options, plugins, log_path)
        return self.handles[slot.name]

    def wait(self, handles, timeout):
        self.inner.wait(handles, timeout)


def plan(out, cases, impls, **kwargs):
    return sweep.plan_sweep(out, "jagged_mean", cases, impls, ["eager"], byte_limit=runner.DEFAULT_BYTE_LIMIT,
                            device="cpu", **kwargs)


@needs_ray
def test_a_grid_on_two_actors_records_where_each_cell_ran_and_a_rerun_resumes(tmp_path, cluster):
    from jaggedperf.lab.sweep import ray_backend

    slots = ray_backend.ray_slots(cluster, "cpu", workers=2)
    assert [s.name for s in slots] == ["ray:cpu0", "ray:cpu1"]
    out = tmp_path / "r.jsonl"
    p = plan(out, [C1, C2], ["segment_reduce", "sum_padded"])
    outcome = sweep.run_sweep(p, slots, OPTIONS, sweep.Settings(log_path=str(tmp_path / "w.log")),
                              backend=ray_backend.RayActors(cpus_per_worker=1.0))
    record, warnings = store.read_results(out)
    assert warnings == [] and len(record.results) == 4 and {r.status for r in record.results} == {OK}
    assert {r.extra["worker"] for r in record.results} == {"ray:cpu0", "ray:cpu1"}  # both actors took a case
    assert {(r.extra["host"], r.extra["torch"]) for r in record.results} == {(platform.node(), torch.__version__)}
    assert "gpu" not in record.results[0].extra  # on the CPU: no GPU name
    assert [w["name"] for w in outcome.environment["workers"]] == ["ray:cpu0", "ray:cpu1"]
    assert all(w["ray_node"] for w in outcome.environment["workers"])
    assert "worker ray:cpu" in (tmp_path / "w.log").read_text()  # the actors' output went to the sweep's log

    more = plan(out, [C1, C2, C3], ["segment_reduce", "sum_padded"])  # the same file, a case more: only it runs
    assert (more.done, more.to_run) == (4, 2)
    again = sweep.run_sweep(more, slots, OPTIONS, backend=ray_backend.RayActors(cpus_per_worker=1.0))
    assert [(r.case, r.status) for r in again.results] == [(C3, OK), (C3, OK)]
    assert len(store.load_results(out).results) == 6


@needs_ray
def test_a_killed_actor_loses_its_cell_in_flight_the_rest_finish_and_a_retry_finishes_it(tmp_path, cluster, gate):
    import ray

    from jaggedperf.lab.sweep import ray_backend

    out = tmp_path / "r.jsonl"
    slots = ray_backend.ray_slots(cluster, "cpu", workers=2)
    p = plan(out, [C1, C2], ["segment_reduce", GATED, "sum_padded"])
    backend, killed, notes = _Recording(), [], []

    def on_start(worker, cell):
        # GATED on C1 is in flight (its actor runs it now or next) and cannot end while the gate is shut: the
        # kill lands mid-cell on every run.
        if cell is not None and cell.implementation == GATED and cell.case == C1 and not killed:
            killed.append(worker)
            ray.kill(backend.handles[worker].actor, no_restart=True)  # as a crash would, mid-unit

    def on_note(note):
        notes.append(note)
        # The sweep has seen the death (whatever it made of it): nothing the killed actor says is heard now.
        if killed and note.startswith(f"{killed[0]}: "):
            gate.open()

    sweep.run_sweep(p, slots, OPTIONS, sweep.Settings(plugins=(GATE_PLUGIN,), timeout_s=GATED_TIMEOUT_S),
                    backend=backend, on_start=on_start, on_note=on_note)
    by_key = {(r.implementation, r.case): r for r in store.load_results(out).results}
    assert len(by_key) == 6 and killed
    assert (by_key[GATED, C1].status, by_key[GATED, C1].reason) == (ERROR, "worker died (exit code unknown)")
    assert by_key["sum_padded", C1].status == OK  # the rest of its unit was requeued and ran on a fresh actor
    assert all(r.status == OK for k, r in by_key.items() if k != (GATED, C1))
    assert any("worker died" in n for n in notes)

    retry = plan(out, [C1, C2], ["segment_reduce", GATED, "sum_padded"], retry_failed=True)
    assert [(c.implementation, c.case) for u in retry.units for c in u] == [(GATED, C1)]
    sweep.run_sweep(retry, slots[:1], OPTIONS, sweep.Settings(plugins=(GATE_PLUGIN,), timeout_s=GATED_TIMEOUT_S),
                    backend=ray_backend.RayActors(cpus_per_worker=1.0))
    latest = {(r.implementation, r.case): r for r in store.load_results(out).results}
    assert latest[GATED, C1].status == OK and latest[GATED, C1].extra["retry"]["reason"].startswith("worker died")


@needs_ray
def test_an_actor_lost_with_its_node_has_its_cells_in_flight_requeued_not_recorded(tmp_path, cluster, gate,
                                                                                     monkeypatch):
    import ray

    from jaggedperf.lab.sweep import ray_backend

    # A node that leaves is seen as its actors' deaths with the node no longer alive; here the actor is killed
    # and the node's departure simulated on that one handle (a second node cannot be taken away on 2 cores).
    gone = {}  # slot: the handle of the actor killed on it
    monkeypatch.setattr(ray_backend.RayWorker, "lost", lambda self: self in gone.values())
    out = tmp_path / "r.jsonl"
    impls = ["segment_reduce", GATED, "sum_padded"]
    p = plan(out, [C1, C2], impls)
    backend, notes = _Recording(), []

    def on_start(worker, cell):
        # GATED on C1 is in flight (its actor runs it now or next) and cannot end while the gate is shut, so
        # when the death is seen the unit's last two cells (GATED, sum_padded) are in flight with no result sent,
        # on every run.
        if cell is not None and cell.implementation == GATED and cell.case == C1 and not gone:
            gone[worker] = backend.handles[worker]
            ray.kill(gone[worker].actor, no_restart=True)

    def on_note(note):
        notes.append(note)
        # The sweep has seen the death (whatever it made of it): nothing the lost actor says is heard now.
        if any(note.startswith(f"{slot}: ") for slot in gone):
            gate.open()

    sweep.run_sweep(p, ray_backend.ray_slots(cluster, "cpu", workers=2), OPTIONS,
                    sweep.Settings(plugins=(GATE_PLUGIN,), timeout_s=GATED_TIMEOUT_S), backend=backend,
                    on_start=on_start, on_note=on_note)
    results = store.load_results(out).results
    assert gone and len(results) == 6 and {r.status for r in results} == {OK}  # the cells in flight ran elsewhere
    assert {(r.implementation, r.case) for r in results} == {(i, c) for i in impls for c in (C1, C2)}  # each once
    assert any("machine was lost with 2 cells in flight; requeued" in n for n in notes)


@needs_ray
def test_sweep_cli_with_ray_runs_on_the_cluster(tmp_path, cluster, capsys):
    from jaggedperf.cli import main

    out = tmp_path / "r.jsonl"
    args = ["sweep", "--out", str(out), "--B", "4", "--M", "2", "--seqlen", "10", "20", "--sparsity", "0.5",
            "--impls", "segment_reduce", "--modes", "eager", "--warmup", "1", "--iters", "2", "--device", "cpu",
            "--ray", "--ray-workers", "2"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "2 worker(s)" in captured.err and "2 cells written (2 ok" in captured.out
    assert {r.extra["worker"] for r in store.load_results(out).results} <= {"ray:cpu0", "ray:cpu1"}


def test_without_ray_the_engine_is_unchanged_and_ray_gives_one_clear_error(tmp_path, monkeypatch, capsys):
    from jaggedperf.cli import main
    from jaggedperf.lab.sweep import ray_backend

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ray_backend.RayUnavailable, match=r"pip install 'jaggedperf\[ray\]'"):
        ray_backend.import_ray()
    out = tmp_path / "r.jsonl"
    assert main(["sweep", "--out", str(out), "--B", "4", "--M", "2", "--seqlen", "10", "--sparsity", "0.5",
                 "--impls", "segment_reduce", "--modes", "eager", "--device", "cpu", "--ray"]) == 2
    err = capsys.readouterr().err
    assert "--ray needs Ray" in err and "jaggedperf[ray]" in err and err.count("error") == 1
    assert not out.exists()
