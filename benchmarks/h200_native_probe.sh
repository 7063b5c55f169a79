#!/usr/bin/env bash
# The native launch path on the GPU machine, in one call: build it (timed), its GPU tests, the host probe
# (walls of the pieces of a call), then the bars' tests. Run from the repository root with $OUT set.
set -u
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 - <<'PY'
import json, time
import jaggedperf.ops
started = time.time()
print("native:", json.dumps(jaggedperf.ops.prepare_native_launch()), f"({time.time() - started:.1f} s)")
PY
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_native_gpu.py -p no:cacheprovider 2>&1 | tail -25
timeout 200 python3 benchmarks/host_probe.py --out "$OUT/probe" --profile-calls 500 2>&1 | tail -40
timeout 200 python3 -m pytest -v -m bars tests/gpu -p no:cacheprovider --junitxml "$OUT/bars.xml" 2>&1 | tail -30
