"""``jaggedperf.compile`` of an ``nn.Module``: the module wrapper, a drop-in for torch.compile's OptimizedModule."""

from __future__ import annotations

import copy
from collections.abc import Sized
from typing import Any

import torch

from jaggedperf.boundary.function import BoundaryFunction

__all__ = ["BoundaryModule"]


class BoundaryModule(torch.nn.Module):
    """An ``nn.Module`` whose calls go through a :class:`BoundaryFunction` of the wrapped module.

    Its attributes are torch.compile's OptimizedModule's: it holds the original as ``_orig_mod`` (its one submodule,
    so state_dict keys gain that prefix), owns only that, ``boundary``, what its class defines (methods, ``training``)
    and nn.Module's own state (hooks, ``_buffers``, ...), and hands every other attribute read, set or deleted
    through it to the original: ``compiled.scale = 3.0`` or ``compiled.proj = nn.Identity()`` changes what the next
    call runs, as with torch.compile. The regions traced the original module itself (``boundary.fn``), so Dynamo's
    guards on its attributes recompile them after such a change, as they do torch.compile's frame.

    Attributes:
        boundary: the :class:`BoundaryFunction` of the original module that every call goes through.
    """

    # what the wrapper owns besides its class's attributes (OptimizedModule's ``_opt_mod_attributes``)
    _OWN = frozenset({"_orig_mod", "boundary", "__dict__", "_super_module_initialized"})

    def __init__(self, mod: torch.nn.Module, compile_kwargs: dict[str, Any]) -> None:
        # first, as in OptimizedModule: attribute reads and writes of the wrapper go to ``_orig_mod``, from here on
        object.__setattr__(self, "_orig_mod", mod)
        self._super_module_initialized = False  # nn.Module.__init__ sets ``training``: not the original's to take
        super().__init__()
        self._super_module_initialized = True
        self._orig_mod = mod  # now registered as the submodule (and gone from the instance's dict)
        self.boundary = BoundaryFunction(mod, compile_kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.boundary(*args, **kwargs)

    @property
    def training(self) -> bool:  # the original's mode, whichever of the two was set (``m.eval()`` too)
        return self._orig_mod.training

    @training.setter
    def training(self, value: bool) -> None:
        if self.__dict__.get("_super_module_initialized"):
            self._orig_mod.training = value

    def __getattr__(self, name: str) -> Any:
        # reached only for what the wrapper does not hold itself: the original's (its parameters, submodules and
        # plain attributes alike), never the wrapper's own registered state, as OptimizedModule reads it
        modules = self.__dict__.get("_modules")
        if modules is None or "_orig_mod" not in modules:  # no instance made by __init__: nothing to forward to
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if name == "_orig_mod":
            return modules["_orig_mod"]
        return getattr(modules["_orig_mod"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(type(self), name) or name in BoundaryModule._OWN:
            super().__setattr__(name, value)  # the class's (``training``, methods patched over) or the wrapper's own
        else:
            setattr(self._orig_mod, name, value)

    def __delattr__(self, name: str) -> None:
        if hasattr(type(self), name) or name in BoundaryModule._OWN:
            super().__delattr__(name)
        else:
            delattr(self._orig_mod, name)

    def __dir__(self) -> list[str]:
        names = self._orig_mod.__dir__()
        return names + [name for name in super().__dir__() if name not in names]

    def __len__(self) -> int:  # the original's length, as OptimizedModule's (a compiled nn.Sequential has one)
        if isinstance(self._orig_mod, Sized):
            return len(self._orig_mod)
        raise TypeError(f"{type(self._orig_mod).__name__} does not support len()")

    def __bool__(self) -> bool:
        # the original's truth, as eager mode's: without it Python would take it from ``__len__``, which raises for
        # a module that has no length (torch 2.13's OptimizedModule raises so; pytorch#196292 adds this __bool__)
        return bool(self._orig_mod)

    def __reduce__(self) -> tuple[type, tuple[torch.nn.Module, dict[str, Any]]]:
        # pickled as OptimizedModule is, as the original and the compile's arguments: the compiled regions are code
        # made at run time (no pickle takes them), and the unpickled wrapper compiles its own
        return (type(self), (self._orig_mod, self.boundary.compile_kwargs))

    def __deepcopy__(self, memo: dict) -> BoundaryModule:
        # a copy compiles its own module: the compiled regions call the module they were traced with, so copying them
        # would run (and train) the original's weights from the copy, silently
        return type(self)(copy.deepcopy(self._orig_mod, memo), self.boundary.compile_kwargs)
