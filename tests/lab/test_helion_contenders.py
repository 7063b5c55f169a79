"""The helion contenders: registered only where helion is installed and CUDA is present, else each
op says why; and our Helion kernels equal to each op's float64 reference, run on the CPU through Triton's
interpreter (``TRITON_INTERPRET=1``; skipped without helion or the interpreter)."""

import importlib.util
import os

import pytest
import torch

from jaggedperf.batch import JaggedBatch
from jaggedperf.impls import helion_contenders
from jaggedperf.impls.registry import get_implementation, get_op
from jaggedperf.inputs import Case
from jaggedperf.lab.measure import correctness

HAS_HELION = importlib.util.find_spec("helion") is not None
CPU = torch.device("cpu")


@pytest.fixture
def restore_registry():
    saved = {op: (dict(get_op(op).implementations), dict(get_op(op).unavailable)) for op in helion_contenders.OPS}
    yield
    for op, (impls, unavailable) in saved.items():
        get_op(op).implementations.clear()
        get_op(op).implementations.update(impls)
        get_op(op).unavailable.clear()
        get_op(op).unavailable.update(unavailable)


def test_unavailable_contenders_are_absent_with_their_reason(restore_registry):
    helion_contenders.register("the helion package is not installed")
    for op in helion_contenders.OPS:
        assert "helion" not in get_op(op).implementations
        assert get_op(op).unavailable["helion"] == "the helion package is not installed"
        with pytest.raises(KeyError, match="not available here: the helion package is not installed"):
            get_implementation(op, "helion")


def test_available_contenders_take_the_ops_arguments_on_cuda_only(restore_registry):
    helion_contenders.register("first unavailable")
    helion_contenders.register(None)
    for op in helion_contenders.OPS:
        impl = get_implementation(op, "helion")
        assert "helion" not in get_op(op).unavailable  # registering clears the reason
        assert impl.takes == "dense" and impl.takes_max_seqlen and impl.devices == ("cuda",)
        assert impl.setup is helion_contenders.load_helion


def test_the_reason_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert "not installed" in helion_contenders.unavailable_reason()
    monkeypatch.undo()
    if HAS_HELION:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        assert "CUDA" in helion_contenders.unavailable_reason()


def test_this_machine_registers_them_only_with_helion_and_cuda():
    registered = HAS_HELION and torch.cuda.is_available()
    for op in helion_contenders.OPS:
        assert ("helion" in get_op(op).implementations) == registered
        assert ("helion" in get_op(op).unavailable) == (not registered)


# --- the kernels, through Triton's interpreter ---------------------------------------------------------------

needs_interpreter = pytest.mark.skipif(not HAS_HELION or os.environ.get("TRITON_INTERPRET") != "1",
                                       reason="needs helion and TRITON_INTERPRET=1")


@pytest.fixture
def kernels(monkeypatch):
    # Triton's interpreter cannot run libdevice calls (exp, rsqrt) that Inductor's codegen emits for Helion;
    # tl.math has the same functions. On a GPU the real libdevice is used.
    import triton.language as tl
    from torch._inductor.runtime import triton_compat

    monkeypatch.setattr(triton_compat, "libdevice", tl.math)
    from jaggedperf.impls.helion_contenders import kernels

    monkeypatch.delenv(kernels.AUTOTUNE_ENV, raising=False)
    return kernels


def _batches(dtype):
    # awkward sizes: M = 1, 3, 129; an empty first and middle sequence; one sequence holding almost everything
    gen = torch.Generator().manual_seed(5)
    for M, lengths in ((1, [0, 5, 0, 9, 1]), (3, [70, 0, 2]), (129, [1, 3])):
        offsets = torch.tensor([0, *lengths]).cumsum(0)
        values = (torch.randn(int(offsets[-1]), M, generator=gen) * 3).to(dtype)
        yield f"M{M}", JaggedBatch.from_tensors(values, offsets, padded_len=max(lengths))


@needs_interpreter
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("op", helion_contenders.OPS)
def test_kernel_equals_the_float64_reference(kernels, op, dtype):
    fn = getattr(kernels, op)
    spec = get_op(op)
    for label, batch in _batches(getattr(torch, dtype)):
        out = fn(batch.values, batch.offsets, batch.max_seqlen)
        assert out.dtype == batch.values.dtype and out.shape == spec.reference(batch).shape, label
        ok, rel, reason = correctness.check_output(out, spec.reference(batch), dtype)
        assert ok, (label, rel, reason)


@needs_interpreter
def test_kernel_on_a_lab_case(kernels):
    spec = get_op("jagged_softmax")
    batch = spec.make_batch(Case(6, 5, 40, 0.3), CPU)
    ok, _, reason = correctness.check_output(kernels.jagged_softmax(batch.values, batch.offsets), spec.reference(batch),
                                             "float32")
    assert ok, reason


def test_autotune_effort_is_off_unless_asked(monkeypatch):
    if not HAS_HELION:
        pytest.skip("needs helion")
    from jaggedperf.impls.helion_contenders import kernels

    for value, effort in (("", None), ("0", None), ("1", "quick"), ("full", "full")):
        monkeypatch.setenv(kernels.AUTOTUNE_ENV, value)
        assert kernels.autotune_effort() == effort


def test_list_names_an_unavailable_contender_and_why(restore_registry, capsys, monkeypatch):
    from jaggedperf.cli import _catalogue, main

    # helion installed but unable to run (no CUDA device): only the registry knows why, so list reads it
    monkeypatch.setattr(_catalogue, "answers_here", lambda plugins: False)
    helion_contenders.register("no helion in this test")
    assert main(["list", "--op", "jagged_softmax"]) == 0
    out = capsys.readouterr().out
    assert "not available here: helion: no helion in this test" in out


def test_list_without_helion_says_it_is_not_installed(capsys):
    from jaggedperf.cli import _catalogue, main

    if not _catalogue.answers_here(()):
        pytest.skip("helion is installed here")
    assert main(["list", "--op", "jagged_softmax"]) == 0
    assert f"not available here: helion: {_catalogue.HELION_NOT_INSTALLED}" in capsys.readouterr().out
