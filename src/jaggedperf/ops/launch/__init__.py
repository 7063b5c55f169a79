"""The fast eager launch tiers, one entry point for every op family.

An eager CUDA call is served by the first of:

- ``native``: the whole call in one C++ call (checks, allocation, ``cuLaunchKernel``), for a call whose
  plan the Python path has registered and checked (``native.py``, ``native.cpp``);
- ``tiers``: the Python path's launches of already-compiled Triton kernels past the JIT's binder, each
  tier verified against the JIT before it is used (``tiers.py``);
- the JIT itself (``kernel[grid](...)``).

``launch_path()`` says which is active and why; ``force_tier`` (benchmarks) pins one Python tier and makes
the native path stand aside meanwhile. Dependencies run one way: this package imports ``tiers`` and
``native``; ``native`` imports ``tiers``' cache and ``verification``; ``tiers`` imports ``verification``.
"""

from __future__ import annotations

from jaggedperf.ops.launch import native, tiers
from jaggedperf.ops.launch.tiers import TIERS, compiled, eager_key, launch_all, plain_eager

__all__ = ["TIERS", "compiled", "eager_key", "force_tier", "launch_all", "launch_path", "native", "plain_eager",
           "prepare_native_launch"]


def launch_path() -> dict:
    """What the fast eager path is doing.

    Returns:
        the Python tiers' state (active tier, launches per tier, why tiers were dropped) with the native
        path's under ``"native"`` (status, why it is off, build time, plans registered and served).
    """
    return {**tiers.state(), "native": native.state()}


def force_tier(tier: str | None) -> None:
    """Benchmarks: launch through ``tier`` only (``"jit"`` for the normal path); None restores. While a tier
    is forced the native path stands aside (the forced tier is what is being timed).

    Args:
        tier: one of TIERS, or None.

    Raises:
        ValueError: for another tier name.
    """
    tiers.force(tier)
    native.pause("force_tier", tier is not None)


def prepare_native_launch() -> dict:
    """Build (if needed) and load the native launch path now, in this thread (before timing anything).

    Returns:
        ``native.state()``: ``status`` is ``"ready"`` when the path is on; never raises.
    """
    return native.ensure()
