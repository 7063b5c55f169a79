"""The fast half: jagged reductions, softmax and layer norm as Triton kernels registered as PyTorch operators.

Knows nothing of the lab. ``jagged_sum`` / ``jagged_mean`` / ``jagged_softmax`` / ``jagged_layer_norm`` are the
public functions; the operators are ``torch.ops.jaggedperf.jagged_sum``, ``jagged_mean`` and ``jagged_expand``
(their backward), ``jagged_softmax`` / ``jagged_layer_norm`` and their ``*_backward``.
``launch_path()`` tells which eager launch path is active; ``prepare_native_launch()`` builds and loads
the native one before anything is timed (``launch``). ``jaggedperf.ops.testing`` holds the seams tests
and benchmarks use (unstable).

Without the ``triton`` package ``import jaggedperf`` still works (batches, inputs, the lab's other
implementations): ``has_triton()`` is False, the operators are not registered, and the four public
functions raise ModuleNotFoundError naming the package.
"""

from jaggedperf.ops.launch import launch_path, prepare_native_launch

MISSING_TRITON = "jaggedperf's ops need the 'triton' package: pip install triton (CUDA builds of torch ship it)"

try:
    from jaggedperf.ops.layer_norm import jagged_layer_norm
    from jaggedperf.ops.reduce import jagged_mean, jagged_sum
    from jaggedperf.ops.softmax import jagged_softmax
except ModuleNotFoundError as missing:  # only a missing triton: any other import error is a bug to see
    if missing.name != "triton" and not (missing.name or "").startswith("triton."):
        raise
    _TRITON_ERROR: ModuleNotFoundError | None = missing

    def _requires_triton(name: str):
        def unavailable(*args, **kwargs):
            raise ModuleNotFoundError(MISSING_TRITON, name="triton") from _TRITON_ERROR

        unavailable.__name__ = unavailable.__qualname__ = name
        unavailable.__doc__ = f"Unavailable in this environment: {MISSING_TRITON}."
        return unavailable

    jagged_sum, jagged_mean = _requires_triton("jagged_sum"), _requires_triton("jagged_mean")
    jagged_softmax, jagged_layer_norm = _requires_triton("jagged_softmax"), _requires_triton("jagged_layer_norm")
else:
    _TRITON_ERROR = None


def has_triton() -> bool:
    """Whether the ops are available (the ``triton`` package imported).

    Returns:
        False when the public functions raise ModuleNotFoundError for want of triton.
    """
    return _TRITON_ERROR is None


__all__ = ["MISSING_TRITON", "has_triton", "jagged_layer_norm", "jagged_mean", "jagged_softmax", "jagged_sum",
           "launch_path", "prepare_native_launch"]
