#!/usr/bin/env bash
# Rehearse a board install on an x86_64 Debian/Ubuntu PC: an arm64 Debian userland under
# qemu-user emulation, set up and used the way a user does it on an aarch64 machine.
#
#   sudo deploy/rehearse_board.sh            # or: sudo make rehearse-board
#   sudo deploy/rehearse_board.sh --rebuild  # build the arm64 root file system again
#
# It builds (first time, ~10 min) or reuses an arm64 Debian root file system outside the
# repository, makes a fresh copy of it for this run, copies this checkout in (the working
# tree as git sees it, without .venv, caches and ignored files), and runs inside it as root:
# deploy/setup_board.sh, the README's command, a Mandarin clip (also with --itn), --format json,
# the server's health check, and the rk backend forced with no NPU runtime. Then it prints a
# summary table (step, result, seconds) and exits 1 if any step failed. Logs: $REHEARSAL_DIR/logs/.
#
# Environment:
#   REHEARSAL_DIR     where the root file systems, pip cache and logs live (default /var/tmp/qwen3asr-rehearsal)
#   REHEARSAL_SUITE   Debian suite (default stable; bookworm has Python 3.11, where rknn-toolkit-lite2 installs)
#   REHEARSAL_MIRROR  Debian mirror (default http://deb.debian.org/debian)
#   REHEARSAL_QEMU_CPU  emulated CPU (default cortex-a76, RK3588's big core; cortex-a72 is RK3576's)
#   REHEARSAL_SERVER_CMD  how to start the server ({port} is replaced; default below)
#
# Emulation traps (none of them is a project bug; each is handled below where it bites):
# - qemu-user's default CPU model ("max") computes WRONG numpy results on Debian 13's numpy
#   and runs about 10x slower; a real core model (QEMU_CPU=cortex-a76) is right and fast.
#   QEMU_CPU must be in the environment of every process, since each exec of an arm64 binary
#   starts qemu anew: every command enters the chroot through in_chroot, which sets it.
# - onnxruntime aborts on import: its cpuinfo library parses /proc/cpuinfo, which under
#   qemu-user is the host's x86 one. An aarch64 /proc/cpuinfo matching the emulated core is
#   bind-mounted over it (make_cpuinfo).
# - sudo cannot work inside: qemu-user-static's binfmt entry has no C (credentials) flag, so
#   setuid bits are ignored. Everything runs as root, as on a freshly flashed board image;
#   setup_board.sh then runs apt-get itself.
# - A fake RK3588 device tree only where a step needs it. Otherwise the machine is what it is,
#   an aarch64 box without a device tree or an NPU (setup_board.sh's no-hardware path), and the
#   rk steps name the SoC with QWEN3ASR_SOC. But rknn-toolkit-lite2 reads
#   /proc/device-tree/compatible itself, and nothing can be created inside a mounted procfs:
#   the two steps about a board whose NPU runtime is missing run with /proc swapped for a plain
#   directory holding the aarch64 cpuinfo, an RK3588 device tree and links into a procfs
#   mounted elsewhere (board_step). The "board checks" step points setup_board.sh at a fake
#   RK3588 tree with QWEN3ASR_SYSFS_ROOT instead.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REHEARSAL_DIR="${REHEARSAL_DIR:-/var/tmp/qwen3asr-rehearsal}"
SUITE="${REHEARSAL_SUITE:-stable}"
MIRROR="${REHEARSAL_MIRROR:-http://deb.debian.org/debian}"
QEMU_CPU_MODEL="${REHEARSAL_QEMU_CPU:-cortex-a76}"
# (the default in its own variable: a "}" inside ${VAR:-...} would end the expansion at {port})
DEFAULT_SERVER_CMD='.venv/bin/python -m qwen3asr.server --host 127.0.0.1 --port {port} --model models/default'
SERVER_CMD="${REHEARSAL_SERVER_CMD:-$DEFAULT_SERVER_CMD}"
BASE="$REHEARSAL_DIR/rootfs-$SUITE-arm64"   # pristine root file system, reused between runs
WORK="$REHEARSAL_DIR/run"                    # this run's copy (kept until the next run, to look into)
LOGS="$REHEARSAL_DIR/logs"
CHECKOUT=/root/qwen3asr-rk                   # where the checkout lands inside
REBUILD=0

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"; }
case "${1:-}" in
  "") ;;
  --rebuild) REBUILD=1 ;;
  -h|--help) usage; exit 0 ;;
  *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
esac

if [[ "$(id -u)" -ne 0 ]]; then
  echo "error: the rehearsal needs root (debootstrap, chroot, mount): run 'sudo make rehearse-board'" >&2
  exit 2
fi
if [[ "$(uname -m)" != "x86_64" ]]; then
  echo "error: written for x86_64 hosts (arm64 under qemu-user); this is $(uname -m)" >&2
  exit 2
fi

# ---------------------------------------------------------------- steps and the summary
NAMES=() RESULTS=() SECS=() NOTES=()
NOTE=""   # a step may set it: shown in the summary
CURRENT_LOG=""
step() {  # step NAME FUNCTION: runs FUNCTION (in this shell) with its output in logs/NN-NAME.log
  local name="$1" fn="$2" log t0 rc
  log="$LOGS/$(printf '%02d' $(( ${#NAMES[@]} + 1 )))-$(tr -c 'A-Za-z0-9.\n-' _ <<< "$name")"
  log="${log%_}.log"
  CURRENT_LOG="$log"
  NOTE=""
  echo "== $name (log: $log)"
  t0="$(date +%s.%N)"
  "$fn" > "$log" 2>&1
  rc=$?
  NAMES+=("$name")
  SECS+=("$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')")
  case "$rc" in
    0) RESULTS+=("pass") ;;
    3) RESULTS+=("skipped") ;;
    *) RESULTS+=("FAIL"); echo "   FAILED; the end of its log:"; tail -n 15 "$log" | sed 's/^/   | /' ;;
  esac
  NOTE="${NOTE:-$(grep '^NOTE: ' "$log" | tail -n1 | sed 's/^NOTE: //')}"
  NOTES+=("$NOTE")
  return "$rc"
}
note() { NOTE="$*"; echo "NOTE: $*"; }  # inside a step: its line in the summary table

summary() {  # a Markdown table, to paste into an issue or a doc
  local i failed=0 w=4 n
  for i in "${!NAMES[@]}"; do (( ${#NAMES[i]} > w )) && w=${#NAMES[i]}; done
  echo
  echo "Board rehearsal: Debian $SUITE arm64 under qemu-user (QEMU_CPU=$QEMU_CPU_MODEL), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  printf "| %-${w}s | %-7s | %7s | %s |\n" step result seconds note
  printf "|-%s-|---------|--------:|------|\n" "$(printf '%*s' "$w" '' | tr ' ' -)"
  for i in "${!NAMES[@]}"; do
    n="${NOTES[i]//|/\\|}"
    (( ${#n} > 110 )) && n="${n:0:107}..."
    printf "| %-${w}s | %-7s | %7s | %s |\n" "${NAMES[i]}" "${RESULTS[i]}" "${SECS[i]}" "$n"
    [[ "${RESULTS[i]}" == FAIL ]] && failed=$((failed + 1))
  done
  echo
  echo "total: $(awk -v a="$T_START" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s; $failed failed; logs in $LOGS"
  return $(( failed > 0 ))
}

# ---------------------------------------------------------------- mounts (never delete under a mount)
MOUNTS=()
mount_in() {  # mount_in ARGS... TARGET: mount, and remember TARGET for unmount_all
  mount "$@" && MOUNTS+=("${!#}")
}
unmount_one() {  # unmount_one TARGET: one of MOUNTS
  local i keep=()
  umount "$1" || return 1
  for i in "${MOUNTS[@]}"; do [[ "$i" == "$1" ]] || keep+=("$i"); done
  MOUNTS=("${keep[@]}")
}
unmount_all() {
  local i
  for (( i = ${#MOUNTS[@]} - 1; i >= 0; i-- )); do
    umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}" 2>/dev/null || echo "warning: cannot unmount ${MOUNTS[i]}" >&2
  done
  MOUNTS=()
}
mounted_under() { awk -v d="$1" '$2 == d || index($2, d "/") == 1 { found = 1 } END { exit !found }' /proc/mounts; }
remove_tree() {  # rm -rf, but never through a mount point (it would empty the host's /dev or /sys)
  if mounted_under "$1"; then echo "error: something is still mounted under $1; not deleting it" >&2; return 1; fi
  rm -rf --one-file-system "$1"
}
trap 'unmount_all' EXIT
trap 'unmount_all; exit 130' INT TERM

# Runs a bash command line inside the copy, as root, in the checkout, with a clean environment
# that a user's login shell would have, plus QEMU_CPU (see the traps above) and the host's pip
# settings (PIP_ENV, see copy_pip_config).
PIP_ENV=()
in_chroot() {
  env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    QEMU_CPU="$QEMU_CPU_MODEL" "${PIP_ENV[@]}" \
    chroot "$WORK" /bin/bash -c "cd $CHECKOUT && $1"
}

# ---------------------------------------------------------------- host tools
host_tools() {
  local missing=()
  command -v debootstrap > /dev/null || missing+=(debootstrap)
  [[ -x /usr/bin/qemu-aarch64-static ]] || missing+=(qemu-user-static)
  command -v update-binfmts > /dev/null || missing+=(binfmt-support)
  if [[ "${#missing[@]}" -gt 0 ]]; then
    echo "installing ${missing[*]}"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" || return 1
  fi
  # The kernel runs arm64 binaries through qemu once qemu-aarch64 is registered with binfmt_misc.
  [[ -e /proc/sys/fs/binfmt_misc/register ]] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || return 1
  if ! grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    update-binfmts --enable qemu-aarch64 || { echo "cannot register qemu-aarch64 with binfmt_misc"; return 1; }
  fi
  cat /proc/sys/fs/binfmt_misc/qemu-aarch64
  # F (fix binary): the kernel opened the interpreter at registration, so it need not exist inside the chroot.
  grep -qs '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
    || { echo "the qemu-aarch64 binfmt entry lacks the F flag; copy qemu-aarch64-static into the root file system"; return 1; }
  note "$(qemu-aarch64-static --version | head -n1), debootstrap $(dpkg-query -W -f '${Version}' debootstrap)"
}

# ---------------------------------------------------------------- arm64 root file system
# Minimal Debian plus python3, as a board image has it; NOT python3-venv or libportaudio2,
# which setup_board.sh must install itself.
rootfs() {
  if [[ "$REBUILD" -eq 1 ]]; then remove_tree "$BASE" || return 1; fi
  if [[ -f "$BASE/.rehearsal-complete" ]]; then
    note "reused $BASE ($(cat "$BASE/.rehearsal-complete"))"
    return 0
  fi
  remove_tree "$BASE.tmp" || return 1
  debootstrap --arch=arm64 --variant=minbase --include=python3,ca-certificates "$SUITE" "$BASE.tmp" "$MIRROR" \
    || return 1
  # The host may reach the internet through a TLS proxy whose CA is in its local store; give
  # the root file system the same local CAs, so pip (and anything else) trusts what the host trusts.
  if compgen -G "/usr/local/share/ca-certificates/*" > /dev/null; then
    cp -a /usr/local/share/ca-certificates/. "$BASE.tmp/usr/local/share/ca-certificates/"
    QEMU_CPU="$QEMU_CPU_MODEL" chroot "$BASE.tmp" update-ca-certificates || return 1
  fi
  rm -rf "$BASE.tmp"/var/cache/apt/archives/*.deb
  local desc
  desc="Debian $(cat "$BASE.tmp/etc/debian_version"), $(QEMU_CPU="$QEMU_CPU_MODEL" chroot "$BASE.tmp" python3 --version), built $(date -u '+%Y-%m-%d')"
  echo "$desc" > "$BASE.tmp/.rehearsal-complete"
  mv "$BASE.tmp" "$BASE"
  note "built $BASE ($desc)"
}

# ---------------------------------------------------------------- this run's copy
# An aarch64 /proc/cpuinfo for the emulated core (Cortex-A76: implementer 0x41, part 0xd0b;
# the features qemu's cortex-a76 model has), one entry per host CPU as qemu runs them.
make_cpuinfo() {
  local n i
  n="$(nproc)"
  for (( i = 0; i < n; i++ )); do
    case "$QEMU_CPU_MODEL" in
      cortex-a72) printf 'processor\t: %d\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 2\n\n' "$i" ;;
      cortex-a53) printf 'processor\t: %d\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd03\nCPU revision\t: 4\n\n' "$i" ;;
      *) printf 'processor\t: %d\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\n' "$i" ;;
    esac
  done
}

# The host's pip settings, so that pip inside reaches PyPI the way the host's does: the
# system-wide config files (/etc/pip.conf, /etc/xdg/pip/) and every file they name (a CA
# bundle, a constraints file) are copied to the same paths; PIP_* variables are passed on.
# Settings that point at this host's local wheel stores (find-links, file:// indexes: x86_64
# wheels, absent inside) are left out and listed; so is the user config (~/.config/pip), whose
# only content here is such local stores.
copy_pip_config() {
  local f v name value dropped=()
  for f in /etc/pip.conf /etc/xdg/pip/pip.conf; do
    [[ -f "$f" ]] || continue
    mkdir -p "$WORK$(dirname "$f")"
    : > "$WORK$f"
    while IFS= read -r line; do
      if [[ "$line" =~ ^[[:space:]]*(find-links|extra-index-url|index-url)[[:space:]]*=.*(file:|[[:space:]]/) ]]; then
        dropped+=("$f: $line"); continue
      fi
      echo "$line" >> "$WORK$f"
      if [[ "$line" =~ ^[[:space:]]*[a-z-]+[[:space:]]*=[[:space:]]*(/[^[:space:]]+)[[:space:]]*$ ]]; then
        v="${BASH_REMATCH[1]}"
        if [[ -f "$v" ]]; then mkdir -p "$WORK$(dirname "$v")"; cp -a "$v" "$WORK$v"; fi
      fi
    done < "$f"
    echo "copied $f:"; sed 's/^/  /' "$WORK$f"
  done
  PIP_ENV=()
  while IFS='=' read -r name value; do
    [[ "$name" == PIP_* ]] || continue
    if [[ "$value" == /* && -f "$value" && ! -e "$WORK$value" ]]; then  # a CA bundle, a constraints file
      mkdir -p "$WORK$(dirname "$value")"; cp -a "$value" "$WORK$value"
    fi
    if [[ "$value" == *file:* ]] || [[ "$value" == /* && ! -e "$WORK$value" ]]; then  # a local wheel store
      dropped+=("environment: $name=$value"); continue
    fi
    PIP_ENV+=("$name=$value")
  done < <(env)
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n "${!v:-}" ]] && PIP_ENV+=("$v=${!v}")
  done
  echo "passed on: ${PIP_ENV[*]:-nothing}"
  [[ "${#dropped[@]}" -eq 0 ]] || printf 'left out (host-local wheel stores): %s\n' "${dropped[@]}"
}

mount_proc() {
  mount_in -t proc proc "$WORK/proc" || return 1
  mount_in --bind "$REHEARSAL_DIR/cpuinfo-$QEMU_CPU_MODEL" "$WORK/proc/cpuinfo"
}

# A board whose NPU runtime is missing, for the steps that need rknn-toolkit-lite2 to believe it
# runs on an RK3588: rknnlite reads /proc/device-tree/compatible itself (QWEN3ASR_SOC does not
# reach it), and nothing can be created inside a mounted procfs. So for those steps /proc is a
# plain directory: the aarch64 cpuinfo, an RK3588 device tree, and for every other entry a
# symlink into a procfs mounted at /.procfs (so /proc/self/fd/N still resolves, which
# onnxruntime needs to open external weights).
board_proc_on() {
  local e
  unmount_one "$WORK/proc/cpuinfo" && unmount_one "$WORK/proc" || return 1
  mountpoint -q "$WORK/proc" && { echo "$WORK/proc is still mounted"; return 1; }
  mkdir -p "$WORK/.procfs"
  mount_in -t proc proc "$WORK/.procfs" || return 1
  for e in "$WORK"/.procfs/*; do
    e="${e##*/}"
    [[ "$e" =~ ^[0-9]+$ || "$e" == cpuinfo || "$e" == device-tree ]] || ln -s "/.procfs/$e" "$WORK/proc/$e"
  done
  cp "$REHEARSAL_DIR/cpuinfo-$QEMU_CPU_MODEL" "$WORK/proc/cpuinfo"
  mkdir -p "$WORK/proc/device-tree"
  printf 'radxa,rock-5b\0rockchip,rk3588\0' > "$WORK/proc/device-tree/compatible"
}
board_proc_off() {
  unmount_one "$WORK/.procfs" || return 1
  if ! mountpoint -q "$WORK/proc"; then
    find "$WORK/proc" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} + || return 1
  fi
  mount_proc
}
board_step() {  # board_step NAME FUNCTION: step with the fake RK3588 /proc
  local rc
  board_proc_on || { echo "cannot set up the fake RK3588 /proc" >&2; return 1; }
  step "$1" "$2"
  rc=$?
  board_proc_off || { echo "cannot mount /proc again" >&2; return 1; }
  return "$rc"
}

fresh_copy() {
  remove_tree "$WORK" || return 1
  cp -a "$BASE" "$WORK" || return 1
  # The checkout: what git sees in the working tree (tracked and untracked, not ignored: no
  # .venv, caches or build output), including uncommitted changes; without git, a plain copy.
  mkdir -p "$WORK$CHECKOUT"
  if git -C "$REPO_ROOT" rev-parse --git-dir > /dev/null 2>&1; then
    (cd "$REPO_ROOT" && git ls-files -z --cached --others --exclude-standard \
      | while IFS= read -r -d '' f; do [[ -e "$f" ]] && printf '%s\0' "$f"; done \
      | tar -c --null --no-recursion -T - -f -) | tar -x -C "$WORK$CHECKOUT" || return 1
  else
    tar -c -C "$REPO_ROOT" --exclude=.venv --exclude='.venv-*' --exclude=.cache --exclude=__pycache__ --exclude=build . \
      | tar -x -C "$WORK$CHECKOUT" || return 1
  fi
  echo "checkout: $(find "$WORK$CHECKOUT" -type f | wc -l) files, $(du -sh "$WORK$CHECKOUT" | cut -f1)"
  cp /etc/resolv.conf "$WORK/etc/resolv.conf"
  copy_pip_config
  make_cpuinfo > "$REHEARSAL_DIR/cpuinfo-$QEMU_CPU_MODEL"
  mkdir -p "$REHEARSAL_DIR/pip-cache" "$WORK/root/.cache/pip"
  mount_proc || return 1
  mount_in -t sysfs sysfs "$WORK/sys" || mount_in --bind /sys "$WORK/sys" || return 1
  mount_in --bind /dev "$WORK/dev" || return 1
  mount_in --bind /dev/pts "$WORK/dev/pts" || return 1
  # pip's download cache outlives the copy, so a second run does not fetch the wheels again.
  mount_in --bind "$REHEARSAL_DIR/pip-cache" "$WORK/root/.cache/pip" || return 1
  in_chroot 'uname -m; head -n 9 /proc/cpuinfo; python3 --version' || return 1
  note "$(in_chroot 'python3 --version') in $WORK"
}

# ---------------------------------------------------------------- steps inside
setup_board() {
  in_chroot 'deploy/setup_board.sh' || return 1
  local out
  out="$(in_chroot 'test -x .venv/bin/python && .venv/bin/python --version')" || { echo "no .venv/bin/python"; return 1; }
  note "$out venv; $(grep -m1 '^  machine:' "$CURRENT_LOG" | sed 's/^  machine: *//')"
}

installed() {
  local py_ok
  in_chroot '.venv/bin/python -c "import qwen3asr, sounddevice; from qwen3asr import vad; print(\"VAD model:\", vad.find_model())"' \
    || return 1
  py_ok="$(in_chroot '.venv/bin/python -c "import sys; print(int(sys.version_info < (3, 13)))"')"
  if [[ "$py_ok" == 1 ]]; then
    in_chroot '.venv/bin/python -c "import rknnlite.api; print(\"rknnlite\", rknnlite.api.__file__)"' || return 1
  else
    echo "Python >= 3.13: rknn-toolkit-lite2 has no wheel; not expected"
  fi
  if in_chroot '.venv/bin/python -c "import qwen3asr.server"' > /dev/null 2>&1; then echo "qwen3asr.server imports"; fi
  local out
  out="$(in_chroot '.venv/bin/python python/mic_stream.py --list-devices' 2>&1)"
  echo "mic_stream.py --list-devices: $out"
  if grep -q 'sounddevice package is missing\|PortAudio is not available' <<< "$out"; then return 1; fi
  note "sounddevice, Silero VAD$([[ "$py_ok" == 1 ]] && echo ", rknnlite") import; no capture device (none in a chroot)"
}

# The text a clip must give (deploy/rehearse_expect.py, also checked against the host's CLI by
# make test): its transcript in audio/transcripts.json, with numbers as digits only when the
# CLI applies inverse text normalisation (--itn; off by default, as the CLI's parser says).
expect_text() {  # expect_text CLIP [--itn]
  in_chroot ".venv/bin/python deploy/rehearse_expect.py $*"
}
# transcribe_clip CLIP [FLAGS]: the README's command on a bundled clip; the printed text must be the expected one.
transcribe_clip() {
  local clip="$1" want got
  shift
  want="$(expect_text "$clip" "$@")" || return 1
  got="$(in_chroot ".venv/bin/python python/transcribe.py --audio audio/$clip $*")" || return 1
  echo "expected: $want"
  echo "printed:  $got"
  note "\"$got\""
  [[ "$got" == "$want" ]]
}
readme_command() { transcribe_clip en_1.wav; }
mandarin() { transcribe_clip zh_1.wav; }
mandarin_itn() { transcribe_clip zh_1.wav --itn; }  # numbers as digits: "6点半"

json_format() {
  local want out
  want="$(expect_text en_2.wav)" || return 1
  out="$(in_chroot '.venv/bin/python python/transcribe.py --audio audio/en_2.wav --format json')" || return 1
  echo "$out"
  python3 - "$want" "$out" <<'EOF' || return 1
import json, sys
want, out = sys.argv[1], json.loads(sys.argv[2])
ok = out.get("text") == want and out.get("language") == "English" and out.get("stats", {}).get("backend") == "onnx"
print(f"NOTE: text {out.get('text')!r}, language {out.get('language')}, backend {out.get('stats', {}).get('backend')}")
sys.exit(0 if ok else 1)
EOF
}

server_health() {
  if ! in_chroot '.venv/bin/python -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec(\"qwen3asr.server\") else 1)"'; then
    note "skipped: no server in this checkout"
    return 3
  fi
  local port cmd pid rc=1 i
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  cmd="${SERVER_CMD//\{port\}/$port}"
  echo "starting: $cmd"
  in_chroot "exec $cmd" > "$LOGS/server.log" 2>&1 &
  pid=$!
  # Start-up under emulation takes a while (imports, model load): poll for up to 180 s.
  for (( i = 0; i < 90; i++ )); do
    if ! kill -0 "$pid" 2>/dev/null; then echo "the server exited:"; cat "$LOGS/server.log"; break; fi
    if out="$(in_chroot ".venv/bin/python -c \"import urllib.request as u; r = u.urlopen('http://127.0.0.1:$port/health', timeout=5); print(r.status, r.read().decode()[:300])\"" 2>/dev/null)"; then
      echo "GET /health: $out"; note "GET /health: ${out:0:60}"
      [[ "$out" == 200* ]] && rc=0
      break
    fi
    sleep 2
  done
  stop_server "$pid" "$port" || rc=1
  [[ "$rc" -eq 0 ]] || echo "no answer from /health on port $port"
  return "$rc"
}

# The background job is the subshell around in_chroot; the server inside the chroot (env, chroot
# and bash exec into it) is its child, which killing the subshell alone leaves running as an
# orphan. Stop the server by its port on its command line (SIGTERM: it exits 0 after its grace
# period; SIGKILL after 30 s), then the subshell, and fail if anything is left.
stop_server() {
  local pid="$1" port="$2" pattern i
  pattern="qwen3asr.server .*--port $port( |\$)"
  pkill -TERM -f -- "$pattern" 2>/dev/null
  for (( i = 0; i < 30; i++ )); do
    pgrep -f -- "$pattern" > /dev/null || break
    sleep 1
  done
  pkill -KILL -f -- "$pattern" 2>/dev/null
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  if pgrep -f -- "$pattern" > /dev/null; then
    echo "the server on port $port is still running: $(pgrep -af -- "$pattern")"
    return 1
  fi
  echo "server stopped (nothing left on port $port)"
}

# An error must be ONE clear message: non-zero exit, no Python traceback, one line naming the problem.
one_clear_error() {  # one_clear_error PATTERN COMMAND
  local pattern="$1" out rc
  out="$(in_chroot "$2" 2>&1)"
  rc=$?
  echo "$ $2"; echo "$out"; echo "(exit status $rc)"
  note "$(grep -m1 '^error' <<< "$out" || grep -m1 -iE 'error|exception' <<< "$out")"
  if [[ "$rc" -eq 0 ]]; then echo "expected a failure"; return 1; fi
  if grep -q 'Traceback' <<< "$out"; then echo "a traceback was printed"; NOTE="traceback, then: $NOTE"; return 1; fi
  if ! grep -qiE "$pattern" <<< "$out"; then echo "the message does not name the problem ($pattern)"; return 1; fi
}
RK_BUNDLE=/tmp/rk-standin
rk_standin() {
  local out
  out="$(in_chroot ".venv/bin/python deploy/rehearse_rk_standin.py --bundle models/default --out $RK_BUNDLE --soc rk3588")" \
    || return 1
  echo "$out"
  note "$out"
}
rk_forced() {  # on the fake RK3588 (board_step): rk models there, librknnrt.so / librkllmrt.so / driver not
  one_clear_error 'librknnrt\.so|librkllmrt\.so|rknn-toolkit-lite2|NPU driver' \
    "QWEN3ASR_SOC=rk3588 .venv/bin/python python/transcribe.py --audio audio/en_1.wav --model $RK_BUNDLE --backend rk" \
    || return 1
  # On a Python without a rknn-toolkit-lite2 wheel, "pip install rknn-toolkit-lite2" cannot work:
  # the message must say which Python it needs.
  if in_chroot '.venv/bin/python -c "import sys; sys.exit(sys.version_info < (3, 13))"' \
     && grep -q 'pip install rknn-toolkit-lite2' "$CURRENT_LOG" && ! grep -q '3\.1[0-2]' "$CURRENT_LOG"; then
    echo "advises 'pip install rknn-toolkit-lite2', which has no wheel for this Python (3.13+), without naming 3.10-3.12"
    NOTE="no wheel for this Python, yet: $NOTE"
    return 1
  fi
}
rk_no_soc() {
  # Off a board with --backend rk and no SoC named: the message must say how a CLI user names it.
  one_clear_error 'QWEN3ASR_SOC|--soc' \
    ".venv/bin/python python/transcribe.py --audio audio/en_1.wav --model $RK_BUNDLE --backend rk" || return 1
  if grep -q 'Pass soc=' "$CURRENT_LOG"; then echo "says 'Pass soc=...', which the CLI has no flag for"; return 1; fi
}
auto_fallback() {  # on the fake RK3588 (board_step)
  # README: backend "auto" is "NPU on a board, else CPU": with rk models but no NPU runtime it must fall back.
  local want got
  want="$(expect_text en_1.wav)" || return 1
  got="$(in_chroot ".venv/bin/python python/transcribe.py --audio audio/en_1.wav --model $RK_BUNDLE" 2>&1)"
  echo "$got"
  note "$(tail -n1 <<< "$got" | cut -c1-150)"
  [[ "$(tail -n1 <<< "$got")" == "$want" ]] && ! grep -q Traceback <<< "$got"
}
rkllm_messages() {
  # librkllmrt.so is loaded only after the encoder's runtime, so off a board no CLI run gets that
  # far: the package's loader is called directly, with the two wrong files users have had in lib/.
  local out rc=0
  local x86_lib=/lib/x86_64-linux-gnu/libc.so.6  # any x86_64 shared library: a PC's build copied by mistake
  [[ -f "$x86_lib" ]] || x86_lib=/bin/true
  mkdir -p "$WORK/tmp/pc" "$WORK/tmp/lfs"  # the names must not give the answer away
  cp "$(readlink -f "$x86_lib")" "$WORK/tmp/pc/librkllmrt.so"
  printf 'version https://git-lfs.github.com/spec/v1\noid sha256:%064d\nsize 7340032\n' 0 > "$WORK/tmp/lfs/librkllmrt.so"
  out="$(in_chroot '.venv/bin/python - /tmp/pc/librkllmrt.so /tmp/lfs/librkllmrt.so' <<'EOF'
import sys
from qwen3asr.backends.rk.rkllm import RKLLMError, load_library
for path in sys.argv[1:]:
    try:
        load_library(path)
        print(f"{path}: loaded?!")
    except RKLLMError as exc:
        print(f"{path}: {exc}")
EOF
)" || return 1
  echo "$out"
  local x86 lfs
  x86="$(grep '^/tmp/pc/' <<< "$out")"
  lfs="$(grep '^/tmp/lfs/' <<< "$out")"
  grep -qiE 'x86|architecture|e_machine' <<< "$x86" || { echo "x86_64 file: the message does not say it is built for another architecture"; rc=1; }
  grep -qi 'LFS' <<< "$lfs" || { echo "LFS pointer: the message does not say it is a Git LFS pointer"; rc=1; }
  # The loader's own reason, e.g. "(...so: cannot open shared object file: No such file or directory)".
  note "x86_64 build: '$(sed -E 's/^[^(]*\(([^)]*)\).*/\1/; s/^.*: //' <<< "$x86")'; LFS pointer: '$(sed -E 's/^[^(]*\(([^)]*)\).*/\1/; s/^.*: //' <<< "$lfs")'"
  return "$rc"
}
pip_install_no_model() {
  # A user who runs `pip install .` (not -e) and then asks for the default model.
  in_chroot "python3 -m venv /tmp/venv-plain && /tmp/venv-plain/bin/python -m pip install -q $CHECKOUT" || return 1
  local out
  out="$(in_chroot 'cd /tmp && /tmp/venv-plain/bin/python -c "
from qwen3asr import Qwen3ASREngine
from qwen3asr.bundle import BundleError
try:
    Qwen3ASREngine()
except (BundleError, OSError, ValueError) as exc:
    print(exc)
else:
    print(\"loaded a model\")
"' 2>&1)" || return 1
  echo "$out"
  note "$(head -n1 <<< "$out" | cut -c1-150)"
  if grep -q '/tmp/venv-plain' <<< "$out"; then echo "the message points into the installed package (/tmp/venv-plain)"; return 1; fi
  grep -q 'QWEN3ASR_MODEL\|--model' <<< "$out" || { echo "the message does not say how to name a model"; return 1; }
}
board_checks() {
  # setup_board.sh --check-only on a fake RK3588 tree (device tree + rknpu debugfs), no runtimes.
  in_chroot 'mkdir -p /tmp/fake-rk3588/proc/device-tree /tmp/fake-rk3588/sys/kernel/debug/rknpu /tmp/fake-rk3588/usr/lib &&
    printf "radxa,rock-5b\0rockchip,rk3588\0" > /tmp/fake-rk3588/proc/device-tree/compatible &&
    echo "RKNPU driver: v0.9.8" > /tmp/fake-rk3588/sys/kernel/debug/rknpu/version' || return 1
  local out rc
  out="$(in_chroot 'QWEN3ASR_SYSFS_ROOT=/tmp/fake-rk3588 QWEN3ASR_SYSTEM_LIBDIR=/tmp/fake-rk3588/usr/lib deploy/setup_board.sh --check-only')"
  rc=$?
  echo "$out"
  grep -q '^\[ok\]    SoC: rk3588' <<< "$out" && grep -q '^\[warn\]  librkllmrt.so: not found' <<< "$out" \
    && grep -q '^\[warn\]  librknnrt.so: not found' <<< "$out" || return 1
  note "exit $rc; $(grep -m1 'errors/warnings' <<< "$out" | sed 's/^ *//')"
  [[ "$rc" -eq 0 ]]
}

# ---------------------------------------------------------------- main
T_START="$(date +%s.%N)"
mkdir -p "$REHEARSAL_DIR"
remove_tree "$LOGS" && mkdir -p "$LOGS"
ok=1
step "host tools" host_tools || ok=0
[[ "$ok" -eq 1 ]] && { step "arm64 rootfs" rootfs || ok=0; }
[[ "$ok" -eq 1 ]] && { step "fresh copy + checkout" fresh_copy || ok=0; }
if [[ "$ok" -eq 1 ]] && step "setup_board.sh" setup_board; then
  step "installed parts" installed
  step "README command (en_1)" readme_command
  step "Mandarin (zh_1)" mandarin
  step "Mandarin --itn (zh_1)" mandarin_itn
  step "--format json (en_2)" json_format
  step "server /health" server_health
  if step "rk stand-in bundle" rk_standin; then
    step "rk forced, no SoC" rk_no_soc
    board_step "rk forced, SoC set (fake RK3588)" rk_forced
    board_step "auto falls back (fake RK3588)" auto_fallback
  fi
  step "librkllmrt.so messages" rkllm_messages
  step "pip install . (no model)" pip_install_no_model
fi
[[ "$ok" -eq 1 ]] && step "board checks (fake RK3588)" board_checks
unmount_all
summary
