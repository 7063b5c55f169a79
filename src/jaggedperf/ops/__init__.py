"""The fast half: jagged reductions as Triton kernels registered as PyTorch operators.

Knows nothing of the lab. ``jagged_sum`` / ``jagged_mean`` are the public functions; the operators
are ``torch.ops.jaggedperf.jagged_sum``, ``jagged_mean`` and ``jagged_expand`` (their backward).
``launch_path()`` tells which eager launch path is active; ``prepare_native_launch()`` builds and loads
the native one before anything is timed (``launch``).
"""

from jaggedperf.ops.launch import launch_path, prepare_native_launch
from jaggedperf.ops.reduce import jagged_mean, jagged_sum

__all__ = ["jagged_mean", "jagged_sum", "launch_path", "prepare_native_launch"]
