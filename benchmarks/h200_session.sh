#!/usr/bin/env bash
# The GPU-machine runs behind benchmarks/results/h200/, one stage per device call (each < 10 min).
# Run from the repository root on the GPU machine, with $OUT set (default ./out):
#
#   bash benchmarks/h200_session.sh check    GPU 0: pytest -m gpu, ops benchmark, repro
#                                            GPU 1: doctor at the seed shapes, then the five-shape run
#   bash benchmarks/h200_session.sh sweeps   both GPUs: the five-shape run (resumed), then the seed
#                                            neighbourhood sweep
#
# Jobs on different GPUs run side by side on separate halves of the host's cores; each job's numbers
# come from its own GPU. The sweeps append to results files in the tree (benchmarks/results/h200/*.jsonl),
# so a later call resumes them once the returned copies are committed. Everything lands in
# $OUT/<stage>.tar.gz; the tails are printed last.
set -u
stage=${1:?usage: h200_session.sh check|sweeps}
OUT=${OUT:-out}
work="$OUT/$stage"
mkdir -p "$work"
export PYTHONPATH=src PYTHONUNBUFFERED=1
ncpu=$(nproc)
half=$((ncpu / 2))
gpu0=(env CUDA_VISIBLE_DEVICES=0 taskset -c "0-$((half - 1))")
gpu1=(env CUDA_VISIBLE_DEVICES=1 taskset -c "$half-$((ncpu - 1))")
jp=(python3 -m jaggedperf)
RES=benchmarks/results/h200
FIVE="512,64,100,0.1 512,64,500,0.75 1024,256,1000,0.5 4096,512,512,0.2 256,64,20000,0.5"
FIVE_IMPLS=${FIVE_IMPLS:-nanmean_padded,sum_padded,segment_reduce,jaggedperf}
ALL_MODES=eager,compile:default,compile:reduce-overhead,compile:max-autotune,compile:max-autotune-no-cudagraphs,graph

{ nvidia-smi; python3 -c 'import sys, torch, triton; print(sys.version); print(torch.__version__, triton.__version__)'
  git log -1 --oneline 2>/dev/null; } > "$work/env.txt" 2>&1

five_shapes() {  # $1: seconds; the rest: launcher. Appends to five_shapes.jsonl (resumable).
  local budget=$1; shift
  local end=$((SECONDS + budget))
  for shape in $FIVE; do
    IFS=, read -r B M L S <<< "$shape"
    left=$((end - SECONDS)); [ "$left" -le 20 ] && break
    timeout -s INT -k 20 "$left" "$@" "${jp[@]}" sweep --out "$RES/five_shapes.jsonl" --B "$B" --M "$M" --seqlen "$L" \
      --sparsity "$S" --impls "$FIVE_IMPLS" --modes "$ALL_MODES" --timeout 150 >> "$work/five_shapes.log" 2>&1
  done
}

case "$stage" in
check)
  (
    timeout 150 "${gpu0[@]}" python3 -m pytest -q -m gpu tests -p no:cacheprovider --timeout 90 --durations 15 \
      > "$work/pytest_gpu.log" 2>&1
    echo "pytest -m gpu rc=$?" >> "$work/status.txt"
    timeout 140 "${gpu0[@]}" python3 benchmarks/ops_bench.py --grid-seconds 45 --out "$work/ops_bench.json" \
      > "$work/ops_bench.log" 2>&1
    echo "ops_bench rc=$?" >> "$work/status.txt"
    timeout 285 "${gpu0[@]}" "${jp[@]}" repro --json "$RES/repro.json" > "$work/repro.txt" 2>&1
    echo "repro rc=$?" >> "$work/status.txt"
    cp "$RES/repro.json" "$work/" 2>/dev/null
  ) &
  (
    timeout 190 "${gpu1[@]}" "${jp[@]}" doctor --impls nanmean_padded,sum_padded,jaggedperf_njt \
      --json "$work/doctor.json" --trace "$work/traces" > "$work/doctor.txt" 2>&1
    echo "doctor rc=$?" >> "$work/status.txt"
    five_shapes 385 "${gpu1[@]}"
    echo "five shapes (part) done" >> "$work/status.txt"
  ) &
  wait
  ;;
sweeps)
  five_shapes 330
  echo "five shapes done" >> "$work/status.txt"
  timeout -s INT -k 20 230 "${jp[@]}" sweep --out "$RES/neighbourhood.jsonl" --B 512 --M 64 --seqlen 100 300 1000 \
    --sparsity 0.1 0.5 0.9 --impls unbind_mean,nanmean_padded,sum_padded,segment_reduce,jaggedperf \
    --timeout 120 > "$work/neighbourhood.log" 2>&1
  echo "neighbourhood rc=$?" >> "$work/status.txt"
  ;;
esac
cp "$RES"/*.jsonl "$work/" 2>/dev/null
tar -czf "$OUT/$stage.tar.gz" -C "$OUT" "$stage"
cat "$work/status.txt"
for f in "$work"/pytest_gpu.log "$work"/ops_bench.log "$work"/repro.txt "$work"/doctor.txt; do
  [ -f "$f" ] && { echo "=== $f"; tail -n 30 "$f"; }
done
tail -n 5 "$work"/*.log 2>/dev/null | tail -n 30
