"""The jagged layer norm over each sequence's len × M elements: ``jagged_layer_norm`` and its operators.

``kernels`` (the Triton kernels) → ``plan`` (kernel, grid and output for a call) → ``op`` (the
``triton_op`` registrations, autograd, the CPU kernel) → ``api`` (the public function).
"""

from jaggedperf.ops.layer_norm.api import jagged_layer_norm

__all__ = ["jagged_layer_norm"]
