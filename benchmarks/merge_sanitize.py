#!/usr/bin/env python3
"""Do the merge-path kernels stay in bounds under compute-sanitizer (memcheck)? Awkward sizes and invalid offsets,
every merge kernel (reduce, combine, expand) launched at least once, fp32 and bf16, int64 and int32 offsets.

Run on the GPU machine:

    PYTHONPATH=src compute-sanitizer --tool memcheck --error-exitcode 1 python3 benchmarks/merge_sanitize.py --out $OUT/sanitize

exits 0 when every launch returned (the sanitizer's own report, and its exit code with ``--error-exitcode``, say
whether any access was out of bounds); with ``--out``, writes ``merge-sanitize.json`` / ``.md`` naming the launches
(``jaggedperf.lab.harness.write_summary``).
"""

import argparse

import torch

from jaggedperf.lab import harness
from jaggedperf.ops import testing

DEVICE = torch.device("cuda")
CASES = [([], 3), ([0], 8), ([7], 1), ([0, 0, 23, 0, 0], 129), ([1] * 3000, 8), ([0] * 5000 + [1, 2, 3], 20),
         ([2, 70000, 1, 0] + [3] * 500, 64)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory of merge-sanitize.json and .md")
    args = ap.parse_args()
    launches = 0
    for lengths, M in CASES:
        offsets = torch.tensor([0] + torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist(), device=DEVICE)
        values = torch.randn(int(offsets[-1]), M, device=DEVICE)
        for dtype in (torch.float32, torch.bfloat16):
            testing.launch_reduce(values.to(dtype), offsets, mean=True, merge=True)
            testing.launch_reduce(values.to(dtype), offsets.int(), merge=True, rows_per_chunk=3)
            grad = torch.randn(len(lengths), M, device=DEVICE, dtype=dtype)
            testing.launch_expand(grad, offsets, values.shape[0], mean=True, merge=True)
            launches += 3
    values = torch.randn(6, 3, device=DEVICE)
    bad = torch.tensor([0, -10**12, 10**12, 3, 2**40], dtype=torch.int64, device=DEVICE)
    out = testing.launch_reduce(values, bad, mean=True, merge=True)
    testing.launch_reduce(values, bad, merge=True, rows_per_chunk=1)
    testing.launch_expand(out.nan_to_num(), bad, 6, mean=True, merge=True)
    torch.cuda.synchronize()
    launches += 3
    message = f"merge kernels under the sanitizer: every launch returned ({launches} planned calls)"
    print(message)
    if args.out:
        cases = [{"lengths": f"{len(ls)} segments, {sum(ls)} rows", "M": M} for ls, M in CASES]
        harness.write_summary(args.out, "merge-sanitize", {"cases": cases, "launches": launches},
                              f"# The merge-path kernels under compute-sanitizer\n\n{message}; the sanitizer's "
                              "report (its stdout) says whether any access was out of bounds.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
