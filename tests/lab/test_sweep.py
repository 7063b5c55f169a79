"""The sweep's scheduler and workers, on the CPU. Worker processes import torch (seconds each), so each
test starts few; GPUs are simulated by CPU slots that carry their own CUDA_VISIBLE_DEVICES."""

import json
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.isolated import hold_in_another_process
import torch

from jaggedperf.inputs import Case
from jaggedperf.lab import runner, sweep
from jaggedperf.lab.results import store
from jaggedperf.lab.sweep import worker
from jaggedperf.lab.plugins import import_plugins, plugin_names
from jaggedperf.lab.result import ERROR, OK, SKIPPED, TIMED, Result, WallStats

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = runner.Options(device=torch.device("cpu"), warmup=1, iters=2)
CPU = [sweep.WorkerSlot("cpu", "cpu")]
C1, C2 = Case(8, 3, 20, 0.5), Case(6, 2, 10, 0.3)


def plan(out, cases, impls, modes, byte_limit=runner.DEFAULT_BYTE_LIMIT):
    return sweep.plan_sweep(out, "jagged_mean", cases, impls, modes, byte_limit=byte_limit, device="cpu")


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# --- slots and planning (no workers) --------------------------------------------------------------


def test_one_slot_per_gpu_each_seeing_only_its_gpu_on_its_own_cores():
    slots = sweep.worker_slots("all", None, device_count=2, visible=None, cpus=range(9))
    assert [(s.name, s.device, dict(s.env), s.cpus) for s in slots] == [
        ("cuda:0", "cuda", {"CUDA_VISIBLE_DEVICES": "0"}, (0, 1, 2, 3)),
        ("cuda:1", "cuda", {"CUDA_VISIBLE_DEVICES": "1"}, (4, 5, 6, 7))]
    slots = sweep.worker_slots("all", None, device_count=2, visible="3,5", cpus=[8])  # the parent's restriction
    assert [(dict(s.env)["CUDA_VISIBLE_DEVICES"], s.cpus) for s in slots] == [("3", ()), ("5", ())]  # 1 core: no pinning
    assert [(s.name, s.cpus) for s in sweep.worker_slots(1, "cuda", device_count=2, cpus=[2, 3])] == [("cuda:0", (2, 3))]


def test_cpu_gets_one_slot_and_impossible_gpu_counts_are_refused():
    assert sweep.worker_slots("all", None, device_count=0) == CPU
    assert sweep.worker_slots("all", "cpu", device_count=2) == CPU
    with pytest.raises(ValueError, match="host has 2 GPUs"):
        sweep.worker_slots(3, None, device_count=2)
    with pytest.raises(ValueError, match="--gpus 2: no CUDA GPU"):
        sweep.worker_slots(2, None, device_count=0)
    with pytest.raises(ValueError, match="--device cuda: no CUDA GPU"):
        sweep.worker_slots("all", "cuda", device_count=0)
    with pytest.raises(ValueError, match="one worker"):
        sweep.worker_slots(2, "cpu", device_count=2)


def test_plan_groups_by_case_eager_first_and_skips_what_is_done_or_too_large(tmp_path):
    out = tmp_path / "r.jsonl"
    big = Case(64, 256, 1000, 0.1)
    done = Result("jagged_mean", "sum_padded", "eager", C1, "cpu")
    store.append_result(out, done)
    p = plan(out, [C1, big, C2], ["sum_padded", "segment_reduce"], ["compile:default", "eager"],
             byte_limit=big.values_nbytes() - 1)
    assert len(p.cells) == 12 and p.done == 1
    assert [(c.implementation, c.mode) for c in p.units[0]] == [
        ("segment_reduce", "eager"), ("sum_padded", "compile:default"), ("segment_reduce", "compile:default")]
    assert [u[0].case for u in p.units] == [C1, C2] and p.to_run == 3 + 4
    assert len(p.too_large) == 4 and {r.case for r in p.too_large} == {big}
    assert all(r.status == SKIPPED and "byte limit" in r.reason for r in p.too_large)



def test_retry_plans_only_the_cells_whose_latest_result_is_an_error_and_settings_are_checked(tmp_path):
    out = tmp_path / "r.jsonl"
    settings = OPTIONS.settings()
    store.write_environment_header(out, {"torch": "x", "settings": settings}, None)
    statuses = {"sum_padded": ERROR, "segment_reduce": "wrong", "nanmean_padded": SKIPPED, "unbind_mean": ERROR}
    for impl, status in statuses.items():
        store.append_result(out, Result("jagged_mean", impl, "eager", C1, "cpu", status=status, reason="r"))
    store.append_result(out, Result("jagged_mean", "unbind_mean", "eager", C1, "cpu"))  # failed, then ok
    impls = list(statuses)
    p = plan(out, [C1], impls, ["eager"])
    assert (p.done, p.to_run, p.retried) == (4, 0, {})
    p = sweep.plan_sweep(out, "jagged_mean", [C1], impls, ["eager"], byte_limit=runner.DEFAULT_BYTE_LIMIT,
                         device="cpu", settings=settings, retry_failed=True)
    assert [c.implementation for u in p.units for c in u] == ["sum_padded"] and p.done == 3
    assert p.retried == {p.units[0][0].key: {"status": ERROR, "reason": "r"}}
    other = {**settings, "iters": settings["iters"] + 1}
    with pytest.raises(sweep.SettingsChanged, match=r"iters: 2 in the file, 3 now \(--accept-settings"):
        sweep.plan_sweep(out, "jagged_mean", [C1], impls, ["eager"], byte_limit=runner.DEFAULT_BYTE_LIMIT,
                         device="cpu", settings=other, retry_failed=True)
    quiet = sweep.plan_sweep(out, "jagged_mean", [C1], impls, ["eager"], byte_limit=runner.DEFAULT_BYTE_LIMIT,
                             device="cpu", settings=other)  # nothing to run: nothing measured differently
    assert quiet.to_run == 0 and quiet.settings_changes == []
    old = tmp_path / "old.jsonl"  # written before settings were recorded
    store.append_result(old, Result("jagged_mean", "sum_padded", "eager", C1, "cpu"))
    p = sweep.plan_sweep(old, "jagged_mean", [C1, C2], ["sum_padded"], ["eager"],
                         byte_limit=runner.DEFAULT_BYTE_LIMIT, device="cpu", settings=settings)
    assert p.to_run == 1 and "records no measurement settings" in p.warnings[-1]

def test_plugins_come_from_flags_and_the_environment():
    assert plugin_names(["a", "b"], {"JAGGEDPERF_PLUGINS": " b, c ,,"}) == ["a", "b", "c"]
    assert plugin_names([], {}) == []


# --- runs (worker processes) ----------------------------------------------------------------------


def test_sweep_appends_a_header_and_a_line_per_cell_and_resumes_a_partial_file(tmp_path):
    out = tmp_path / "r.jsonl"
    # A partial file: a header, one finished eager cell, and a line a killed writer left unfinished.
    store.write_environment_header(out, {"torch": "earlier"}, None)
    earlier = Result("jagged_mean", "segment_reduce", "eager", C1, "cpu", wall=WallStats(2.0, 0.1, 2.0, 1.9, 2.2, 3))
    store.append_result(out, earlier)
    with open(out, "a") as f:
        f.write('{"op": "jagged_mean", "implementation": "segm')
    p = plan(out, [C1, C2], ["segment_reduce"], ["eager", "compile:default"])
    assert (p.done, p.to_run) == (1, 3)
    started = []
    outcome = sweep.run_sweep(p, CPU, OPTIONS, sweep.Settings(log_path=str(tmp_path / "w.log")),
                              on_start=lambda w, c: started.append(c))
    assert [(r.mode, r.case) for r in outcome.results] == [
        ("compile:default", C1), ("eager", C2), ("compile:default", C2)]  # only the missing cells ran
    assert started == [p.units[0][0], None, *p.units[1], None]
    record, warnings = store.read_results(out)
    assert warnings == []  # the unfinished line was cut off, no cell repeats
    assert len(record.results) == 4 and {r.status for r in record.results} == {OK}
    assert record.environment["torch"] == "earlier" and record.environment["more"][0]["workers"][0]["name"] == "cpu"
    header = record.environment["more"][0]
    assert header["threads"] == header["settings"]["threads"] == OPTIONS.threads  # the cells', not the parent's
    compiled = {r.case: r for r in record.results if r.mode == "compile:default"}
    assert compiled[C1].speedup_vs_eager == pytest.approx(2.0 / compiled[C1].wall.median_ms)  # twin from the file
    eager_c2 = next(r for r in record.results if r.mode == "eager" and r.case == C2)
    assert compiled[C2].speedup_vs_eager == pytest.approx(eager_c2.wall.median_ms / compiled[C2].wall.median_ms)
    assert {r.extra.get("worker") for r in outcome.results} == {"cpu"}
    assert "worker cpu" in (tmp_path / "w.log").read_text()

    # The same sweep again: nothing to run, no worker started, the file untouched.
    before = out.read_bytes()
    again = plan(out, [C1, C2], ["segment_reduce"], ["eager", "compile:default"])
    assert (again.done, again.to_run) == (4, 0)
    assert sweep.run_sweep(again, CPU, OPTIONS).results == []
    assert out.read_bytes() == before


class _ThreadWorker:
    """A back end's handle on a worker that is a thread of this process (no timeouts: it cannot be killed)."""

    class _Channel:  # the worker's end
        def __init__(self, handle):
            self.handle = handle

        def send(self, message):
            self.handle.inbox.put(message)

        def recv(self):
            return self.handle.outbox.get()

    def __init__(self, slot, options, plugins):
        self.inbox, self.outbox, self.code = queue.Queue(), queue.Queue(), None
        self.thread = threading.Thread(target=self._serve, args=(slot, options, plugins), daemon=True)
        self.thread.start()

    def _serve(self, slot, options, plugins):
        try:
            worker.serve(self._Channel(self), slot, options, plugins)
            self.code = 0
        except SystemExit as exc:
            self.code = exc.code

    def send(self, message):
        self.outbox.put(message)

    def receive(self):
        messages = []
        while not self.inbox.empty():
            messages.append(self.inbox.get())
        return messages

    def has_message(self):
        return not self.inbox.empty()

    def alive(self):
        return self.thread.is_alive()

    def exit_code(self):
        return self.code

    def kill(self):
        self.stop()

    def stop(self):
        self.outbox.put(worker.STOP)
        self.thread.join(10)


class _Threads:
    """A second back end, written against ``sweep.Backend`` alone."""

    def __init__(self):
        self.started = []

    def start(self, slot, options, plugins, log_path):
        self.started.append(slot.name)
        return _ThreadWorker(slot, options, plugins)

    def wait(self, handles, timeout):
        deadline = time.monotonic() + (timeout if timeout is not None else 60)
        while time.monotonic() < deadline and not any(h.has_message() or not h.alive() for h in handles):
            time.sleep(0.01)


def test_another_backend_runs_the_sweep_through_the_same_scheduler(tmp_path):
    out = tmp_path / "r.jsonl"
    p = plan(out, [C1, C2], ["segment_reduce"], ["eager"])
    backend = _Threads()
    outcome = sweep.run_sweep(p, CPU, OPTIONS, backend=backend)
    assert backend.started == ["cpu"]
    assert [(r.case, r.status, r.extra["worker"]) for r in outcome.results] == [(C1, OK, "cpu"), (C2, OK, "cpu")]
    record, warnings = store.read_results(out)
    assert warnings == [] and len(record.results) == 2
    assert record.environment["workers"][0]["name"] == "cpu"


def test_hang_exit_raise_and_a_broken_device_are_recorded_and_the_other_cells_finish(tmp_path, sweep_plugin):
    import_plugins([sweep_plugin])  # by name, as --plugin does
    from helpers.sweep_plugin import EXITS, HANGS, POISONS, RAISES

    out = tmp_path / "r.jsonl"
    cores = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else []
    pins = [(c,) for c in cores] if len(cores) == 2 else [(), ()]
    slots = [sweep.WorkerSlot(f"sim{i}", "cpu", (("CUDA_VISIBLE_DEVICES", str(i)),), pins[i]) for i in range(2)]
    p = plan(out, [C1], [HANGS, EXITS, POISONS, RAISES, "segment_reduce"], ["eager"])
    notes, started = [], set()
    outcome = sweep.run_sweep(p, slots, OPTIONS, sweep.Settings(timeout_s=3, plugins=(sweep_plugin,)),
                              on_note=notes.append, on_start=lambda w, c: started.add(w))
    by_impl = {r.implementation: r for r in store.load_results(out).results}
    assert len(by_impl) == 5 and len(lines(out)) == 6  # one header, one line per cell
    assert (by_impl[HANGS].status, by_impl[HANGS].reason) == (ERROR, "timed out after 3 s")
    assert (by_impl[EXITS].status, by_impl[EXITS].reason) == (ERROR, "worker died (exit code 3)")
    assert by_impl[RAISES].status == ERROR and "ValueError: plugin refuses this batch" in by_impl[RAISES].reason
    assert by_impl[POISONS].status == ERROR and "simulated illegal memory access" in by_impl[POISONS].reason
    assert by_impl["segment_reduce"].status == OK
    # The unit went to sim0; the rest of it to sim1, the only worker ready when sim0 was killed.
    assert by_impl[HANGS].extra["worker"] == "sim0" and by_impl[EXITS].extra["worker"] == "sim1"
    assert started == {"sim0", "sim1"}
    assert any("timed out" in n for n in notes) and any("worker died" in n for n in notes)
    # Once: the cells after it ran in a fresh worker, whose check (not patched by test_poisons) passed.
    assert sum("unusable after an error (simulated sticky error)" in n for n in notes) == 1
    workers = outcome.environment["workers"]
    assert [(w["name"], w["CUDA_VISIBLE_DEVICES"]) for w in workers] == [("sim0", "0"), ("sim1", "1")]
    if pins[0]:
        assert [(tuple(w["cpus"]), w["threads"]) for w in workers] == [(pins[0], 1), (pins[1], 1)]
    assert multiprocessing.active_children() == []  # every worker stopped or killed


def test_a_worker_that_cannot_start_ends_the_sweep_with_its_reason(tmp_path):
    out = tmp_path / "r.jsonl"
    p = plan(out, [C1], ["segment_reduce"], ["eager"])
    notes = []
    settings = sweep.Settings(plugins=("no_such_plugin_module",), start_attempts=1)  # imported only by the worker
    with pytest.raises(sweep.SweepError, match="no worker could start: .*plugin 'no_such_plugin_module' could not be imported"):
        sweep.run_sweep(p, CPU, OPTIONS, settings, on_note=notes.append)
    assert notes and "slot given up" in notes[0]
    assert not out.exists() and multiprocessing.active_children() == []


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_killing_the_sweep_keeps_finished_lines_leaves_no_orphans_and_resumes(tmp_path, sweep_plugin):
    from jaggedperf.cli import main

    out = tmp_path / "r.jsonl"
    args = ["sweep", "--out", str(out), "--B", "4", "--M", "2", "--seqlen", "10:80:10", "--sparsity", "0.5",
            "--impls", "test_slow", "--modes", "eager", "--plugin", sweep_plugin, "--warmup", "1", "--iters", "1",
            "--device", "cpu"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]))
    proc = subprocess.Popen([sys.executable, "-m", "jaggedperf", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_text().count("\n") >= 2:  # the header and a first cell
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep ended before it could be killed"
        workers = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert workers
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "a worker outlived its sweep"

    text = out.read_text()
    finished = text[: text.rfind("\n") + 1]
    assert all(json.loads(line) for line in finished.splitlines())  # every finished line is whole
    done = len(store.load_results(out).results)
    assert 1 <= done < 8

    assert main(args) == 0  # the same command resumes
    record, warnings = store.read_results(out)
    assert warnings == [] and len(record.results) == 8 and {r.status for r in record.results} == {OK}
    assert out.read_text().startswith(finished)  # what was written before the kill is kept as it was


def test_a_worker_records_an_implementation_that_changes_its_inputs_and_measures_the_next_on_the_real_batch(
        tmp_path, sweep_plugin):
    import_plugins([sweep_plugin])
    from helpers.sweep_plugin import MUTATES

    out = tmp_path / "r.jsonl"
    p = plan(out, [C1], ["segment_reduce", MUTATES, "sum_padded"], ["eager"])
    sweep.run_sweep(p, CPU, OPTIONS, backend=_Threads())
    by_impl = {r.implementation: r for r in store.load_results(out).results}
    assert by_impl[MUTATES].status == ERROR and by_impl[MUTATES].reason.startswith("changed its inputs in place (values)")
    assert by_impl["segment_reduce"].status == by_impl["sum_padded"].status == OK  # not "wrong", rel. error 1
    assert by_impl["sum_padded"].rel_error < 1e-5

# --- one sweep per results file -------------------------------------------------------------------


def test_a_second_sweep_on_the_same_file_is_refused_with_the_holders_pid_until_the_holder_dies(tmp_path):
    from jaggedperf.lab.sweep import lock

    out = tmp_path / "r.jsonl"
    holder = hold_in_another_process(out)
    try:
        with pytest.raises(sweep.SweepLocked, match=rf"another sweep \(pid {holder.pid} on .*\) is writing to {out}"):
            with lock.hold(out):
                pass
        p = plan(out, [C1], ["segment_reduce"], ["eager"])
        with pytest.raises(sweep.SweepLocked):
            sweep.run_sweep(p, CPU, OPTIONS, backend=_Threads())
        assert not out.exists()  # nothing measured, nothing written
    finally:
        holder.kill()  # a crash: the kernel releases the lock, the stale file stays
        holder.wait(10)
    assert lock.lock_path(out).exists()
    with lock.hold(out):
        with lock.hold(out):  # re-entrant in one process: the CLI holds it when run_sweep takes it
            assert f"pid {os.getpid()} on" in lock.lock_path(out).read_text()
    assert not lock.lock_path(out).exists()  # removed by its holder at the end


def test_the_lock_file_goes_when_the_sweep_ends(tmp_path):
    out = tmp_path / "r.jsonl"
    sweep.run_sweep(plan(out, [C1], ["segment_reduce"], ["eager"]), CPU, OPTIONS, backend=_Threads())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]

# --- on the GPU machine (pytest -m gpu) -----------------------------------------------------------


@pytest.mark.gpu  # in the parallel pass: its workers' copy probes take 256 MiB where the GPU has no 2 GiB left
def test_every_gpu_gets_its_own_worker_that_sees_only_it(tmp_path):
    n = torch.cuda.device_count()
    slots = sweep.worker_slots()  # every GPU of this host
    assert [s.name for s in slots] == [f"cuda:{i}" for i in range(n)]
    cases = [Case(512, 64, 100 * (i + 1), 0.5) for i in range(2 * n)]  # two cases per worker
    p = sweep.plan_sweep(tmp_path / "r.jsonl", "jagged_mean", cases, ["segment_reduce", "sum_padded"], ["eager"],
                         byte_limit=runner.DEFAULT_BYTE_LIMIT, device="cuda")
    options = runner.Options(device=torch.device("cuda"), warmup=5, iters=20)
    outcome = sweep.run_sweep(p, slots, options, sweep.Settings(timeout_s=300))
    record = store.load_results(p.out)
    # correct and timed (stable or not: this test is about the workers, and other tests may share the machine)
    assert len(record.results) == len(p.cells) and {r.status for r in record.results} <= set(TIMED)
    assert all(r.device == "cuda" and r.device_time is not None for r in record.results)
    assert {r.extra["worker"] for r in record.results} == {s.name for s in slots}  # every GPU took work
    workers = outcome.environment["workers"]
    assert [w["gpus_visible"] for w in workers] == [1] * n  # each worker sees its GPU only
    assert len({w["gpu_uuid"] for w in workers}) == n  # ... and they are n different GPUs
    assert len({w["CUDA_VISIBLE_DEVICES"] for w in workers}) == n
    assert all(w["gpu"] and (w["copy_gbps"] or 0) > 0 for w in workers) and (record.copy_gbps or 0) > 0, workers
    cores = [set(w["cpus"]) for w in workers]
    assert all(a.isdisjoint(b) for i, a in enumerate(cores) for b in cores[i + 1:])


@pytest.mark.gpu
def test_faults_on_a_gpu_worker(tmp_path, sweep_plugin):
    import_plugins([sweep_plugin])
    from helpers.sweep_plugin import DEVICE_ASSERT, EXITS, HANGS

    p = sweep.plan_sweep(tmp_path / "r.jsonl", "jagged_mean", [C1], [HANGS, EXITS, DEVICE_ASSERT, "segment_reduce"],
                         ["eager"], byte_limit=runner.DEFAULT_BYTE_LIMIT, device="cuda")
    notes = []
    options = runner.Options(device=torch.device("cuda"), warmup=5, iters=20)
    sweep.run_sweep(p, sweep.worker_slots(1), options, sweep.Settings(timeout_s=20, plugins=(sweep_plugin,)),
                    on_note=notes.append)
    by_impl = {r.implementation: r for r in store.load_results(p.out).results}
    assert by_impl[HANGS].reason == "timed out after 20 s"
    assert by_impl[EXITS].reason == "worker died (exit code 3)"
    assert by_impl[DEVICE_ASSERT].status == ERROR
    assert any("the device is unusable" in n for n in notes)  # a sticky CUDA error: the worker was replaced
    assert by_impl["segment_reduce"].status in TIMED  # ... and the cell after it ran on a fresh one

