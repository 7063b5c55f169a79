"""jaggedperf.compile against torch.compile on PyTorch's own NJT OpInfo samples (``jaggedperf.lab.conformance``).

PyTorch's NJT compile tests run every sample of its NJT OpInfo database through ``torch.compile(fullgraph=True,
backend="aot_eager_decomp_partition")``, forward and backward; here each op's first sample runs eagerly, through
torch.compile and through jaggedperf.compile, and no sample may come out ``differs`` (another value, gradient,
requires_grad, grad_fn presence or cached seqlen than eager mode where torch.compile gives eager mode's, or a raise
where torch.compile does not). Backward samples for ops with autograd, forward samples for the rest; a subset
under Inductor. A quarter of the elementwise ufuncs (``_taken``); every sample: ``benchmarks/boundary_conformance.py``
(its summaries, ``benchmarks/results/cpu/boundary-conformance/``).

The database imports expecttest (a test dependency of PyTorch's): without it these tests skip, except in CI, which
must run them.
"""

from __future__ import annotations

import os

import pytest

from jaggedperf.lab import conformance

try:
    from torch.testing._internal.opinfo.definitions.nested import njt_op_db
except ImportError as err:  # no expecttest: the offline GPU box
    njt_op_db, MISSING = [], f"PyTorch's NJT OpInfo database is not importable ({err})"
else:
    MISSING = None

# Ops whose first sample also runs under Inductor: the families a jagged model is made of.
INDUCTOR_OPS = ("add", "mul", "sin", "nn.functional.relu", "nn.functional.gelu", "softmax", "log_softmax",
                "nn.functional.layer_norm", "nn.functional.linear", "sum", "mean", "matmul", "unsqueeze", "chunk",
                "where")


# Elementwise ufuncs (201 of the database's ops, three quarters of these tests' time: ~1.6 s a sample on 2 cores)
# cross the boundary one way: values in, values out, the NJT's structure unchanged. The suite takes every
# UFUNC_STRIDE-th of each kind in the database's order and those in INDUCTOR_OPS; JAGGEDPERF_CONFORMANCE=all takes
# them all (each op's first sample; the benchmark's committed summaries take every sample).
UFUNC_KINDS = ("UnaryUfuncInfo", "BinaryUfuncInfo")
UFUNC_STRIDE = 4


def _taken(ops) -> list:
    if os.environ.get("JAGGEDPERF_CONFORMANCE") == "all":
        return list(ops)
    seen = dict.fromkeys(UFUNC_KINDS, 0)
    taken = []
    for op in ops:
        kind = type(op).__name__
        if kind in seen:
            seen[kind] += 1
            if (seen[kind] - 1) % UFUNC_STRIDE and op.full_name not in INDUCTOR_OPS:
                continue
        taken.append(op)
    return taken


def _cases() -> list:
    if MISSING is not None:
        return [pytest.param(None, False, marks=pytest.mark.skipif(not os.environ.get("CI"), reason=MISSING))]
    return [pytest.param(op.full_name, op.supports_autograd, id=op.full_name) for op in _taken(njt_op_db)]


def _first_sample(name: str, requires_grad: bool):
    for op, sample, sample_name in conformance.samples(requires_grad, ops=lambda n: n == name):
        return op, sample, sample_name
    return None


def _check(name: str, requires_grad: bool, backend: str) -> conformance.SampleResult | None:
    if MISSING is not None:
        pytest.fail(f"CI must run PyTorch's NJT samples: {MISSING}")
    found = _first_sample(name, requires_grad) or (_first_sample(name, False) if requires_grad else None)
    if found is None:
        pytest.skip(f"the database has no NJT sample of {name}")
    result = conformance.run_sample(*found, backend=backend)
    assert result.outcome != conformance.DIFFERS, f"{result.sample}: {result.detail}"
    assert result.outcome in conformance.OUTCOMES
    return result



@pytest.mark.parametrize("name, autograd", _cases())
def test_opinfo_sample_has_torch_compiles_outcome(name, autograd):
    _check(name, autograd, "aot_eager_decomp_partition")


@pytest.mark.parametrize("name", INDUCTOR_OPS)
def test_opinfo_sample_has_torch_compiles_outcome_under_inductor(name):
    if MISSING is not None and not os.environ.get("CI"):
        pytest.skip(MISSING)
    _check(name, True, "inductor")


@pytest.mark.parametrize("way, eager_alone_crashes, kind", [
    ("eager", True, conformance.TORCH_CRASHES),
    ("torch.compile", False, conformance.TORCH_CRASHES),
    ("jaggedperf.compile", True, conformance.TORCH_CRASHES),
    ("jaggedperf.compile", False, conformance.DIFFERS),
])
def test_a_sample_that_kills_the_process_is_ours_to_answer_only_where_eager_mode_alone_survives_it(
        way, eager_alone_crashes, kind):
    result = conformance.crashed("split_with_sizes", "a sample", "aot_eager", True, way, "signal 11",
                                 eager_crashes=eager_alone_crashes)
    assert result.outcome == kind and way in result.detail and "signal 11" in result.detail
    report = conformance.Report([result])
    assert report.compared == (kind == conformance.DIFFERS) and len(report.differing()) == report.compared
