"""float64 references on the GPU for the GPU tests (index_add over segment ids: not the kernels' method), and
how the tests hand their measured numbers to the junit XML."""


import pytest
import torch

from jaggedperf.inputs import Case
from jaggedperf.lab.measure import stats as _stats
from jaggedperf.lab.reduce_row import expand_reference, reference  # noqa: F401 - the backward's reference, the tests' name
from helpers.reference import assert_matches


# The family's GPU shapes (softmax, layer norm and their Helion contenders): the seed's, one of >= 64 MB, and
# awkward ones (3 columns, 129 columns, 65536 short sequences, one column of two 10^5-row sequences).
FAMILY_SHAPES = [
    Case(512, 64, 100, 0.1),
    Case(512, 64, 500, 0.75),
    Case(1024, 256, 1000, 0.5),
    Case(7, 3, 50, 0.5, "heavy"),
    Case(3, 129, 5000, 0.0, "heavy"),
    Case(65536, 16, 64, 0.2),
    Case(2, 1, 100000, 0.0, "fixed"),
]
# Past this many elements (B × M × seqlen) a case's backward against float64 (values, gradient, their float64 copies
# and reference: GBs) runs alone, after the parallel pass (the `memory` mark): on an 80 GB card eight workers' cached
# memory beside the bf16 backward at 1024 × 256 × <= 1000 left too little (out of memory in parallel; alone it passes).
MEMORY_ELEMENTS = 10**8


def shape_params(shapes):
    """``shapes`` as pytest params, those past ``MEMORY_ELEMENTS`` marked `memory`."""
    return [pytest.param(c, marks=pytest.mark.memory) if c.B * c.M * c.seqlen > MEMORY_ELEMENTS else c for c in shapes]


def gpu_reference(values, offsets, *, mean, empty_zero=False, absolute=False):
    """(B, M) float64 on the device (``lab.reduce_row.reference``: index_add over segment ids, not the kernels'
    method); ``absolute``: of |values| (the scale errors are judged against); ``empty_zero``: an empty segment's
    mean 0 instead of NaN."""
    out = reference(values.abs() if absolute else values, offsets, mean=mean)
    if mean and empty_zero:
        out = torch.where(offsets.long().diff().unsqueeze(1) == 0, 0.0, out)
    return out


def check(out, values, offsets, *, mean, empty_zero=False, what="output"):
    ref = gpu_reference(values, offsets, mean=mean, empty_zero=empty_zero)
    scale = gpu_reference(values, offsets, mean=mean, empty_zero=True, absolute=True)
    assert_matches(out, ref, values.dtype, scale=scale, what=what)  # compared on the device


def record(record_property, **numbers) -> None:
    """Each measured number into the junit XML (``--junitxml``), xfailed tests included: floats to 3 decimals,
    anything else as it is."""
    for name, value in numbers.items():
        record_property(name, round(value, 3) if isinstance(value, float) else value)


# For tests of the doctor's attribution, not of the host's quiet. On the shared H200 host the compiled NJT
# calls' walls spread 10-14% (IQR / median) and drifted 10-12% within a cell in several runs, past the lab's
# default 10%, where the doctor refuses a verdict by design (tests/lab/test_doctor.py covers the refusal).
# The residual check (parts within 10% of Δ) is not relaxed.
NOISY_HOST = _stats.Policy(max_iqr_rel=0.25, max_drift_rel=0.25, attempts=5)
