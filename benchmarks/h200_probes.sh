#!/usr/bin/env bash
# One GPU-machine call (~9 min): helion 1.5.0; the training probe (#16 bar 4); the row-block variants
# probe (#16); the timed kernel bars, doctor and model tests (#14/#16); helion's GPU tests (#20).
# carry the helion 1.5.0 wheel folder (HELION_WHEELS, default .probe/wheels-helion-old). Everything lands in $OUT/call.tgz (8 files max come back).
# The wheels (the GPU machine is offline): python3 -m pip download --no-deps -d DIR helion==1.5.0 filecheck==1.0.6
# (helion 1.5.1 does not import under the machine's torch 2.11). $OUT: the device call's output folder.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
t0=$(date +%s); left() { echo $(( 555 - ($(date +%s) - t0) )); }
W="$OUT/w"; mkdir -p "$W"; trap 'tar czf "$OUT/call.tgz" -C "$OUT" w' EXIT
{ uptime; nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm --format=csv; } > "$W/load.txt" 2>&1
python3 -m pip install --no-index --no-deps "${HELION_WHEELS:-.probe/wheels-helion-old}"/*.whl > "$W/helion-install.log" 2>&1
set +e; source scripts/setup-env.sh test > "$W/setup.log" 2>&1; set +e
python -c "import helion; print('helion', helion.__version__)" 2>&1 | tail -1
timeout -s INT 120 python benchmarks/training_probe.py --out "$W/training" > "$W/training.log" 2>&1
echo "training rc=$? at $(( $(date +%s) - t0 )) s"; cat "$W/training/training_probe.md" 2>/dev/null | tail -14
timeout -s INT 100 python benchmarks/rowblock_probe.py --out "$W/rowblock_probe.json" > "$W/rowblock.log" 2>&1
echo "rowblock rc=$? at $(( $(date +%s) - t0 )) s"; tail -12 "$W/rowblock.log" | cut -c1-200
JAGGEDPERF_TIMED_TESTS=only timeout -s INT $(( $(left) - 80 )) python -m pytest -q -m gpu -p no:cacheprovider -rfExX \
  tests/gpu/test_kernel_bars_gpu.py tests/gpu/test_doctor_gpu.py tests/gpu/test_model_gpu.py \
  --junitxml="$W/timed.xml" > "$W/timed.log" 2>&1
echo "timed rc=$? at $(( $(date +%s) - t0 )) s"; grep -E "^(FAILED|ERROR|XPASS)|passed|failed" "$W/timed.log" | tail -12 | cut -c1-250
timeout -s INT $(( $(left) - 10 )) python -m pytest -q -m gpu -n 4 -p no:cacheprovider -rfE tests/gpu/test_helion_gpu.py \
  --junitxml="$W/helion.xml" > "$W/helion.log" 2>&1
echo "helion rc=$? at $(( $(date +%s) - t0 )) s"; tail -3 "$W/helion.log" | cut -c1-250
python3 benchmarks/test_run_report.py "$W"/*.xml --json "$W/tests.json" > "$W/tests.md" 2>&1; head -14 "$W/tests.md"
