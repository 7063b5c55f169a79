"""The merge-path and split kernels compiled for sm_90 by the installed Triton and by the GPU box's (installed beside
it by scripts/setup_env.py; required in CI), no GPU (``helpers/merge_compile.py``): what the H200 needs of their
code, checked in CPU CI, and that the GPU box's compiler takes it at all.

- 128-bit global loads (stores for the backward): M is a compile-time value, so a row's address is a known multiple
  of M's power-of-two factor (a runtime M of 4, 8 or 24 gave scalar 32-bit accesses).
- Registers that leave the programs an SM the config aims at resident (``config.MERGE_TILES``; the split's two roles
  together, ``config.SPLIT_TILES``): every program has the same share of units, so the grid is one wave; a kernel
  past its register budget turns it into 1.3-2 waves (fp32 M = 64 at 16 programs an SM and 166 registers: 26 µs at
  the 512 × 64 seed shape against 19 at 8, H200).
- No local memory (spills).
- A tile's loads issued together: a run of at least a tile's 128-bit loads before any add (each tile is loaded one
  iteration before it is added; a plain ``acc += load`` loop let ptxas interleave each load with its adds, one load in
  flight, and the fp32 sum ran 1.5-2× slower than the mean on the same bytes on the H200).
"""

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import scripts
from helpers.interpret import nvidia_backend
from helpers.isolated import run_script

# The GPU box's Triton (setup_env.DEVICE_TRITON), where scripts/setup_env.py installed it beside the environment's own
# (with the test extra and the network: CI). CI must compile with it.
setup_env = scripts.load("scripts/setup_env.py")
DEVICE_TRITON = Path(sys.prefix) / setup_env.DEVICE_TRITON_DIR


@pytest.fixture(scope="module", params=["installed", "device"], ids=["installed-triton", "gpu-box-triton"])
def compiled(request) -> dict:
    if not nvidia_backend():
        pytest.skip("triton without its nvidia backend")
    first = None
    if request.param == "device":
        if not (DEVICE_TRITON / "triton" / "__init__.py").exists():
            reason = (f"the GPU box's Triton is not installed at {DEVICE_TRITON} (bash scripts/setup-env.sh test "
                      f"installs it where pip can get it, unless the environment's own Triton is that version)")
            if os.environ.get("CI"):
                pytest.fail(f"CI must compile with the GPU box's Triton: {reason}")
            pytest.skip(reason)
        first = str(DEVICE_TRITON)
    run = run_script("merge_compile.py", timeout=900, first_on_path=first)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    if first is not None:
        wanted = setup_env.DEVICE_TRITON.split("==")[1]
        assert lines[-2] == f"triton {wanted}", f"compiled with {lines[-2]}, not the GPU box's {wanted}"
    return json.loads(lines[-1])


def _odd_m(name: str) -> bool:
    """Whether a compiled kernel's name (``kernel/dtype/M/op``) is for odd M: its rows start at odd multiples of the
    element size, so no 128-bit access is ever aligned (its loads are scalar by necessity, not by a runtime M)."""
    parts = name.split("/")
    return len(parts) > 2 and parts[2].isdigit() and int(parts[2]) % 2 == 1


def test_every_merge_kernel_has_vector_accesses_and_no_local_memory(compiled):
    assert len(compiled) >= 13, sorted(compiled)
    for name, found in compiled.items():
        if not name.startswith("combine/") and not _odd_m(name):
            assert found["vector"], f"{name}: no 128-bit global accesses"
        assert found["local_bytes"] == 0, f"{name}: {found['local_bytes']} bytes of local memory"


def test_registers_leave_the_programs_an_sm_the_config_aims_at(compiled):
    for name, found in compiled.items():
        assert found["programs_per_sm"] >= found["aim"], (
            f"{name}: {found['registers']} registers a lane leave {found['programs_per_sm']} programs an SM, "
            f"the grid aims at {found['aim']}")


def test_a_tiles_loads_are_in_flight_together(compiled):
    for name, found in compiled.items():
        if name.startswith(("reduce/", "split/")) and not _odd_m(name):
            assert found["load_run"] >= found["loads_a_tile"], (
                f"{name}: at most {found['load_run']} 128-bit loads in a row, a tile is {found['loads_a_tile']}")
