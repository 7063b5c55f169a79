"""`jaggedperf repro` with its CPU defaults, as a newcomer runs it on a 2-core machine without a GPU: it finishes within
REPRO_CPU_LIMIT_S, says what it shrank and why, prints a line as each of its 30 cells finishes, and marks a cell its
compile budget cut with that budget (never a silent gap). Marked ``timed``: it runs alone, after the rest."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

REPRO_CPU_LIMIT_S = 180  # the bound for the whole command on a 2-core CPU


@pytest.mark.timed
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU default; a GPU runs the seed's method")
def test_repro_on_the_cpu_finishes_in_minutes_and_says_what_it_cut(tmp_path):
    out = tmp_path / "repro.json"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # a cold cache, as on a fresh clone
    env.pop("TRITON_INTERPRET", None)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "import sys; from jaggedperf.cli import main; "
                           f"sys.exit(main(['repro', '--json', {str(out)!r}]))"],
                          capture_output=True, text=True, env=env, timeout=REPRO_CPU_LIMIT_S + 120)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-3000:]
    assert took <= REPRO_CPU_LIMIT_S, f"repro took {took:.0f} s on the CPU (limit {REPRO_CPU_LIMIT_S} s)"
    err = done.stderr
    assert "On the CPU, so that this finishes in minutes: 3 warm-up and 15 timed calls" in err
    assert "under a 30 s budget" in err
    assert all(f"[{k}/30 " in err for k in range(1, 31))  # one line as each cell finishes
    results = json.loads(out.read_text())["results"]
    assert len(results) == 30
    for r in results:  # every cell measured, or cut by the budget, or not tried after a cut: nothing else
        assert r["status"] in ("ok", "unstable") or r["reason"].startswith(("timed out after 30 s", "not tried: at")), r
        if r["status"] in ("error", "skipped"):
            assert r["mode"] != "eager", r  # only compiles are cut (unbind_mean's unrolled ones, on a quiet machine)
    cut = [r for r in results if r["status"] == "error"]
    if cut:
        assert "cut > 30 s" in done.stdout
