"""The jagged softmax along the ragged dimension: ``jagged_softmax`` and its operators.

``kernels`` (the Triton kernels) → ``plan`` (kernel, grid and output for a call) → ``op`` (the
``triton_op`` registrations, autograd, the CPU kernel) → ``api`` (the public function).
"""

from jaggedperf.ops.softmax.api import jagged_softmax

__all__ = ["jagged_softmax"]
