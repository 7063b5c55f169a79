"""Our Helion contenders on the GPU: registered where helion imports, each equal to its op's float64
reference (the lab's correctness gate) at the seed shapes and awkward ones, every dtype, and capturable in a CUDA
graph (the lab's device-time method). Skipped where helion is not installed or does not import
(helion 1.5.1 needs a newer torch than 2.11).

Run on the GPU machine: ``PYTHONPATH=src python -m pytest -q -m gpu tests/gpu/test_helion_gpu.py``.
"""


import pytest
import torch

try:
    import helion  # noqa: F401
except ImportError as exc:  # installed but not importable with this torch (helion 1.5.1 under torch 2.11)
    pytest.skip(f"helion does not import here: {exc}", allow_module_level=True)

from jaggedperf.impls import helion_contenders
from jaggedperf.impls.registry import get_implementation, get_op
from jaggedperf.inputs import Case
from jaggedperf.lab.measure import correctness, timing
from helpers.gpu import FAMILY_SHAPES

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
SHAPES = [c for c in FAMILY_SHAPES if c != Case(1024, 256, 1000, 0.5)]  # the family's, but the 536 MB one


def test_registered_with_the_setup_hook_reporting_the_version():
    assert helion_contenders.unavailable_reason() is None
    for op in helion_contenders.OPS:
        assert get_implementation(op, "helion").devices == ("cuda",)
    state = helion_contenders.load_helion(CUDA)["helion"]
    assert state["version"] and state["autotune"].startswith("off")


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: c.label)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", helion_contenders.OPS)
def test_equals_the_float64_reference(op, dtype, case):
    assert_equals_reference(op, Case(case.B, case.M, case.seqlen, case.sparsity, case.distribution, dtype=dtype))


@pytest.mark.parametrize("op", helion_contenders.OPS)
def test_a_large_shape_in_fp32(op):
    assert_equals_reference(op, Case(1024, 256, 1000, 0.5))


def assert_equals_reference(op: str, case: Case) -> None:
    """The helion contender of ``op`` on ``case``'s batch: its input's dtype, and within the lab's gate of the
    float64 reference."""
    spec = get_op(op)
    batch = spec.make_batch(case, CUDA)
    impl = get_implementation(op, "helion")
    out = impl.fn(*impl.prepare(batch))
    assert out.dtype == batch.values.dtype
    ok, rel, reason = correctness.check_output(out, spec.reference(batch).to(CUDA), case.dtype)  # compared on the GPU
    assert ok, (rel, reason)


@pytest.mark.parametrize("op", helion_contenders.OPS)
def test_captures_in_a_cuda_graph_and_replays_the_same_result(op):
    spec = get_op(op)
    batch = spec.make_batch(Case(512, 64, 100, 0.1), CUDA)
    impl = get_implementation(op, "helion")
    args = impl.prepare(batch)
    expected = impl.fn(*args)
    holder = {}
    graph = timing.capture_graph(lambda: holder.__setitem__("out", impl.fn(*args)), CUDA)
    assert graph is not None
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(holder["out"], expected, rtol=0, atol=0, equal_nan=True)
