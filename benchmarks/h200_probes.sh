#!/usr/bin/env bash
# One GPU-machine call (~9.5 min), the probes that decide what to route (benchmarks/NOTES.md, sessions 11-12): the
# row-block and chunk-size probe on the giant, the empty-heavy and the seed shapes (#16); the row-wise families' tile
# against smaller ones (tile_probe.py, #20); then the timed tests (TESTS, default the doctor's and compile bars',
# #15/#18). TRAINING=1 adds the training probe; FAMILY_ARGS="..." runs family_bench.py too (e.g. the split layer
# norm at few long sequences: --ops jagged_layer_norm --only B8-M4096-L4000-s0-fixed); TILE_PROBE=0 skips the tile
# probe, ROWBLOCK=0 the row-block probe (ROWBLOCK_CLASSES: its shape classes, default giant,empty,seed);
# SPLIT_PROBE=1 runs split_probe.py (softmax's split against its one-program kernel at few long sequences);
# KERNEL_GRID_ARGS="..." runs kernel_grid_bench.py with them (e.g. --classes seed --quick --budget-s 0: a fresh
# process's first calls while the native module builds, and the training walls);
# UNTIMED="tests..." runs those untimed GPU tests first (UNTIMED_N workers,
# UNTIMED_S seconds at most); TESTS_K selects among the timed tests (pytest -k).
# carry the helion 1.5.0 wheel folder (HELION_WHEELS, default .probe/wheels-helion-old). Everything lands in $OUT/call.tgz (8 files max come back).
# The wheels (the GPU machine is offline): python3 -m pip download --no-deps -d DIR helion==1.5.0 filecheck==1.0.6
# (helion 1.5.1 does not import under the machine's torch 2.11). $OUT: the device call's output folder.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
t0=$(date +%s); left() { echo $(( ${CALL_S:-560} - ($(date +%s) - t0) )); }
W="$OUT/w"; mkdir -p "$W"; trap 'tar czf "$OUT/call.tgz" -C "$OUT" w' EXIT
{ uptime; nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm --format=csv; } > "$W/load.txt" 2>&1
echo "tree $(bash benchmarks/tree_hash.sh)" | tee "$W/tree.txt"  # the code's content hash (benchmarks/tree_hash.sh)
python3 -m pip install --no-index --no-deps "${HELION_WHEELS:-.probe/wheels-helion-old}"/*.whl > "$W/helion-install.log" 2>&1
set +e; source scripts/setup-env.sh test > "$W/setup.log" 2>&1; set +e
echo "setup at $(( $(date +%s) - t0 )) s"
if [ "${ROWBLOCK:-1}" = 1 ]; then
  timeout -s INT 100 python benchmarks/rowblock_probe.py --classes "${ROWBLOCK_CLASSES:-giant,empty,seed}" --out "$W/rowblock_probe.json" \
    > "$W/rowblock.log" 2>&1
  echo "probe rc=$? at $(( $(date +%s) - t0 )) s"; grep -v "^W" "$W/rowblock.log" | tail -30 | cut -c1-220
fi
if [ "${TILE_PROBE:-1}" = 1 ]; then
  timeout -s INT 170 python benchmarks/tile_probe.py --out "$W/tile_probe.json" > "$W/tile.log" 2>&1
  echo "tiles rc=$? at $(( $(date +%s) - t0 )) s"; grep "^|" "$W/tile.log" | cut -c1-260
fi
if [ "${SPLIT_PROBE:-0}" = 1 ]; then
  timeout -s INT 150 python benchmarks/split_probe.py --out "$W/split_probe.json" > "$W/split.log" 2>&1
  echo "split rc=$? at $(( $(date +%s) - t0 )) s"; grep "^|" "$W/split.log" | cut -c1-300
fi
# what each pass selects (pytest --co), so that the report names any test a cut pass left without a result
collect() { python -m pytest --co -q -m gpu -p no:cacheprovider "$@" 2>/dev/null | grep "::" ; }
# SUITE_COLLECT=1: also list the whole GPU suite as this machine collects it (Helion's cases included where it imports),
# for a union report over several calls (test_run_report.py --collected .../suite-collected.txt)
# (both passes: an exported JAGGEDPERF_TIMED_TESTS=defer would leave the timed tests out of it)
if [ "${SUITE_COLLECT:-0}" = 1 ]; then JAGGEDPERF_TIMED_TESTS= collect tests > "$W/suite-collected.txt"; fi
if [ -n "${UNTIMED:-}" ]; then  # untimed GPU tests to run first, e.g. one new test
  collect $UNTIMED > "$W/collected.untimed.txt"
  # the workers share the cores: each gets its share of torch's CPU threads (a CPU op's parallel path on a full
  # machine's worth of threads per worker oversubscribes it; NOTES, session 17)
  workers=${UNTIMED_N:-0}; threads=$(( workers > 0 ? $(nproc) / workers : $(nproc) )); threads=$(( threads > 0 ? threads : 1 ))
  OMP_NUM_THREADS=$threads timeout -s INT "${UNTIMED_S:-120}" python -m pytest -q -m gpu -n "$workers" -p no:cacheprovider -rfE $UNTIMED \
    --junitxml="$W/untimed.xml" > "$W/untimed.log" 2>&1
  echo "untimed rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR)|passed|failed" "$W/untimed.log" | tail -5 | cut -c1-300
fi
if [ -n "${KERNEL_GRID_ARGS:-}" ]; then  # e.g. "--classes seed --quick --budget-s 0": the fresh process and training walls
  timeout -s INT 200 python benchmarks/kernel_grid_bench.py --out "$W/kernel_grid" $KERNEL_GRID_ARGS > "$W/kernel_grid.log" 2>&1
  echo "kernel grid rc=$? at $(( $(date +%s) - t0 )) s"; sed -n '/^## Training/,$p' "$W/kernel_grid/kernel_grid.md" 2>/dev/null | cut -c1-260 | head -40
fi
if [ -n "${FAMILY_ARGS:-}" ]; then
  timeout -s INT 150 python benchmarks/family_bench.py --out "$W/family" $FAMILY_ARGS --budget-s 100 > "$W/family.log" 2>&1
  echo "family rc=$? at $(( $(date +%s) - t0 )) s"; cut -c1-260 "$W/family/family_bench.md" 2>/dev/null | head -30
fi
TESTS=${TESTS:-"tests/gpu/test_doctor_gpu.py tests/gpu/test_compile_bars_gpu.py"}
JAGGEDPERF_TIMED_TESTS=only collect $TESTS -k "${TESTS_K:-not nothing_deselected}" > "$W/collected.timed.txt"
JAGGEDPERF_TIMED_TESTS=only timeout -s INT $(( $(left) - 40 )) python -m pytest -q -m gpu -p no:cacheprovider -rfExX \
  $TESTS -k "${TESTS_K:-not nothing_deselected}" --junitxml="$W/timed.xml" > "$W/timed.log" 2>&1
echo "timed rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR|XPASS)|passed|failed" "$W/timed.log" | tail -25 | cut -c1-300
if [ -n "${TRAINING:-}" ]; then
  timeout -s INT 90 python benchmarks/training_probe.py --out "$W/training" > "$W/training.log" 2>&1
  echo "training rc=$? at $(( $(date +%s) - t0 )) s"; tail -14 "$W/training/training_probe.md" 2>/dev/null
fi
python3 benchmarks/test_run_report.py "$W"/*.xml --collected "$W"/collected.*.txt --json "$W/tests.json" \
  > "$W/tests.md" 2>&1; head -24 "$W/tests.md"
