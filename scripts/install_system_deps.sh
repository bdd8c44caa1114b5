#!/usr/bin/env bash
# Install the Debian packages listed in scripts/apt-packages.txt that are missing.
# Needs root (or sudo) only when something is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
missing=()
while read -r pkg; do
  [[ -z "$pkg" || "$pkg" == \#* ]] && continue
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done < "$here/apt-packages.txt"
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
echo "installing Debian packages: ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "error: need root to install ${missing[*]} (apt-get install ${missing[*]})" >&2; exit 1; fi
fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
