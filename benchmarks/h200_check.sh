#!/usr/bin/env bash
# One GPU-machine call: GPU tests, the ops benchmark (with its config grid) and a lab smoke run over
# every device-timing path. Run from the repository root on the GPU machine:
#   bash benchmarks/h200_check.sh            (writes under $OUT, default ./out)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
{ nvidia-smi; python3 -c 'import sys, torch, triton; print(sys.version); print(torch.__version__, triton.__version__)'; } > "$OUT/env.txt" 2>&1
timeout 150 python3 -m pytest -q -m gpu tests -p no:cacheprovider > "$OUT/pytest_gpu.log" 2>&1
echo "pytest -m gpu: rc=$?"
timeout 250 python3 benchmarks/ops_bench.py --grid-seconds 110 --out "$OUT/ops_bench.json" > "$OUT/ops_bench.log" 2>&1
echo "ops_bench: rc=$?"
timeout 120 python3 -m jaggedperf run --B 512 --M 64 --seqlen 100 --sparsity 0.1 \
  --impls sum_padded,segment_reduce,jaggedperf \
  --modes eager,compile:max-autotune-no-cudagraphs,compile:reduce-overhead,graph \
  --json "$OUT/lab_smoke.json" > "$OUT/lab_smoke.txt" 2>&1
echo "lab smoke: rc=$?"
tail -n 25 "$OUT/pytest_gpu.log"; tail -n 45 "$OUT/ops_bench.log"; tail -n 30 "$OUT/lab_smoke.txt"
