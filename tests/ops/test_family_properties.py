"""Every op (sum, mean, softmax, layer norm) × every entry point gets the same property (``family_property``): any
offsets, valid or invalid, with empty and one-row segments and odd M, give the float64 reference (or its gradient,
or its tangent) or the documented ValueError; never a crash, never a silent answer. On the CPU every entry point
checks the offsets, so an invalid one must raise. Each entry point runs in its own subprocess; under
TRITON_INTERPRET=1 the row-wise families' Triton kernels get the crash half of it (any offsets, no check in front)."""

import pytest
from helpers.interpret import PROFILE, needs_interpreter
from helpers.isolated import run_isolated

# examples per op for one entry point; a compiled entry point recompiles as shapes change, so it gets fewer
# ("ci" sized for CI's 20 minutes on two cores: docs/decisions/ci-budget.md)
EAGER_EXAMPLES = {"ci": 60, "dev": 1000}.get(PROFILE, 60)
COMPILED_EXAMPLES = {"ci": 12, "dev": 200}.get(PROFILE, 12)
ENTRY_POINTS = ["public", "torch.ops", "njt", "compile", "compile-dynamic", "jaggedperf.compile", "backward",
                "forward-ad"]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_op_gives_the_reference_or_the_documented_error(entry):
    examples = COMPILED_EXAMPLES if "compile" in entry else EAGER_EXAMPLES
    tally = run_isolated(f"""
        from helpers import family_property
        result = family_property.run({entry!r}, {examples})
    """, env={"TRITON_INTERPRET": "0"}, timeout=900)
    # both outcomes were exercised on every entry point
    assert tally["reference"] >= examples and tally["documented error"] >= examples // 2, tally


@needs_interpreter
def test_the_rowwise_kernels_never_crash_nor_touch_memory_outside_their_tensors_on_any_offsets():
    # every unmasked load and store inside a tensor argument of its launch (helpers.bounds), as on the GPU
    tally = run_isolated("""
        from helpers import bounds, family_property
        bounds.check_bounds()
        result = family_property.run_kernels(60)
    """, env={"TRITON_INTERPRET": "1"})
    assert tally["reference"] > 0 and tally["unspecified"] > 0, tally
