#!/usr/bin/env bash
# Issue #21's 2-GPU proof: the seed's neighbourhood through the local engine (one worker process per GPU)
# and through Ray (a local 2-GPU Ray cluster, one actor per GPU), both under $OUT, then compared cell by
# cell (`jaggedperf compare`: equal within spread is the claim). Offline: Ray is installed from the wheels
# carried in .probe/wheels (Python 3.12, linux x86_64; made by `pip download ray==2.60.0 --python-version
# 3.12 --only-binary=:all: --platform manylinux2014_x86_64 -d .probe/wheels`). Both sweeps resume: run the
# script again to finish what a time limit cut. From the repository root on the GPU machine:
#   bash benchmarks/ray_gpu_proof.sh            (writes under $OUT, default ./out)
set -u
OUT=${OUT:-out}
WHEELS=${WHEELS:-.probe/wheels}  # or .probe/wheels-packed: the same, ray's wheel as .whl.tar.xz (under 64 MiB)
PY=${PYTHON:-python3}
BUDGET=${BUDGET:-270}  # seconds per engine
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
{ nvidia-smi -L; "$PY" -c 'import sys, torch; print(sys.version); print(torch.__version__, torch.cuda.device_count())';
  echo "commit: $(git rev-parse HEAD 2>/dev/null)"; echo "load: $(cat /proc/loadavg)"; } > "$OUT/env.txt" 2>&1
if ! "$PY" -c 'import ray' 2>/dev/null; then
  # A wheel carried as its unpacked contents (tar.xz, to fit a transfer limit) is zipped again first; a
  # wheel's RECORD hashes its files, not the archive, so the re-zipped wheel is the same wheel.
  for packed in "$WHEELS"/*.whl.tar.xz; do
    [ -e "$packed" ] || continue
    whl="$WHEELS/$(basename "$packed" .tar.xz)"; tmp=$(mktemp -d)
    tar -C "$tmp" -xJf "$packed" && "$PY" -c 'import os, sys, zipfile
src, dst = sys.argv[1:]
with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
    for root, _, files in os.walk(src):
        for f in files:
            z.write(os.path.join(root, f), os.path.relpath(os.path.join(root, f), src))' "$tmp" "$whl"
    rm -rf "$tmp"
  done
  "$PY" -m pip install --no-index --find-links "$WHEELS" "ray==2.60.0" > "$OUT/ray_install.log" 2>&1 \
    || { echo "ray install failed:"; tail -n 5 "$OUT/ray_install.log"; exit 1; }
fi
GRID=(--B 512 --M 64 --seqlen 100 500 1000 --sparsity 0.1 0.75 --impls sum_padded,segment_reduce,jaggedperf
      --modes eager,compile:max-autotune-no-cudagraphs --timeout 120)
timeout -s INT -k 20 "$BUDGET" "$PY" -m jaggedperf sweep --out "$OUT/local.jsonl" "${GRID[@]}" > "$OUT/local.log" 2>&1
echo "local engine: rc=$?"
timeout -s INT -k 20 "$BUDGET" "$PY" -m jaggedperf sweep --out "$OUT/ray.jsonl" "${GRID[@]}" --ray > "$OUT/ray.log" 2>&1
echo "ray engine: rc=$?"
"$PY" -m jaggedperf compare "$OUT/local.jsonl" "$OUT/ray.jsonl" --json "$OUT/compare.json" > "$OUT/compare.txt" 2>&1
"$PY" -m jaggedperf report "$OUT/ray.jsonl" -o "$OUT/ray-report.md" --no-plots > /dev/null 2>&1
"$PY" - "$OUT/ray.jsonl" <<'PYEOF' > "$OUT/where.txt"
import collections, sys
from jaggedperf.lab.results.store import load_results
rs = load_results(sys.argv[1]).results
print(collections.Counter((r.extra.get("worker"), r.extra.get("host"), r.extra.get("gpu"), r.status) for r in rs))
PYEOF
tail -n 4 "$OUT/local.log" "$OUT/ray.log"; tail -n 3 "$OUT/compare.txt"; cat "$OUT/where.txt"
