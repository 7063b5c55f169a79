"""The Ray back end on a local Ray cluster on the CPU (2 CPUs, 2 actors): a small grid, a killed actor, a lost
node, a resume; and the one clear error without Ray. Skipped where Ray is not installed (the error test runs
everywhere). Starting the cluster takes ~10 s and each actor imports torch, so the tests share one cluster."""

import builtins
import importlib.util
import os
import platform
from pathlib import Path

import pytest
import torch

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


@pytest.fixture(scope="module")
def cluster():
    from jaggedperf.lab.sweep import ray_backend

    # The actors import the test plugin by name: the workers Ray starts inherit this PYTHONPATH.
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests"), *([old] if old else [])])
    try:
        with ray_backend.connect(num_cpus=2) as c:
            yield c
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


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
def test_a_killed_actor_loses_its_cell_in_flight_the_rest_finish_and_a_retry_finishes_it(tmp_path, cluster,
                                                                                          sweep_plugin):
    import ray

    from jaggedperf.lab.sweep import ray_backend

    import_plugins([sweep_plugin])
    from helpers.sweep_plugin import SLOW

    out = tmp_path / "r.jsonl"
    slots = ray_backend.ray_slots(cluster, "cpu", workers=2)
    p = plan(out, [C1, C2], ["segment_reduce", SLOW, "sum_padded"])
    backend, killed, notes = _Recording(), [], []

    def on_start(worker, cell):
        if cell is not None and cell.implementation == SLOW and cell.case == C1 and not killed:
            killed.append(worker)
            ray.kill(backend.handles[worker].actor, no_restart=True)  # as a crash would, mid-unit

    sweep.run_sweep(p, slots, OPTIONS, sweep.Settings(plugins=(sweep_plugin,)), backend=backend, on_start=on_start,
                    on_note=notes.append)
    by_key = {(r.implementation, r.case): r for r in store.load_results(out).results}
    assert len(by_key) == 6 and killed
    assert (by_key[SLOW, C1].status, by_key[SLOW, C1].reason) == (ERROR, "worker died (exit code unknown)")
    assert by_key["sum_padded", C1].status == OK  # the rest of its unit was requeued and ran on a fresh actor
    assert all(r.status == OK for k, r in by_key.items() if k != (SLOW, C1))
    assert any("worker died" in n for n in notes)

    retry = plan(out, [C1, C2], ["segment_reduce", SLOW, "sum_padded"], retry_failed=True)
    assert [(c.implementation, c.case) for u in retry.units for c in u] == [(SLOW, C1)]
    sweep.run_sweep(retry, slots[:1], OPTIONS, sweep.Settings(plugins=(sweep_plugin,)),
                    backend=ray_backend.RayActors(cpus_per_worker=1.0))
    latest = {(r.implementation, r.case): r for r in store.load_results(out).results}
    assert latest[SLOW, C1].status == OK and latest[SLOW, C1].extra["retry"]["reason"].startswith("worker died")


@needs_ray
def test_an_actor_lost_with_its_node_has_its_cells_in_flight_requeued_not_recorded(tmp_path, cluster, sweep_plugin,
                                                                                     monkeypatch):
    import ray

    from jaggedperf.lab.sweep import ray_backend

    import_plugins([sweep_plugin])
    from helpers.sweep_plugin import SLOW

    # A node that leaves is seen as its actors' deaths with the node no longer alive; here the actor is killed
    # and the node's departure simulated on that one handle (a second node cannot be taken away on 2 cores).
    gone = []
    monkeypatch.setattr(ray_backend.RayWorker, "lost", lambda self: self in gone)
    out = tmp_path / "r.jsonl"
    p = plan(out, [C1, C2], ["segment_reduce", SLOW, "sum_padded"])
    backend, notes = _Recording(), []

    def on_start(worker, cell):
        if cell is not None and cell.implementation == SLOW and cell.case == C1 and not gone:
            gone.append(backend.handles[worker])
            ray.kill(backend.handles[worker].actor, no_restart=True)

    sweep.run_sweep(p, ray_backend.ray_slots(cluster, "cpu", workers=2), OPTIONS,
                    sweep.Settings(plugins=(sweep_plugin,)), backend=backend, on_start=on_start, on_note=notes.append)
    results = store.load_results(out).results
    assert gone and len(results) == 6 and {r.status for r in results} == {OK}  # the cell in flight ran elsewhere
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
