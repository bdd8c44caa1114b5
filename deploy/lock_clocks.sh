#!/usr/bin/env bash
# Thin wrapper: sudo deploy/lock_clocks.sh --mode lock|unlock|status [options]
# (see deploy/lock_clocks.py --help). Needs only the system python3 (stdlib).
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/lock_clocks.py" "$@"
