"""``jaggedperf.compile`` of an ``nn.Module``: the module wrapper, a drop-in for torch.compile's OptimizedModule."""

from __future__ import annotations

import copy
from typing import Any

import torch

from jaggedperf.boundary.function import BoundaryFunction

__all__ = ["BoundaryModule"]


class BoundaryModule(torch.nn.Module):
    """An ``nn.Module`` whose calls go through a :class:`BoundaryFunction` of the wrapped module.

    Like ``torch.compile``'s OptimizedModule, it holds the original as ``_orig_mod`` (so its
    state_dict keys gain that prefix) and reads unknown attributes from it.
    """

    def __init__(self, mod: torch.nn.Module, compile_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self._orig_mod = mod
        self.boundary = BoundaryFunction(mod, compile_kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.boundary(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> BoundaryModule:
        # a copy compiles its own module: the compiled regions call the module they were traced with, so copying them
        # would run (and train) the original's weights from the copy, silently
        return BoundaryModule(copy.deepcopy(self._orig_mod, memo), self.boundary.compile_kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("_orig_mod"), name)
