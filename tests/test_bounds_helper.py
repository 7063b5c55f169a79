"""``helpers.bounds`` (the interpreter's out-of-bounds check the offsets properties run under): a read or a write
past a kernel's tensors is an error, one inside them or masked off is not."""

from helpers.interpret import needs_interpreter
from helpers.isolated import run_isolated

KERNEL = """
import triton
import triton.language as tl
from helpers import bounds

@triton.jit
def copy(src, dst, n, shift, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i + shift, mask=i < n, other=0.0), mask=i < n)

bounds.check_bounds()
src, dst = torch.randn(8), torch.empty(8)
copy[(1,)](src, dst, 8, 0, BLOCK=16)  # lanes 8-15 masked off: their addresses are past the end, never touched
result["inside"] = bool(torch.equal(dst, src))
try:
    copy[(1,)](src, dst, 8, 1, BLOCK=16)  # lane 7 reads src[8]
    result["past the end"] = "no error"
except Exception as error:
    result["past the end"] = type(error).__name__ + ": " + str(error)[:300]
"""


@needs_interpreter
def test_an_unmasked_read_past_the_tensor_is_an_error_and_masked_lanes_are_not_checked():
    result = run_isolated(KERNEL, env={"TRITON_INTERPRET": "1"})
    assert result["inside"] is True
    assert "OutOfBounds" in result["past the end"] and "copy: unmasked load of 1 address" in result["past the end"], \
        result["past the end"]


@needs_interpreter
def test_the_suite_runs_every_interpreted_kernel_under_the_check():
    # tests/conftest.py turns it on in every pytest process that interprets kernels
    from triton.runtime import interpreter

    assert interpreter.InterpreterBuilder.create_masked_load.__name__ == "masked_load"
    assert interpreter.InterpreterBuilder.create_masked_store.__name__ == "masked_store"
