#!/usr/bin/env bash
# Prepare an RK3588 / RK3576 board (or any aarch64 Linux machine) for qwen3asr-rk.
#
# Checks: SoC (device tree), RKNPU kernel driver >= 0.9.8, aarch64, Python >= 3.10 with venv,
# PortAudio (libportaudio2, for live captions), librkllmrt.so (RKLLM decoder runtime) and
# librknnrt.so (RKNN encoder runtime). Installs the missing Debian packages (python3-venv,
# libportaudio2) with apt-get, then creates a virtualenv with this package and its rk, mic
# (and server, when the checkout has it) extras, plus the Silero VAD model.
# On an aarch64 machine that is not an RK3588/RK3576 board (a Pi, a container, a CI runner)
# it sets up the same venv for the CPU backend and lists what only a board has.
#
#   deploy/setup_board.sh                 # check, then create ./.venv
#   deploy/setup_board.sh --check-only    # only check, create nothing
#   deploy/setup_board.sh --dry-run       # check, print the commands it would run
#
# Options: --venv DIR (default: <repo>/.venv), --python EXE, --rkllm-lib PATH,
#   --no-apt (install no Debian packages; print the apt-get command instead).
# Environment (every path read can be redirected; the tests use fake trees):
#   QWEN3ASR_SYSFS_ROOT     prefix for /sys and /proc (default: none)
#   QWEN3ASR_SYSTEM_LIBDIR  where librknnrt.so / librkllmrt.so / libportaudio.so.2 are searched (default /usr/lib)
#   QWEN3ASR_ARCH           machine architecture (default: uname -m)
#   QWEN3ASR_EUID           user id deciding between apt-get and sudo apt-get (default: id -u)
#   QWEN3ASR_PYTHON         interpreter (same as --python)
#   QWEN3ASR_VENV           venv directory (same as --venv)
#   QWEN3ASR_RKLLM_LIB      librkllmrt.so path (same as --rkllm-lib)
# Exit status: 0 ok (warnings allowed), 1 a check failed, 2 bad usage.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SYSFS_ROOT="${QWEN3ASR_SYSFS_ROOT:-}"
SYSTEM_LIBDIR="${QWEN3ASR_SYSTEM_LIBDIR:-/usr/lib}"
ARCH="${QWEN3ASR_ARCH:-$(uname -m)}"
EUID_="${QWEN3ASR_EUID:-$(id -u)}"
PYTHON="${QWEN3ASR_PYTHON:-}"
VENV_DIR="${QWEN3ASR_VENV:-$REPO_ROOT/.venv}"
RKLLM_LIB="${QWEN3ASR_RKLLM_LIB:-}"
MODE=setup  # setup | check | dry-run
USE_APT=1

MIN_DRIVER="0.9.8"                  # RKLLM runtime 1.2.x / 1.3.x want this kernel driver
RKLLM_SUPPORTED="1.2.x and 1.3.x"   # ctypes layouts the decoder backend knows
LITE2_MAX_PYTHON="3.12"             # newest Python with a rknn-toolkit-lite2 wheel (2.5.0: cp312, no cp313)
RKLLM_URL="https://github.com/airockchip/rknn-llm (rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so)"
RKNNRT_URL="https://github.com/airockchip/rknn-toolkit2 (rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so)"

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --check-only) MODE=check ;;
    --dry-run) MODE=dry-run ;;
    --no-apt) USE_APT=0 ;;
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
info() { echo "[info]  $*"; }

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

# One shell word per argument, single-quoted only where the shell would change it, so a printed
# command can be pasted as it is ('pkg>=1.0' would otherwise be a redirect).
quote_cmd() {
  local out="" a
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+="$a "; else out+="'${a//\'/\'\\\'\'}' "; fi
  done
  echo "${out% }"
}

# ---------------------------------------------------------------- SoC
SOC=""
COMPATIBLE=""
BOARD=0   # 1 on an RK3588 / RK3576: the NPU checks count; 0: CPU backend only
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
    BOARD=1
    ok "SoC: $SOC (device tree: $COMPATIBLE)"
  elif [[ -n "$COMPATIBLE" ]]; then
    warn "SoC: not an RK3588 or RK3576 (device tree: $COMPATIBLE); setting up the CPU backend only"
  else
    warn "SoC: no device tree at $SYSFS_ROOT/proc/device-tree/compatible (not a Rockchip board: a PC, a container?);" \
         "setting up the CPU backend only"
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
    if [[ "$EUID_" -eq 0 ]]; then
      # root reads debugfs, so the file is absent: debugfs not mounted, or no rknpu driver loaded.
      warn "RKNPU driver: $SYSFS_ROOT/sys/kernel/debug/rknpu/version does not exist: is debugfs mounted" \
           "('mount -t debugfs none /sys/kernel/debug') and the rknpu driver loaded ('dmesg | grep -i rknpu')?" \
           "Need >= $MIN_DRIVER."
    else
      warn "RKNPU driver: version not readable (debugfs needs root). Check it with" \
           "'sudo cat /sys/kernel/debug/rknpu/version' (need >= $MIN_DRIVER)."
    fi
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
    fail "architecture: $ARCH; rknn-toolkit-lite2 and librkllmrt.so exist only for aarch64: run this on the board" \
         "(on a PC, 'make setup' sets up the CPU backend)"
  fi
}

# ---------------------------------------------------------------- Python
PY=""
PY_VERSION=""
PY_HAS_VENV=0
RK_EXTRA_OK=1   # 0: this Python has no rknn-toolkit-lite2 wheel (the rk extra installs nothing)
APT_PKGS=()
check_python() {
  local candidates=() seen=() cand v
  # Newest first among the versions rknn-toolkit-lite2 has wheels for, then the default python3.
  if [[ -n "$PYTHON" ]]; then candidates=("$PYTHON"); else candidates=(python3.12 python3.11 python3.10 python3); fi
  for cand in "${candidates[@]}"; do
    command -v "$cand" > /dev/null 2>&1 || continue
    v="$("$cand" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true)"
    [[ -n "$v" ]] || continue
    seen+=("$cand $v")
    if version_ge "$v" "3.10.0"; then PY="$cand"; PY_VERSION="$v"; break; fi
  done
  if [[ -z "$PY" ]]; then
    fail "Python: need 3.10 or newer (found: ${seen[*]:-none}); use a newer OS image (Debian 12+, Ubuntu 22.04+)" \
         "or pass --python EXE"
    return
  fi
  ok "Python: $PY ($PY_VERSION)"
  if ! version_ge "$LITE2_MAX_PYTHON.99" "$PY_VERSION"; then
    RK_EXTRA_OK=0
    local msg="Python $PY_VERSION: rknn-toolkit-lite2 (the RKNN encoder runtime) has wheels only up to Python $LITE2_MAX_PYTHON, so the venv gets the CPU backend and the RKLLM decoder binding but not the NPU encoder. For the NPU, pass --python with a Python 3.10-$LITE2_MAX_PYTHON interpreter (the board vendor's Debian 12 / Ubuntu 24.04 image has one; elsewhere e.g. 'uv python install $LITE2_MAX_PYTHON')"
    if [[ "$BOARD" -eq 1 ]]; then warn "$msg"; else info "$msg"; fi
  fi
  if "$PY" -c 'import venv, ensurepip' > /dev/null 2>&1; then
    PY_HAS_VENV=1
  else
    APT_PKGS+=("python${PY_VERSION%.*}-venv")
    info "Python: $PY cannot create virtualenvs yet (no ensurepip); python${PY_VERSION%.*}-venv will be installed"
  fi
}

# ---------------------------------------------------------------- PortAudio (live captions)
PORTAUDIO=""
check_portaudio() {
  local d
  for d in "$SYSTEM_LIBDIR" "$SYSTEM_LIBDIR/aarch64-linux-gnu"; do
    if [[ -e "$d/libportaudio.so.2" ]]; then PORTAUDIO="$d/libportaudio.so.2"; break; fi
  done
  if [[ -n "$PORTAUDIO" ]]; then
    ok "PortAudio: $PORTAUDIO (python/mic_stream.py's sounddevice loads it)"
  else
    APT_PKGS+=(libportaudio2)
    info "PortAudio: libportaudio.so.2 not found in $SYSTEM_LIBDIR; libportaudio2 will be installed" \
         "(python/mic_stream.py needs it)"
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

# Off a board the runtimes are not expected: a file that is there is still checked, a missing
# one is listed once under "What only a board has".
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
  if [[ -n "$RKLLM_LIB" ]]; then fail "$msg"
  elif [[ "$BOARD" -eq 1 ]]; then warn "$msg; the RKLLM decoder backend cannot load until then"; fi
}

RKNNRT_FOUND=""
check_rknnrt() {
  local path="$SYSTEM_LIBDIR/librknnrt.so"
  if [[ -f "$path" ]]; then
    if check_lib_file "librknnrt.so" "$path"; then RKNNRT_FOUND="$path"; fi
  elif [[ "$BOARD" -eq 1 ]]; then
    warn "librknnrt.so: not found at $path (rknn-toolkit-lite2 loads it from /usr/lib). Copy it from $RKNNRT_URL;" \
         "use the same version as the rknn-toolkit2 that converted the encoder"
  fi
}

# ---------------------------------------------------------------- installing
# In --dry-run, and after a failed check, commands are printed (quoted, ready to paste), not run.
DRY=0
run() {
  if [[ "$DRY" -eq 1 ]]; then echo "would run: $(quote_cmd "$@")"; return 0; fi
  echo "+ $(quote_cmd "$@")"
  local rc=0
  "$@" || rc=$?
  if [[ "$rc" -ne 0 ]]; then fail "this command failed (exit status $rc): $(quote_cmd "$@")"; return 1; fi
}

# python3.X-venv and libportaudio2 when missing: apt-get as root, sudo apt-get otherwise.
APT_DONE=""
install_debian_packages() {  # returns 1 when the venv cannot be made
  [[ "${#APT_PKGS[@]}" -gt 0 ]] || return 0
  local sudo=() why=""
  [[ "$EUID_" -eq 0 ]] || sudo=(sudo)
  if [[ "$USE_APT" -eq 0 ]]; then why="--no-apt"
  elif ! command -v apt-get > /dev/null 2>&1; then why="no apt-get on this system"
  elif [[ "${#sudo[@]}" -gt 0 ]] && ! command -v sudo > /dev/null 2>&1; then why="not root, and no sudo"; fi
  if [[ -n "$why" ]]; then
    local hint="install them ('$(quote_cmd "${sudo[@]}" apt-get install -y "${APT_PKGS[@]}")' or your distribution's equivalent)"
    if [[ "$PY_HAS_VENV" -eq 0 ]]; then
      fail "Debian packages not installed ($why): ${APT_PKGS[*]}; $hint and run this again"
      return 1
    fi
    warn "Debian package libportaudio2 not installed ($why): python/mic_stream.py cannot run until you $hint"
    return 0
  fi
  run "${sudo[@]}" apt-get update || return 1
  run "${sudo[@]}" apt-get install -y --no-install-recommends "${APT_PKGS[@]}" || return 1
  if [[ "$DRY" -eq 0 ]]; then APT_DONE="${APT_PKGS[*]}"; PORTAUDIO="${PORTAUDIO:-installed}"; fi
}

# The package's optional extras for this machine: rk (rknn-toolkit-lite2; pyproject limits it to
# the Pythons it has wheels for), mic (sounddevice) and server when pyproject.toml defines it.
EXTRAS=""
pick_extras() {
  EXTRAS="rk,mic"
  if awk '/^\[/ { on = ($0 == "[project.optional-dependencies]") } on && /^[[:space:]]*server[[:space:]]*=/ { found = 1 }
         END { exit !found }' "$REPO_ROOT/pyproject.toml" 2>/dev/null; then EXTRAS+=",server"; fi
}

# silero-vad is installed with --no-deps (we load only its ONNX file); one pin, in requirements-nodeps.txt.
VAD_SPEC=""
pick_vad() {
  VAD_SPEC="$(grep -oE '^silero-vad==[0-9][0-9.]*' "$REPO_ROOT/requirements-nodeps.txt" 2>/dev/null | head -n1 || true)"
  VAD_SPEC="${VAD_SPEC:-silero-vad}"
}

VAD_MODEL=""
setup_venv() {
  local vpy="$VENV_DIR/bin/python" imports="qwen3asr"
  if [[ -x "$vpy" && "$DRY" -eq 0 ]]; then
    echo "reusing the virtualenv $VENV_DIR"
  else
    run "$PY" -m venv "$VENV_DIR" || return 1
  fi
  run "$vpy" -m pip install --upgrade pip || return 1
  run "$vpy" -m pip install -e "$REPO_ROOT[$EXTRAS]" || return 1
  run "$vpy" -m pip install --no-deps "$VAD_SPEC" || return 1
  [[ "$DRY" -eq 0 ]] || return 0
  "$vpy" -c 'import qwen3asr' || { fail "venv: importing qwen3asr failed"; return 1; }
  if [[ "$RK_EXTRA_OK" -eq 1 ]]; then
    "$vpy" -c 'import rknnlite.api' || { fail "venv: importing rknnlite (rknn-toolkit-lite2) failed"; return 1; }
    imports+=", rknnlite"
  fi
  if [[ -n "$PORTAUDIO" ]]; then
    if "$vpy" -c 'import sounddevice'; then imports+=", sounddevice"
    else warn "venv: importing sounddevice failed: python/mic_stream.py cannot run"; fi
  fi
  VAD_MODEL="$("$vpy" -c 'from qwen3asr import vad; print(vad.find_model())')" \
    || { fail "venv: the Silero VAD model is not found after installing $VAD_SPEC"; return 1; }
  ok "venv: $VENV_DIR ($imports import; Silero VAD model $VAD_MODEL)"
}

# ---------------------------------------------------------------- main
echo "qwen3asr-rk board setup ($MODE)"
check_soc
if [[ "$BOARD" -eq 1 ]]; then check_driver; fi
check_arch
check_python
check_portaudio
check_rkllm
check_rknnrt
pick_extras
pick_vad

if [[ "$MODE" != "check" ]]; then
  if [[ "$MODE" == "dry-run" || "$ERRORS" -gt 0 ]]; then DRY=1; fi
  if [[ "$ERRORS" -gt 0 ]]; then echo "Once the [error] lines above are fixed, this would run:"; fi
  if install_debian_packages; then
    if [[ "$DRY" -eq 0 && "$PY_HAS_VENV" -eq 0 ]] && ! "$PY" -c 'import venv, ensurepip' > /dev/null 2>&1; then
      fail "Python: $PY still cannot create virtualenvs after installing ${APT_PKGS[*]}"
    else
      setup_venv || true
    fi
  fi
fi

case "$MODE" in
  check) VENV_STATE="not touched (--check-only)" ;;
  dry-run) VENV_STATE="$VENV_DIR (not created: --dry-run)" ;;
  *) if [[ "$ERRORS" -eq 0 ]]; then VENV_STATE="$VENV_DIR"; else VENV_STATE="not created or incomplete (errors above)"; fi ;;
esac
if [[ "$BOARD" -eq 1 ]]; then KIND="$SOC board (NPU and CPU backends)"; else KIND="not an RK3588/RK3576 board: CPU backend only"; fi
if [[ "$RK_EXTRA_OK" -eq 1 ]]; then EXTRAS_NOTE="$EXTRAS"; else EXTRAS_NOTE="$EXTRAS (rk installs nothing on Python $PY_VERSION)"; fi

echo
echo "Summary"
echo "  machine:            $KIND"
echo "  SoC:                ${SOC:-unknown}"
if [[ "$BOARD" -eq 1 ]]; then
  echo "  RKNPU driver:       ${DRIVER:-unknown} (need >= $MIN_DRIVER)"
fi
echo "  Python:             ${PY:-none} ${PY_VERSION}"
echo "  venv:               $VENV_STATE"
echo "  extras:             $EXTRAS_NOTE; VAD model: ${VAD_MODEL:-$VAD_SPEC (not installed)}"
echo "  Debian packages:    ${APT_DONE:-${APT_PKGS[*]:-nothing missing}}${APT_DONE:+ (installed)}"
echo "  librkllmrt.so:      ${RKLLM_FOUND:-missing} (supported runtimes: $RKLLM_SUPPORTED)"
echo "  librknnrt.so:       ${RKNNRT_FOUND:-missing}"
echo "  errors/warnings:    $ERRORS/$WARNINGS"
if [[ "$BOARD" -eq 0 ]]; then
  echo
  echo "What only a board has (not set up here): an RK3588/RK3576 NPU, the RKNPU kernel driver >= $MIN_DRIVER,"
  echo "librknnrt.so in /usr/lib and librkllmrt.so ($RKLLM_SUPPORTED) in lib/. Without them the rk backend"
  echo "(--backend rk) cannot run; transcribe.py's default --backend auto uses ONNX Runtime on the CPU."
fi
if [[ "$ERRORS" -gt 0 ]]; then
  echo "Fix the [error] lines above and run again."
  exit 1
fi
if [[ "$BOARD" -eq 1 ]]; then
  echo "Next: sudo deploy/lock_clocks.sh --mode lock   (before timing runs; --mode unlock afterwards)"
else
  echo "Next: $VENV_DIR/bin/python python/transcribe.py --audio audio/en_1.wav"
fi
