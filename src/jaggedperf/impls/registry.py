"""The contenders: implementations of each jagged op, registered by name with the input they take.

An implementation takes either a jagged NestedTensor (``takes="njt"``) or plain
``(values, offsets)`` tensors (``takes="dense"``). ``prepare`` turns a batch into the arguments the
implementation is called with, once, outside any timed region. An NJT implementation may also name
a ``plain`` twin: the same computation written on (values, offsets), which the doctor compiles to
separate NestedTensor overhead from the computation itself.

An op's inputs. Each op says how a case becomes its batch (``Op.make_batch``; by default a
``JaggedBatch`` of random values, ``jaggedperf.inputs.make_batch``) and which tensors its
implementations take after the jagged input (``Op.params``; by default none). A model op's batch is
its own type (e.g. ``rec_block``'s ``LookupBatch``: jagged ids plus the block's weights); the lab reads
of any batch only what ``Batch`` names, and only the op's reference, byte count and implementations
read the rest. Every implementation of an op is called as

    fn(<nt> | <values, offsets>, [padded_len], [max_seqlen], *op.params(batch))

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
from typing import Callable, Protocol

import torch

from jaggedperf.checks import check_layout
from jaggedperf.inputs import Case, make_batch
from jaggedperf.names import unknown_message

TAKES = ("njt", "dense")

SetupHook = Callable[[torch.device], "dict | None"]


class Batch(Protocol):
    """What the lab reads of any op's batch (``JaggedBatch`` is one; so is ``rec_block``'s ``LookupBatch``).

    ``values`` is the jagged input's values, ``(total_len, ...)``; ``offsets`` its ``(B+1,)`` int64
    offsets; the seqlens are host ints computed when the batch was made; ``padded_nbytes`` is the dense
    ``(B, padded_len, M)`` tensor a padded implementation materialises; ``to_nested`` is the NJT an
    ``njt`` implementation takes.
    """

    values: torch.Tensor
    offsets: torch.Tensor
    max_seqlen: int
    min_seqlen: int
    padded_len: int

    @property
    def B(self) -> int: ...

    @property
    def M(self) -> int: ...

    @property
    def total_len(self) -> int: ...

    def padded_nbytes(self) -> int: ...

    def to_nested(self) -> torch.Tensor: ...


def make_jagged_batch(case: Case, device: torch.device) -> Batch:
    """The default ``Op.make_batch``: ``jaggedperf.inputs.make_batch``, its layout checked (the lab checks
    the offsets of every batch).

    Raises:
        TypeError, ValueError: the batch breaks the jagged layout (``checks.check_layout``).
    """
    batch = make_batch(case, device)
    check_layout(batch.values, batch.offsets)
    return batch


def no_params(batch: Batch) -> tuple[torch.Tensor, ...]:
    """The default ``Op.params``: the implementations take nothing after the jagged input."""
    return ()


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

    def prepare(self, batch: Batch) -> tuple:
        """Arguments for ``fn``: (nt,) or (values, offsets), plus the padded length where it pads, plus
        max_seqlen where it takes one (an NJT carries its own), plus the op's params."""
        extra = (batch.padded_len,) if self.pads else ()
        if self.takes_max_seqlen:
            extra += (batch.max_seqlen,)
        extra += get_op(self.op).params(batch)
        if self.takes == "njt":
            return (batch.to_nested(), *extra)
        return (batch.values, batch.offsets, *extra)

    def prepare_plain(self, batch: Batch) -> tuple:
        """Arguments for ``plain``: (values, offsets, padded_len), plus the op's params."""
        return (batch.values, batch.offsets, batch.padded_len, *get_op(self.op).params(batch))


@dataclass
class Op:
    name: str
    # float64 result on the batch's device, or on the CPU where that device ran out of memory (impls.reference)
    reference: Callable[[Batch], torch.Tensor]
    must_move_bytes: Callable[[Batch], int]  # fewest bytes any implementation must move
    description: str
    implementations: dict[str, Implementation] = field(default_factory=dict)
    make_batch: Callable[[Case, torch.device], Batch] = make_jagged_batch  # the case's batch, on the device
    params: Callable[[Batch], tuple[torch.Tensor, ...]] = no_params  # tensors every implementation takes last
    unavailable: dict[str, str] = field(default_factory=dict)  # name -> why it is not registered here (optional ones)


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
        get_op(op).unavailable.pop(name, None)
        get_op(op).implementations[name] = Implementation(op, name, fn, takes, description, pads, plain,
                                                          tuple(devices), takes_max_seqlen, setup)
        return fn

    return register


def mark_unavailable(op: str, name: str, reason: str) -> None:
    """Record that optional implementation ``name`` of ``op`` is not registered here, and why (a package that does
    not import, no CUDA device); it is dropped if it was registered. ``jaggedperf list`` shows the reason.

    Raises:
        KeyError: ``op`` is not registered.
    """
    spec = get_op(op)
    spec.implementations.pop(name, None)
    spec.unavailable[name] = reason


def get_op(name: str) -> Op:
    """The op registered as ``name``.

    Raises:
        KeyError: no such op (the message names the closest valid ones and lists them all).
    """
    if name not in OPS:
        raise KeyError(unknown_message("op", name, sorted(OPS)))
    return OPS[name]


def get_implementation(op: str, name: str) -> Implementation:
    """Implementation ``name`` of ``op``.

    Raises:
        KeyError: no such op or implementation (the message names the closest valid ones and lists them all).
    """
    spec = get_op(op)
    impls = spec.implementations
    if name in spec.unavailable:
        raise KeyError(f"implementation {name!r} of {op} is not available here: {spec.unavailable[name]}")
    if name not in impls:
        raise KeyError(unknown_message("implementation", name, list(impls), f"of {op}"))
    return impls[name]


def implementation_names(op: str) -> list[str]:
    """The names of ``op``'s implementations, in registration order.

    Raises:
        KeyError: no such op.
    """
    return list(get_op(op).implementations)
