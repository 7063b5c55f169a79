"""NJT operators that a region's compile computes another way: a softmax over the ragged dim and its backward, and a
sum or mean over it (which torch cannot differentiate).

Inside a region ``fn`` runs on NJTs, and torch computes their ops through the NJT's table of jagged implementations
(``torch.nested._internal.ops``) while Dynamo and AOTAutograd trace. Two of those are wrong or slow on the ragged dim:

- ``aten._softmax_backward_data`` hands the NJTs' values and the op's ``dim`` to the dense op unchanged, so over the
  ragged dim (dim 1 of a (B, j, M) NJT) it reduces over the values' dim 1, the columns: the gradient of
  ``torch.softmax(nt, dim=1)`` is silently wrong, eagerly and under torch.compile (measured on torch 2.11, 2.13 and 2.15
  on the CPU, and on 2.11 on CUDA: ``tests/boundary/test_lowering.py`` holds it against a float64 reference, a strict
  xfail that passes once a torch fixes it);
- ``aten._softmax`` over the ragged dim pads the values to (B, max_seqlen, M) with −inf, runs a dense softmax and cuts
  the padding off again: two more passes over a padded buffer.

While a region is traced (``tracing``: the boundary enters it around each region call, where Dynamo and AOTAutograd
trace on a first call or a recompile) the table's entries for those two ops compute the ragged-dim case otherwise:

- on CUDA with ``jaggedperf::jagged_softmax`` and ``jagged_softmax_backward`` on the values viewed as (N, columns):
  one kernel each, no padded buffer;
- elsewhere (the CPU; float64 on CUDA) from torch ops traced into the graph, which Inductor fuses: a segment index
  (``bucketize`` of the offsets), the segments' column maxima (``scatter_reduce``), exponentials and their sums
  (``index_add``), and the backward y · (g − Σ_segment g·y): the CPU operator's math (``ops.softmax.op``) without its
  host check of the offsets, which a region's NJT has valid (the operator itself, opaque to the compiler and checking
  them on every call, made a step at 16 × 32 × ≤ 20 take 1.3 ms against 0.56; torch's padded forward runs the
  padding ops' eager loops).

The forward reads the max_seqlen as torch's implementation reads it (a host read where the NJT caches none, which the
boundary then makes before crossing, as eager mode caches it on the NJT): input and output NJTs cache what they cache
under torch.compile, and the CUDA kernels take their one-tile path.

A third case is above the table, in the region's graph: a sum or mean over the ragged dim (``nt.sum(dim=1)``,
``nt.mean(1, keepdim=True)``, ``torch.mean(nt, dim=1)``). torch pads the values to (B, max_seqlen, M) and reduces
the padded tensor, and it cannot differentiate either: the sum's NJT backward (``aten._nested_sum_backward``) is not
implemented and the mean's dense backward expands to the NJT's symbolic sizes (both raise, eagerly and under
torch.compile, measured on torch 2.11, 2.13 and 2.15), so a model that trains on a pooled NJT fails in ``backward()``.
``lower_graph`` (called by the regions' backend on each Dynamo graph, before AOTAutograd traces it) replaces such a
call with ``ragged_reduce``: jaggedperf's ``jagged_sum`` / ``jagged_mean`` operators on the NJT's values and offsets
(the cached max_seqlen passed where there is one), whose autograd is theirs: one kernel forward, one backward, no
padded buffer. An empty segment's mean is NaN, as torch's 0 / 0.

Every other case, and every call outside a region's trace (the user's eager code, ``torch.compile`` on the NJT), goes to
torch's own implementation: ``install`` wraps the table's entries, it does not change what they do there.

Invariants:
- lowered only where the result is the same function (and for the backward, the right one): an NJT without holes
  whose ragged dim is 1, the reduced dim that ragged dim, a floating dtype the computation takes on that device, no
  ``half_to_float``; the output NJT has its input's offsets, lengths, ragged index and metadata cache (torch's
  ``extract_kwargs``), as torch's implementation builds it;
- the compiled graph holds plain-tensor ops: a compiled call never reaches this module (a lookup in torch's table
  outside a trace costs one thread-local read);
- where this torch's NJT internals differ (its table or ``extract_kwargs`` missing), nothing is installed and regions
  compile torch's implementations.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from jaggedperf.njt import JAGGED_CLASS, cached_seqlen

__all__ = ["active", "install", "installed", "lower_graph", "ragged_reduce", "tracing"]

_aten = torch.ops.aten

_state = threading.local()


class tracing:
    """Lower the ragged-dim cases while the block runs (a region's call: traced on its first call or a recompile).

    A class with slots rather than a generator context: the boundary enters it on every region call, where a
    ``contextlib`` frame costs more than the two attribute writes."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = getattr(_state, "on", False)
        _state.on = True

    def __exit__(self, *exc: Any) -> None:
        _state.on = self._before


def active() -> bool:
    """Whether a region is being traced on this thread (``tracing``)."""
    return getattr(_state, "on", False)


def _columns(values: torch.Tensor) -> torch.Tensor:
    """(N, ...) values as (N, columns), contiguous: a softmax over the rows treats every column alike."""
    flat = values.reshape(values.shape[0], -1) if values.dim() != 2 else values
    return flat if flat.is_contiguous() else flat.contiguous()


def _ragged_dim(nt: torch.Tensor, dim: int) -> bool:
    """Whether ``dim`` of the NJT ``nt`` is its ragged dim 1 and ``nt`` has no holes."""
    if not isinstance(nt, JAGGED_CLASS) or nt._lengths is not None or nt._ragged_idx != 1:
        return False
    ndim = nt.dim()
    return isinstance(dim, int) and -ndim <= dim < ndim and dim % ndim == 1


def _operators_take(values: torch.Tensor) -> bool:
    """Whether jaggedperf's operators take ``values``: a dtype of theirs on its device, and Triton there on CUDA."""
    from jaggedperf.ops import has_triton
    from jaggedperf.ops.rowwise import operator_dtypes

    return values.dtype in operator_dtypes(values) and (values.device.type != "cuda" or has_triton())


def _on_cuda(values: torch.Tensor) -> bool:
    """Whether jaggedperf's softmax operators take ``values`` on CUDA (elsewhere the softmax is traced torch ops)."""
    return values.device.type == "cuda" and _operators_take(values)


def _segments(rows: int, offsets: torch.Tensor) -> torch.Tensor:
    """The segment of each of ``rows`` rows: b where offsets[b] <= r < offsets[b+1] (traced: a compiled search)."""
    return torch.bucketize(torch.arange(rows, device=offsets.device, dtype=offsets.dtype), offsets[1:], right=True)


def _segment_softmax(x: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The softmax of each segment's rows per column of (N, C) ``x``, from torch ops (traced into the graph, which the
    compiler fuses into a few passes), in fp32 for 16-bit dtypes; a column of −inf gives NaN, as torch.softmax."""
    from jaggedperf.ops.rowwise import acc_dtype

    acc = acc_dtype(x.dtype)
    segment = _segments(x.shape[0], offsets)
    xf = x.to(acc)
    top = torch.full((offsets.shape[0] - 1, x.shape[1]), float("-inf"), dtype=acc, device=x.device)
    top = top.scatter_reduce(0, segment.unsqueeze(1).expand(x.shape), xf, "amax", include_self=True)
    e = torch.exp(xf - top.index_select(0, segment))
    sums = torch.zeros_like(top).index_add(0, segment, e)
    return (e / sums.index_select(0, segment)).to(x.dtype)


def _segment_backward(y: torch.Tensor, grad: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """y · (grad − Σ_segment grad·y) for (N, C) ``y`` and ``grad`` (softmax's backward over each segment's rows),
    from torch ops (traced into the graph), accumulated in fp32 for 16-bit dtypes."""
    from jaggedperf.ops.rowwise import acc_dtype

    acc = acc_dtype(y.dtype)
    segment = _segments(y.shape[0], offsets)
    yf, gf = y.to(acc), grad.to(acc)
    dots = torch.zeros(offsets.shape[0] - 1, y.shape[1], dtype=acc, device=y.device).index_add_(0, segment, gf * yf)
    return (yf * (gf - dots.index_select(0, segment))).to(y.dtype)


def _softmax(original: Callable, extract: Callable) -> Callable:
    def softmax(*args: Any, **kwargs: Any) -> torch.Tensor:
        if active():
            nt, dim, half_to_float = _bind(args, kwargs, ("self", "dim", "half_to_float"))
            if not half_to_float and _ragged_dim(nt, dim) and nt.dtype.is_floating_point:
                values = nt._values
                longest = nt._max_seqlen  # read as torch's implementation reads it (the module's docstring)
                x = _columns(values)
                if _on_cuda(x):
                    out = torch.ops.jaggedperf.jagged_softmax(x, nt._offsets, longest)
                else:
                    out = _segment_softmax(x, nt._offsets)
                return JAGGED_CLASS(out.view(values.shape), **extract(nt))
        return original(*args, **kwargs)

    return softmax


def _softmax_backward(original: Callable, extract: Callable) -> Callable:
    def softmax_backward(*args: Any, **kwargs: Any) -> torch.Tensor:
        if active():
            grad, out, dim, input_dtype = _bind(args, kwargs, ("grad_output", "output", "dim", "input_dtype"))
            if (isinstance(grad, JAGGED_CLASS) and _ragged_dim(out, dim) and grad._lengths is None
                    and grad._ragged_idx == 1 and input_dtype == out.dtype and grad.dtype == out.dtype
                    and grad._values.shape == out._values.shape and out.dtype.is_floating_point):
                y, g = _columns(out._values), _columns(grad._values)
                if _on_cuda(y):
                    back = torch.ops.jaggedperf.jagged_softmax_backward(y, g, out._offsets, cached_seqlen(out, "max"))
                else:
                    back = _segment_backward(y, g, out._offsets)
                return JAGGED_CLASS(back.view(out._values.shape), **extract(grad))
        return original(*args, **kwargs)

    return softmax_backward


def _bind(args: tuple, kwargs: dict, names: tuple[str, ...]) -> tuple:
    """The named arguments of a call, positional or keyword (the table's entries are called both ways)."""
    if not kwargs and len(args) >= len(names):
        return args[:len(names)]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return tuple(bound.get(n) for n in names)


# The graph's spellings of a sum or mean: Tensor methods (call_method) and torch functions (call_function); the bool
# says which is a mean.
_REDUCTION_METHODS = {"sum": False, "mean": True}
_REDUCTION_FUNCTIONS = {torch.sum: False, torch.mean: True, torch.Tensor.sum: False, torch.Tensor.mean: True}


def ragged_reduce(nt: torch.Tensor, mean: bool, keepdim: bool) -> torch.Tensor:
    """The sum (or mean) of the NJT ``nt`` over its ragged dim by jaggedperf's operators, as torch's ``nt.sum(dim=1,
    keepdim=keepdim)`` gives it: a dense (B, ...) tensor, (B, 1, ...) with ``keepdim``; differentiable through the
    operators' autograd and the NJT's ``values()``."""
    values = nt.values()
    offsets = nt.offsets()
    x = _columns(values)
    longest = cached_seqlen(nt, "max")
    if mean:
        out = torch.ops.jaggedperf.jagged_mean(x, offsets, False, longest)  # empty_zero=False: NaN, as 0 / 0
    else:
        out = torch.ops.jaggedperf.jagged_sum(x, offsets, longest)
    out = out.view(offsets.shape[0] - 1, *values.shape[1:])
    return out.unsqueeze(1) if keepdim else out


def _reduction(node: torch.fx.Node) -> tuple[torch.fx.Node, bool, bool] | None:
    """(the NJT node, mean, keepdim) where ``node`` is a sum or mean over an NJT's ragged dim that ``ragged_reduce``
    computes (an NJT without holes, ragged dim 1, reduced alone, a floating dtype the operators take, no ``dtype``
    argument); else None."""
    if node.op == "call_method" and node.target in _REDUCTION_METHODS:
        mean = _REDUCTION_METHODS[node.target]
    elif node.op == "call_function" and node.target in _REDUCTION_FUNCTIONS:
        mean = _REDUCTION_FUNCTIONS[node.target]
    else:
        return None
    if not node.args or len(node.args) > 3 or set(node.kwargs) - {"dim", "keepdim"}:
        return None
    nt, dim, keepdim = _bind(node.args, node.kwargs, ("input", "dim", "keepdim"))
    keepdim = False if keepdim is None else keepdim
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    example = nt.meta.get("example_value") if isinstance(nt, torch.fx.Node) else None
    if type(keepdim) is not bool or type(dim) is not int or not _ragged_dim(example, dim):
        return None
    return (nt, mean, keepdim) if _operators_take(example._values) else None


def lower_graph(gm: torch.fx.GraphModule) -> int:
    """Replace every sum or mean over an NJT's ragged dim in the Dynamo graph ``gm`` with ``ragged_reduce`` (the
    module's docstring); the number replaced (``gm`` recompiled where any)."""
    from jaggedperf.ops.reduce import op as _reduce_op  # noqa: F401 (registers torch.ops.jaggedperf.jagged_sum/mean)

    replaced = 0
    for node in list(gm.graph.nodes):
        found = _reduction(node)
        if found is None:
            continue
        nt, mean, keepdim = found
        with gm.graph.inserting_before(node):
            lowered = gm.graph.call_function(ragged_reduce, (nt, mean, keepdim))
        lowered.meta.update(node.meta)
        node.replace_all_uses_with(lowered)
        gm.graph.erase_node(node)
        replaced += 1
    if replaced:
        gm.recompile()
    return replaced


_installed = False


def install() -> bool:
    """Wrap torch's NJT table entries of ``_softmax`` and ``_softmax_backward_data`` (once a process); whether they
    are wrapped."""
    global _installed
    if _installed:
        return True
    try:
        from torch.nested._internal import ops as njt_ops

        from jaggedperf.ops.softmax import op as _softmax_op  # noqa: F401 (registers torch.ops.jaggedperf.jagged_softmax*)

        table, extract = njt_ops.JAGGED_OPS_TABLE, njt_ops.extract_kwargs
        entries = {_aten._softmax.default: _softmax, _aten._softmax_backward_data.default: _softmax_backward}
        if JAGGED_CLASS == () or any(op not in table for op in entries):
            return False
    except (ImportError, AttributeError):  # pragma: no cover (another torch's NJT internals)
        return False
    for op, make in entries.items():
        table[op] = make(table[op], extract)
    _installed = True
    return True


def installed() -> bool:
    """Whether ``install`` wrapped the entries."""
    return _installed
