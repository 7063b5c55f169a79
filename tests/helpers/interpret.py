"""What the ops tests share about their environment: the interpreter switch, examples per property, Triton's
backends."""

import os

import pytest

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# Examples per interpreter property test (each one launches real kernels in the interpreter: ~0.1-0.3 s); "ci" sized
# for CI's 20 minutes on two cores (docs/decisions/ci-budget.md), "dev" fifteen times as many.
INTERP_EXAMPLES = {"ci": 40, "dev": 600}.get(PROFILE, 40)

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
needs_interpreter = pytest.mark.skipif(
    not INTERPRET, reason="runs the Triton kernels on CPU tensors: needs TRITON_INTERPRET=1"
)


def nvidia_backend() -> bool:
    """Whether the installed Triton has its nvidia backend (what compiling for sm_90 without a GPU needs)."""
    try:
        from triton.backends import backends

        return "nvidia" in backends
    except Exception:  # noqa: BLE001 - any import failure means no backend
        return False
