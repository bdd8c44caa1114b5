#!/usr/bin/env bash
# Create .venv-rknn: the x86_64 venv for rknn-toolkit2 (ONNX -> .rknn conversion and the
# simulator). It is separate from .venv because the toolkit needs numpy<2.
#
# Usage: bash scripts/setup_rknn_env.sh [VENV_DIR]   (default: .venv-rknn in the repo root)
# Env:   PYTHON=python3.11   interpreter to build the venv from (the toolkit wheel is cp311 here)
# Idempotent: an existing venv whose toolkit imports is kept as it is.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-rknn}"
PYTHON="${PYTHON:-python3.11}"
TOOLKIT="rknn-toolkit2==2.5.0"

if [ "$(uname -m)" != "x86_64" ] && [ "$(uname -m)" != "aarch64" ]; then
    echo "rknn-toolkit2 has wheels for x86_64 and aarch64 only (this is $(uname -m))" >&2
    exit 1
fi

check() {
    "$VENV/bin/python" - <<'PY'
import numpy, onnx, onnxruntime
from rknn.api import RKNN
assert numpy.__version__.startswith("1."), numpy.__version__
RKNN(verbose=False).release()
print(f"rknn-toolkit2 OK (numpy {numpy.__version__}, onnx {onnx.__version__}, "
      f"onnxruntime {onnxruntime.__version__})")
PY
}

if [ -x "$VENV/bin/python" ] && check 2>/dev/null; then
    exit 0
fi

if ! command -v "$PYTHON" >/dev/null; then
    echo "$PYTHON not found; set PYTHON=/path/to/python3.11" >&2
    exit 1
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade "pip<26.4"
"$VENV/bin/pip" install --quiet -r "$ROOT/requirements-rknn.txt"
# --no-deps: its metadata pins torch<=2.4 and opencv-python, which we replace (see the
# requirements file); everything it really imports is installed above.
"$VENV/bin/pip" install --quiet --no-deps "$TOOLKIT"
check
