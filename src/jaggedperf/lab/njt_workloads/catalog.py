"""The workloads: NJT functions and modules as users write them, each built for one batch with what a training step
needs (the module's parameters or the NJT input that requires grad, and the output gradient: an NJT like the output,
with its cached seqlens, as the compiled backward of ``torch.compile`` on an NJT requires of a tangent). They follow
common patterns: PyTorch's tutorial of jagged self-attention (a packed projection, heads split by
``unflatten``/``transpose``, ``scaled_dot_product_attention`` on NJTs), a layer norm with pointwise work and a
residual, a softmax over the ragged dim, tritonbench's jagged mean on the NJT, and the identity (the boundary's own
cost)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from jaggedperf.batch import JaggedBatch

__all__ = ["WORKLOADS", "Built", "NormBlock", "SelfAttention", "Workload", "get", "identity", "njt_mean",
           "ragged_softmax", "ragged_softmax_reference"]


class SelfAttention(torch.nn.Module):
    """Multi-head self-attention over each sequence of an NJT: one packed q/k/v projection, SDPA, out projection."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = torch.chunk(self.qkv(x), 3, dim=-1)
        q, k, v = (t.unflatten(-1, [self.heads, -1]).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v)
        return self.out(attended.transpose(1, 2).flatten(-2))


class NormBlock(torch.nn.Module):
    """Layer norm, a projection, an activation, a residual: NJT in, NJT out."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.proj(self.norm(x))) * 0.5


def ragged_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=1) * 2.0


def ragged_softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """``ragged_softmax`` sequence by sequence on dense tensors (differentiable in ``x``'s values): the reference
    where torch's NJT softmax backward over the ragged dim is wrong (``jaggedperf.boundary.lowering``)."""
    values, bounds = x.values(), x.offsets().tolist()
    pieces = [torch.softmax(values[a:b], dim=0) for a, b in zip(bounds, bounds[1:])]
    return torch.nested.nested_tensor_from_jagged(torch.cat(pieces) * 2.0, x.offsets())


def njt_mean(x: torch.Tensor) -> torch.Tensor:
    return torch.mean(x, dim=1)


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class Built:
    """One workload on one batch."""

    fn: Callable[..., torch.Tensor]  # a function or module
    x: torch.Tensor  # the NJT it is called on
    leaves: tuple[torch.Tensor, ...]  # what a training step's gradients reach (reset to None after each step)
    grad: torch.Tensor | None  # the output gradient a training step backpropagates; None: no training step


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[[JaggedBatch, torch.dtype], Built]
    needs_cuda: bool = False  # SDPA on NJTs has no CPU kernel
    # Where torch's own NJT implementation is wrong: the same function computed another way, run in float64 on the
    # input NJT (its outputs and gradients are every way's reference then), and what is wrong in torch's (eager mode
    # and torch.compile measured against it too, not held to it)
    reference: Callable[[torch.Tensor], torch.Tensor] | None = None
    torch_wrong: str = ""


def _njt(batch: JaggedBatch, dtype: torch.dtype, requires_grad: bool) -> torch.Tensor:
    nt = torch.nested.nested_tensor_from_jagged(batch.values.to(dtype), batch.offsets, min_seqlen=batch.min_seqlen,
                                                max_seqlen=batch.max_seqlen)
    return nt.detach().requires_grad_(requires_grad)


def _grad_like(out: torch.Tensor, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator(device=out.device).manual_seed(seed)
    if not out.is_nested:
        return torch.randn(out.shape, generator=gen, device=out.device, dtype=out.dtype)
    values = torch.randn(out._values.shape, generator=gen, device=out.device, dtype=out.dtype)
    return torch.nested.nested_tensor_from_jagged(values, out._offsets, min_seqlen=out._maybe_min_seqlen,
                                                  max_seqlen=out._maybe_max_seqlen)


def _module(make: Callable[[int], torch.nn.Module]) -> Callable[[JaggedBatch, torch.dtype], Built]:
    def build(batch: JaggedBatch, dtype: torch.dtype) -> Built:
        torch.manual_seed(0)
        module = make(batch.M).to(device=batch.device, dtype=dtype)
        x = _njt(batch, dtype, requires_grad=False)
        with torch.no_grad():
            grad = _grad_like(module(x))
        return Built(module, x, tuple(module.parameters()), grad)

    return build


def _function(fn: Callable[[torch.Tensor], torch.Tensor], trains: bool) -> Callable[[JaggedBatch, torch.dtype], Built]:
    def build(batch: JaggedBatch, dtype: torch.dtype) -> Built:
        x = _njt(batch, dtype, requires_grad=trains)
        with torch.no_grad():
            grad = _grad_like(fn(x)) if trains else None
        return Built(fn, x, (x,) if trains else (), grad)

    return build


WORKLOADS = (
    Workload("attention", "self-attention over each sequence (PyTorch's NJT tutorial): projection, SDPA on NJTs",
             _module(lambda width: SelfAttention(width, heads=4)), needs_cuda=True),
    Workload("norm_block", "layer norm, projection, GELU, residual: NJT in, NJT out", _module(NormBlock)),
    Workload("ragged_softmax", "softmax over each sequence (the ragged dim), NJT out; the input trains",
             _function(ragged_softmax, trains=True), reference=ragged_softmax_reference,
             torch_wrong="torch's NJT softmax backward over the ragged dim reduces over the columns (its gradient)"),
    Workload("njt_mean", "tritonbench's jagged mean on the NJT (torch.mean over the ragged dim)",
             _function(njt_mean, trains=False)),
    Workload("identity", "returns its NJT argument: the boundary's own cost", _function(identity, trains=False)),
)


def get(name: str) -> Workload:
    """The workload of that name.

    Raises:
        KeyError: no such workload (the message lists them).
    """
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(f"no workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")
