#!/usr/bin/env bash
# One GPU-machine call (~9 min): issue #18's H200 proof (the same small grid twice, compared), then the
# family benchmark with helion 1.5.0 (#20). carry the helion 1.5.0 wheel folder (HELION_WHEELS, default .probe/wheels-helion-old).
# The wheels (the GPU machine is offline): python3 -m pip download --no-deps -d DIR helion==1.5.0 filecheck==1.0.6
# (helion 1.5.1 does not import under the machine's torch 2.11). $OUT: the device call's output folder.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
t0=$(date +%s); left() { echo $(( 555 - ($(date +%s) - t0) )); }
W="$OUT/w"; mkdir -p "$W"; trap 'tar czf "$OUT/call.tgz" -C "$OUT" w' EXIT
python3 -m pip install --no-index --no-deps "${HELION_WHEELS:-.probe/wheels-helion-old}"/*.whl > "$W/helion-install.log" 2>&1
set +e; source scripts/setup-env.sh test > "$W/setup.log" 2>&1; set +e
grid=(--B 512 --M 64 --seqlen 100 500 --sparsity 0.1 --impls sum_padded,segment_reduce,jaggedperf
      --modes eager,compile:max-autotune-no-cudagraphs,graph)
for k in a b; do
  timeout 110 python -m jaggedperf run "${grid[@]}" --json "$W/stability-$k.json" > "$W/stability-$k.txt" 2>&1
  echo "stability $k rc=$? at $(( $(date +%s) - t0 )) s"
done
python -m jaggedperf compare "$W/stability-a.json" "$W/stability-b.json" --fail-on-regression > "$W/compare.txt" 2>&1
echo "compare rc=$?"; tail -25 "$W/compare.txt" | cut -c1-200
timeout -s INT $(( $(left) - 10 )) python benchmarks/family_bench.py --out "$W/family" > "$W/family.log" 2>&1
echo "family rc=$? at $(( $(date +%s) - t0 )) s"; tail -30 "$W/family/family_bench.md" 2>/dev/null | cut -c1-200
