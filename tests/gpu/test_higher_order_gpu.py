"""Higher-order derivatives of every op on CUDA (fp32, the Triton kernels and, where the product is itself
differentiated, the composite of the reduce kernels) against the float64 reference on the CPU under the same
transform (``helpers.higher_order``; the CPU tests compare in float64 to 1e-9)."""

import pytest
import torch
from helpers.higher_order import OPS, TRANSFORMS, case, operator, reference, transform

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", TRANSFORMS)
def test_transforms_on_cuda_match_the_reference(op, name):
    offsets, x, weight, tangent = case(op)
    on_cuda = [t.cuda().float() for t in (x, weight, tangent)]
    got = transform(name, operator(op, offsets.cuda()), *on_cuda)
    expected = transform(name, reference(op, offsets), x, weight, tangent)
    torch.testing.assert_close(got.double().cpu(), expected, rtol=1e-4, atol=1e-5)
