# Sourced by scripts/repro.sh and scripts/test.sh: makes (first run) and activates the project's
# environment, .venv (or $JAGGEDPERF_VENV). The argument names the extras: plot, test.
# A python3 (or $PYTHON) that already imports torch >= 2.6 is reused, in a virtualenv or conda env too:
# nothing is downloaded for it. Anywhere else torch is pinned to 2.13.0. The logic is scripts/setup_env.py.
# Strict mode holds inside this file only: the caller's shell options come back at its end (a shell that sources it
# is not left exiting on its next failing command).
_jaggedperf_shell_options=$(set +o)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${JAGGEDPERF_VENV:-$root/.venv}
# (an explicit return: set -e does not act inside a sourced file used in an && list)
if ! "${PYTHON:-python3}" "$root/scripts/setup_env.py" --root "$root" --venv "$venv" \
    --python "${PYTHON:-python3}" --extra "${1:-}"; then
  eval "$_jaggedperf_shell_options"
  return 1 2>/dev/null || exit 1
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
eval "$_jaggedperf_shell_options"
unset _jaggedperf_shell_options
