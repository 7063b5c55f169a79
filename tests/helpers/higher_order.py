"""Higher-order derivatives of the ops and of their float64 references under one transform each (torch.func's, a
gradient penalty, forward-over-reverse): shared by the CPU tests (tests/ops/test_higher_order.py) and the GPU's."""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as fwAD

from helpers.family import EPS, reference_graph
from helpers.reference import lengths_to_offsets

OPS = ("sum", "mean", "softmax", "layer_norm")
TRANSFORMS = ("grad", "grad of grad", "jacrev of grad", "jvp of grad", "hessian", "vmap of grad",
              "forward-over-reverse", "gradient penalty")
LENGTHS = {"sum": [3, 0, 1, 4], "mean": [3, 1, 4], "softmax": [3, 0, 1, 4], "layer_norm": [3, 0, 1, 4]}
M = 2


def operator(op: str, offsets):
    """``torch.ops.jaggedperf``'s op as a function of the values (float64 on the CPU: exact comparisons)."""
    ops = torch.ops.jaggedperf
    return {"sum": lambda x: ops.jagged_sum(x, offsets), "mean": lambda x: ops.jagged_mean(x, offsets, False),
            "softmax": lambda x: ops.jagged_softmax(x, offsets),
            "layer_norm": lambda x: ops.jagged_layer_norm(x, offsets, EPS)}[op]


def reference(op: str, offsets):
    """The float64 reference of ``op`` (a loop over segments) as a differentiable function of the values."""
    bounds = [int(b) for b in offsets]

    def reduce(x, mean):
        return torch.stack([x[a:b].sum(0) / ((b - a) if mean else 1) for a, b in zip(bounds[:-1], bounds[1:])])

    if op in ("sum", "mean"):
        return lambda x: reduce(x, op == "mean")
    return lambda x: reference_graph(op, x, offsets.cpu())


def case(op: str, seed: int = 0):
    """(offsets, values x, the loss's weight, a tangent), float64 on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    offsets = lengths_to_offsets(LENGTHS[op])
    n_rows = int(offsets[-1])
    n_out = len(LENGTHS[op]) if op in ("sum", "mean") else n_rows
    x = torch.randn(n_rows, M, generator=gen, dtype=torch.float64)
    return (offsets, x, torch.randn(n_out, M, generator=gen, dtype=torch.float64),
            torch.randn(n_rows, M, generator=gen, dtype=torch.float64))


FUNC_TRANSFORMS = ("grad", "grad of grad", "jacrev of grad", "jvp of grad", "hessian", "vmap of grad")


def loss_of(f, weight):
    """The loss Σ weight · tanh(f(x)) as a function of x: nonlinear after the op, so every op has a Hessian."""
    return lambda x: (weight * torch.tanh(f(x))).sum()


def func_transform(name: str, f, weight, tangent):
    """``name`` (one of ``FUNC_TRANSFORMS``: torch.func's) of ``loss_of(f, weight)`` as a function of x (one
    torch.compile can trace whole)."""
    loss = loss_of(f, weight)
    grad = torch.func.grad(loss)
    return {"grad": grad,
            "grad of grad": torch.func.grad(lambda x: (grad(x) * tangent).sum()),
            "jacrev of grad": torch.func.jacrev(grad),
            "jvp of grad": lambda x: torch.func.jvp(grad, (x,), (tangent,))[1],
            "hessian": torch.func.hessian(loss),
            "vmap of grad": lambda x: torch.func.vmap(grad)(torch.stack([x, 2 * x, -x]))}[name]


def transform(name: str, f, x, weight, tangent) -> torch.Tensor:
    """``name`` (one of ``TRANSFORMS``) of ``loss_of(f, weight)`` at ``x``; ``tangent`` the vector of the products."""
    if name in FUNC_TRANSFORMS:
        return func_transform(name, f, weight, tangent)(x)
    loss = loss_of(f, weight)

    if name == "forward-over-reverse":  # torch.autograd.forward_ad's tangent through autograd's backward
        with fwAD.dual_level():
            dual = fwAD.make_dual(x.clone().requires_grad_(), tangent)
            (g,) = torch.autograd.grad(loss(dual), dual)
            product = fwAD.unpack_dual(g).tangent
        assert product is not None, "the Hessian-vector product's tangent was dropped"
        return product
    if name == "gradient penalty":  # a training step with the gradient's norm in its loss (create_graph)
        leaf = x.clone().requires_grad_()
        (g,) = torch.autograd.grad(loss(leaf), leaf, create_graph=True)
        g.pow(2).sum().backward()
        return leaf.grad
    raise ValueError(f"no transform {name!r}")
