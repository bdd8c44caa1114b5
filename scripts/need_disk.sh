#!/usr/bin/env bash
# Refuse, with the numbers, a set-up step that would run out of disk half way (pip then stops with
# "[Errno 28] No space left on device" after minutes of work and leaves a half-built venv).
#
# Usage: bash scripts/need_disk.sh VENV_DIR FULL_MB WHAT
#   VENV_DIR  the venv the step installs into (it may not exist yet)
#   FULL_MB   the venv's size once complete, measured on a fresh install (README "Disk")
#   WHAT      what is being installed, for the message
# Needed: FULL_MB less what VENV_DIR already holds, plus 200 MB of room for pip's own files.
set -euo pipefail
venv="$1"; full_mb="$2"; what="$3"
have_mb=0
if [ -d "$venv" ]; then have_mb=$(du -sm "$venv" | awk '{ print $1 }'); fi
need_mb=$(( full_mb > have_mb ? full_mb - have_mb + 200 : 200 ))
dir="$venv"
while [ ! -d "$dir" ]; do dir="$(dirname "$dir")"; done
free_mb=$(df -Pm "$dir" | awk 'NR == 2 { print $4 }')
if [ -n "$free_mb" ] && [ "$free_mb" -lt "$need_mb" ]; then
    echo "not enough disk for $what: it needs about $need_mb MB more in $dir, which has $free_mb MB free." >&2
    echo "Free some space (or point VENV / RKNN_VENV at a larger filesystem) and run the command again." >&2
    exit 1
fi
