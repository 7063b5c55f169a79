#!/usr/bin/env python3
"""The merge-path kernels under compute-sanitizer (memcheck): awkward sizes and invalid offsets, every kernel
launched at least once. Run: ``compute-sanitizer --tool memcheck python3 benchmarks/merge_sanitize.py``; exits 0
when every launch returned (the sanitizer's own report says whether any access was out of bounds)."""

import torch

from jaggedperf.ops import testing

DEVICE = torch.device("cuda")


def main() -> int:
    cases = [([], 3), ([0], 8), ([7], 1), ([0, 0, 23, 0, 0], 129), ([1] * 3000, 8), ([0] * 5000 + [1, 2, 3], 20),
             ([2, 70000, 1, 0] + [3] * 500, 64)]
    for lengths, M in cases:
        offsets = torch.tensor([0] + torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist(), device=DEVICE)
        values = torch.randn(int(offsets[-1]), M, device=DEVICE)
        for dtype in (torch.float32, torch.bfloat16):
            testing.launch_reduce(values.to(dtype), offsets, mean=True, merge=True)
            testing.launch_reduce(values.to(dtype), offsets.int(), merge=True, rows_per_chunk=3)
            grad = torch.randn(len(lengths), M, device=DEVICE, dtype=dtype)
            testing.launch_expand(grad, offsets, values.shape[0], mean=True, merge=True)
    values = torch.randn(6, 3, device=DEVICE)
    bad = torch.tensor([0, -10**12, 10**12, 3, 2**40], dtype=torch.int64, device=DEVICE)
    out = testing.launch_reduce(values, bad, mean=True, merge=True)
    testing.launch_reduce(values, bad, merge=True, rows_per_chunk=1)
    testing.launch_expand(out.nan_to_num(), bad, 6, mean=True, merge=True)
    torch.cuda.synchronize()
    print("merge kernels under the sanitizer: every launch returned")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
