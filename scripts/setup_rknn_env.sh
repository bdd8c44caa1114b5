#!/usr/bin/env bash
# Create .venv-rknn: the x86_64 venv for rknn-toolkit2 (ONNX -> .rknn conversion and the
# simulator). It is separate from .venv because the toolkit needs numpy<2. This checkout is
# installed into it editable (pip install -e, its dependencies from pyproject.toml held to the
# pins of requirements-rknn.txt), so scripts/onnx2rknn.py imports qwen3asr_tools and qwen3asr.
#
# Usage: bash scripts/setup_rknn_env.sh [VENV_DIR]   (default: .venv-rknn in the repo root)
# Env:   RKNN_PYTHON=python3.11   interpreter to build the venv from (the toolkit wheel is cp311
#        here). Not PYTHON: `make` passes its own PYTHON (the main venv's interpreter) to recipes.
# Idempotent: a venv whose stamp ($VENV/.stamp) is newer than requirements-rknn.txt, this script
# and pyproject.toml (what the editable install reads), whose toolkit imports and whose qwen3asr
# and qwen3asr_tools are this checkout's, is kept as it is; otherwise the pins are (re)applied and
# the checkout is (re)installed. One venv serves one checkout: running this from another checkout
# points the venv at that one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-rknn}"
RKNN_PYTHON="${RKNN_PYTHON:-python3.11}"
REQUIREMENTS="$ROOT/requirements-rknn.txt"
PYPROJECT="$ROOT/pyproject.toml"
STAMP="$VENV/.stamp"
TOOLKIT="rknn-toolkit2==2.5.0"

if [ "$(uname -m)" != "x86_64" ] && [ "$(uname -m)" != "aarch64" ]; then
    echo "rknn-toolkit2 has wheels for x86_64 and aarch64 only (this is $(uname -m))" >&2
    exit 1
fi

check() {
    # -I (no PYTHONPATH, no current directory): the packages must come from the install.
    "$VENV/bin/python" -I - "$ROOT/python" <<'PY'
import os, sys
import numpy, onnx, onnxruntime
from rknn.api import RKNN
import qwen3asr, qwen3asr_tools
assert numpy.__version__.startswith("1."), numpy.__version__
RKNN(verbose=False).release()
for mod in (qwen3asr, qwen3asr_tools):
    where = os.path.dirname(os.path.dirname(os.path.realpath(mod.__file__)))
    assert where == os.path.realpath(sys.argv[1]), f"{mod.__name__} comes from {where}, not {sys.argv[1]}"
print(f"rknn-toolkit2 OK (numpy {numpy.__version__}, onnx {onnx.__version__}, "
      f"onnxruntime {onnxruntime.__version__}); qwen3asr from {sys.argv[1]}")
PY
}

if [ -x "$VENV/bin/python" ] && [ "$STAMP" -nt "$REQUIREMENTS" ] && [ "$STAMP" -nt "${BASH_SOURCE[0]}" ] \
        && [ "$STAMP" -nt "$PYPROJECT" ] && check 2>/dev/null; then
    exit 0
fi

bash "$ROOT/scripts/need_disk.sh" "$VENV" 1650 "the rknn-toolkit2 venv $VENV"
if [ ! -x "$VENV/bin/python" ]; then
    if ! command -v "$RKNN_PYTHON" >/dev/null; then
        echo "$RKNN_PYTHON not found; set RKNN_PYTHON=/path/to/python3.11" >&2
        exit 1
    fi
    "$RKNN_PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade "pip<26.4"
"$VENV/bin/python" -m pip install --quiet -r "$REQUIREMENTS"
# --no-deps: its metadata pins torch<=2.4 and opencv-python, which we replace (see the
# requirements file); everything it really imports is installed above.
"$VENV/bin/python" -m pip install --quiet --no-deps "$TOOLKIT"
# This checkout, editable, with its runtime dependencies from pyproject.toml (the one list of
# them) held to the pins above as constraints (numpy<2 here); the build backend is the pinned
# setuptools (no isolated build env to download).
"$VENV/bin/python" -m pip install --quiet --no-build-isolation -c "$REQUIREMENTS" -e "$ROOT"
check
touch "$STAMP"
