#!/usr/bin/env bash
# Does a newer torch stop paying the NJT guard cost? The seed's table (a subset: the seed's two shapes,
# nanmean_padded and sum_padded, eager and compile:max-autotune-no-cudagraphs) through `sweep --torch`, then the
# doctor's NJT-overhead split, under each torch version, on the CPU. Run from the repository root (the environments are made,
# or taken from the cache, by the sweep):
#   PYTHON=.venv/bin/python bash benchmarks/torch_versions_cpu.sh 2.11.0,2.13.0,2.15.0
# (PYTHON: a Python with the project's requirements; STAGES=sweep or STAGES=doctor runs one part.)
# On a machine whose pip configuration caps torch (a constraint file), PIP_CONSTRAINT=/dev/null lifts it.
set -u
VERSIONS=${1:-2.11.0,2.13.0,2.15.0}
RES=${RES:-benchmarks/results/cpu/torch-versions}
ITERS=${ITERS:-30}
WARMUP=${WARMUP:-5}
IMPLS=${IMPLS:-nanmean_padded,sum_padded}
# On a shared, busy machine the doctor declines to time guards of an unstable call: RELAX="--max-iqr 1
# --max-drift 1 --attempts 1" accepts every measurement (the spread is still recorded and reported).
RELAX=${RELAX:-}
mkdir -p "$RES"
export PYTHONPATH=src PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
{ echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- src || echo -dirty)"; echo "date: $(date -u +%FT%TZ)";
  echo "cpus: $(nproc)"; echo "load before: $(cat /proc/loadavg)"; } >> "$RES/run.txt"
STAGES=${STAGES:-sweep,doctor}
cmd=("$PY" -m jaggedperf sweep --out "$RES/seed.jsonl" --preset seed --impls "$IMPLS"
     --modes eager,compile:max-autotune-no-cudagraphs --device cpu --warmup "$WARMUP" --iters "$ITERS" $RELAX --timeout 300
     --torch "$VERSIONS")
if [[ $STAGES == *sweep* ]]; then
  echo "sweep: ${cmd[*]}" >> "$RES/run.txt"
  "${cmd[@]}" > "$RES/sweep.log" 2>&1
  echo "sweep rc=$? load after: $(cat /proc/loadavg)" >> "$RES/run.txt"
fi
[[ $STAGES == *doctor* ]] || exit 0
CACHE=${JAGGEDPERF_ENV_CACHE:-$HOME/.cache/jaggedperf/torch-envs}
tag=$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')
for v in ${VERSIONS//,/ }; do
  envpy="$CACHE/torch-$v-$tag/bin/python"
  dcmd=("$envpy" -m jaggedperf doctor --device cpu --impls "$IMPLS" --warmup "$WARMUP" --iters "$ITERS"
        $RELAX --json "$RES/doctor-$v.json")
  echo "doctor $v: ${dcmd[*]} (load before: $(cat /proc/loadavg))" >> "$RES/run.txt"
  timeout 1800 "${dcmd[@]}" > "$RES/doctor-$v.txt" 2>&1
  echo "doctor $v rc=$? load after: $(cat /proc/loadavg)" >> "$RES/run.txt"
done
