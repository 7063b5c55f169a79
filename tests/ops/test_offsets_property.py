"""The bad-offsets property: random offsets, valid and invalid, through the public functions and
``torch.ops.jaggedperf.*`` (the CPU), and through the operators' Triton branch (TRITON_INTERPRET=1):
the float64 reference or a documented error, never a crash. Each property runs in a subprocess, so a
crash fails the test (naming the last example) instead of killing pytest."""


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


@needs_interpreter
def test_any_offsets_through_the_triton_kernels_never_crash():
    tally = run_isolated(f"""
        from helpers import offsets_property
        result = offsets_property.run({INTERP_EXAMPLES * 2}, "cpu", device_kernels=True)
    """, env={"TRITON_INTERPRET": "1"})
    assert tally["reference"] > 0 and tally["unspecified"] > 0 and tally["documented error"] == 0
