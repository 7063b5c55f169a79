"""Out-of-bounds accesses of Triton kernels run by the interpreter (TRITON_INTERPRET=1), as errors.

A CUDA kernel that reads past its tensors faults on the GPU (or, worse, reads another allocation's bytes); under the
interpreter the same read silently returns host memory. ``check_bounds()`` makes every *unmasked* element of every
``tl.load`` / ``tl.store`` an error unless all its bytes lie inside the storage of one tensor argument of the launch
that runs it (views included: the whole storage counts, as a CUDA allocation would). Masked-off lanes are never
checked: the kernels compute wild addresses there on purpose and never touch them.

It patches the interpreter's private hooks (``GridExecutor._init_args_hst``, the builder's masked load and store),
for the process, before its first launch: ``tests/conftest.py`` does so in every pytest process that interprets
kernels, and a subprocess (``helpers.isolated.run_isolated``) calls it itself. A Triton without those hooks raises, so
that the check can never be silently absent.
"""

from __future__ import annotations

import numpy as np
import torch


class OutOfBounds(AssertionError):
    """An unmasked load or store outside every tensor argument of its launch."""


def check_bounds() -> None:
    """Check every unmasked interpreter load and store from now on (see the module's docstring).

    Raises:
        RuntimeError: this Triton's interpreter has not the hooks the check patches.
    """
    from triton.runtime import interpreter

    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    if not all(hasattr(c, n) for c, n in ((executor, "_init_args_hst"), (builder, "create_masked_load"),
                                          (builder, "create_masked_store"))):
        raise RuntimeError("this Triton's interpreter has no hooks for the bounds check")
    launch = {"name": "?", "ranges": []}
    init_args = executor._init_args_hst

    def init(self, args_dev, kwargs):
        args, kwargs_hst = init_args(self, args_dev, kwargs)
        launch["name"] = getattr(self.fn, "__name__", repr(self.fn))
        launch["ranges"] = [(t.untyped_storage().data_ptr(), t.untyped_storage().data_ptr() + t.untyped_storage().nbytes())
                            for t in _tensors(list(args) + list(kwargs_hst.values()))]
        return args, kwargs_hst

    def checked(ptrs, mask, what: str) -> None:
        addresses = np.unique(ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape).astype(bool)])
        if addresses.size == 0:
            return
        size = max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)  # the pointee's bytes
        inside = np.zeros(addresses.shape, dtype=bool)
        for lo, hi in launch["ranges"]:
            inside |= (addresses >= lo) & (addresses + size <= hi)
        if not inside.all():
            raise OutOfBounds(f"{launch['name']}: unmasked {what} of {int((~inside).sum())} address(es) outside every "
                              f"tensor argument (first {int(addresses[~inside][0])}; arguments {launch['ranges']})")

    load, store = builder.create_masked_load, builder.create_masked_store

    def masked_load(self, ptrs, mask, other, *rest):
        checked(ptrs, mask, "load")
        return load(self, ptrs, mask, other, *rest)

    def masked_store(self, ptrs, value, mask, *rest):
        checked(ptrs, mask, "store")
        return store(self, ptrs, value, mask, *rest)

    executor._init_args_hst = init
    builder.create_masked_load = masked_load
    builder.create_masked_store = masked_store


def _tensors(args: list) -> list[torch.Tensor]:
    out = []
    for a in args:
        if isinstance(a, tuple):
            out += _tensors(list(a))
        elif isinstance(a, torch.Tensor):
            out.append(a)
        elif hasattr(a, "base") and isinstance(a.base, torch.Tensor):  # a tensor descriptor
            out.append(a.base)
    return out
