"""One property for every op (sum, mean, softmax, layer norm) through every entry point, run inside a subprocess by
test_family_properties.py (a crash then fails a test, naming the example, instead of killing pytest).

The property: any offsets, valid or not (empty and one-row segments, odd M, B = 0, broken values), through the
public function, ``torch.ops.jaggedperf``, a jagged NestedTensor, ``torch.compile`` (static and dynamic),
``jaggedperf.compile``, autograd's backward or forward-mode AD, give the float64 reference (the gradient or tangent
of it for the last two) or the documented ``ValueError`` for invalid offsets: on the CPU every entry point checks
them. Never a crash, never a silent wrong answer. Each example is written to stderr before it runs.

Compiled entry points are compiled once per op and called on every example (their recompiles are what a user's
model sees: shapes change, then the graph turns dynamic); the recompile limit is raised so that no example falls
back to eager unseen.
"""

from __future__ import annotations

import re
import sys

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaggedperf

OPS = ("sum", "mean", "softmax", "layer_norm")
ENTRY_POINTS = ("public", "torch.ops", "njt", "compile", "compile-dynamic", "jaggedperf.compile", "backward",
                "forward-ad")
COMPILED = ("compile", "compile-dynamic", "jaggedperf.compile")
EPS = 1e-5
OFFSET_ERRORS = re.compile(r"offsets\[0\] must be 0; got |offsets must be non-decreasing; |"
                           r"offsets\[-1\] must equal (values\.shape\[0\]|n_rows)=")
HUGE = [2**31 - 1, -(2**31), 2**40, -(2**40), 2**62, -(2**63), 2**63 - 1]


@st.composite
def offsets_cases(draw, max_b: int = 6, max_rows: int = 24, huge: bool = True):
    """(n_rows, offsets, valid): valid offsets (often with empty and one-row segments), one broken value, or
    anything; ``huge``: values past any tensor's size among them."""
    b = draw(st.integers(0, max_b))
    lengths = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 5, 8]), min_size=b, max_size=b))
    valid = [0]
    for n in lengths:
        valid.append(valid[-1] + n)
    n_rows = valid[-1] if b else draw(st.integers(0, 3))
    if not b:
        valid = [0]
    kind = draw(st.sampled_from(["one-broken", "valid", "valid", "anything"]))
    near = st.integers(-3, max(n_rows, 1) + 3)
    values = st.one_of(near, st.sampled_from(HUGE)) if huge else near
    if kind == "valid":
        offsets = valid
    elif kind == "one-broken":
        offsets = list(valid)
        offsets[draw(st.integers(0, len(offsets) - 1))] = draw(values)
    else:
        offsets = draw(st.lists(values, min_size=1, max_size=max_b + 1))
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    if dtype == torch.int32:
        offsets = [min(max(x, -(2**31)), 2**31 - 1) for x in offsets]
    ok = offsets[0] == 0 and offsets[-1] == n_rows and all(a <= b for a, b in zip(offsets, offsets[1:]))
    return n_rows, torch.tensor(offsets, dtype=dtype), ok


# --- the float64 references: a loop over segments, unlike the kernels ----------------------------------------

def reference(op: str, v: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """float64 (B, M) for sum/mean (NaN for an empty segment's mean), (N, M) for softmax/layer norm; differentiable."""
    bounds = [int(x) for x in offsets]
    pieces = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        seg = v[a:b]
        if op == "sum":
            pieces.append(seg.sum(0, keepdim=True))
        elif op == "mean":
            pieces.append(seg.sum(0, keepdim=True) / (b - a))  # 0/0 for an empty segment: NaN, its tangent too
        elif b > a:
            pieces.append(torch.softmax(seg, 0) if op == "softmax" else torch.layer_norm(seg, seg.shape, eps=EPS))
    if pieces:
        return torch.cat(pieces)
    return v.new_zeros((len(bounds) - 1 if op in ("sum", "mean") else 0, v.shape[1])) + 0 * v.sum()


def _sum(values, offsets=None):
    return jaggedperf.jagged_sum(values, offsets)


def _mean(values, offsets=None):
    return jaggedperf.jagged_mean(values, offsets)


def _softmax(values, offsets=None):
    return jaggedperf.jagged_softmax(values, offsets)


def _layer_norm(values, offsets=None):
    return jaggedperf.jagged_layer_norm(values, offsets, eps=EPS)


# one function (one code object: Dynamo counts recompiles per code object) per op, and one per op for the boundary
FUNCTIONS = {"sum": _sum, "mean": _mean, "softmax": _softmax, "layer_norm": _layer_norm}


def _sum_nt(nt):
    return jaggedperf.jagged_sum(nt)


def _mean_nt(nt):
    return jaggedperf.jagged_mean(nt)


def _softmax_nt(nt):
    return jaggedperf.jagged_softmax(nt).values()


def _layer_norm_nt(nt):
    return jaggedperf.jagged_layer_norm(nt, eps=EPS).values()


NESTED_FUNCTIONS = {"sum": _sum_nt, "mean": _mean_nt, "softmax": _softmax_nt, "layer_norm": _layer_norm_nt}


def function(op: str):
    """The public function of ``op``, taking (values, offsets) or a NestedTensor alone."""
    return FUNCTIONS[op]


def operator(op: str, values, offsets):
    ops = torch.ops.jaggedperf
    if op == "sum":
        return ops.jagged_sum(values, offsets)
    if op == "mean":
        return ops.jagged_mean(values, offsets, False)
    if op == "softmax":
        return ops.jagged_softmax(values, offsets)
    return ops.jagged_layer_norm(values, offsets, EPS)


def _dense(out):
    # softmax and layer norm give an NJT for an NJT: its values are the (N, M) result
    return out.values() if getattr(out, "is_nested", False) else out


_COMPILED: dict = {}


def compiled(op: str, entry: str):
    """The compiled callable of (op, entry), made once: ``f(values, offsets)``, or ``f(nt)`` for the boundary."""
    key = (op, entry)
    if key not in _COMPILED:
        if entry == "jaggedperf.compile":
            _COMPILED[key] = jaggedperf.compile(NESTED_FUNCTIONS[op])
        else:
            _COMPILED[key] = torch.compile(FUNCTIONS[op], dynamic=entry == "compile-dynamic")
    return _COMPILED[key]


def nested(values, offsets):
    """A jagged NestedTensor over (values, offsets), or None when torch refuses to build one (invalid offsets
    torch itself rejects: not ours to check)."""
    try:
        return torch.nested.nested_tensor_from_jagged(values, offsets.to(torch.int64))
    except (RuntimeError, ValueError, IndexError, TypeError):
        return None


def call(op: str, entry: str, values, offsets):
    """Run one entry point; returns (what it gave, what the float64 reference gives for it), or None when the
    example cannot be built for this entry point (an NJT torch will not make)."""
    fn = function(op)
    x64 = values.detach().double()
    if entry == "public":
        return fn(values, offsets), lambda: reference(op, x64, offsets)
    if entry == "torch.ops":
        return operator(op, values, offsets), lambda: reference(op, x64, offsets)
    if entry in ("compile", "compile-dynamic"):
        return compiled(op, entry)(values, offsets), lambda: reference(op, x64, offsets)
    if entry in ("njt", "jaggedperf.compile"):
        nt = nested(values, offsets)
        if nt is None:
            return None
        run = (lambda: _dense(fn(nt))) if entry == "njt" else (lambda: compiled(op, entry)(nt))
        return run(), lambda: reference(op, x64, offsets)
    if entry == "backward":
        x = values.detach().clone().requires_grad_(True)
        out = fn(x, offsets)
        grad = torch.randn(out.shape, dtype=out.dtype)
        out.backward(grad)
        v = x64.clone().requires_grad_(True)

        def expected():
            ref = reference(op, v, offsets)
            (dv,) = torch.autograd.grad(ref, v, grad.double(), allow_unused=True)
            return torch.zeros_like(x64) if dv is None else dv

        return x.grad if x.grad is not None else torch.zeros_like(values), expected
    # forward-mode AD: the tangent of the output for a random tangent of the values
    tangent = torch.randn_like(values)
    _, out_tangent = torch.func.jvp(lambda v: fn(v, offsets), (values,), (tangent,))
    return out_tangent, lambda: torch.func.jvp(lambda v: reference(op, v, offsets), (x64,), (tangent.double(),))[1]


def assert_close(out, ref, what: str) -> None:
    """``out`` has ref's shape, NaN exactly where ref has it, and every other element within 1e-4 of it relative
    to the larger of |ref| and the largest |ref| of the output (fp32 accumulation over short segments)."""
    assert tuple(out.shape) == tuple(ref.shape), f"{what}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    got = out.detach().double()
    assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{what}: NaN where the reference has none, or not"
    finite = ~torch.isnan(ref)
    if not bool(finite.any()):
        return
    scale = ref[finite].abs().max().clamp_min(1.0)
    err = (got[finite] - ref[finite]).abs().max()
    assert float(err) <= 1e-4 * float(scale), f"{what}: off by {float(err):.3g} (scale {float(scale):.3g})"


def check_example(op: str, entry: str, case, m: int) -> str:
    """One example: "reference", "documented error" or "not built" (an NJT torch would not make).
    Raises AssertionError on a wrong answer, an invalid input accepted, or an undocumented error."""
    n_rows, offsets, ok = case
    values = torch.randn(n_rows, m)
    sys.stderr.write(f"example: {op} {entry} n_rows={n_rows} m={m} offsets={offsets.tolist()} {offsets.dtype}\n")
    sys.stderr.flush()
    try:
        done = call(op, entry, values, offsets)
    except ValueError as e:
        assert not ok and OFFSET_ERRORS.search(str(e)), f"{op} {entry}: unexpected error {e!r} (valid={ok})"
        return "documented error"
    except Exception as e:  # noqa: BLE001  (a compiled call wraps the op's error: find it in the chain)
        cause = _value_error_in(e)
        assert cause is not None and not ok and OFFSET_ERRORS.search(str(cause)), \
            f"{op} {entry}: unexpected error {type(e).__name__}: {str(e)[:500]} (valid={ok})"
        return "documented error"
    if done is None:
        return "not built"
    assert ok, f"{op} {entry}: invalid offsets {offsets.tolist()} accepted (n_rows={n_rows}): a silent answer"
    out, expected = done
    assert_close(out, expected(), f"{op} {entry} offsets={offsets.tolist()} m={m}")
    return "reference"


def _value_error_in(exc: BaseException):
    while exc is not None:
        if isinstance(exc, ValueError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def run(entry: str, examples: int, seed: int = 0) -> dict:
    """The property for ``entry`` on every op, ``examples`` examples per op; returns how many ended each way."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 4096)
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # never an example run eagerly in a compiled entry's place
    tally = {"reference": 0, "documented error": 0, "not built": 0}
    for op in OPS:
        @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck), print_blob=True)
        @given(case=offsets_cases(huge=entry not in ("njt", "jaggedperf.compile")), m=st.sampled_from([1, 3, 5, 2]))
        def prop(case, m):
            tally[check_example(op, entry, case, m)] += 1

        torch.manual_seed(seed)
        prop()
    return tally


def run_kernels(examples: int, seed: int = 0) -> dict:
    """Under TRITON_INTERPRET=1: the softmax and layer norm Triton kernels (forward and backward) on any offsets,
    launched directly (the operators' CUDA branch, with no check in front): valid offsets give the reference,
    invalid ones an output of the right shape with unspecified values, and never a crash (the kernels keep every
    access in bounds whatever the offsets)."""
    from jaggedperf.ops import testing
    from jaggedperf.ops.layer_norm.plan import plan_layer_norm, plan_layer_norm_backward
    from jaggedperf.ops.softmax.plan import plan_softmax, plan_softmax_backward

    tally = {"reference": 0, "unspecified": 0}

    def launch(planned):
        planned.out.fill_(float("nan"))
        testing.run_direct(planned.launches)
        return planned.out

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(case=offsets_cases(), m=st.sampled_from([1, 3, 5]), op=st.sampled_from(["softmax", "layer_norm"]),
           backward=st.booleans())
    def prop(case, m, op, backward):
        n_rows, offsets, ok = case
        values = torch.randn(n_rows, m)
        sys.stderr.write(f"example: kernels {op} backward={backward} n_rows={n_rows} m={m} "
                         f"offsets={offsets.tolist()}\n")
        sys.stderr.flush()
        grad = torch.randn(n_rows, m)
        if op == "softmax":
            out = launch(plan_softmax(values, offsets))
            if backward:
                out = launch(plan_softmax_backward(out.nan_to_num(), grad, offsets))
        else:
            out = launch(plan_layer_norm(values, offsets, EPS))
            if backward:
                out = launch(plan_layer_norm_backward(values, grad, offsets, EPS))
        assert tuple(out.shape) == (n_rows, m)
        if not ok:
            tally["unspecified"] += 1
            return
        v = values.double().requires_grad_(backward)
        ref = reference(op, v, offsets)
        if backward:
            (ref,) = torch.autograd.grad(ref, v, grad.double(), allow_unused=True)
        assert_close(out, ref, f"kernels {op} backward={backward} offsets={offsets.tolist()}")
        tally["reference"] += 1

    torch.manual_seed(seed)
    prop()
    return tally
