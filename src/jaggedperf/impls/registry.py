"""The contenders: implementations of each jagged op, registered by name with the input they take.

An implementation takes either a jagged NestedTensor (``takes="njt"``) or plain
``(values, offsets)`` tensors (``takes="dense"``). ``prepare`` turns a batch into the arguments the
implementation is called with, once, outside any timed region. An NJT implementation may also name
a ``plain`` twin: the same computation written on (values, offsets), which the doctor compiles to
separate NestedTensor overhead from the computation itself.

Setup hook. An implementation may name ``setup(device) -> dict | None``: the lab's runner calls it
once per device, before the first cell of that implementation on that device is made or timed (a
hook shared by several implementations runs once per device). It readies what the implementation's
calls need and must not be timed (a build, a cache load, a warm pool). What it returns is merged into
the run's environment (its keys are the hook's to name, e.g. ``{"native_launch": {...}}``); None
records nothing. A hook that raises makes each cell of its implementations on that device an error
with the reason, and the run goes on. Plugins register hooks the same way as the built-ins:

    @implementation("jagged_mean", "mine", takes="dense", description="…", setup=load_my_library)
    def mine(values, offsets): ...

The built-in ops and implementations are registered when ``jaggedperf.impls`` is imported (its
``__init__`` imports this module, then each built-in module), so they are there before any plugin
registers more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from jaggedperf.batch import JaggedBatch

TAKES = ("njt", "dense")

SetupHook = Callable[[torch.device], "dict | None"]


@dataclass(frozen=True)
class Implementation:
    op: str
    name: str
    fn: Callable[..., torch.Tensor]
    takes: str  # "njt" or "dense"
    description: str
    pads: bool = False  # materialises a (B, padded_len, M) tensor: subject to the lab's byte limit
    plain: Callable[..., torch.Tensor] | None = None  # (values, offsets, padded_len) twin of an NJT implementation
    devices: tuple[str, ...] = ("cpu", "cuda")
    takes_max_seqlen: bool = False  # a dense implementation that takes the batch's max_seqlen (a host int)
    setup: SetupHook | None = None  # called once per device before its first cell (see the module docstring)

    def prepare(self, batch: JaggedBatch) -> tuple:
        """Arguments for ``fn``: (nt,) or (values, offsets), plus the padded length where it pads, plus
        max_seqlen where it takes one (an NJT carries its own)."""
        extra = (batch.padded_len,) if self.pads else ()
        if self.takes_max_seqlen:
            extra += (batch.max_seqlen,)
        if self.takes == "njt":
            return (batch.to_nested(), *extra)
        return (batch.values, batch.offsets, *extra)

    def prepare_plain(self, batch: JaggedBatch) -> tuple:
        """Arguments for ``plain``: (values, offsets, padded_len)."""
        return (batch.values, batch.offsets, batch.padded_len)


@dataclass
class Op:
    name: str
    reference: Callable[[JaggedBatch], torch.Tensor]  # float64 result on the CPU
    must_move_bytes: Callable[[JaggedBatch], int]  # fewest bytes any implementation must move
    description: str
    implementations: dict[str, Implementation] = field(default_factory=dict)


OPS: dict[str, Op] = {}


def register_op(op: Op) -> Op:
    """Register ``op`` under its name (replacing one of the same name).

    Args:
        op: the op, with no implementations yet or some.

    Returns:
        ``op``.
    """
    OPS[op.name] = op
    return op


def implementation(op: str, name: str, *, takes: str, description: str, pads: bool = False, plain=None,
                   devices=("cpu", "cuda"), takes_max_seqlen: bool = False, setup: SetupHook | None = None):
    """Decorator: register ``fn`` as implementation ``name`` of ``op``.

    Args:
        op: a registered op's name.
        name: the implementation's name (replaces one of the same name).
        takes: ``"njt"`` or ``"dense"``.
        description: one line for ``jaggedperf list``.
        pads, plain, devices, takes_max_seqlen: see ``Implementation``.
        setup: the setup hook (see the module docstring), or None.

    Returns:
        The decorator; it returns ``fn`` unchanged.

    Raises:
        ValueError: ``takes`` is neither.
        KeyError: ``op`` is not registered (when the decorator is applied).
    """
    if takes not in TAKES:
        raise ValueError(f"takes must be one of {TAKES}; got {takes!r}")

    def register(fn):
        get_op(op).implementations[name] = Implementation(op, name, fn, takes, description, pads, plain,
                                                          tuple(devices), takes_max_seqlen, setup)
        return fn

    return register


def get_op(name: str) -> Op:
    """The op registered as ``name``.

    Raises:
        KeyError: no such op (the message lists the valid ones).
    """
    if name not in OPS:
        raise KeyError(f"unknown op {name!r}; valid ops: {', '.join(sorted(OPS)) or '(none)'}")
    return OPS[name]


def get_implementation(op: str, name: str) -> Implementation:
    """Implementation ``name`` of ``op``.

    Raises:
        KeyError: no such op or implementation (the message lists the valid ones).
    """
    impls = get_op(op).implementations
    if name not in impls:
        raise KeyError(f"unknown implementation {name!r} of {op}; valid: {', '.join(impls)}")
    return impls[name]


def implementation_names(op: str) -> list[str]:
    """The names of ``op``'s implementations, in registration order.

    Raises:
        KeyError: no such op.
    """
    return list(get_op(op).implementations)
