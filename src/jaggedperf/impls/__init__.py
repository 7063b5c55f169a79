"""Named implementations of jagged ops (the lab's contenders)."""

from jaggedperf.impls.registry import OPS, Implementation, Op, get_implementation, get_op, implementation_names

__all__ = ["OPS", "Implementation", "Op", "get_implementation", "get_op", "implementation_names"]
