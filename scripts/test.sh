#!/usr/bin/env bash
# Set up (first run only) and run the test suite. On a machine without a GPU the Triton kernels
# run under TRITON_INTERPRET=1 and tests marked `gpu` are skipped. Extra arguments go to pytest.
# With 2+ cores and pytest-xdist importable (the test extra brings it; the GPU box has it) the suite runs in two
# passes: the untimed tests in parallel (one worker a core, at most 8, half the cores past 8), then the timed
# ones (marked bars or timed) and those that need much GPU memory (marked memory) alone, serially.
source "$(dirname "$0")/setup-env.sh" test
if ! python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  export TRITON_INTERPRET=1
fi
# Inductor's on-disk caches, fresh for this run: they key a graph by its operators' names, not by our operators'
# source, so a cache another checkout (or an older commit) wrote would serve its graphs of our ops to this one.
# Both passes share it: the timed pass loads the programs the parallel pass compiled.
fresh_cache=0
if [ -z "${TORCHINDUCTOR_CACHE_DIR:-}" ]; then
  TORCHINDUCTOR_CACHE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/jaggedperf-inductor.XXXXXX")
  export TORCHINDUCTOR_CACHE_DIR
  trap 'rm -rf "$TORCHINDUCTOR_CACHE_DIR"' EXIT
  fresh_cache=1
fi
set +e
summaries=$(mktemp "${TMPDIR:-/tmp}/jaggedperf-tests.XXXXXX")
# pytest exits 5 when it collected no tests (e.g. `-m gpu` on a machine without one): not a failure. Each pass's
# summary line, and the lines above it that say why a pass stopped early, are kept for the closing line.
run_pytest() {
  python -m pytest -q "$@" | tee >(tail -n 3 >> "$summaries")
  local rc=${PIPESTATUS[0]}; [ "$rc" -eq 5 ] && rc=0; return "$rc"
}
cores=$(nproc 2>/dev/null || echo 1)
if [ "$cores" -ge 8 ]; then workers=$(( cores / 2 < 8 ? cores / 2 : 8 )); else workers=$cores; fi
# pytest's own help or version: one pytest call, nothing to total
case " $* " in *" -h "*|*" --help "*|*" --version "*) exec python -m pytest "$@" ;; esac
if [ "$cores" -ge 2 ] && python -c 'import xdist' 2>/dev/null && [[ " $* " != *" -n "* ]]; then
  start=$SECONDS
  # The parallel pass lists the files that hold the serial tests; the serial pass collects only those.
  JAGGEDPERF_SERIAL_FILES=$(mktemp "${TMPDIR:-/tmp}/jaggedperf-serial.XXXXXX")
  export JAGGEDPERF_SERIAL_FILES
  # One test at a time to a worker (xdist's chunks kept a file's slow tests on one worker), the longest first
  # (tests/conftest.py, tests/helpers/schedule.py).
  JAGGEDPERF_TIMED_TESTS=defer run_pytest -n "$workers" --dist load --maxschedchunk 1 "$@"; rc_parallel=$?
  # ... but not the autotuners' picks: each kernel's best config was benchmarked beside the other workers' kernels,
  # so the timed pass tunes each kernel again, alone, on its first call (and a graph compiled again benchmarks its
  # matmul choices again; a loaded graph keeps the choice it was compiled with).
  if [ "$fresh_cache" -eq 1 ]; then
    find "$TORCHINDUCTOR_CACHE_DIR" -name '*.best_config' -delete
    rm -rf "$TORCHINDUCTOR_CACHE_DIR/cache"
  fi
  JAGGEDPERF_TIMED_TESTS=only run_pytest "$@"; rc_timed=$?
  sleep 0.2  # the summaries' tail processes finish writing
  # the closing line: the whole run's totals (each pass's own line counts only its half, and "deselected" the other)
  python "$(dirname "$0")/test_totals.py" "$summaries" $(( SECONDS - start ))
  rm -f "$summaries" "$JAGGEDPERF_SERIAL_FILES"
  exit $(( rc_parallel != 0 ? rc_parallel : rc_timed ))
fi
run_pytest "$@"; rc=$?
rm -f "$summaries"
exit "$rc"
