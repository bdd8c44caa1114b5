"""Is a shared library file loadable on this machine? Read from its first bytes (ELF header).

Used before handing a path to the dynamic loader, whose own errors for a Git LFS pointer or a
library built for another CPU are misleading ("No such file or directory"): the RKLLM runtime
(librkllmrt.so) and the RKNN NPU runtime (librknnrt.so) are both checked with it.
"""

from __future__ import annotations

import platform
from typing import Optional

_ELF_MACHINES = {62: "x86_64", 183: "aarch64", 40: "32-bit ARM", 3: "x86 (32-bit)"}


def describe_library_file(path: str) -> Optional[str]:
    """Why ``path`` cannot be a shared library of this machine, from its first bytes (None if
    it looks loadable): a Git LFS pointer, not an ELF file, or a library for another CPU."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        return f"cannot be read ({exc})"
    if head.startswith(b"version https://git-lfs"):
        return "is a Git LFS pointer, not the library (run git lfs pull, or download the real file)"
    if not head.startswith(b"\x7fELF") or len(head) < 20:
        return "is not a shared library (no ELF header)"
    machine = int.from_bytes(head[18:20], "big" if head[5] == 2 else "little")
    built = _ELF_MACHINES.get(machine, f"ELF machine {machine}")
    here = {"arm64": "aarch64", "amd64": "x86_64"}.get(platform.machine().lower(), platform.machine().lower())
    if built in ("x86_64", "aarch64") and built != here:
        return (f"is built for {built}, this machine is {here}"
                + ("; Rockchip's runtime libraries run on the board only" if here != "aarch64" else
                   "; use the aarch64 build of the library"))
    return None


__all__ = ["describe_library_file"]
