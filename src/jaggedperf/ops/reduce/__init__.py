"""The jagged reductions: ``jagged_sum`` / ``jagged_mean`` and their operators.

``kernels`` and ``merge`` (the Triton kernels) → ``plan`` (kernels, grids and outputs for a call) → ``op`` (the
``triton_op`` registrations and their checks, the CPU kernels) → ``autograd`` (reverse and forward
mode) → ``api`` (the public functions). ``cpu`` holds the pure-torch kernels, always checking the
offsets, as operators opaque to torch.compile.
"""

from jaggedperf.ops.reduce.api import jagged_mean, jagged_sum

__all__ = ["jagged_mean", "jagged_sum"]
