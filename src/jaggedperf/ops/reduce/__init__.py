"""The jagged reductions: ``jagged_sum`` / ``jagged_mean`` and their operators.

``kernels`` (the Triton kernels) → ``plan`` (kernels, grids and outputs for a call) → ``op`` (the
``triton_op`` registrations, autograd, the CPU kernel) → ``api`` (the public functions).
"""

from jaggedperf.ops.reduce.api import jagged_mean, jagged_sum

__all__ = ["jagged_mean", "jagged_sum"]
