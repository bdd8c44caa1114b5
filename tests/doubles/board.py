"""A fake board root (``/``) in a directory: the sysfs, procfs and debugfs nodes the board
scripts (deploy/lock_clocks.py, deploy/setup_board.sh) read and write, and stand-in library files.

Contract checked: the kernel interfaces of RK3588 / RK3576 boards with the Rockchip BSP kernel,
copied from real boards: cpufreq policies (frequencies, governors, scaling_setspeed),
devfreq nodes for the NPU and DDR (whose ``userspace`` directory the kernel adds when that
governor starts), cpuidle state1, the NUL-separated device-tree compatible list and the rknpu
debugfs files. Nothing here needs a board, root, a network or a virtualenv.
"""

from __future__ import annotations

from pathlib import Path

A55 = "408000 600000 816000 1008000 1200000 1416000 1608000 1800000"
A76 = A55 + " 2016000 2208000 2256000 2304000 2352000 2400000"
A53_3576 = A55 + " 2016000"
A72_3576 = A55 + " 2016000 2208000"
CPU_GOVERNORS = "conservative ondemand userspace powersave performance schedutil"
NPU_GOVERNORS = "rknpu_ondemand dmc_ondemand userspace powersave performance simple_ondemand"
DMC_GOVERNORS = "dmc_ondemand userspace powersave performance simple_ondemand"

BOARDS = {
    "rk3588": {
        "compatible": b"radxa,rock-5b\0rockchip,rk3588\0",
        "policies": {"policy0": (A55, range(0, 4)), "policy4": (A76, range(4, 6)), "policy6": (A76, range(6, 8))},
        "npu": ("fdab0000.npu", "300000000 400000000 500000000 600000000 700000000 800000000 900000000 1000000000"),
        "dmc": "528000000 1068000000 1560000000 2112000000",
        "load": "NPU load:  Core0:  0%, Core1: 12%, Core2:  0%,\n",
    },
    "rk3576": {
        "compatible": b"armsom,sige5\0rockchip,rk3576\0",
        "policies": {"policy0": (A53_3576, range(0, 4)), "policy4": (A72_3576, range(4, 8))},
        "npu": ("27700000.npu", "300000000 400000000 500000000 600000000 700000000 800000000 900000000 950000000"),
        "dmc": "534000000 1068000000 1560000000 2112000000",
        "load": "NPU load:  Core0:  3%, Core1:  0%,\n",
    },
}


def put(path: Path, text: str | bytes) -> None:
    """Write ``text`` to ``path``, creating its directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def make_board(root: Path, soc: str, driver: str | None = "RKNPU driver: v0.9.8\n") -> Path:
    """A fake / with the sysfs, procfs and debugfs nodes the scripts read."""
    board = BOARDS[soc]
    put(root / "proc/device-tree/compatible", board["compatible"])
    for policy, (freqs, cpus) in board["policies"].items():
        node = root / "sys/devices/system/cpu/cpufreq" / policy
        top = freqs.split()[-1]
        put(node / "scaling_available_frequencies", freqs + " \n")
        put(node / "scaling_available_governors", CPU_GOVERNORS + " \n")
        put(node / "scaling_governor", "schedutil\n")
        put(node / "scaling_setspeed", "<unsupported>\n")
        put(node / "scaling_cur_freq", "1008000\n")
        put(node / "scaling_min_freq", "408000\n")
        put(node / "scaling_max_freq", top + "\n")
        put(node / "affected_cpus", " ".join(str(c) for c in cpus) + "\n")
        for c in cpus:
            put(root / f"sys/devices/system/cpu/cpu{c}/cpuidle/state0/disable", "0\n")
            put(root / f"sys/devices/system/cpu/cpu{c}/cpuidle/state1/disable", "0\n")
    npu_name, npu_freqs = board["npu"]
    for name, freqs, governors, governor in (
        (npu_name, npu_freqs, NPU_GOVERNORS, "rknpu_ondemand"),
        ("dmc", board["dmc"], DMC_GOVERNORS, "dmc_ondemand"),
    ):
        node = root / "sys/class/devfreq" / name
        put(node / "available_frequencies", freqs + "\n")
        put(node / "available_governors", governors + "\n")
        put(node / "governor", governor + "\n")
        put(node / "cur_freq", freqs.split()[0] + "\n")
        put(node / "min_freq", freqs.split()[0] + "\n")
        put(node / "max_freq", freqs.split()[-1] + "\n")
        (node / "userspace").mkdir()  # the kernel adds it when userspace starts
    if driver is not None:
        put(root / "sys/kernel/debug/rknpu/version", driver)
    put(root / "sys/kernel/debug/rknpu/load", board["load"])
    return root


def fake_elf(path: Path, machine: int = 0xB7, extra: bytes = b"") -> Path:
    """A 64-bit little-endian ELF header with the given e_machine (0xB7 aarch64, 0x28 arm): what
    setup_board.sh reads of a runtime library (librknnrt.so, librkllmrt.so, PortAudio) to tell its
    CPU; ``extra`` after it (e.g. the version string librknnrt.so embeds)."""
    header = b"\x7fELF\x02\x01\x01" + bytes(9) + b"\x03\x00" + machine.to_bytes(2, "little") + bytes(44)
    put(path, header + extra)
    return path
