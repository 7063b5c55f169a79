"""The sweep engine: every cell of a grid on every GPU of the host, each under a timeout, every result
appended to a JSON-lines file as it finishes; a rerun resumes.

- ``slots``: where workers run (one per GPU, or one on the CPU);
- ``plan``: what is left to run, grouped into units (one per case, eager first);
- ``scheduler``: dispatch, timeouts, deaths, the results file;
- ``backend``: what a back end provides; ``local``: local processes (the default); ``ray_backend``: Ray
  actors on a cluster (optional: ``jaggedperf[ray]``, imported only when used);
- ``envs``: the same sweep under other torch versions, each in its own cached environment;
- ``worker``: what a worker runs, whatever started it;
- ``isolated``: ``runner.run`` through this engine (``repro``/``run --timeout``);
- ``lock``: one sweep per results file.
"""

from jaggedperf.lab.sweep.backend import Backend, WorkerHandle
from jaggedperf.lab.sweep.isolated import run_isolated
from jaggedperf.lab.sweep.local import LocalProcesses
from jaggedperf.lab.sweep.lock import SweepLocked, hold as hold_lock
from jaggedperf.lab.sweep.plan import SettingsChanged, SweepPlan, plan_sweep
from jaggedperf.lab.sweep.scheduler import DEFAULT_TIMEOUT_S, Settings, SweepError, SweepOutcome, run_sweep
from jaggedperf.lab.sweep.slots import WorkerSlot, worker_slots

__all__ = ["DEFAULT_TIMEOUT_S", "Backend", "LocalProcesses", "Settings", "SettingsChanged", "SweepError",
           "SweepLocked", "SweepOutcome", "SweepPlan", "WorkerHandle", "WorkerSlot", "hold_lock", "plan_sweep",
           "run_isolated", "run_sweep", "worker_slots"]
