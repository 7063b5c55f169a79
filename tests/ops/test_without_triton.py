"""``import jaggedperf`` works where triton cannot be imported; the ops then raise one clear error.

The check runs in a fresh interpreter in which ``import triton`` fails (``sys.modules['triton'] = None``
before anything is imported), as on a CPU machine without the package.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    sys.modules["triton"] = None  # import triton now raises ModuleNotFoundError
    import torch
    import jaggedperf
    from jaggedperf import JaggedBatch, make_batch
    from jaggedperf.inputs import Case

    assert not jaggedperf.ops.has_triton()
    batch = make_batch(Case(4, 3, 10, 0.5))
    assert isinstance(batch, JaggedBatch) and batch.values.shape[1] == 3
    assert jaggedperf.ops.launch_path()["tier"] == "launch"  # the launch package needs no triton
    for fn in (jaggedperf.jagged_sum, jaggedperf.jagged_mean):
        try:
            fn(batch.values, batch.offsets)
        except ModuleNotFoundError as exc:
            assert exc.name == "triton" and str(exc) == jaggedperf.ops.MISSING_TRITON, exc
            assert "'triton' package" in str(exc) and "pip install triton" in str(exc), exc
        else:
            raise AssertionError(f"{fn.__name__} ran without triton")
    assert not hasattr(torch.ops.jaggedperf, "jagged_sum")  # nothing half-registered
    print("ok")
""")


def test_import_without_triton_and_one_clear_error():
    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
