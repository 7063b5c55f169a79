"""What the row-wise families (``softmax``, ``layer_norm``) share around their kernels: the public call
(input checks, a jagged NestedTensor in → one out, the eager fast path in front of the operator), their
launch plan, and the pure-torch pieces of their CPU kernels.

Their output is jagged like their input, ``(N, M)``. The inputs are checked exactly as ``jagged_mean``'s
(``jaggedperf.ops.nested.checked_inputs``: the same checks, classes and messages).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Literal

import torch
from torch.autograd import forward_ad

from jaggedperf.checks import (CPU_OPERATOR_DTYPES, SUPPORTED_DTYPES, check_layout, check_max_seqlen,
                               check_offsets_span)
from jaggedperf.njt import JAGGED_CLASS, cached_seqlen, wrap
from jaggedperf.njt_autograd import join

from jaggedperf.ops.autograd_kernel import below_autograd, function_apply, in_modes, outer_forward_level, run
from jaggedperf.ops.launch.body import fast_eager, run_in_operator
from jaggedperf.ops.launch.plan import Launch, Plan, sym_max
from jaggedperf.ops.nested import checked_inputs, is_nested, transformed
from jaggedperf.ops.config import next_pow2, sm_count
from jaggedperf.ops.tiles import WIDE, TileBudget, TileConfig, hint_of, tile_config


def call(values, offsets, name: str, *, max_seqlen, validate, plan: Callable[..., Plan],
         operator: Callable[..., torch.Tensor], params: tuple = ()):
    """A row-wise family's public call: checks, the eager fast path or the operator, NJT in → NJT out.

    Args:
        values: (N, M) float32/bfloat16/float16, or a jagged NestedTensor (B, j, M) alone.
        offsets: (B + 1,) int32/int64 on values' device; None with a NestedTensor.
        name: the public function's name (error messages).
        max_seqlen: an upper bound on the lengths or None (a NestedTensor's cached one is used when it has it).
        validate: as for ``jagged_mean``.
        plan: ``plan(values, offsets, *params, max_seqlen=...)`` → the Plan of the eager fast path.
        operator: ``operator(values, offsets, *params, max_seqlen)`` → (N, M): the registered operator.
        params: the family's own arguments (layer norm's eps).

    Returns:
        (N, M) in values' dtype; a jagged NestedTensor over the same offsets (and cached seqlens) when
        ``values`` was one.

    Raises:
        as ``jagged_mean``'s checks (TypeError, ValueError).
    """
    nested = values if is_nested(values) else None
    values, offsets, max_seqlen = checked_inputs(values, offsets, name, max_seqlen, validate)
    # forward-mode AD and torch.func need the operator: its autograd kernel carries their tangents
    if fast_eager(values, offsets) and not transformed():
        planned = plan(values, offsets, *params, max_seqlen=max_seqlen)
        run_in_operator(planned.launches, values, offsets)
        out = planned.out
    else:
        out = operator(values, offsets, *params, max_seqlen)
    if nested is None:
        return out
    return _jagged_like(nested, out, offsets)


def _jagged_like(nested, out: torch.Tensor, offsets: torch.Tensor):
    """``out`` (N, M) as a jagged NestedTensor over ``offsets`` with ``nested``'s cached seqlens: over ``nested``'s own
    offsets tensor it has ``nested``'s ragged structure (``out + nested`` works).

    Eagerly, ``jaggedperf.njt.wrap`` (the constructor without dispatch: a fraction of ``nested_tensor_from_jagged``'s
    host time, which an eager call spent more on than on its kernel), through ``Join`` where a gradient flows into
    ``out`` (one autograd node, differentiable twice, which the NJT's own view op is not). Traced, or under a
    torch.func transform, the public op.
    """
    if not torch.compiler.is_compiling() and type(nested) is JAGGED_CLASS:
        cache = dict(getattr(nested, "_metadata_cache", None) or {})
        if not (out.requires_grad and torch.is_grad_enabled()):
            return wrap(out, offsets, cache)
        if not transformed():
            return join(out, offsets, cache)
    return torch.nested.nested_tensor_from_jagged(out, offsets, min_seqlen=cached_seqlen(nested, "min"),
                                                  max_seqlen=cached_seqlen(nested, "max"))


def plan_rowwise(kernel, name: str, reads: tuple, offsets, params: tuple = (), *, column_blocks: bool,
                 max_seqlen=None, cfg: TileConfig | None = None, budget: TileBudget = WIDE,
                 per_element: bool | Literal["auto"] | None = None) -> Plan:
    """Allocate a row-wise kernel's (N, M) output and describe its one launch.

    Every row-wise kernel's signature is ``(*reads, offsets, out, *params, n_rows, n_cols, n_segments, BLOCK_L,
    BLOCK_M)``; its grid is a program per segment (at least one: a grid of 0 is not launched), times a program
    per column block when ``column_blocks``. Nothing here reads a tensor's values: under
    ``torch.compile(dynamic=True)`` N and B may be SymInts and planning installs no guard on them.

    Args:
        kernel: the ``@triton.jit`` kernel.
        name: its name in the launch key.
        reads: the (N, M) contiguous tensors it reads; the output takes the first one's shape, dtype and device.
        offsets: (B + 1,) contiguous int32/int64.
        params: its scalars after the output (layer norm's eps).
        column_blocks: one program per column block (softmax), else one per segment that loops over them.
        max_seqlen: an upper bound on the lengths (an int, a SymInt) or None: it sizes the tile only.
        cfg: force a tile (tests); None: ``tile_config`` within ``budget``.
        budget: the kernel's TileBudget (``jaggedperf.ops.tiles``) when its programs fill the GPU; with fewer
            programs than SMs (B × column blocks, from B's hint: no guard), ``WIDE``.
        per_element: None for a kernel without a PER_ELEMENT constexpr; else its value, passed last: a bool (forced,
            tests), or "auto" (softmax's forward): True where the programs are fewer than the SMs (per-element
            running statistics for few long loops) or where 2-byte values may loop (``narrow_loads_loop``), per
            column elsewhere.

    Returns:
        the Plan: its ``out`` (N, M), filled once its launch has run.
    """
    n_rows, n_cols = reads[0].shape
    auto = cfg is None
    cfg = cfg or tile_config(n_cols, max_seqlen, budget)
    col_blocks = -(-int(n_cols) // cfg.block_m) if column_blocks else 1
    # whether the programs are fewer than the SMs: asked once, and only where it decides something
    few = ((auto and budget is not WIDE) or per_element == "auto") and not fills_the_gpu(
        offsets.shape[0] - 1, col_blocks, reads[0].device)
    if auto and budget is not WIDE and few:
        # few long programs: the lean tile's 4 warps leave the SMs idle (softmax at 8 × 4000 × 4096 fp32 on the H200:
        # 847 µs against the wide tile's 637); its BLOCK_M is the lean one's (both capped by MAX_BLOCK_M), so
        # the programs stay the same
        cfg = tile_config(n_cols, max_seqlen, WIDE)
    out = torch.empty((n_rows, n_cols), dtype=reads[0].dtype, device=reads[0].device)
    args = (*reads, offsets, out, *params, n_rows, int(n_cols), offsets.shape[0] - 1, cfg.block_l, cfg.block_m)
    key = (name, cfg.block_l, cfg.block_m)
    if per_element is not None:
        flag = (few or narrow_loads_loop(reads[0], max_seqlen, cfg)) if per_element == "auto" else bool(per_element)
        args, key = (*args, flag), (*key, flag)
    grid = (sym_max(offsets.shape[0] - 1, 1), col_blocks, 1)
    return Plan(out, (Launch(kernel, grid, args, cfg.num_warps, (out,), key),))


def narrow_loads_loop(values: torch.Tensor, max_seqlen, cfg: TileConfig) -> bool:
    """Whether ``values`` is 2-byte (bf16/fp16) and a segment may be longer than one tile of ``cfg``.

    There softmax's per-column pass (each tile reduced over its rows every iteration) measured 2.7× slower than
    per element in bf16 on the H200 at 1024 × 256, and 1.9-2.8× at three few-program shapes, where fp32 was 3%
    faster per column (docs/performance.md). The likely cause, unconfirmed: 8-element loads stack
    the tile's warps along its rows, so every such reduction crosses all of them.

    Args:
        values: the (N, M) input.
        max_seqlen: an upper bound on the lengths (an int, a SymInt: its hint, no guard) or None (may loop).
        cfg: the planned tile.
    """
    longest = hint_of(max_seqlen)
    return values.element_size() == 2 and (longest is None or longest > cfg.block_l)


def fills_the_gpu(n_segments, col_blocks: int, device: torch.device) -> bool:
    """Whether one program per (segment, column block) gives at least one program per SM.

    Args:
        n_segments: B (an int, or a SymInt: its hint, with no guard; a compiled graph keeps its first call's choice,
            which changes only the speed).
        col_blocks: column blocks per segment (1 for one program per segment).
        device: where the kernels run.
    """
    hint = hint_of(n_segments)
    return hint is None or hint * col_blocks >= sm_count(device)


MAX_PARTS = 64  # the most parts a split gives one (segment, column block)


def split_parts(n_segments, n_rows, n_cols, split_tile: Callable[[], TileConfig], device: torch.device, *,
                column_blocks: bool, programs_per_sm: int) -> int:
    """Parts per (segment, column block) program for a family's split, or 0 where one program each is the better plan.

    Args:
        n_segments: B; n_rows: N (ints, or SymInts: their hints, with no guard; a compiled graph keeps its first
            call's choice, which changes only the speed).
        n_cols: M.
        split_tile: the split's tile; called only where B alone is fewer than the SMs (planning is on every eager
            call's path).
        device: where the kernels run.
        column_blocks: the one-program kernel runs a program per column block of the tile (softmax), else one per
            segment.
        programs_per_sm: the programs per SM the split aims at over the batch (each family's, measured).

    Returns:
        0 when the one-program kernel's programs fill the SMs, B or N has no hint, or the sequences average fewer
        than four tiles (one part: the one-program kernel's work and an extra launch); else ~programs_per_sm
        programs per SM over the batch, a power of two, at most MAX_PARTS and at most half the tiles of an average
        sequence (every part reads at least two tiles).
    """
    n_segments, n_rows = hint_of(n_segments), hint_of(n_rows)
    sms = sm_count(device)
    if n_segments is None or n_rows is None or n_segments >= sms:
        return 0
    tile = split_tile()
    programs = n_segments * (-(-int(n_cols) // tile.block_m) if column_blocks else 1)
    tiles = n_rows // max(n_segments, 1) // tile.block_l  # per average sequence
    if programs >= sms or tiles < 4:
        return 0
    wanted = min(MAX_PARTS, next_pow2(-(-programs_per_sm * sms // max(programs, 1))))
    return min(wanted, 1 << ((tiles // 2).bit_length() - 1))  # the largest power of two <= tiles / 2: >= 2


def split_launcher(values, offsets, parts: int, cfg: TileConfig, *, column_blocks: bool):
    """What a family's split launches share: the (N, M) output and ``launch(kernel, name, leading args, written,
    *constexprs)``, which appends the common tail (N, M, B, BLOCK_L, BLOCK_M, PARTS) and then the constexprs.

    Args:
        values: (N, M); offsets: (B + 1,).
        parts: programs per (segment, column block).
        cfg: the split's tile.
        column_blocks: grid (B, column blocks, PARTS) (softmax's kernels read the part from axis 2); else (B, PARTS).

    Returns:
        (the output, ``launch``): each Launch keyed by its name, the tile, PARTS and the constexprs.
    """
    n_rows, n_cols = values.shape
    n_segments = offsets.shape[0] - 1
    out = torch.empty((n_rows, n_cols), dtype=values.dtype, device=values.device)
    grid = ((sym_max(n_segments, 1), -(-int(n_cols) // cfg.block_m), parts) if column_blocks else
            (sym_max(n_segments, 1), parts, 1))
    tail = (n_rows, int(n_cols), n_segments, cfg.block_l, cfg.block_m, parts)

    def launch(kernel, name: str, args: tuple, written: torch.Tensor, *constexprs) -> Launch:
        return Launch(kernel, grid, (*args, *tail, *constexprs), cfg.num_warps, (written,),
                      (name, *tail[-3:], *constexprs))

    return out, launch


def split_workspace(n_segments, parts: int, fields: int, device) -> torch.Tensor:
    """fp32 per-part summaries, ``fields`` floats per (segment, part); its kernels write every slot before any reads
    it (so it is not zeroed)."""
    return torch.empty((sym_max(n_segments, 1) * parts * fields,), dtype=torch.float32, device=device)


def segment_ids(offsets: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's segment, and the lengths (the CPU kernels' gather/scatter index), after checking the offsets.

    The check is unconditional (no sync on the CPU, a pass over B + 1 ints, as for the reductions): with invalid
    offsets ``repeat_interleave(output_size=)`` would write out of bounds. The CPU kernels that call this run on
    real tensors only: eagerly, or inside the opaque operators (``cpu_operator``) that compiled code calls.

    Args:
        offsets: (B + 1,) offsets, layout checked.
        n_rows: N, the rows they must span.

    Returns:
        (segment of each row (N,) int64, lengths (B,) int64).

    Raises:
        ValueError: invalid offsets, with jaggedperf.checks' messages.
    """
    check_offsets_span(offsets, n_rows, "values.shape[0]")
    lengths = (offsets[1:] - offsets[:-1]).to(torch.int64)
    ids = torch.arange(lengths.shape[0], device=offsets.device)
    return torch.repeat_interleave(ids, lengths, output_size=n_rows), lengths


def check_operator(values, offsets, max_seqlen, name: str, grad=None) -> None:
    """An operator body's metadata checks (no sync, traceable): the public functions' checks and messages.

    Args:
        values: (N, M) (the backward's saved tensor: x or y); offsets: (B + 1,).
        max_seqlen: as for the public functions.
        name: the operator's name in messages.
        grad: the backward's (N, M) gradient, or None.

    Raises:
        TypeError, ValueError: as ``jaggedperf.checks``.
    """
    check_layout(values, offsets, dtypes=operator_dtypes(values))
    check_max_seqlen(max_seqlen, name)
    if grad is not None:
        if not isinstance(grad, torch.Tensor):
            raise TypeError(f"{name}: grad must be a torch.Tensor; got {type(grad).__name__}")
        if tuple(grad.shape) != tuple(values.shape) or grad.device != values.device:
            raise ValueError(f"{name}: grad must match values' shape {tuple(values.shape)} and device "
                             f"{values.device}; got {tuple(grad.shape)} on {grad.device}")


def operator_dtypes(tensor) -> tuple:
    """The dtypes an operator takes: the public ones on CUDA; float64 too elsewhere (gradcheck on the CPU)."""
    return SUPPORTED_DTYPES if isinstance(tensor, torch.Tensor) and tensor.device.type == "cuda" \
        else CPU_OPERATOR_DTYPES


class _SelfAdjoint(torch.autograd.Function):
    """One row-wise operator call with its backward and jvp: both are the Jacobian applied to a vector, since the
    Jacobians of softmax (diag(y) − y yᵀ per column) and of the layer norm without affine (rstd · (I − 11ᵀ/n −
    x̂x̂ᵀ/n) per segment) are symmetric. Inputs: (the family's ``Adjoint``, keyset, modes, *the operator's args)
    (``autograd_kernel``).
    Where that product is itself differentiated (``Adjoint.apply_jacobian``) it is built from differentiable ops."""

    @staticmethod
    def forward(adjoint, keyset, modes, *args):
        return below_autograd(adjoint.name, keyset, args, modes)

    @staticmethod
    def setup_context(ctx, inputs, output):
        adjoint, _, modes, *args = inputs
        saved = adjoint.saved(args, output)
        ctx.adjoint, ctx.rest, ctx.modes = adjoint, tuple(args[2:]), modes
        ctx.save_for_backward(*saved)
        ctx.save_for_forward(*saved)

    @staticmethod
    def backward(ctx, grad):
        back = ctx.adjoint.apply_jacobian(ctx.saved_tensors, grad.contiguous(), ctx.rest, in_backward=True)
        return (None, None, None, back, None) + (None,) * len(ctx.rest)

    @staticmethod
    def jvp(ctx, _adjoint, _keyset, _modes, tangent, *_):
        if tangent is None:
            return None
        saved, modes = ctx.saved_tensors, contextlib.nullcontext()
        if ctx.modes is not None and torch.compiler.is_compiling():
            # traced, AOTAutograd's levels keep the saved values' tangents through ``unpack_dual`` (the result then
            # raises), so the rule runs as a first-order one, which an outer forward-mode level would read wrong
            if outer_forward_level():
                raise NotImplementedError(
                    f"{ctx.adjoint.name}: forward-over-forward derivatives (jacfwd of jacfwd, jvp of jvp) under "
                    "torch.compile are not supported; call the transform eagerly, or use jacfwd of jacrev")
        elif ctx.modes is not None:
            # eagerly under torch.func, the rule's ops reach the outer levels in the call's modes
            # (``autograd_kernel``), on operands stripped of this level's own tangents (a rule's result carries none)
            saved, modes = tuple(forward_ad.unpack_dual(t).primal for t in saved), in_modes(ctx.modes)
        with modes:
            return ctx.adjoint.apply_jacobian(saved, tangent.contiguous(), ctx.rest, in_backward=False)


_APPLY = function_apply(_SelfAdjoint)


class Adjoint:
    """A row-wise operator's autograd, reverse and forward mode, from its symmetric Jacobian.

    The kernel registered for the CPU and CUDA autograd keys (``jaggedperf.ops.autograd_kernel.run``: why and when)
    goes through ``_SelfAdjoint`` where autograd records, else below it; the generated one, with the same backward,
    stays for other devices.

    Higher orders: the backward operator (``jacobian``'s fused kernel) has no derivative of its own. Where J · v may
    itself be differentiated (``differentiated``: a backward with ``create_graph``, as for a gradient penalty, a
    Hessian-vector product or ``torch.func.grad``; nested torch.func transforms; a forward-mode level open during a
    backward), ``composite`` serves instead: the same product from ``jagged_sum`` / ``jagged_expand`` and
    elementwise ops, whose own derivatives (reverse, forward, batched) exist. A plain backward, eager or compiled,
    keeps the fused kernel.

    Args:
        name: the operator (``torch.ops.jaggedperf.<name>``).
        saved: ``saved(args, output)`` → the tensors the Jacobian needs.
        jacobian: ``jacobian(saved tensors, (N, M) vector, args after (values, offsets))`` → J · vector, by the
            backward operator.
        composite: the same signature and product, from differentiable ops.
    """

    def __init__(self, name: str, saved: Callable, jacobian: Callable, composite: Callable):
        self.name, self.saved, self.jacobian, self.composite = name, saved, jacobian, composite

    def apply_jacobian(self, saved: tuple, vector: torch.Tensor, rest: tuple, in_backward: bool) -> torch.Tensor:
        """J · ``vector`` (a backward's, or ``in_backward`` False a jvp's): by ``composite`` where the product is
        itself differentiated (the class docstring), else by the backward operator."""
        if differentiated(saved, vector, in_backward):
            return self.composite(saved, vector, rest)
        return self.jacobian(saved, vector, rest)

    def register(self, operator, library: torch.library.Library) -> None:
        """Register the autograd kernels of ``operator`` (its ``triton_op``) in ``library`` (kept alive by the caller)."""

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*self.saved(inputs, output))
            ctx.rest = tuple(inputs[2:])

        def backward(ctx, grad):
            back = self.apply_jacobian(ctx.saved_tensors, grad.contiguous(), ctx.rest, in_backward=True)
            return (back, None) + (None,) * len(ctx.rest)

        operator.register_autograd(backward, setup_context=setup_context)

        def autograd_kernel(keyset, *args):
            return run(_APPLY, self, self.name, keyset, args)

        autograd_kernel.__name__ = f"{self.name}_autograd"
        for key in ("AutogradCPU", "AutogradCUDA"):
            library.impl(self.name, autograd_kernel, key, with_keyset=True)


def differentiated(saved: tuple, vector: torch.Tensor, in_backward: bool) -> bool:
    """Whether a Jacobian-vector product computed now may itself be differentiated: in grad mode with an operand
    that requires grad (a backward with ``create_graph``, torch.func.grad's among them; a plain backward runs in
    no-grad mode); under nested torch.func transforms (an outer level may differentiate it: ``jvp``, ``jacrev``,
    ``vmap`` of a gradient; a single level's own product, a first-order ``jvp``'s, is not); or, ``in_backward``,
    with a forward-mode level open (tangents through the backward: forward-over-reverse; a jvp's own level is open
    by definition, its product not differentiated for that)."""
    if in_backward and forward_ad._current_level >= 0:
        return True
    if torch.is_grad_enabled() and (vector.requires_grad or any(t.requires_grad for t in saved)):
        return True
    return torch._C._are_functorch_transforms_active() and torch._C._functorch.current_level() > 1


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for the supported dtypes; float64 stays float64 (the operators take it on the CPU, for gradcheck)."""
    return torch.promote_types(dtype, torch.float32)
