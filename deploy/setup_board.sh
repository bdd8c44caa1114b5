#!/usr/bin/env bash
# Prepare an RK3588 / RK3576 board for qwen3asr-rk.
#
# Checks: SoC (device tree), RKNPU kernel driver >= 0.9.8, aarch64, Python 3.10-3.12
# with venv, librkllmrt.so (RKLLM decoder runtime) and librknnrt.so (RKNN encoder
# runtime). Then creates a virtualenv with requirements.txt + rknn-toolkit-lite2 and
# installs this package into it (editable, no deps).
#
#   deploy/setup_board.sh                 # check, then create ./.venv
#   deploy/setup_board.sh --check-only    # only check, create nothing
#   deploy/setup_board.sh --dry-run       # check, print the commands it would run
#
# Options: --venv DIR (default: <repo>/.venv), --python EXE, --rkllm-lib PATH.
# Environment (every path read can be redirected; the tests use fake trees):
#   QWEN3ASR_SYSFS_ROOT     prefix for /sys and /proc (default: none)
#   QWEN3ASR_SYSTEM_LIBDIR  where librknnrt.so / librkllmrt.so are searched (default /usr/lib)
#   QWEN3ASR_ARCH           machine architecture (default: uname -m)
#   QWEN3ASR_PYTHON         interpreter (same as --python)
#   QWEN3ASR_VENV           venv directory (same as --venv)
#   QWEN3ASR_RKLLM_LIB      librkllmrt.so path (same as --rkllm-lib)
# Exit status: 0 ok (warnings allowed), 1 a check failed, 2 bad usage.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SYSFS_ROOT="${QWEN3ASR_SYSFS_ROOT:-}"
SYSTEM_LIBDIR="${QWEN3ASR_SYSTEM_LIBDIR:-/usr/lib}"
ARCH="${QWEN3ASR_ARCH:-$(uname -m)}"
PYTHON="${QWEN3ASR_PYTHON:-}"
VENV_DIR="${QWEN3ASR_VENV:-$REPO_ROOT/.venv}"
RKLLM_LIB="${QWEN3ASR_RKLLM_LIB:-}"
MODE=setup  # setup | check | dry-run

MIN_DRIVER="0.9.8"                  # RKLLM runtime 1.2.x / 1.3.x want this kernel driver
RKLLM_SUPPORTED="1.2.x and 1.3.x"   # ctypes layouts the decoder backend knows
LITE2_SPEC="rknn-toolkit-lite2>=2.3"
RKLLM_URL="https://github.com/airockchip/rknn-llm (rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so)"
RKNNRT_URL="https://github.com/airockchip/rknn-toolkit2 (rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so)"

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --check-only) MODE=check ;;
    --dry-run) MODE=dry-run ;;
    --venv) VENV_DIR="${2:?--venv needs a directory}"; shift ;;
    --python) PYTHON="${2:?--python needs an executable}"; shift ;;
    --rkllm-lib) RKLLM_LIB="${2:?--rkllm-lib needs a path}"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

ERRORS=0
WARNINGS=0
ok()   { echo "[ok]    $*"; }
warn() { echo "[warn]  $*"; WARNINGS=$((WARNINGS + 1)); }
fail() { echo "[error] $*"; ERRORS=$((ERRORS + 1)); }

# "a.b.c" >= "x.y.z", numerically per field.
version_ge() {
  local -a a b
  local i
  IFS=. read -r -a a <<< "$1"
  IFS=. read -r -a b <<< "$2"
  for i in 0 1 2; do
    if (( ${a[i]:-0} > ${b[i]:-0} )); then return 0; fi
    if (( ${a[i]:-0} < ${b[i]:-0} )); then return 1; fi
  done
  return 0
}

# ---------------------------------------------------------------- SoC
SOC=""
COMPATIBLE=""
check_soc() {
  local f
  for f in "$SYSFS_ROOT/proc/device-tree/compatible" "$SYSFS_ROOT/sys/firmware/devicetree/base/compatible"; do
    [[ -r "$f" ]] || continue
    COMPATIBLE="$(tr '\0' ' ' < "$f" | sed 's/ *$//')"
    local s
    for s in $COMPATIBLE; do
      case "$s" in
        rockchip,rk3588*) SOC=rk3588; break ;;
        rockchip,rk3576*) SOC=rk3576; break ;;
      esac
    done
    break
  done
  if [[ -n "$SOC" ]]; then
    ok "SoC: $SOC (device tree: $COMPATIBLE)"
  elif [[ -n "$COMPATIBLE" ]]; then
    fail "SoC: not an RK3588 or RK3576 (device tree: $COMPATIBLE)"
  else
    fail "SoC: cannot read $SYSFS_ROOT/proc/device-tree/compatible; run this on the RK3588/RK3576 board"
  fi
}

# ---------------------------------------------------------------- RKNPU driver
DRIVER=""
check_driver() {
  local f line=""
  # debugfs is root-only; the driver may also export /proc/rknpu (readable by all).
  for f in "$SYSFS_ROOT/sys/kernel/debug/rknpu/version" "$SYSFS_ROOT/proc/rknpu/version"; do
    if [[ -r "$f" ]] && line="$(cat "$f" 2>/dev/null)" && [[ -n "$line" ]]; then break; fi
    line=""
  done
  if [[ -z "$line" ]]; then
    warn "RKNPU driver: version not readable (debugfs needs root). Check it with" \
         "'sudo cat /sys/kernel/debug/rknpu/version' (need >= $MIN_DRIVER), or rerun this script with sudo."
    return
  fi
  DRIVER="$(grep -oE '[0-9]+\.[0-9]+\.[0-9]+' <<< "$line" | head -n1 || true)"
  if [[ -z "$DRIVER" ]]; then
    fail "RKNPU driver: cannot parse a version from '$line' (expected 'RKNPU driver: v0.9.8')"
  elif version_ge "$DRIVER" "$MIN_DRIVER"; then
    ok "RKNPU driver: $DRIVER (>= $MIN_DRIVER)"
  else
    fail "RKNPU driver: $DRIVER is older than $MIN_DRIVER, which the RKLLM runtime ($RKLLM_SUPPORTED) needs." \
         "Upgrade the kernel: install your board vendor's newest kernel/image (Armbian, Radxa, Orange Pi and" \
         "Firefly kernels ship rknpu $MIN_DRIVER), or build rknpu_driver_${MIN_DRIVER}_*.tar.bz2 from" \
         "https://github.com/airockchip/rknn-llm (rknpu-driver/) into the vendor kernel; reboot and check again."
  fi
}

# ---------------------------------------------------------------- architecture
check_arch() {
  if [[ "$ARCH" == "aarch64" || "$ARCH" == "arm64" ]]; then
    ok "architecture: $ARCH"
  else
    fail "architecture: $ARCH; rknn-toolkit-lite2 and librkllmrt.so exist only for aarch64: run this on the board"
  fi
}

# ---------------------------------------------------------------- Python
PY=""
PY_VERSION=""
check_python() {
  local candidates=() seen=() cand v
  if [[ -n "$PYTHON" ]]; then candidates=("$PYTHON"); else candidates=(python3.12 python3.11 python3.10 python3); fi
  for cand in "${candidates[@]}"; do
    command -v "$cand" > /dev/null 2>&1 || continue
    v="$("$cand" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true)"
    [[ -n "$v" ]] || continue
    seen+=("$cand $v")
    if version_ge "$v" "3.10.0" && ! version_ge "$v" "3.13.0"; then PY="$cand"; PY_VERSION="$v"; break; fi
  done
  if [[ -z "$PY" ]]; then
    fail "Python: need 3.10, 3.11 or 3.12 (found: ${seen[*]:-none}); e.g. 'sudo apt install python3.11 python3.11-venv'"
    return
  fi
  ok "Python: $PY ($PY_VERSION)"
  if ! "$PY" -c 'import venv, ensurepip' > /dev/null 2>&1; then
    fail "Python: $PY cannot create virtualenvs; 'sudo apt install python${PY_VERSION%.*}-venv'"
  fi
}

# ---------------------------------------------------------------- runtime libraries
# Prints "aarch64", "other:<e_machine hex>" or "not-elf" for a file.
elf_machine() {
  local bytes
  local -a b
  bytes="$(od -An -tx1 -N20 "$1" 2>/dev/null | tr -s ' \n' ' ')"
  read -r -a b <<< "$bytes"
  if [[ "${#b[@]}" -lt 20 || "${b[0]}${b[1]}${b[2]}${b[3]}" != "7f454c46" ]]; then echo "not-elf"; return; fi
  if [[ "${b[18]}${b[19]}" == "b700" ]]; then echo "aarch64"; else echo "other:${b[19]}${b[18]}"; fi
}

# Best effort: a version string such as "2.3.2 (429f97ae6b@2025-04-09T09:10:37)" inside the binary.
lib_version() {
  grep -a -o -m1 -E '[0-9]+\.[0-9]+\.[0-9]+[a-z0-9]* \([0-9a-f]+@[0-9T:-]+\)' "$1" 2>/dev/null | head -n1 || true
}

check_lib_file() {  # name path -> 0 if usable
  local name="$1" path="$2" machine version
  machine="$(elf_machine "$path")"
  case "$machine" in
    aarch64)
      version="$(lib_version "$path")"
      ok "$name: $path (aarch64${version:+, version $version})"; return 0 ;;
    not-elf)
      fail "$name: $path is not an ELF library (a Git LFS pointer or an HTML page?); download the real file" ;;
    *)
      fail "$name: $path is built for another architecture (e_machine 0x${machine#other:}); use the aarch64 build" ;;
  esac
  return 1
}

RKLLM_FOUND=""
check_rkllm() {
  local candidates=() c
  if [[ -n "$RKLLM_LIB" ]]; then candidates=("$RKLLM_LIB"); else candidates=("$REPO_ROOT/lib/librkllmrt.so" "$SYSTEM_LIBDIR/librkllmrt.so"); fi
  for c in "${candidates[@]}"; do
    if [[ -f "$c" ]]; then
      if check_lib_file "librkllmrt.so" "$c"; then RKLLM_FOUND="$c"; fi
      return 0
    fi
  done
  local msg="librkllmrt.so: not found (looked in ${candidates[*]}). Supported RKLLM runtimes: $RKLLM_SUPPORTED; get the aarch64 library of one of those releases from $RKLLM_URL and put it in $REPO_ROOT/lib/ (or pass --rkllm-lib PATH)"
  if [[ -n "$RKLLM_LIB" ]]; then fail "$msg"; else warn "$msg; the RKLLM decoder backend cannot load until then"; fi
}

RKNNRT_FOUND=""
check_rknnrt() {
  local path="$SYSTEM_LIBDIR/librknnrt.so"
  if [[ -f "$path" ]]; then
    if check_lib_file "librknnrt.so" "$path"; then RKNNRT_FOUND="$path"; fi
  else
    warn "librknnrt.so: not found at $path (rknn-toolkit-lite2 loads it from /usr/lib). Copy it from $RKNNRT_URL;" \
         "use the same version as the rknn-toolkit2 that converted the encoder"
  fi
}

# ---------------------------------------------------------------- venv
run() {
  if [[ "$MODE" == "dry-run" ]]; then echo "would run: $*"; else echo "+ $*"; "$@"; fi
}

setup_venv() {
  local vpy="$VENV_DIR/bin/python"
  if [[ -x "$vpy" ]]; then
    echo "reusing the virtualenv $VENV_DIR"
  else
    run "$PY" -m venv "$VENV_DIR"
  fi
  run "$vpy" -m pip install --upgrade pip
  run "$vpy" -m pip install -r "$REPO_ROOT/requirements.txt" "$LITE2_SPEC"
  run "$vpy" -m pip install --no-deps -e "$REPO_ROOT"
  if [[ "$MODE" != "dry-run" ]]; then
    "$vpy" -c 'import qwen3asr, rknnlite.api' || { fail "venv: importing qwen3asr / rknnlite failed"; return; }
    ok "venv: $VENV_DIR (qwen3asr and rknnlite import)"
  fi
}

# ---------------------------------------------------------------- main
echo "qwen3asr-rk board setup ($MODE)"
check_soc
check_driver
check_arch
check_python
check_rkllm
check_rknnrt

if [[ "$ERRORS" -eq 0 && "$MODE" != "check" ]]; then
  setup_venv
fi

case "$MODE" in
  check) VENV_STATE="not touched (--check-only)" ;;
  dry-run) VENV_STATE="$VENV_DIR (not created: --dry-run)" ;;
  *) if [[ "$ERRORS" -eq 0 ]]; then VENV_STATE="$VENV_DIR"; else VENV_STATE="not created (errors above)"; fi ;;
esac

echo
echo "Summary"
echo "  SoC:                ${SOC:-unknown}"
echo "  RKNPU driver:       ${DRIVER:-unknown} (need >= $MIN_DRIVER)"
echo "  Python:             ${PY:-none} ${PY_VERSION}"
echo "  venv:               $VENV_STATE"
echo "  librkllmrt.so:      ${RKLLM_FOUND:-missing} (supported runtimes: $RKLLM_SUPPORTED)"
echo "  librknnrt.so:       ${RKNNRT_FOUND:-missing}"
echo "  errors/warnings:    $ERRORS/$WARNINGS"
if [[ "$ERRORS" -gt 0 ]]; then
  echo "Fix the [error] lines above and run again."
  exit 1
fi
echo "Next: sudo deploy/lock_clocks.sh --mode lock   (before timing runs; --mode unlock afterwards)"
