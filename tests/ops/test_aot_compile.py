"""The kernels compile for sm_90 with the installed Triton (no GPU needed; the interpreter accepts
programs the compiler rejects, so CPU CI checks both)."""


import pytest
from helpers.interpret import nvidia_backend
from helpers.isolated import run_script


@pytest.mark.skipif(not nvidia_backend(), reason="triton without its nvidia backend")
def test_kernels_compile_for_sm90_with_vector_loads():
    run = run_script("aot_compile.py", timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("ok") == 8
