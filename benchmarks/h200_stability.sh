#!/usr/bin/env bash
# Issue #18's H200 proof (~4 min): the same 18-cell grid twice back to back, then `jaggedperf compare
# --fail-on-regression` on the pair. The two runs' stable cells must agree (no regression, no improvement claimed
# between identical runs), and a cell whose host-speed probes moved by > 10% between the runs is not counted on wall
# time (compare's host-speed rule, session 11). Grid: sum_padded, segment_reduce, jaggedperf × eager, the seed's
# compiled mode, graph × both seed shapes (the grid of run 50, which failed on wall time before the rule).
# Everything lands in $OUT/call.tgz beside the other scripts' files (8 files max come back): W=$OUT/w.
# STABILITY_ARGS replaces the grid (a CPU smoke test of the script: --device cpu and a tiny case).
cd "$(dirname "$0")/.."
W="${W:-$OUT/w}"; mkdir -p "$W/stability"
if ! python -c "import jaggedperf" 2>/dev/null; then  # alone in a call: the README's set-up first (offline reuse)
  set +e; source scripts/setup-env.sh test > "$W/stability/setup.log" 2>&1; set +e
fi
GRID=(--preset seed --impls sum_padded segment_reduce jaggedperf
      --modes eager compile:max-autotune-no-cudagraphs graph)
[ -n "${STABILITY_ARGS:-}" ] && read -r -a GRID <<< "$STABILITY_ARGS"
for run in a b; do
  python -m jaggedperf run "${GRID[@]}" --json "$W/stability/$run.json" > "$W/stability/$run.txt" 2>&1
  echo "stability run $run rc=$?"
done
python -m jaggedperf compare "$W/stability/a.json" "$W/stability/b.json" --fail-on-regression \
  --json "$W/stability/comparison.json" > "$W/stability/comparison.txt" 2>&1
echo "compare rc=$?"; tail -30 "$W/stability/comparison.txt" | cut -c1-220
