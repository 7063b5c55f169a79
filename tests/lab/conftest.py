import pytest

from jaggedperf.lab.measure import timing


@pytest.fixture(autouse=True)
def _contention_not_judged(monkeypatch):
    """A test's statuses must not depend on what else the machine runs: CPU contention (``stats.contended``) is
    judged only where a test puts the machine's size back (``timing.machine_cpus``); load is still recorded."""
    monkeypatch.setattr(timing, "machine_cpus", lambda: None)
