#!/usr/bin/env bash
# One GPU-machine call (~9.5 min): `pytest -m gpu` as scripts/test.sh runs it (the untimed tests in parallel, then
# the timed and memory ones alone), to the call's limit: the untimed pass, then the compile bars (#15), the doctor
# and model tests (#15/#18), the ops and bars tests (#14). The kernel and family bars (#16/#20) take ~4 min alone:
# benchmarks/h200_probes.sh. Helion is not installed here (its GPU tests skip: ~6 min alone, h200_probes.sh).
# Everything lands in $OUT/call.tgz (8 files max come back). $OUT: the device call's output folder.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
t0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - t0) )); }
W="$OUT/w"; mkdir -p "$W"; trap 'tar czf "$OUT/call.tgz" -C "$OUT" w' EXIT
{ uptime; nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm --format=csv; } > "$W/load.txt" 2>&1
echo "tree $(bash benchmarks/tree_hash.sh)" | tee "$W/tree.txt"  # the code's content hash (benchmarks/tree_hash.sh)
set +e; source scripts/setup-env.sh test > "$W/setup.log" 2>&1; set +e
echo "setup at $(( $(date +%s) - t0 )) s"
# what each pass selects (pytest --co), so that the report names any test a cut pass left without a result
collect() { python -m pytest --co -q -m gpu -p no:cacheprovider "$@" 2>/dev/null | grep "::" ; }
JAGGEDPERF_TIMED_TESTS=defer collect tests > "$W/collected.untimed.txt"
JAGGEDPERF_TIMED_TESTS=only collect tests/gpu/test_doctor_gpu.py tests/gpu/test_model_gpu.py tests/gpu/test_ops_gpu.py \
  tests/gpu/test_bars_gpu.py tests/gpu/test_compile_bars_gpu.py > "$W/collected.timed.txt"
JAGGEDPERF_TIMED_TESTS=defer OMP_NUM_THREADS=$(( $(nproc) / 10 > 0 ? $(nproc) / 10 : 1 )) \
  timeout -s INT "${UNTIMED_S:-290}" python -m pytest -q -m gpu -n 10 -p no:cacheprovider -rfE \
  tests --junitxml="$W/untimed.xml" > "$W/untimed.log" 2>&1
echo "untimed rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR)|passed|failed" "$W/untimed.log" | tail -12 | cut -c1-300
JAGGEDPERF_TIMED_TESTS=only timeout -s INT $(( $(left) - 10 )) python -m pytest -q -m gpu -p no:cacheprovider -rfExX \
  tests/gpu/test_doctor_gpu.py tests/gpu/test_model_gpu.py tests/gpu/test_ops_gpu.py tests/gpu/test_bars_gpu.py \
  tests/gpu/test_compile_bars_gpu.py --junitxml="$W/timed.xml" > "$W/timed.log" 2>&1
echo "timed rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR|XPASS)|passed|failed" "$W/timed.log" | tail -12 | cut -c1-300
python3 benchmarks/test_run_report.py "$W"/*.xml --collected "$W"/collected.*.txt --json "$W/tests.json" \
  > "$W/tests.md" 2>&1; head -24 "$W/tests.md"
