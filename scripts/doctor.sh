#!/usr/bin/env bash
# Set up (first run only) and explain the pytorch/pytorch#160355 slowdown: `jaggedperf doctor` on the
# seed's two shapes × three implementations, compiled mode max-autotune-no-cudagraphs vs eager.
# Extra arguments go to `jaggedperf doctor`, e.g. bash scripts/doctor.sh --json doctor.json --trace traces
source "$(dirname "$0")/setup-env.sh" test
exec jaggedperf doctor "$@"
