"""Which Rockchip board this is: the SoC from the device tree, its NPU cores, CPU speeds and RAM.

Read from files only (``/proc/device-tree/compatible``, sysfs); nothing here needs the NPU
runtimes, so the backend factory can ask before it loads anything.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ...checks import is_integer, show

ENV_SOC = "QWEN3ASR_SOC"  # "rk3576" / "rk3588": skip device-tree detection
SUPPORTED_SOCS = ("rk3576", "rk3588")
# NPU core masks (rknnlite's RKNNLite.NPU_CORE_* values)
CORE_MASKS = {"auto": 0, "0": 1, "1": 2, "2": 4, "0_1": 3, "0_1_2": 7}
DEFAULT_CORE_MASK = {"rk3588": 7, "rk3576": 3}  # all cores: NPU_CORE_0_1_2 / NPU_CORE_0_1
SOC_CORES = {"rk3588": 3, "rk3576": 2}
DEVICE_TREE_COMPATIBLE = "/proc/device-tree/compatible"


def detect_soc(compatible_path: str = DEVICE_TREE_COMPATIBLE) -> str:
    """``"rk3588"`` or ``"rk3576"`` from the device tree (RK3588S counts as RK3588: same NPU)."""
    try:
        with open(compatible_path, "rb") as f:
            compat = f.read().split(b"\0")
    except OSError:
        raise RuntimeError(f"cannot read {compatible_path}: not a Rockchip board? Name the SoC: --soc rk3588|rk3576 "
                           f"(CLIs), RKOptions(soc=...) (API) or QWEN3ASR_SOC=rk3588|rk3576") from None
    for entry in compat:
        name = entry.decode("ascii", errors="replace").strip()
        for soc in SUPPORTED_SOCS:
            if name.startswith(f"rockchip,{soc}"):
                return soc
    found = ", ".join(e.decode("ascii", errors="replace") for e in compat if e)
    raise RuntimeError(f"unsupported SoC (device tree says: {found or 'nothing'}); the RKNN encoder supports "
                       f"{', '.join(SUPPORTED_SOCS)}. Override with --soc, RKOptions(soc=...) or QWEN3ASR_SOC.")


def resolve_core_mask(soc: str, core_mask: Any = None) -> int:
    """An RKNNLite core mask: None -> all cores of ``soc``; an int; or a name of CORE_MASKS."""
    if core_mask is None:
        return DEFAULT_CORE_MASK[soc]
    if isinstance(core_mask, str):
        key = core_mask.strip().lower().removeprefix("npu_core_")
        if key not in CORE_MASKS:
            raise ValueError(f"unknown NPU core mask {show(core_mask)}; use one of {', '.join(CORE_MASKS)} or an int")
        mask = CORE_MASKS[key]
    elif is_integer(core_mask):
        mask = int(core_mask)
    else:
        raise TypeError(f"an NPU core mask is a name ({', '.join(CORE_MASKS)}) or an int, got {show(core_mask)}")
    if mask not in CORE_MASKS.values():
        raise ValueError(f"NPU core mask {mask} is not one of {sorted(CORE_MASKS.values())}")
    if mask >> SOC_CORES[soc]:
        raise ValueError(f"core mask {mask} names an NPU core {soc} does not have ({SOC_CORES[soc]} cores)")
    return mask


def cpu_capacities(root: str = "/sys/devices/system/cpu") -> list:
    """Relative speed of each CPU: cpu_capacity, else cpuinfo_max_freq, else all equal."""
    caps = []
    for n in range(os.cpu_count() or 1):
        for rel in ("cpu_capacity", "cpufreq/cpuinfo_max_freq"):
            try:
                with open(os.path.join(root, f"cpu{n}", rel)) as f:
                    caps.append(float(f.read().split()[0]))
                break
            except (OSError, ValueError, IndexError):
                continue
        else:
            caps.append(1.0)
    return caps


def board_ram_bytes(meminfo: str = "/proc/meminfo") -> Optional[int]:
    """The board's RAM as the kernel counts it (MemTotal: a "4 GB" board shows 3.7-3.9 GB), or
    None when it cannot be read."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


__all__ = ["CORE_MASKS", "DEFAULT_CORE_MASK", "ENV_SOC", "SOC_CORES", "SUPPORTED_SOCS", "board_ram_bytes",
           "cpu_capacities", "detect_soc", "resolve_core_mask"]
