"""Bad inputs on CUDA: invalid offsets never crash the kernels nor make them access out of bounds (the
property of tests/ops/offsets_property.py, in a subprocess; a small sample under compute-sanitizer's
memcheck where it is installed), the operators take non-contiguous values, validate=True under
torch.compile asserts on the device, forward-mode AD passes the fast paths by, and our messages for
max_seqlen past int64 and a NestedTensor whose offsets do not span its values.

Run on the GPU machine: ``PYTHONPATH=src python -m pytest -q -m gpu tests/gpu/test_bad_inputs_gpu.py``.
"""

import shutil
import sys

import pytest
import torch
from torch.autograd import forward_ad
from helpers.gpu import check, expand_reference
from helpers.isolated import run_isolated

import jaggedperf

pytestmark = pytest.mark.gpu
OPS = torch.ops.jaggedperf


# The Python path's examples compile the kernels they reach, and M is compiled into them: each width is its own set of
# Triton compiles (all five widths in one process made it the parallel pass's longest test, 130 s on the H200). So it
# runs one width a part, 300 examples each (every other strategy branch is drawn in each: valid, one broken and any
# offsets, huge values, both offsets dtypes, with and without max_seqlen, every entry point), on as many workers. The
# native path draws every width: its first call of each plan takes the Python path, whose kernels the parts have left
# in Triton's on-disk cache by then (the parallel pass starts the longest tests first).
OFFSETS_PATHS = [*(pytest.param("0", (m, m), id=f"python-path-M{m}") for m in range(1, 6)),
                 pytest.param("build", (1, 5), id="native-path")]


@pytest.mark.parametrize("native,widths", OFFSETS_PATHS)
def test_any_offsets_through_the_cuda_kernels_never_crash(native, widths):
    # valid offsets give the reference, invalid ones an output of the right shape; never a crash or a CUDA error
    tally = run_isolated(f"""
        from helpers import offsets_property
        jaggedperf.ops.prepare_native_launch()
        result = offsets_property.run(300, "cuda", widths={widths})
        result["native"] = jaggedperf.ops.launch_path()["native"]["status"]
    """, env={"JAGGEDPERF_NATIVE": native})
    assert tally["reference"] > 50 and tally["unspecified"] > 50, tally


@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer is not installed")
def test_invalid_offsets_under_memcheck_access_nothing_out_of_bounds(tmp_path):
    import os
    import subprocess

    from helpers.isolated import SRC, TESTS

    script = tmp_path / "memcheck_sample.py"
    script.write_text("from helpers import offsets_property\nprint(offsets_property.run(40, 'cuda', seed=1))\n")
    env = {**os.environ, "JAGGEDPERF_NATIVE": "0", "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
    done = subprocess.run(["compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "99", sys.executable,
                           str(script)], capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ERROR SUMMARY: 0 errors" in done.stdout + done.stderr


@pytest.mark.parametrize("max_seqlen", [None, 8], ids=["chunks", "segments"])
def test_operators_take_non_contiguous_values(max_seqlen):
    offsets = torch.tensor([0, 3, 3, 8, 9], device="cuda")
    values = torch.randn(9, 40, device="cuda")[:, ::4]  # (9, 10), stride 40
    check(OPS.jagged_sum(values, offsets, max_seqlen), values, offsets, mean=False)
    check(OPS.jagged_mean(values, offsets, True, max_seqlen), values, offsets, mean=True, empty_zero=True)
    grad = torch.randn(4, 20, device="cuda")[:, ::2]
    out = OPS.jagged_expand(grad, offsets, 9, True, max_seqlen)
    torch.testing.assert_close(out.double(), expand_reference(grad, offsets, 9, mean=True))


def test_validate_under_compile_asserts_on_the_device():
    # a device-side assert ends the CUDA context: in a subprocess
    result = run_isolated("""
        f = torch.compile(lambda v, o: jaggedperf.jagged_sum(v, o, validate=True), fullgraph=True)
        v = torch.randn(6, 3, device="cuda")
        result["good"] = torch.allclose(f(v, torch.tensor([0, 2, 6], device="cuda")).cpu(),
                                        torch.stack([v[:2].sum(0), v[2:].sum(0)]).cpu(), atol=1e-5)
        try:
            f(v, torch.tensor([1, 3, 7], device="cuda"))
            torch.cuda.synchronize()
            result["bad"] = "returned"
        except Exception as e:
            result["bad"] = f"{type(e).__name__}: {e}"
    """)
    assert result["good"] is True
    assert result["bad"] != "returned" and ("device-side assert" in result["bad"] or "offsets" in result["bad"])


def test_validate_eagerly_and_bad_max_seqlen_on_cuda():
    jaggedperf.ops.prepare_native_launch()
    values, offsets = torch.randn(6, 3, device="cuda"), torch.tensor([0, 2, 6], device="cuda")
    for _ in range(3):  # registers and then serves the native plan where the path is on
        jaggedperf.jagged_sum(values, offsets, max_seqlen=4)
    with pytest.raises(ValueError, match="max_seqlen must be None or an int in \\[0, 2\\*\\*63 - 1\\]"):
        jaggedperf.jagged_sum(values, offsets, max_seqlen=2**70)
    nt = torch.nested.nested_tensor_from_jagged(torch.randn(10, 3, device="cuda"), offsets)
    with pytest.raises(ValueError, match="offsets\\[-1\\] must equal values.shape\\[0\\]=10; got 6"):
        jaggedperf.jagged_sum(nt, validate=True)


@pytest.mark.parametrize("max_seqlen", [None, 4], ids=["chunks", "segments"])
def test_forward_mode_ad_on_cuda_passes_the_fast_paths_by(max_seqlen):
    jaggedperf.ops.prepare_native_launch()
    offsets = torch.tensor([0, 2, 2, 6], device="cuda")
    primal, tangent = torch.randn(6, 5, device="cuda"), torch.randn(6, 5, device="cuda")
    for _ in range(3):  # a registered native plan for exactly this call
        jaggedperf.jagged_mean(primal, offsets, max_seqlen=max_seqlen, empty="zero")
    expected = jaggedperf.jagged_mean(tangent, offsets, max_seqlen=max_seqlen, empty="zero")
    _, jvp = torch.func.jvp(lambda x: jaggedperf.jagged_mean(x, offsets, max_seqlen=max_seqlen, empty="zero"),
                            (primal,), (tangent,))
    torch.testing.assert_close(jvp, expected)
    with forward_ad.dual_level():
        out = jaggedperf.jagged_sum(forward_ad.make_dual(primal, tangent), offsets, max_seqlen=max_seqlen)
        torch.testing.assert_close(forward_ad.unpack_dual(out).tangent,
                                   jaggedperf.jagged_sum(tangent, offsets, max_seqlen=max_seqlen))
    _, jvp = torch.func.jvp(lambda x: OPS.jagged_sum(x, offsets, max_seqlen), (primal,), (tangent,))
    torch.testing.assert_close(jvp, OPS.jagged_sum(tangent, offsets, max_seqlen))
