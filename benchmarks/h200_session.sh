#!/usr/bin/env bash
# The GPU-machine runs behind benchmarks/results/h200/, one stage per device call (each < 10 min).
# Run from the repository root on the GPU machine (2×H200), with $OUT set (default ./out):
#
#   bash benchmarks/h200_session.sh check    GPU 0: pytest -m gpu, then the ops benchmark (bf16 config grid)
#                                            GPU 1: the seed-neighbourhood sweep (resumable), then unbind_mean
#                                            eager and graph on the five shapes
#   bash benchmarks/h200_session.sh proof    GPU 0 alone (GPU 1 idle, so wall times are quiet): repro;
#                                            then GPU 0: the five-shape run for njt_mean and jaggedperf_njt,
#                                            GPU 1: the neighbourhood sweep (resumed)
#   bash benchmarks/h200_session.sh proof1   one GPU: repro, then jaggedperf's neighbourhood cells
#   bash benchmarks/h200_session.sh check1   one GPU: pytest -m gpu, then the ops benchmark (bf16 grid)
#   bash benchmarks/h200_session.sh ops1     one GPU: pytest -m gpu, the host probe, the ops benchmark (no
#                                            config grid) and the seed table of the fast implementations
#   bash benchmarks/h200_session.sh ops2     one GPU: pytest -m gpu, then the ops benchmark (no config grid)
#   bash benchmarks/h200_session.sh compiled1  one GPU: our op eager vs compiled (max-autotune-no-cudagraphs)
#                                            on every shape of the ops' benchmark bars (≈ 4 min)
#
# Jobs on different GPUs run side by side on separate halves of the host's cores; each job's numbers
# come from its own GPU. The sweeps append to results files in the tree (benchmarks/results/h200/*.jsonl),
# so a later call resumes them once the returned copies are committed. Everything lands in
# $OUT/<stage>.tar.gz; the tails are printed last.
set -u
stage=${1:?usage: h200_session.sh check|proof|check1|proof1|ops1|ops2|compiled1}
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
ALL_MODES=eager,compile:default,compile:reduce-overhead,compile:max-autotune,compile:max-autotune-no-cudagraphs,graph
SEED_MODES=eager,compile:max-autotune-no-cudagraphs
NEAR_IMPLS=nanmean_padded,sum_padded,segment_reduce,jaggedperf

{ nvidia-smi; python3 -c 'import sys, torch, triton; print(sys.version); print(torch.__version__, triton.__version__)'
  git log -1 --oneline 2>/dev/null; } > "$work/env.txt" 2>&1

five_shapes() {  # $1: seconds, $2: implementations, $3: modes; the rest: launcher. Appends to five_shapes.jsonl.
  local budget=$1 impls=$2 modes=$3; shift 3
  local end=$((SECONDS + budget))
  for shape in $FIVE; do
    IFS=, read -r B M L S <<< "$shape"
    left=$((end - SECONDS)); [ "$left" -le 20 ] && break
    timeout -s INT -k 20 "$left" "$@" "${jp[@]}" sweep --out "$RES/five_shapes.jsonl" --B "$B" --M "$M" --seqlen "$L" \
      --sparsity "$S" --impls "$impls" --modes "$modes" --timeout 100 >> "$work/five_shapes.log" 2>&1
  done
}

neighbourhood() {  # $1: seconds; the rest: launcher. The seed's neighbourhood, then a B × M grid (resumable).
  local end=$((SECONDS + $1)); shift
  local left
  left=$((end - SECONDS)); [ "$left" -gt 20 ] && timeout -s INT -k 20 "$left" "$@" "${jp[@]}" sweep \
    --out "$RES/neighbourhood.jsonl" --B 512 --M 64 --seqlen 100 200 300 500 750 1000 --sparsity 0.1 0.3 0.5 0.7 0.9 \
    --impls "$NEAR_IMPLS" --modes "$SEED_MODES" --timeout 120 >> "$work/neighbourhood.log" 2>&1
  left=$((end - SECONDS)); [ "$left" -gt 20 ] && timeout -s INT -k 20 "$left" "$@" "${jp[@]}" sweep \
    --out "$RES/neighbourhood.jsonl" --B 64 512 4096 --M 16 64 256 --seqlen 500 --sparsity 0.5 \
    --impls "$NEAR_IMPLS" --modes "$SEED_MODES" --timeout 120 >> "$work/neighbourhood.log" 2>&1
  # unbind_mean compiles one graph per sequence (≈75 s at B=512): eager only over the neighbourhood
  left=$((end - SECONDS)); [ "$left" -gt 20 ] && timeout -s INT -k 20 "$left" "$@" "${jp[@]}" sweep \
    --out "$RES/neighbourhood.jsonl" --B 512 --M 64 --seqlen 100 200 300 500 750 1000 --sparsity 0.1 0.3 0.5 0.7 0.9 \
    --impls unbind_mean --modes eager --timeout 120 >> "$work/neighbourhood.log" 2>&1
  echo "neighbourhood stage done" >> "$work/status.txt"
}

case "$stage" in
check)
  (
    timeout 300 "${gpu0[@]}" python3 -m pytest -v -m gpu tests -p no:cacheprovider --timeout 120 --durations 15 \
      > "$work/pytest_gpu.log" 2>&1
    echo "pytest -m gpu rc=$?" >> "$work/status.txt"
    timeout 220 "${gpu0[@]}" python3 benchmarks/ops_bench.py --grid-seconds 70 --grid-dtype bf16 \
      --out "$work/ops_bench.json" > "$work/ops_bench.log" 2>&1
    echo "ops_bench rc=$?" >> "$work/status.txt"
  ) &
  (
    neighbourhood 420 "${gpu1[@]}"
    five_shapes 100 unbind_mean eager,graph "${gpu1[@]}"
    echo "five shapes unbind done" >> "$work/status.txt"
  ) &
  wait
  ;;
proof)
  # GPU 1 idle: the seed table's wall times without a second job on the host
  timeout 360 "${gpu0[@]}" "${jp[@]}" repro --impls "unbind_mean,nanmean_padded,sum_padded,segment_reduce,jaggedperf,jaggedperf_njt" \
    --json "$work/repro.json" > "$work/repro.txt" 2>&1
  echo "repro rc=$?" >> "$work/status.txt"
  five_shapes 150 njt_mean,jaggedperf_njt "$ALL_MODES" "${gpu0[@]}" &
  neighbourhood 150 "${gpu1[@]}" &
  wait
  echo "five shapes extras done" >> "$work/status.txt"
  ;;
proof1)  # one GPU: the quiet seed table, then jaggedperf's neighbourhood cells (re-measured after a config change)
  timeout 330 "${jp[@]}" repro --impls "unbind_mean,nanmean_padded,sum_padded,segment_reduce,jaggedperf,jaggedperf_njt" \
    --timeout 120 --json "$work/repro.json" > "$work/repro.txt" 2>&1
  echo "repro rc=$?" >> "$work/status.txt"
  NEAR_IMPLS=jaggedperf neighbourhood $((480 - SECONDS))
  ;;
check1)  # one GPU: the GPU tests, then the ops benchmark with the bf16 config grid
  timeout 290 python3 -m pytest -v -m gpu tests -p no:cacheprovider --timeout 120 --durations 15 \
    > "$work/pytest_gpu.log" 2>&1
  echo "pytest -m gpu rc=$?" >> "$work/status.txt"
  timeout $((500 - SECONDS)) python3 benchmarks/ops_bench.py --grid-seconds 60 --grid-dtype bf16 \
    --out "$work/ops_bench.json" > "$work/ops_bench.log" 2>&1
  echo "ops_bench rc=$?" >> "$work/status.txt"
  ;;
ops2)  # one GPU, ≈ 8 min: after a kernel change: the GPU tests, then the ops benchmark with its segments grid
  timeout 330 python3 -m pytest -v -m gpu tests -p no:cacheprovider --timeout 120 --durations 15 \
    > "$work/pytest_gpu.log" 2>&1
  echo "pytest -m gpu rc=$?" >> "$work/status.txt"
  timeout $((570 - SECONDS)) python3 benchmarks/ops_bench.py --grid-seconds 0 --out "$work/ops_bench.json" \
    > "$work/ops_bench.log" 2>&1
  echo "ops_bench rc=$?" >> "$work/status.txt"
  ;;
ops1)  # one GPU, ≈ 9 min: after a change to the ops' launch path or kernels
  timeout 290 python3 -m pytest -v -m gpu tests -p no:cacheprovider --timeout 120 --durations 15 \
    > "$work/pytest_gpu.log" 2>&1
  echo "pytest -m gpu rc=$?" >> "$work/status.txt"
  timeout 60 python3 benchmarks/host_probe.py --out "$work" > "$work/host_probe.log" 2>&1
  echo "host_probe rc=$?" >> "$work/status.txt"
  timeout 120 python3 benchmarks/ops_bench.py --grid-seconds 0 --out "$work/ops_bench.json" > "$work/ops_bench.log" 2>&1
  echo "ops_bench rc=$?" >> "$work/status.txt"
  timeout $((560 - SECONDS)) "${jp[@]}" repro --impls "sum_padded,segment_reduce,jaggedperf,jaggedperf_njt" \
    --timeout 100 --json "$work/repro.json" > "$work/repro.txt" 2>&1
  echo "repro rc=$?" >> "$work/status.txt"
  ;;
compiled1)  # one GPU: is a compiled function around jagged_mean ever slower than eager, on the bars' shapes?
  for spec in "512 64 100 0.1 tritonbench" "512 64 500 0.75 tritonbench" "1024 256 1000 0.5 tritonbench" \
      "4096 512 512 0.2 tritonbench" "256 64 20000 0.5 tritonbench" "4096 128 32768 0.0 heavy" \
      "8 4096 4000 0.0 fixed" "65536 16 64 0.2 tritonbench"; do
    read -r B M L S D <<< "$spec"
    timeout 100 "${jp[@]}" run --B "$B" --M "$M" --seqlen "$L" --sparsity "$S" --distribution "$D" --impls jaggedperf \
      --modes eager,compile:max-autotune-no-cudagraphs --json "$work/compiled_${B}_${M}_${L}_${D}.json" \
      > "$work/compiled_${B}_${M}_${L}_${D}.txt" 2>&1
    echo "$spec rc=$?" >> "$work/status.txt"
  done
  ;;
esac
cp "$RES"/*.jsonl "$work/" 2>/dev/null
tar -czf "$OUT/$stage.tar.gz" -C "$OUT" "$stage"
cat "$work/status.txt"
for f in "$work"/pytest_gpu.log "$work"/ops_bench.log "$work"/repro.txt "$work"/doctor.txt; do
  [ -f "$f" ] && { echo "=== $f"; tail -n 30 "$f"; }
done
tail -n 5 "$work"/*.log 2>/dev/null | tail -n 30
