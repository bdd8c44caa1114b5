"""Board scripts (deploy/) against fake sysfs trees built in tmp_path (doubles/board.py).

The fake trees copy what RK3588 / RK3576 boards with the Rockchip BSP kernel show:
cpufreq policies, devfreq nodes for the NPU and DDR, cpuidle state1, the NUL-separated
device-tree compatible list and the rknpu debugfs files. Nothing here needs a board,
root, a network or a virtualenv.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from doubles.board import A55, BOARDS, fake_elf, make_board, put
from doubles.programs import apt_doubles, fake_python

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"

_spec = importlib.util.spec_from_file_location("lock_clocks", DEPLOY / "lock_clocks.py")
lock_clocks = importlib.util.module_from_spec(_spec)
sys.modules["lock_clocks"] = lock_clocks  # dataclasses look their module up there
_spec.loader.exec_module(lock_clocks)

# ----------------------------------------------------------------------------- fake trees

def tree_contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text().strip()


def run_lock(root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(DEPLOY / "lock_clocks.py"), "--sysfs-root", str(root), "--allow-non-root", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


CPUFREQ = "sys/devices/system/cpu/cpufreq"
DEVFREQ = "sys/class/devfreq"


def expected_lock_writes(root: Path, soc: str, cpu=None, npu=None, ddr=None) -> list[tuple[str, str]]:
    board = BOARDS[soc]
    writes = []
    for policy, (freqs, _) in board["policies"].items():
        writes.append((f"{CPUFREQ}/{policy}/scaling_governor", "userspace"))
        writes.append((f"{CPUFREQ}/{policy}/scaling_setspeed", cpu or freqs.split()[-1]))
    npu_name, npu_freqs = board["npu"]
    writes.append((f"{DEVFREQ}/{npu_name}/governor", "userspace"))
    writes.append((f"{DEVFREQ}/{npu_name}/userspace/set_freq", npu or npu_freqs.split()[-1]))
    writes.append((f"{DEVFREQ}/dmc/governor", "userspace"))
    writes.append((f"{DEVFREQ}/dmc/userspace/set_freq", ddr or board["dmc"].split()[-1]))
    return writes


# ----------------------------------------------------------------------------- SoC detection


@pytest.mark.parametrize(
    "compatible, soc",
    [
        (b"radxa,rock-5b\0rockchip,rk3588\0", "rk3588"),
        (b"radxa,rock-5a\0rockchip,rk3588s\0", "rk3588"),
        (b"rockchip,rk3576-evb1-v10\0rockchip,rk3576\0", "rk3576"),
    ],
)
def test_detect_soc_from_nul_separated_compatible(tmp_path, compatible, soc):
    put(tmp_path / "proc/device-tree/compatible", compatible)
    assert lock_clocks.detect_soc(tmp_path) == soc


def test_detect_soc_falls_back_to_sys_firmware(tmp_path):
    put(tmp_path / "sys/firmware/devicetree/base/compatible", b"rockchip,rk3576\0")
    assert lock_clocks.detect_soc(tmp_path) == "rk3576"


def test_detect_soc_rejects_other_socs_and_lists_strings(tmp_path):
    put(tmp_path / "proc/device-tree/compatible", b"radxa,rock-3a\0rockchip,rk3568\0")
    with pytest.raises(lock_clocks.ClockError, match=r"\['radxa,rock-3a', 'rockchip,rk3568'\].*--soc"):
        lock_clocks.detect_soc(tmp_path)


def test_detect_soc_without_device_tree(tmp_path):
    with pytest.raises(lock_clocks.ClockError, match="cannot read the device tree"):
        lock_clocks.detect_soc(tmp_path)


# ----------------------------------------------------------------------------- lock


@pytest.mark.parametrize("soc", ["rk3588", "rk3576"])
def test_lock_writes_userspace_and_max_frequencies(tmp_path, soc):
    root = make_board(tmp_path / "root", soc)
    proc = run_lock(root, "--mode", "lock")
    assert proc.returncode == 0, proc.stderr
    expected = expected_lock_writes(root, soc)
    for rel, value in expected:
        assert read(root, rel) == value, rel
    # Printed in order, one line per write.
    printed = [line for line in proc.stdout.splitlines() if line.startswith("write ")]
    assert printed == [f"write {v} > {root / rel}" for rel, v in expected]
    # cpuidle untouched without --disable-cpuidle.
    assert read(root, "sys/devices/system/cpu/cpu0/cpuidle/state1/disable") == "0"
    state = json.loads((root / "run/qwen3asr-clocks.json").read_text())
    assert state["soc"] == soc
    assert state["freq"]["policy0"] == {"governor": "schedutil", "setspeed": None}
    assert state["freq"][BOARDS[soc]["npu"][0]] == {"governor": "rknpu_ondemand", "setspeed": None}
    assert state["freq"]["dmc"] == {"governor": "dmc_ondemand", "setspeed": None}
    assert state["cpuidle"] == {}


def test_lock_rk3576_picks_each_cluster_max_and_disables_cpuidle(tmp_path):
    root = make_board(tmp_path / "root", "rk3576")
    proc = run_lock(root, "--mode", "lock", "--disable-cpuidle", "--soc", "rk3576")
    assert proc.returncode == 0, proc.stderr
    assert read(root, f"{CPUFREQ}/policy0/scaling_setspeed") == "2016000"  # A53 cluster
    assert read(root, f"{CPUFREQ}/policy4/scaling_setspeed") == "2208000"  # A72 cluster
    assert read(root, f"{DEVFREQ}/27700000.npu/userspace/set_freq") == "950000000"
    for cpu in range(8):
        assert read(root, f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state1/disable") == "1"
        assert read(root, f"sys/devices/system/cpu/cpu{cpu}/cpuidle/state0/disable") == "0"
    state = json.loads((root / "run/qwen3asr-clocks.json").read_text())
    assert state["cpuidle"] == {f"cpu{i}": "0" for i in range(8)}


def test_lock_requested_frequencies(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    proc = run_lock(root, "--mode", "lock", "--cpu", "1800000", "--npu", "800000000", "--ddr", "1560000000")
    assert proc.returncode == 0, proc.stderr
    for rel, value in expected_lock_writes(root, "rk3588", cpu="1800000", npu="800000000", ddr="1560000000"):
        assert read(root, rel) == value, rel


def test_lock_ddr_skip_leaves_dmc_alone(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    shutil.rmtree(root / DEVFREQ / "dmc")
    proc = run_lock(root, "--mode", "lock", "--ddr", "skip")
    assert proc.returncode == 0, proc.stderr
    assert read(root, f"{DEVFREQ}/fdab0000.npu/governor") == "userspace"
    assert "dmc" not in json.loads((root / "run/qwen3asr-clocks.json").read_text())["freq"]


def test_dry_run_writes_nothing_and_prints_every_write(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    before = tree_contents(root)
    proc = run_lock(root, "--mode", "lock", "--dry-run", "--disable-cpuidle")
    assert proc.returncode == 0, proc.stderr
    assert tree_contents(root) == before
    assert not (root / "run").exists()
    expected = [f"would write {v} > {root / rel}" for rel, v in expected_lock_writes(root, "rk3588")]
    expected += [f"would write 1 > {root}/sys/devices/system/cpu/cpu{c}/cpuidle/state1/disable" for c in range(8)]
    assert [line for line in proc.stdout.splitlines() if line.startswith("would write")] == expected
    assert f"would save the current state to {root / 'run/qwen3asr-clocks.json'}" in proc.stdout


def test_dry_run_does_not_need_root(tmp_path, monkeypatch, capsys):
    root = make_board(tmp_path / "root", "rk3588")
    monkeypatch.setattr(lock_clocks.os, "geteuid", lambda: 1000)
    assert lock_clocks.main(["--sysfs-root", str(root), "--mode", "lock", "--dry-run"]) == 0
    assert lock_clocks.main(["--sysfs-root", str(root), "--mode", "status"]) == 0
    assert lock_clocks.main(["--sysfs-root", str(root), "--mode", "lock"]) == 1
    assert "--mode lock writes to sysfs: run as root (sudo)" in capsys.readouterr().err
    assert read(root, f"{CPUFREQ}/policy0/scaling_governor") == "schedutil"


# ----------------------------------------------------------------------------- unlock


def observable_state(root: Path) -> dict[str, str]:
    """What the kernel would report: governors, pinned speeds under userspace, cpuidle."""
    state = {}
    for gov in sorted(root.glob(f"{CPUFREQ}/policy*/scaling_governor")) + sorted(root.glob(f"{DEVFREQ}/*/governor")):
        state[str(gov.relative_to(root))] = gov.read_text().strip()
        if gov.read_text().strip() == "userspace":
            speed = gov.parent / ("scaling_setspeed" if gov.name == "scaling_governor" else "userspace/set_freq")
            state[str(speed.relative_to(root))] = speed.read_text().strip()
    for idle in sorted(root.glob("sys/devices/system/cpu/cpu*/cpuidle/state*/disable")):
        state[str(idle.relative_to(root))] = idle.read_text().strip()
    return state


def test_unlock_restores_the_saved_state_exactly(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    # A board that was not at defaults: one policy pinned by hand, DDR on a
    # different governor, cpu3 idle state already disabled.
    put(root / f"{CPUFREQ}/policy6/scaling_governor", "userspace\n")
    put(root / f"{CPUFREQ}/policy6/scaling_setspeed", "2016000\n")
    put(root / f"{DEVFREQ}/dmc/governor", "simple_ondemand\n")
    put(root / "sys/devices/system/cpu/cpu3/cpuidle/state1/disable", "1\n")
    before = observable_state(root)

    assert run_lock(root, "--mode", "lock", "--disable-cpuidle").returncode == 0
    locked = observable_state(root)
    assert locked != before
    assert locked[f"{CPUFREQ}/policy6/scaling_setspeed"] == "2400000"

    proc = run_lock(root, "--mode", "unlock")
    assert proc.returncode == 0, proc.stderr
    assert observable_state(root) == before
    assert read(root, f"{CPUFREQ}/policy6/scaling_setspeed") == "2016000"
    assert not (root / "run/qwen3asr-clocks.json").exists()


def test_second_lock_keeps_the_state_from_before_the_first(tmp_path):
    root = make_board(tmp_path / "root", "rk3576")
    before = observable_state(root)
    assert run_lock(root, "--mode", "lock").returncode == 0
    proc = run_lock(root, "--mode", "lock", "--npu", "600000000", "--disable-cpuidle")
    assert proc.returncode == 0, proc.stderr
    assert "exists from an earlier lock" in proc.stdout
    assert read(root, f"{DEVFREQ}/27700000.npu/userspace/set_freq") == "600000000"
    assert run_lock(root, "--mode", "unlock").returncode == 0
    assert observable_state(root) == before


def test_unlock_dry_run_changes_nothing(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    assert run_lock(root, "--mode", "lock").returncode == 0
    locked = tree_contents(root)
    proc = run_lock(root, "--mode", "unlock", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert tree_contents(root) == locked
    assert f"would write schedutil > {root}/{CPUFREQ}/policy0/scaling_governor" in proc.stdout
    assert f"would write rknpu_ondemand > {root}/{DEVFREQ}/fdab0000.npu/governor" in proc.stdout


def test_unlock_without_state_file_restores_offered_defaults(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    for policy in ("policy0", "policy4", "policy6"):
        put(root / f"{CPUFREQ}/{policy}/scaling_governor", "userspace\n")
    # This NPU node offers no rknpu_ondemand: the next default is used.
    put(root / f"{DEVFREQ}/fdab0000.npu/available_governors", "userspace powersave performance simple_ondemand\n")
    put(root / f"{DEVFREQ}/fdab0000.npu/governor", "userspace\n")
    put(root / f"{DEVFREQ}/dmc/governor", "userspace\n")
    put(root / "sys/devices/system/cpu/cpu5/cpuidle/state1/disable", "1\n")
    proc = run_lock(root, "--mode", "unlock")
    assert proc.returncode == 0, proc.stderr
    assert "no state file" in proc.stdout
    for policy in ("policy0", "policy4", "policy6"):
        assert read(root, f"{CPUFREQ}/{policy}/scaling_governor") == "schedutil"
    assert read(root, f"{DEVFREQ}/fdab0000.npu/governor") == "simple_ondemand"
    assert read(root, f"{DEVFREQ}/dmc/governor") == "dmc_ondemand"
    assert read(root, "sys/devices/system/cpu/cpu5/cpuidle/state1/disable") == "0"


# ----------------------------------------------------------------------------- errors


def test_unsupported_cpu_frequency_lists_the_offered_ones(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    before = tree_contents(root)
    proc = run_lock(root, "--mode", "lock", "--cpu", "2400000")
    assert proc.returncode == 1
    # policy0 (A55) tops out at 1.8 GHz; the A76 policies would accept 2.4 GHz.
    assert (
        f"error: cpu policy0: 2400000 kHz is not offered by {root}/{CPUFREQ}/policy0/scaling_available_frequencies; "
        f"offered: {A55} kHz"
    ) in proc.stderr
    assert tree_contents(root) == before  # checked before anything was written or saved


def test_unsupported_npu_frequency_lists_the_offered_ones(tmp_path):
    root = make_board(tmp_path / "root", "rk3576")
    proc = run_lock(root, "--mode", "lock", "--npu", "1000000000")
    assert proc.returncode == 1
    assert "npu: 1000000000 Hz is not offered" in proc.stderr
    assert "offered: 300000000 400000000 500000000 600000000 700000000 800000000 900000000 950000000 Hz" in proc.stderr


def test_missing_cpu_policy_is_a_clear_error(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    shutil.rmtree(root / CPUFREQ / "policy6")
    proc = run_lock(root, "--mode", "lock")
    assert proc.returncode == 1
    assert f"error: missing CPU policy node {root}/{CPUFREQ}/policy6 (expected on rk3588)" in proc.stderr


def test_missing_dmc_suggests_ddr_skip(tmp_path):
    root = make_board(tmp_path / "root", "rk3576")
    shutil.rmtree(root / DEVFREQ / "dmc")
    proc = run_lock(root, "--mode", "lock")
    assert proc.returncode == 1
    assert f"missing DDR devfreq node {root}/{DEVFREQ}/dmc; use --ddr skip" in proc.stderr


def test_missing_frequency_list_names_the_file(tmp_path):
    root = make_board(tmp_path / "root", "rk3576")
    (root / CPUFREQ / "policy4/scaling_available_frequencies").unlink()
    proc = run_lock(root, "--mode", "lock")
    assert proc.returncode == 1
    assert f"missing sysfs node {root}/{CPUFREQ}/policy4/scaling_available_frequencies" in proc.stderr


def test_npu_found_by_glob_when_the_usual_name_differs(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    (root / DEVFREQ / "fdab0000.npu").rename(root / DEVFREQ / "fdab0000.rknpu.npu")
    assert run_lock(root, "--mode", "lock").returncode == 0
    assert read(root, f"{DEVFREQ}/fdab0000.rknpu.npu/userspace/set_freq") == "1000000000"


def test_missing_npu_devfreq_is_a_clear_error(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    shutil.rmtree(root / DEVFREQ / "fdab0000.npu")
    proc = run_lock(root, "--mode", "lock")
    assert proc.returncode == 1
    assert f"missing NPU devfreq node {root}/{DEVFREQ}/fdab0000.npu" in proc.stderr
    assert "is the rknpu driver loaded?" in proc.stderr


def test_userspace_governor_not_offered(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    put(root / f"{CPUFREQ}/policy4/scaling_available_governors", "ondemand performance schedutil\n")
    proc = run_lock(root, "--mode", "lock")
    assert proc.returncode == 1
    assert "cpu policy4: the userspace governor is not offered" in proc.stderr


def test_bad_frequency_argument_is_rejected_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        lock_clocks.main(["--sysfs-root", str(tmp_path), "--mode", "lock", "--cpu", "fast"])
    assert exc.value.code == 2
    assert "'fast': expected max or a positive integer" in capsys.readouterr().err


# ----------------------------------------------------------------------------- status


def test_status_reports_governors_frequencies_and_npu_load(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    assert run_lock(root, "--mode", "lock", "--npu", "900000000").returncode == 0
    proc = subprocess.run(
        ["bash", str(DEPLOY / "lock_clocks.sh"), "--sysfs-root", str(root), "--mode", "status"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "SoC: rk3588 (3 NPU cores)"
    assert "cpu policy0 (policy0): governor=userspace cur=1008000 kHz locked=1800000 kHz offered=408000..1800000 kHz" in lines
    assert "npu (fdab0000.npu): governor=userspace cur=300000000 Hz locked=900000000 Hz offered=300000000..1000000000 Hz" in lines
    assert "NPU load: NPU load:  Core0:  0%, Core1: 12%, Core2:  0%," in lines
    assert any(line.startswith("state file: ") and "(locked;" in line for line in lines)


def test_status_without_debugfs_says_it_is_not_readable(tmp_path):
    root = make_board(tmp_path / "root", "rk3576")
    shutil.rmtree(root / "sys/kernel/debug")
    proc = run_lock(root, "--mode", "status")
    assert proc.returncode == 0, proc.stderr
    assert "NPU load: not readable (debugfs needs root" in proc.stdout
    assert "cpu policy4 (policy4): governor=schedutil cur=1008000 kHz offered=408000..2208000 kHz" in proc.stdout


# ----------------------------------------------------------------------------- setup_board.sh


def run_setup(root: Path, *args: str, arch: str = "aarch64", libdir: Path | None = None, euid: int = 1000,
              script: Path = DEPLOY / "setup_board.sh", path: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    env.update(QWEN3ASR_SYSFS_ROOT=str(root), QWEN3ASR_ARCH=arch, QWEN3ASR_SYSTEM_LIBDIR=str(libdir or root / "usr/lib"),
               QWEN3ASR_EUID=str(euid))
    for var in ("QWEN3ASR_PYTHON", "QWEN3ASR_VENV", "QWEN3ASR_RKLLM_LIB"):
        env.pop(var, None)
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=120)


def printed_commands(stdout: str, prefix: str = "would run: ") -> list[list[str]]:
    """The commands a run printed, split as a shell would. A word the shell would take as an
    operator (an unquoted ``>`` in ``pkg>=1.0`` is a redirect) fails the test."""
    commands = []
    for line in stdout.splitlines():
        if not line.startswith(prefix):
            continue
        text = line[len(prefix):]
        words = shlex.split(text)
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        assert list(lexer) == words, f"not safe to paste into a shell: {line}"
        commands.append(words)
    return commands


def expected_extras(repo: Path = REPO) -> str:
    """The extras setup_board.sh must install: rk, mic, and server once pyproject.toml has it."""
    extras = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return "rk,mic" + (",server" if "server" in extras else "")


def vad_pin(repo: Path = REPO) -> str:
    pins = [line for line in (repo / "requirements-nodeps.txt").read_text().splitlines() if line.startswith("silero-vad==")]
    assert len(pins) == 1
    return pins[0]


def venv_commands(python: Path, venv: Path, repo: Path = REPO) -> list[list[str]]:
    vpy = f"{venv}/bin/python"
    return [[str(python), "-m", "venv", str(venv)],
            [vpy, "-m", "pip", "install", "--upgrade", "pip"],
            [vpy, "-m", "pip", "install", "-e", f"{repo}[{expected_extras(repo)}]"],
            [vpy, "-m", "pip", "install", "--no-deps", vad_pin(repo)]]


@pytest.fixture
def board_ok(tmp_path):
    """An RK3588 tree with driver 0.9.8, aarch64 runtime libraries, PortAudio and a 3.11 python."""
    root = make_board(tmp_path / "root", "rk3588")
    fake_elf(root / "usr/lib/librknnrt.so", extra=b"\0librknnrt version: 2.5.0 (0123abcd@2025-08-01T10:00:00)\0")
    fake_elf(root / "usr/lib/aarch64-linux-gnu/libportaudio.so.2")
    rkllm = fake_elf(tmp_path / "lib/librkllmrt.so")
    python = fake_python(tmp_path / "bin/python3.11", "3.11.9")
    return root, rkllm, python, tmp_path / "venv"


def test_setup_check_only_ok_tree_prints_summary(board_ok):
    root, rkllm, python, venv = board_ok
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "[ok]    SoC: rk3588 (device tree: radxa,rock-5b rockchip,rk3588)" in out
    assert "[ok]    RKNPU driver: 0.9.8 (>= 0.9.8)" in out
    assert f"[ok]    Python: {python} (3.11.9)" in out
    assert f"[ok]    librkllmrt.so: {rkllm} (aarch64)" in out
    assert f"[ok]    PortAudio: {root}/usr/lib/aarch64-linux-gnu/libportaudio.so.2" in out
    assert "  machine:            rk3588 board (NPU and CPU backends)" in out
    assert "What only a board has" not in out
    assert "librknnrt.so: " in out and "version 2.5.0 (0123abcd@2025-08-01T10:00:00)" in out
    assert "  venv:               not touched (--check-only)" in out
    assert "  librkllmrt.so:      " + str(rkllm) + " (supported runtimes: 1.2.x and 1.3.x)" in out
    assert "  errors/warnings:    0/0" in out
    assert not venv.exists()


def test_setup_detects_rk3576(tmp_path):
    root = make_board(tmp_path / "root", "rk3576", driver="RKNPU driver: v0.9.8\n")
    rkllm = fake_elf(tmp_path / "lib/librkllmrt.so")
    python = fake_python(tmp_path / "bin/python3.12", "3.12.3")
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm))
    assert "[ok]    SoC: rk3576" in proc.stdout
    assert "  SoC:                rk3576" in proc.stdout


def test_setup_old_driver_fails_with_upgrade_hint(board_ok):
    root, rkllm, python, venv = board_ok
    put(root / "sys/kernel/debug/rknpu/version", "RKNPU driver: v0.9.6\n")
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm))
    assert proc.returncode == 1
    assert "[error] RKNPU driver: 0.9.6 is older than 0.9.8" in proc.stdout
    assert "https://github.com/airockchip/rknn-llm (rknpu-driver/)" in proc.stdout
    assert "Fix the [error] lines above" in proc.stdout


def test_setup_driver_version_via_procfs_when_debugfs_is_absent(board_ok):
    root, rkllm, python, venv = board_ok
    shutil.rmtree(root / "sys/kernel/debug")
    put(root / "proc/rknpu/version", "RKNPU driver: v0.9.10\n")
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm))
    assert proc.returncode == 0, proc.stdout
    assert "[ok]    RKNPU driver: 0.9.10 (>= 0.9.8)" in proc.stdout  # numeric, not string, comparison


def test_setup_unreadable_driver_version_is_a_warning(board_ok):
    root, rkllm, python, venv = board_ok
    shutil.rmtree(root / "sys/kernel/debug")
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm))
    assert proc.returncode == 0, proc.stdout
    assert "[warn]  RKNPU driver: version not readable (debugfs needs root)" in proc.stdout
    assert "sudo cat /sys/kernel/debug/rknpu/version" in proc.stdout
    assert "  errors/warnings:    0/1" in proc.stdout


def test_setup_as_root_without_debugfs_does_not_say_sudo(board_ok):
    # root reads debugfs: a missing version file means debugfs is not mounted or no driver is loaded.
    root, rkllm, python, venv = board_ok
    shutil.rmtree(root / "sys/kernel/debug")
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm), euid=0)
    assert proc.returncode == 0, proc.stdout
    assert f"[warn]  RKNPU driver: {root}/sys/kernel/debug/rknpu/version does not exist: is debugfs mounted" in proc.stdout
    assert "'mount -t debugfs none /sys/kernel/debug'" in proc.stdout
    assert "sudo" not in proc.stdout.split("Summary")[0]


def test_setup_rejects_python_older_than_3_10(board_ok):
    root, rkllm, _, venv = board_ok
    old = fake_python(venv.parent / "bin/python3.9", "3.9.18")
    proc = run_setup(root, "--check-only", "--python", str(old), "--rkllm-lib", str(rkllm))
    assert proc.returncode == 1
    assert f"[error] Python: need 3.10 or newer (found: {old} 3.9.18)" in proc.stdout
    assert "apt install python3.1" not in proc.stdout  # a package name many distributions lack


def test_setup_rejects_non_aarch64(board_ok):
    root, rkllm, python, venv = board_ok
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm), arch="x86_64")
    assert proc.returncode == 1
    assert "[error] architecture: x86_64; rknn-toolkit-lite2 and librkllmrt.so exist only for aarch64" in proc.stdout
    assert "'make setup' sets up the CPU backend" in proc.stdout


@pytest.mark.parametrize("compatible, shown", [
    (None, "[warn]  SoC: no device tree at {root}/proc/device-tree/compatible (not a Rockchip board"),
    (b"raspberrypi,5-model-b\0brcm,bcm2712\0",
     "[warn]  SoC: not an RK3588 or RK3576 (device tree: raspberrypi,5-model-b brcm,bcm2712); setting up the CPU backend only"),
])
def test_setup_on_other_aarch64_sets_up_the_cpu_backend(tmp_path, compatible, shown):
    # A Pi 5, a container or a CI runner: no NPU, but the CPU backend runs, so the venv is made.
    root = tmp_path / "root"
    root.mkdir()
    if compatible is not None:
        put(root / "proc/device-tree/compatible", compatible)
    fake_elf(root / "usr/lib/aarch64-linux-gnu/libportaudio.so.2")
    python = fake_python(tmp_path / "bin/python3", "3.11.2")
    venv = tmp_path / "venv"
    proc = run_setup(root, "--dry-run", "--python", str(python), "--venv", str(venv))
    assert proc.returncode == 0, proc.stdout
    out = proc.stdout
    assert shown.format(root=root) in out
    assert printed_commands(out) == venv_commands(python, venv)
    assert "RKNPU driver" not in out  # not looked for off a board
    assert "[warn]  librkllmrt.so" not in out and "[warn]  librknnrt.so" not in out
    assert "  machine:            not an RK3588/RK3576 board: CPU backend only" in out
    assert "  errors/warnings:    0/1" in out  # the SoC line
    assert "What only a board has (not set up here): an RK3588/RK3576 NPU, the RKNPU kernel driver >= 0.9.8," in out
    assert f"Next: {venv}/bin/python python/transcribe.py --audio audio/en_1.wav" in out
    assert not venv.exists()


def test_setup_off_a_board_still_checks_runtime_files_that_are_there(tmp_path):
    root = tmp_path / "root"
    fake_elf(root / "usr/lib/librknnrt.so", machine=0x3E)  # an x86_64 build copied by mistake
    python = fake_python(tmp_path / "bin/python3", "3.11.2")
    proc = run_setup(root, "--check-only", "--python", str(python))
    assert proc.returncode == 1
    assert "built for another architecture (e_machine 0x003e)" in proc.stdout


def test_setup_rejects_lfs_pointer_and_armhf_libraries(board_ok):
    root, rkllm, python, venv = board_ok
    put(rkllm, "version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 7340032\n")
    fake_elf(root / "usr/lib/librknnrt.so", machine=0x28)
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm))
    assert proc.returncode == 1
    assert f"[error] librkllmrt.so: {rkllm} is not an ELF library (a Git LFS pointer" in proc.stdout
    assert "librknnrt.so: " in proc.stdout and "built for another architecture (e_machine 0x0028)" in proc.stdout


def test_setup_missing_rkllm_lib_says_where_to_get_it(board_ok):
    root, _, python, venv = board_ok
    missing = venv.parent / "nowhere/librkllmrt.so"
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(missing))
    assert proc.returncode == 1
    assert f"[error] librkllmrt.so: not found (looked in {missing})" in proc.stdout
    assert "rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so" in proc.stdout
    assert "1.2.x and 1.3.x" in proc.stdout


def test_setup_dry_run_prints_the_venv_commands_and_creates_nothing(board_ok):
    root, rkllm, python, venv = board_ok
    before = tree_contents(root)
    proc = run_setup(root, "--dry-run", "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # The package with its rk and mic extras (server once it exists), then the VAD model without torch.
    assert printed_commands(proc.stdout) == venv_commands(python, venv)
    assert f"would run: {venv}/bin/python -m pip install -e '{REPO}[{expected_extras()}]'" in lines
    assert f"  venv:               {venv} (not created: --dry-run)" in lines
    assert f"  extras:             {expected_extras()}; VAD model: {vad_pin()} (not installed)" in lines
    assert not venv.exists()
    assert tree_contents(root) == before


def test_setup_printed_commands_survive_spaces_and_quotes(board_ok):
    root, rkllm, python, venv = board_ok
    odd = venv.parent / "it's a venv"
    proc = run_setup(root, "--dry-run", "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(odd))
    assert proc.returncode == 0, proc.stdout
    assert printed_commands(proc.stdout) == venv_commands(python, odd)


def test_setup_dry_run_prints_the_commands_even_after_errors(board_ok):
    root, rkllm, python, venv = board_ok
    put(root / "sys/kernel/debug/rknpu/version", "RKNPU driver: v0.8.2\n")
    proc = run_setup(root, "--dry-run", "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    assert proc.returncode == 1
    assert "Once the [error] lines above are fixed, this would run:" in proc.stdout
    assert printed_commands(proc.stdout) == venv_commands(python, venv)
    assert not venv.exists()


def test_setup_with_errors_runs_nothing_and_prints_what_it_would_run(board_ok):
    root, rkllm, python, venv = board_ok
    put(root / "sys/kernel/debug/rknpu/version", "RKNPU driver: v0.8.2\n")
    proc = run_setup(root, "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    assert proc.returncode == 1
    assert printed_commands(proc.stdout) == venv_commands(python, venv)
    assert printed_commands(proc.stdout, prefix="+ ") == []
    assert "  venv:               not created or incomplete (errors above)" in proc.stdout


def test_setup_a_failing_command_is_an_error_with_the_summary(board_ok):
    # The fake interpreter "creates" no venv, so the venv's pip cannot run: one [error] naming the
    # command, then the summary (not an abort in the middle).
    root, rkllm, python, venv = board_ok
    proc = run_setup(root, "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    assert proc.returncode == 1
    assert printed_commands(proc.stdout, prefix="+ ") == venv_commands(python, venv)[:2]
    assert f"[error] this command failed (exit status 127): {venv}/bin/python -m pip install --upgrade pip" in proc.stdout
    assert "  errors/warnings:    1/0" in proc.stdout
    assert proc.stdout.rstrip().endswith("Fix the [error] lines above and run again.")


@pytest.fixture
def fake_apt(tmp_path):
    """``sudo`` and ``apt-get`` doubles first on PATH; each call is appended to the returned log."""
    bin_dir, log = tmp_path / "fake-bin", tmp_path / "apt-calls.log"
    apt_doubles(bin_dir, log)
    return bin_dir, log


@pytest.mark.parametrize("euid, sudo", [(1000, ["sudo"]), (0, [])])
def test_setup_installs_missing_debian_packages(board_ok, fake_apt, euid, sudo):
    # Debian's python3 comes without venv/ensurepip; PortAudio (for mic_stream.py) is not installed.
    root, rkllm, _, venv = board_ok
    bin_dir, log = fake_apt
    (root / "usr/lib/aarch64-linux-gnu/libportaudio.so.2").unlink()
    python = fake_python(venv.parent / "bin/python3.12", "3.12.3", venv=False)
    args = ("--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    apt = [sudo + ["apt-get", "update"],
           sudo + ["apt-get", "install", "-y", "--no-install-recommends", "python3.12-venv", "libportaudio2"]]
    proc = run_setup(root, "--dry-run", *args, euid=euid, path=bin_dir)
    assert proc.returncode == 0, proc.stdout
    assert f"[info]  Python: {python} cannot create virtualenvs yet (no ensurepip); python3.12-venv will be installed" in proc.stdout
    assert "libportaudio2 will be installed (python/mic_stream.py needs it)" in proc.stdout
    assert printed_commands(proc.stdout) == apt + venv_commands(python, venv)
    assert "  Debian packages:    python3.12-venv libportaudio2" in proc.stdout
    assert not log.exists()
    # For real: apt-get runs (through sudo unless root); the fake python still lacks ensurepip afterwards.
    proc = run_setup(root, *args, euid=euid, path=bin_dir)
    assert proc.returncode == 1
    assert printed_commands(proc.stdout, prefix="+ ") == apt
    calls = [line.split() for line in log.read_text().splitlines()]
    assert calls == ([c for cmd in apt for c in (cmd, cmd[1:])] if sudo else apt)
    assert f"[error] Python: {python} still cannot create virtualenvs after installing python3.12-venv libportaudio2" in proc.stdout


def test_setup_no_apt_without_portaudio_warns_with_the_command(board_ok, fake_apt):
    root, rkllm, python, venv = board_ok
    bin_dir, log = fake_apt
    (root / "usr/lib/aarch64-linux-gnu/libportaudio.so.2").unlink()
    proc = run_setup(root, "--dry-run", "--no-apt", "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv),
                     path=bin_dir)
    assert proc.returncode == 0, proc.stdout
    assert not log.exists()
    assert ("[warn]  Debian package libportaudio2 not installed (--no-apt): python/mic_stream.py cannot run until you "
            "install them ('sudo apt-get install -y libportaudio2' or your distribution's equivalent)") in proc.stdout
    assert printed_commands(proc.stdout) == venv_commands(python, venv)


def test_setup_no_apt_without_venv_module_is_an_error(board_ok):
    root, rkllm, _, venv = board_ok
    python = fake_python(venv.parent / "bin/python3.11", "3.11.9", venv=False)
    proc = run_setup(root, "--no-apt", "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    assert proc.returncode == 1
    assert ("[error] Debian packages not installed (--no-apt): python3.11-venv; install them "
            "('sudo apt-get install -y python3.11-venv' or") in proc.stdout
    assert printed_commands(proc.stdout) == []


@pytest.mark.parametrize("where, extras", [("[project.optional-dependencies]", "rk,mic,server"),
                                           ("[tool.elsewhere]", "rk,mic")])
def test_setup_installs_the_server_extra_when_the_checkout_has_one(tmp_path, board_ok, where, extras):
    root, rkllm, python, venv = board_ok
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    shutil.copy(DEPLOY / "setup_board.sh", repo / "deploy")
    text = (REPO / "pyproject.toml").read_text()
    text = re.sub(r"(?ms)^server = \[.*?\]\n", "", text)  # the checkout's own server extra, if any
    if where in text:
        text = text.replace(where + "\n", where + '\nserver = ["anything>=1"]\n')
    else:
        text += f'\n{where}\nserver = ["anything>=1"]\n'
    put(repo / "pyproject.toml", text)
    shutil.copy(REPO / "requirements-nodeps.txt", repo)
    proc = run_setup(root, "--dry-run", "--python", str(python), "--rkllm-lib", str(rkllm), "--venv", str(venv),
                     script=repo / "deploy/setup_board.sh")
    assert proc.returncode == 0, proc.stdout
    assert expected_extras(repo) == extras
    assert printed_commands(proc.stdout) == venv_commands(python, venv, repo)


def test_setup_unknown_option_is_a_usage_error(board_ok):
    root, _, _, _ = board_ok
    proc = run_setup(root, "--frobnicate")
    assert proc.returncode == 2
    assert "unknown option --frobnicate" in proc.stderr


def test_setup_help_shows_the_header_only():
    proc = subprocess.run(["bash", str(DEPLOY / "setup_board.sh"), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.startswith("Prepare an RK3588 / RK3576 board (or any aarch64 Linux machine) for qwen3asr-rk.")
    assert "QWEN3ASR_SYSFS_ROOT" in proc.stdout
    assert "set -euo" not in proc.stdout


@pytest.mark.parametrize("line, ok", [("RKNPU driver: v1.0.0\n", True), ("RKNPU driver: v0.9.7\n", False)])
def test_setup_driver_versions_compare_per_field(board_ok, line, ok):
    root, rkllm, python, _ = board_ok
    put(root / "sys/kernel/debug/rknpu/version", line)
    proc = run_setup(root, "--check-only", "--python", str(python), "--rkllm-lib", str(rkllm))
    assert proc.returncode == (0 if ok else 1), proc.stdout
    assert ("[ok]    RKNPU driver: 1.0.0" in proc.stdout) == ok


@pytest.mark.parametrize("board", [True, False])
def test_setup_python_3_13_sets_up_without_the_npu_encoder(board_ok, tmp_path, board):
    # Debian 13's only Python: every runtime dependency has wheels, rknn-toolkit-lite2 does not.
    root, rkllm, _, venv = board_ok
    if not board:
        shutil.rmtree(root / "proc")
    new = fake_python(venv.parent / "bin/python3.13", "3.13.5")
    proc = run_setup(root, "--dry-run", "--python", str(new), "--rkllm-lib", str(rkllm), "--venv", str(venv))
    assert proc.returncode == 0, proc.stdout
    level = "[warn] " if board else "[info] "
    assert (f"{level} Python 3.13.5: rknn-toolkit-lite2 (the RKNN encoder runtime) has wheels only up to Python 3.12, "
            "so the venv gets the CPU backend and the RKLLM decoder binding but not the NPU encoder.") in proc.stdout
    assert "pass --python with a Python 3.10-3.12 interpreter" in proc.stdout
    assert "apt install python3.1" not in proc.stdout
    assert printed_commands(proc.stdout) == venv_commands(new, venv)  # the rk extra's marker skips the wheel
    assert f"  extras:             {expected_extras()} (rk installs nothing on Python 3.13.5)" in proc.stdout


def test_pyproject_limits_only_the_rk_extra_to_python_3_12():
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "3.13" in SpecifierSet(project["requires-python"])
    assert all(Requirement(r).marker is None for r in project["dependencies"])
    rk = [Requirement(r) for r in project["optional-dependencies"]["rk"]]
    assert [r.name for r in rk] == ["rknn-toolkit-lite2"]
    for version, wanted in (("3.10", True), ("3.12", True), ("3.13", False), ("3.14", False)):
        assert rk[0].marker.evaluate({"python_version": version}) is wanted, version


def test_corrupt_state_file_is_a_clear_error(tmp_path):
    root = make_board(tmp_path / "root", "rk3588")
    put(root / "run/qwen3asr-clocks.json", "{not json")
    proc = run_lock(root, "--mode", "unlock")
    assert proc.returncode == 1
    assert f"error: {root}/run/qwen3asr-clocks.json is not a valid state file" in proc.stderr
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- rehearsal stand-ins


def test_rehearsal_rk_standin_reaches_the_rknn_runtime(tmp_path):
    """deploy/rehearse_rk_standin.py's files pass every file check, so that the rehearsal's
    ``--backend rk`` steps reach rknnlite and librkllmrt.so (what they are there to show)."""
    from qwen3asr.backends.rk import backend as rk_backend
    from qwen3asr.bundle import Bundle
    from qwen3asr.backends.rk.rknn import RknnEncoderRunner

    out = tmp_path / "rk-standin"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    proc = subprocess.run([sys.executable, str(DEPLOY / "rehearse_rk_standin.py"), "--bundle", str(REPO / "models/default"),
                           "--out", str(out), "--soc", "rk3588"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    bundle = Bundle.load(str(out))

    class Recorder:  # RKNNLite's calls, recorded; the real one would now load librknnrt.so
        calls: list = []

        def load_rknn(self, path):
            Recorder.calls.append(("load_rknn", path))
            return 0

        def init_runtime(self, core_mask):
            Recorder.calls.append(("init_runtime", core_mask))
            return 0

        def release(self):
            pass

    RknnEncoderRunner(bundle, "merged", soc="rk3588", lite_class=Recorder)
    merged = [e["file"] for e in bundle.manifest["rk"]["rknn"]["rk3588"] if e["form"] == "merged"]
    assert len(merged) == len([v for v in bundle.manifest["encoder"]["variants"] if v["form"] == "merged"]) > 0
    assert Recorder.calls == [c for f in merged for c in (("load_rknn", str(out / f)), ("init_runtime", 7))]
    entry = rk_backend.rkllm_entry(bundle, "rk3588")
    assert rk_backend.decoder_path(bundle, entry, "rk3588") == str(out / "rk/decoder_rk3588_w8a8.rkllm")


def test_the_rehearsal_stops_the_server_it_started_inside_the_chroot(tmp_path):
    """rehearse_board.sh's stop_server: the server runs as the child of the background subshell
    (in the rehearsal: env -> chroot -> bash exec into it), which killing the subshell alone
    leaves running as an orphan (seen minutes after a rehearsal). The function, taken from the
    script as it is, must leave nothing on the port."""
    import re

    import processes
    from conftest import RUN_ID

    script = (DEPLOY / "rehearse_board.sh").read_text()
    func = re.search(r"^stop_server\(\) \{\n.*?^\}\n", script, re.S | re.M).group(0)
    port = 40000 + os.getpid() % 20000
    server = f"exec {sys.executable} -c 'import time; time.sleep(120)' qwen3asr.server --port {port}"
    driver = tmp_path / "driver.sh"
    # started as the rehearsal starts it: a function (in_chroot there) run in the background
    driver.write_text("in_chroot() { env PATH=\"$PATH\" bash -c \"$1\"; }\n" + func
                      + f"in_chroot \"{server}\" > /dev/null 2>&1 &\npid=$!\nsleep 1\n"
                      f"stop_server \"$pid\" {port}; echo rc=$?\n")
    out = subprocess.run(["bash", str(driver)], capture_output=True, text=True, timeout=90)
    assert "rc=0" in out.stdout and f"nothing left on port {port}" in out.stdout, out.stdout + out.stderr
    assert not [cmd for cmd in processes.marked(RUN_ID).values() if f"--port {port}" in cmd]


def test_set_up_refuses_a_disk_too_small_with_the_numbers(tmp_path):
    """scripts/need_disk.sh (make's venv steps, scripts/setup_rknn_env.sh): what a venv still needs
    is its full size less what it holds; more than the filesystem has free is refused up front."""
    script = REPO / "scripts" / "need_disk.sh"
    free_mb = shutil.disk_usage(tmp_path).free // 2**20
    venv = tmp_path / "v"
    ok = subprocess.run(["bash", str(script), str(venv), "10", "a small venv"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    big = subprocess.run(["bash", str(script), str(venv), str(free_mb + 10_000), "the test packages"],
                         capture_output=True, text=True, timeout=60)
    assert big.returncode == 1
    assert re.search(rf"not enough disk for the test packages: it needs about \d+ MB more in {re.escape(str(tmp_path))}, "
                     r"which has \d+ MB free", big.stderr), big.stderr
    # a venv that already holds part of its size needs only the rest (+ 200 MB): with 100 MB of it
    # there, a full size of free - 150 MB fits, which would not fit into an empty one
    venv.mkdir()
    (venv / "blob").write_bytes(os.urandom(100 * 2**20))
    free_mb = shutil.disk_usage(tmp_path).free // 2**20
    part = subprocess.run(["bash", str(script), str(venv), str(free_mb - 150), "a venv half installed"],
                          capture_output=True, text=True, timeout=60)
    assert part.returncode == 0, part.stderr
