"""The jagged sum/mean's shared cases: the lengths, widths and dtypes every reduce path's tests run over, and
their inputs and float64 expectations (tests/ops/test_reduce.py, tests/ops/test_reduce_merge.py)."""

import torch

from helpers.reference import case_id, lengths_to_offsets, reference_reduce

FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16

# (lengths, M, dtype, offsets dtype, empty mode, note)
CASES = [
    ([], 3, FP32, torch.int64, "nan", "none"),
    ([], 129, BF16, torch.int32, "zero", "none"),
    ([7], 1, FP32, torch.int64, "nan", "one"),
    ([0], 3, FP32, torch.int64, "nan", "one"),
    ([0], 3, FP16, torch.int64, "zero", "one"),
    ([4, 0, 5], 129, BF16, torch.int64, "nan", ""),
    ([4, 0, 5], 129, FP32, torch.int32, "zero", ""),
    ([0, 0, 3, 1, 0, 0], 3, FP32, torch.int64, "nan", "lead-trail"),
    ([0, 0, 3, 1, 0, 0], 3, FP16, torch.int32, "zero", "lead-trail"),
    ([0, 0, 23, 0, 0], 3, FP32, torch.int64, "nan", "one-holds-all"),
    ([0, 0, 0], 5, FP32, torch.int64, "nan", "all-empty"),
    ([0, 0, 0], 5, BF16, torch.int64, "zero", "all-empty"),
    ([1, 30, 2, 0, 9, 1, 1, 12], 1, FP32, torch.int64, "nan", "long"),
    ([1, 30, 2, 0, 9, 1, 1, 12], 16, BF16, torch.int32, "zero", "long"),
    ([3, 5, 2], 300, FP32, torch.int64, "nan", "two-col-blocks"),
    ([2, 70, 1, 0], 64, FP16, torch.int64, "nan", "long"),
]
IDS = [case_id(ls, M, dt, od, em, note) for ls, M, dt, od, em, note in CASES]


def make(lengths, M, dtype, offsets_dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    offsets = lengths_to_offsets(lengths, offsets_dtype)
    values = torch.randn(int(offsets[-1]), M, generator=gen).to(dtype)
    return values, offsets


def expected(values, offsets, mean, empty_zero):
    ref = reference_reduce(values, offsets, mean=mean, empty_zero=empty_zero)
    scale = reference_reduce(values, offsets, mean=mean, empty_zero=True, absolute=True)
    return ref, scale
