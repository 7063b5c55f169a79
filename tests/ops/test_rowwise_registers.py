"""The row-wise kernels' occupancy where their programs fill the GPU: registers a thread compiled for sm_90 (the
installed Triton, no GPU; ``rowwise_registers.py``) leave at least the programs an SM each plan counts on.

Why a test: a kernel's registers are the most that any of its branches needs. A per-element statistics pass once
compiled into every softmax and layer norm kernel cost the one-tile path on the H200 too, where
it never runs: softmax at 65536 × 64 396 → 471 µs (72 → 125 registers: 7 → 4 programs an SM), the layer norm at
1024 × 256 437 → 498 (125 → 227-243: 2 → 1 at 8 warps). Those passes are now constexpr variants compiled only where
the plan routes them (docs/performance.md, the model's point 9); this keeps it so for the next change.
"""

import json

import pytest

from helpers.interpret import nvidia_backend
from helpers.isolated import run_script

# kernel name → the fewest programs an SM it must leave, by warps (4: the lean tile and the splits; 8: the wide tile).
# The per-element one-program softmax in fp32 has no floor: the plan runs it there only with fewer programs than SMs.
FLOORS = {
    "softmax/per_column": {4: 6, 8: 2},  # 4 programs an SM at the lean tile cost 19% (above)
    "softmax/per_element/bf16": {4: 4, 8: 2},  # planned where bf16 may loop: 4 an SM measured 2.7× faster than
    # the per-column pass at 6 (H200, 1024 × 256: 319 against 875 µs)
    "softmax_backward": {4: 5, 8: 2},
    "layer_norm_backward": {4: 3, 8: 1},  # its two-pass form (``_joint_moments``) kept the three-pass one's 3 and 1
    # fp32 (168 registers at the lean tile, Triton 3.6.0): an x̂-free co-moment, Σ d·g, instead of a second centred tile
    "layer_norm": {4: 4, 8: 2},  # 1 program an SM at the wide tile cost 14-49% (above)
    "softmax_stats/per_element": {4: 2},  # its split aims at 2 programs an SM (softmax.plan.SPLIT_PROGRAMS_PER_SM)
    "softmax_parts": {4: 4},
    "ln_moments": {4: 4},  # the layer norm's split aims at 4 (layer_norm.plan.SPLIT_PROGRAMS_PER_SM)
    "ln_parts": {4: 4},
}


@pytest.fixture(scope="module")
def occupancy() -> dict:
    if not nvidia_backend():
        pytest.skip("triton without its nvidia backend")
    run = run_script("rowwise_registers.py", timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel", list(FLOORS))
def test_each_kernel_leaves_the_programs_an_sm_its_plan_counts_on(occupancy, kernel):
    checked = 0
    for name, (registers, programs) in occupancy.items():
        if not name.startswith(kernel + "/"):
            continue
        warps = int(name.rsplit("/", 1)[1])
        floor = FLOORS[kernel][warps]
        assert programs >= floor, f"{name}: {registers} registers a thread, {programs} programs an SM (< {floor})"
        checked += 1
    assert checked >= 4, f"{kernel}: {checked} compiled variants found in {sorted(occupancy)}"


def test_the_per_element_pass_costs_registers_so_it_stays_a_variant(occupancy):
    # the premise of the floors: per element takes more registers than per column at the same tile (else the variant
    # would not be needed)
    for name, (registers, _) in occupancy.items():
        if name.startswith("softmax/per_column/"):
            assert occupancy[name.replace("per_column", "per_element")][0] > registers, name
