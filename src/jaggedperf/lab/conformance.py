"""Conformance of ``jaggedperf.compile`` with ``torch.compile``, on PyTorch's own NJT OpInfo samples.

Each sample of PyTorch's NJT OpInfo database (``torch.testing._internal.opinfo.definitions.nested.njt_op_db``,
shipped in the torch wheel) runs three ways, as PyTorch's own NJT compile tests run it (``fullgraph=True`` on the
chosen backend, forward, and backward where the sample requires grad): eagerly, through ``torch.compile`` and
through ``jaggedperf.compile``. Each is a ``Run``: the outputs (or the exception), then the gradients of the
inputs that require grad for random output gradients that every way shares. A sample's ``Outcome`` compares the
three (``judge``); the one that must never occur is ``DIFFERS``: ``jaggedperf.compile`` giving another value,
gradient, ``requires_grad``, ``grad_fn`` presence or cached seqlen than eager mode where ``torch.compile`` gives
eager mode's, or raising where ``torch.compile`` does not.

The database needs ``expecttest`` (a test dependency of PyTorch's); without it ``samples`` raises ImportError.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.utils._pytree as pytree

from jaggedperf.njt import JAGGED_CLASS

__all__ = ["OUTCOMES", "WAYS", "Outcome", "Report", "Run", "SampleResult", "crashed", "judge", "run_eager",
           "run_sample", "samples"]

IDENTICAL = "identical"  # ours matches eager mode, through the components
FELL_BACK = "fell back"  # ours went to torch.compile(fn) for this sample and matches what it gives
BOTH_RAISE = "both raise"  # torch.compile raises, and so does ours
OURS_ONLY = "ours works"  # torch.compile raises (or differs from eager mode), ours matches eager mode
THEIRS_DIFFER = "torch.compile differs"  # torch.compile differs from eager mode, ours gives what torch.compile gives
DIFFERS = "differs"  # the one that must not occur
EAGER_RAISES = "eager raises"  # nothing to compare with: not counted as a sample
MUTATES = "mutates its inputs"  # an in-place op: the three runs would not see the same inputs; skipped
TORCH_CRASHES = "torch crashes"  # eager mode or torch.compile killed the process (a segfault): not counted
OUTCOMES = (IDENTICAL, FELL_BACK, BOTH_RAISE, OURS_ONLY, THEIRS_DIFFER, DIFFERS, EAGER_RAISES, MUTATES, TORCH_CRASHES)
# The ways a sample runs, in order (``run_sample``'s ``phase`` names the one about to run)
WAYS = ("eager", "torch.compile", "jaggedperf.compile")


@dataclass(frozen=True)
class Run:
    """One way of running a sample: what it returned and the inputs' gradients, or what it raised."""

    outputs: Any = None
    grads: tuple | None = None
    error: str | None = None
    fell_back: str | None = None  # why jaggedperf.compile went to torch.compile(fn), if it did


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class SampleResult:
    """One sample's outcome, as the report keeps it."""

    op: str
    sample: str
    backend: str
    requires_grad: bool
    outcome: str
    detail: str
    seconds: float


@dataclass
class Report:
    """Every sample's result, with the counts the report is judged by."""

    results: list[SampleResult] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = Counter(r.outcome for r in self.results)
        return {kind: c.get(kind, 0) for kind in OUTCOMES}

    @property
    def compared(self) -> int:
        """Samples compared (eager mode ran them and they leave their inputs alone)."""
        return sum(1 for r in self.results if r.outcome not in (EAGER_RAISES, MUTATES, TORCH_CRASHES))

    def differing(self) -> list[SampleResult]:
        return [r for r in self.results if r.outcome == DIFFERS]

    def to_json(self) -> dict:
        return {"counts": self.counts(), "compared": self.compared, "results": [asdict(r) for r in self.results]}


def samples(requires_grad: bool, device: str = "cpu", dtype: torch.dtype = torch.float32,
            ops: Callable[[str], bool] | None = None) -> Iterator[tuple[Any, Any, str]]:
    """(op info, sample, sample name) for every NJT OpInfo sample, op by op in the database's order.

    Args:
        requires_grad: the samples' inputs require grad (and only ops that support autograd are taken).
        ops: which ops (by full name) to take; all when None.

    Raises:
        ImportError: PyTorch's test utilities (and ``expecttest``) are not importable.
    """
    from torch.testing._internal.opinfo.definitions.nested import njt_op_db

    for op in njt_op_db:
        if ops is not None and not ops(op.full_name):
            continue
        if requires_grad and not op.supports_autograd:
            continue
        try:
            generated = list(op.sample_inputs(device=device, dtype=dtype, requires_grad=requires_grad))
        except Exception:  # noqa: BLE001 (an op the database has no NJT samples for)
            continue
        for i, sample in enumerate(generated):
            yield op, sample, getattr(sample, "name", "") or f"sample {i}"


def _leaves(x: Any) -> list:
    return pytree.tree_leaves(x)


def _versions(sample) -> list[int]:
    out = []
    for t in _leaves((sample.input, sample.args, sample.kwargs)):
        if isinstance(t, torch.Tensor):
            out.append((t._values if isinstance(t, JAGGED_CLASS) else t)._version)
    return out


def _grad_inputs(sample) -> list[torch.Tensor]:
    return [t for t in _leaves((sample.input, sample.args, sample.kwargs))
            if isinstance(t, torch.Tensor) and t.requires_grad]


def _execute(call: Callable[[], Any], sample, seed: int) -> Run:
    """Run ``call`` on the sample, then take the gradients of its grad inputs for seeded output gradients."""
    try:
        outputs = call()
    except Exception as err:  # noqa: BLE001
        return Run(error=_describe(err))
    inputs = _grad_inputs(sample)
    needs = [t for t in _leaves(outputs) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not inputs or not needs or not torch.is_grad_enabled():
        return Run(outputs=outputs)
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        grad_outputs = [torch.randn_like(t) for t in needs]
        grads = torch.autograd.grad(needs, inputs, grad_outputs, allow_unused=True)
    except Exception as err:  # noqa: BLE001
        return Run(outputs=outputs, error="backward: " + _describe(err))
    finally:
        torch.random.set_rng_state(gen_state)
    return Run(outputs=outputs, grads=tuple(grads))


def _describe(err: Exception) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0].strip()[:160] if lines else ''}"


def run_sample(op, sample, sample_name: str, backend: str, seed: int = 0,
               phase: Callable[[str], None] | None = None) -> SampleResult:
    """Run one sample eagerly, through torch.compile and through jaggedperf.compile, and judge it.

    Args:
        phase: called with each of ``WAYS`` before that way runs (a driver that survives a crash of the process
            records which way crashed: ``crashed``).
    """
    import jaggedperf

    phase = phase or (lambda way: None)
    start = time.perf_counter()
    requires_grad = bool(_grad_inputs(sample))

    def fn(*args, **kwargs):
        return op.op(*args, **kwargs)

    args = (sample.input, *sample.args)
    before = _versions(sample)
    phase(WAYS[0])
    eager = run_eager(op, sample, seed)
    if _versions(sample) != before:
        return SampleResult(op.full_name, sample_name, backend, requires_grad, MUTATES, "", time.perf_counter() - start)
    torch.compiler.reset()
    phase(WAYS[1])
    theirs = _execute(lambda: torch.compile(fn, fullgraph=True, backend=backend)(*args, **sample.kwargs), sample,
                      seed)
    torch.compiler.reset()
    phase(WAYS[2])
    ours_fn = jaggedperf.compile(fn, fullgraph=True, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = _execute(lambda: ours_fn(*args, **sample.kwargs), sample, seed)
    if ours_fn.last_fallback is not None:
        ours = Run(ours.outputs, ours.grads, ours.error, ours_fn.last_fallback)
    torch.compiler.reset()
    outcome = judge(eager, theirs, ours)
    return SampleResult(op.full_name, sample_name, backend, requires_grad, outcome.kind, outcome.detail,
                        time.perf_counter() - start)


def run_eager(op, sample, seed: int = 0) -> Run:
    """The sample run eagerly (outputs, then the gradients for the seeded output gradients): the reference."""
    return _execute(lambda: op.op(sample.input, *sample.args, **sample.kwargs), sample, seed)


def crashed(op_name: str, sample_name: str, backend: str, requires_grad: bool, way: str, how: str,
            eager_crashes: bool) -> SampleResult:
    """The result of a sample whose ``way`` (one of ``WAYS``) killed the process (``how``, e.g. a signal). Torch's
    own crash (nothing to compare) where eager mode crashes on it, alone in a process of its own, in any of a few
    runs (``eager_crashes``: some crash only now and then, so a crash of a later way may be the same fault), or where
    torch.compile did; ``DIFFERS`` where ours did and eager mode alone never does."""
    detail = f"{way} killed the process ({how})"
    if eager_crashes and way != WAYS[0]:
        detail += "; eager mode alone kills it too"
    kind = DIFFERS if way == WAYS[2] and not eager_crashes else TORCH_CRASHES
    return SampleResult(op_name, sample_name, backend, requires_grad, kind, detail, 0.0)


def judge(eager: Run, theirs: Run, ours: Run) -> Outcome:
    """The sample's outcome (the module's docstring); ``eager`` is the reference."""
    if eager.error is not None and eager.outputs is None:
        return Outcome(EAGER_RAISES, eager.error)
    if ours.error is not None:
        if theirs.error is not None:
            return Outcome(BOTH_RAISE, ours.error)
        if eager.error is not None and eager.error.startswith("backward") and ours.error.startswith("backward"):
            return Outcome(BOTH_RAISE, ours.error)  # eager mode's backward raises too
        return Outcome(DIFFERS, f"ours raised where torch.compile did not: {ours.error}")
    ours_vs_eager = _difference(ours, eager)
    if ours_vs_eager is None:
        if ours.fell_back is not None:
            return Outcome(FELL_BACK, ours.fell_back)
        if theirs.error is not None:
            return Outcome(OURS_ONLY, f"torch.compile: {theirs.error}")
        if _difference(theirs, eager) is not None:
            return Outcome(OURS_ONLY, f"torch.compile: {_difference(theirs, eager)}")
        return Outcome(IDENTICAL)
    if eager.error is not None and eager.grads is None and ours.grads is not None:
        # eager mode's backward raised, ours computed gradients: compare the forward alone
        if _difference(Run(ours.outputs), Run(eager.outputs)) is None:
            return Outcome(OURS_ONLY, f"eager {eager.error}")
    theirs_vs_eager = None if theirs.error is not None else _difference(theirs, eager)
    if theirs.error is None and theirs_vs_eager is not None and _difference(ours, theirs) is None:
        return Outcome(THEIRS_DIFFER, theirs_vs_eager)
    return Outcome(DIFFERS, ours_vs_eager)


def _difference(a: Run, b: Run) -> str | None:
    """What differs between two runs' outputs and gradients (None: nothing)."""
    why = _compare(a.outputs, b.outputs, "output")
    if why is None and (a.grads is None) != (b.grads is None):
        return f"gradients: {'none' if a.grads is None else 'some'} against {'none' if b.grads is None else 'some'}"
    if why is None and a.grads is not None:
        why = _compare(a.grads, b.grads, "gradient")
    return why


def _compare(a: Any, b: Any, what: str) -> str | None:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if sa != sb:
        return f"{what} structure {sa} against {sb}"
    for i, (x, y) in enumerate(zip(la, lb)):
        why = _compare_leaf(x, y)
        if why is not None:
            return f"{what} {i}: {why}"
    return None


def _compare_leaf(x: Any, y: Any) -> str | None:
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return f"{type(x).__name__} against {type(y).__name__}"
        return None if x == y or (x != x and y != y) else f"{x!r} against {y!r}"
    if x.is_nested != y.is_nested:
        return f"nested {x.is_nested} against {y.is_nested}"
    if x.requires_grad != y.requires_grad:
        return f"requires_grad {x.requires_grad} against {y.requires_grad}"
    if (x.grad_fn is None) != (y.grad_fn is None):
        return f"grad_fn {type(x.grad_fn).__name__} against {type(y.grad_fn).__name__}"
    if x.dtype != y.dtype:
        return f"dtype {x.dtype} against {y.dtype}"
    if not x.is_nested:
        return _close(x, y)
    if not (isinstance(x, JAGGED_CLASS) and isinstance(y, JAGGED_CLASS)):
        return None if x.layout == y.layout else f"layout {x.layout} against {y.layout}"
    if x._ragged_idx != y._ragged_idx or x.dim() != y.dim():
        return f"ragged dim {x._ragged_idx} of {x.dim()} against {y._ragged_idx} of {y.dim()}"
    for name in ("min_seqlen", "max_seqlen"):
        tx, ty = x._metadata_cache.get(name), y._metadata_cache.get(name)
        if (tx is None) != (ty is None) or (tx is not None and tx.shape[0] != ty.shape[0]):
            return f"cached {name} {None if tx is None else tx.shape[0]} against {None if ty is None else ty.shape[0]}"
    if not torch.equal(x._offsets, y._offsets):
        return "offsets"
    xs, ys = x.unbind(), y.unbind()
    for i, (u, v) in enumerate(zip(xs, ys)):
        why = _close(u, v)
        if why is not None:
            return f"sequence {i}: {why}"
    return None


def _close(x: torch.Tensor, y: torch.Tensor) -> str | None:
    if x.shape != y.shape:
        return f"shape {tuple(x.shape)} against {tuple(y.shape)}"
    try:
        torch.testing.assert_close(x.detach(), y.detach(), equal_nan=True, check_dtype=True)
    except AssertionError as err:
        return "values: " + " ".join(str(err).split())[:200]
    return None
