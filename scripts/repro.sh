#!/usr/bin/env bash
# Set up (first run only) and reproduce the pytorch/pytorch#160355 table on the best device present.
# Extra arguments go to `jaggedperf repro`, e.g. bash scripts/repro.sh --json out.json
source "$(dirname "$0")/setup-env.sh" plot
exec jaggedperf repro "$@"
