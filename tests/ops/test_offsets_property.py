"""The bad-offsets property: random offsets, valid and invalid, through the public functions and
``torch.ops.jaggedperf.*`` (the CPU), and through the operators' Triton branch (TRITON_INTERPRET=1):
the float64 reference or a documented error, never a crash. Each property runs in a subprocess, so a
crash fails the test (naming the last example) instead of killing pytest."""


import pytest

from helpers.interpret import INTERP_EXAMPLES, PROFILE, needs_interpreter
from helpers.isolated import run_isolated

CPU_EXAMPLES = {"ci": 400, "dev": 4000}.get(PROFILE, 400)


def test_any_offsets_on_the_cpu_give_the_reference_or_a_documented_error():
    tally = run_isolated(f"""
        from helpers import offsets_property
        result = offsets_property.run({CPU_EXAMPLES}, "cpu")
    """, env={"TRITON_INTERPRET": "0"})
    # the property held for every example; both outcomes were exercised, and nothing went unchecked
    assert tally["reference"] > CPU_EXAMPLES // 5 and tally["documented error"] > CPU_EXAMPLES // 5
    assert tally["unspecified"] == 0


# The grids the kernels are planned on: the CPU's default SM count and the H200's (132); the merge path's programs and
# the chunks' rows per chunk follow from it. The property's explicit edge cases (offsets near +-2**63) run in both.
SM_COUNTS = (4, 132)


@needs_interpreter
@pytest.mark.parametrize("sm_count", SM_COUNTS, ids=lambda n: f"{n}-SMs")
def test_any_offsets_through_the_triton_kernels_never_crash_nor_touch_memory_outside_their_tensors(sm_count):
    # every unmasked load and store inside a tensor argument of its launch (helpers.bounds), as on the GPU
    tally = run_isolated(f"""
        from helpers import bounds, offsets_property
        import jaggedperf.ops.config
        jaggedperf.ops.config.DEFAULT_SM_COUNT = {sm_count}
        bounds.check_bounds()
        result = offsets_property.run({INTERP_EXAMPLES}, "cpu", device_kernels=True, widths=(1, 5))
    """, env={"TRITON_INTERPRET": "1"})
    assert tally["reference"] > 0 and tally["unspecified"] > 0 and tally["documented error"] == 0
