#!/usr/bin/env bash
# The content hash of the code a run used: sha256 over every .py and .sh file under src/, tests/ and benchmarks/
# (paths and contents, sorted). The GPU machine runs a copy of the working tree whose .git may be older than the
# files, so a run records this rather than `git rev-parse HEAD`; to tie it to a commit, run this script in a
# checkout of that commit (`git worktree add /tmp/c COMMIT && bash /tmp/c/benchmarks/tree_hash.sh`).
cd "${1:-$(dirname "$0")/..}" || exit 1
find src tests benchmarks -type f \( -name '*.py' -o -name '*.sh' \) -not -path '*/__pycache__/*' | LC_ALL=C sort \
  | xargs sha256sum | sha256sum | cut -c1-16
