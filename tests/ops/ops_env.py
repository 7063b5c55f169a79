"""What the ops tests share about their environment (importable, unlike conftest)."""

import os

import pytest

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# Examples per interpreter property test (each one launches real kernels in the interpreter: ~0.1 s).
INTERP_EXAMPLES = {"ci": 60, "dev": 600}.get(PROFILE, 60)

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
needs_interpreter = pytest.mark.skipif(
    not INTERPRET, reason="runs the Triton kernels on CPU tensors: needs TRITON_INTERPRET=1"
)
