# Sourced by scripts/repro.sh and scripts/test.sh: makes .venv with jaggedperf installed and activates it.
# A machine whose python3 already has a CUDA-enabled torch reuses it (no multi-GB download);
# anywhere else torch is pinned to 2.13.0 (a CPU build where only that is on disk, the PyPI build elsewhere).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    "$py" -m venv --system-site-packages "$venv"
  else
    "$py" -m venv "$venv"
  fi
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  "${pip[@]}" "torch==2.13.0"
fi
if ! "$venv/bin/python" -c 'import triton' 2>/dev/null; then
  # CPU builds of torch do not bring Triton; the kernels then run under TRITON_INTERPRET=1.
  "${pip[@]}" "triton==3.7.1" || echo "setup-env: triton unavailable; Triton kernels will be skipped" >&2
fi
"${pip[@]}" --no-build-isolation -e "$root[$1]" 2>/dev/null || "${pip[@]}" -e "$root[$1]"
# shellcheck disable=SC1091
source "$venv/bin/activate"
