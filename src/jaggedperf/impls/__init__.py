"""Named implementations of jagged ops (the lab's contenders).

The registry is imported first, then each built-in module, which registers its op and implementations
with it; no module of this package imports another's registrations back, so there is no import cycle
(``rec_block`` reuses ``jagged_mean``'s setup hook, a plain function).
"""

from jaggedperf.impls.registry import OPS, Implementation, Op, get_implementation, get_op, implementation_names

from jaggedperf.impls import jagged_mean  # noqa: E402,F401  (registers jagged_mean and its implementations)
from jaggedperf.impls import rec_block  # noqa: E402,F401  (registers rec_block, a model, and its implementations)
from jaggedperf.impls import jagged_sum  # noqa: E402,F401  (registers jagged_sum and its implementations)
from jaggedperf.impls import jagged_softmax  # noqa: E402,F401  (registers jagged_softmax and its implementations)
from jaggedperf.impls import jagged_layer_norm  # noqa: E402,F401  (registers jagged_layer_norm and its ...)
from jaggedperf.impls import helion_contenders  # noqa: E402,F401  (helion of each family op, or why not)

__all__ = ["OPS", "Implementation", "Op", "get_implementation", "get_op", "implementation_names"]
