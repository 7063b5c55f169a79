"""An operator body's launches, for any op family: ``wrap_triton`` when traced, the fast tiers when eager.

Inside a ``triton_op`` body the same plan runs two ways: traced (torch.compile, fake or functional tensors)
through ``wrap_triton``, so that Inductor sees the kernels; eagerly on real CUDA tensors (``torch.ops...``,
autograd's backward) through the fast launch tiers. The tiers' cache key must hold everything the JIT
specialises on, including the 16-byte alignment of every pointer: ``run_in_operator`` takes every tensor the
kernels read, so a misaligned view of any of them (a gradient, say) gets its own compiled kernel.
"""

from __future__ import annotations

import torch
from torch.library import wrap_triton

from jaggedperf.ops.launch.tiers import eager_key, launch_all, plain_eager


def run_in_operator(launches, values: torch.Tensor, offsets: torch.Tensor, *more: torch.Tensor) -> None:
    """Run a plan's launches from inside an operator body.

    Args:
        launches: the plan's ``Launch``es, in order.
        values: the (rows, M) tensor the kernels read (its dtype, width and row count key the launch).
        offsets: the (B + 1,) offsets.
        more: any other tensor the kernels read (their alignment joins the key).
    """
    if plain_eager(values, offsets) and all(type(t) is torch.Tensor for t in more):
        key = eager_key(values, offsets) + tuple(t.data_ptr() % 16 == 0 for t in more)
        launch_all(launches, values.device, key)
        return
    for launch in launches:
        wrap_triton(launch.kernel)[launch.grid](*launch.args, num_warps=launch.num_warps)


def fast_eager(values, offsets) -> bool:
    """Whether a public function may skip its operator: eager plain CUDA tensors, no autograd to record.

    Args:
        values, offsets: the call's tensors.

    Returns:
        True when the plan may be launched directly through the fast tiers.
    """
    return plain_eager(values, offsets) and not (values.requires_grad and torch.is_grad_enabled())
