"""Resident pages of memory-mapped weight files (the lean profile): the one libc call of the CPU
path (``madvise``), kept apart so that ctypes stays out of every other module but the board's
bindings (backends/rk/)."""

from __future__ import annotations

import os

MADV_DONTNEED = 4  # linux/mman.h


def drop_mapped_pages(directory: str) -> int:
    """Drop the resident pages of every file under ``directory`` that this process maps (Linux;
    elsewhere nothing): ONNX Runtime maps page-aligned external weights and, once a session has
    prepacked them, reads only a few of them again (the pages come back from the file when
    read: they are clean, never written). Used after each session of the lean profile is made:
    the 0.6B decoder's mapped scales kept 36 MB resident beside their prepacked copy. Returns
    the bytes advised."""
    import ctypes
    import ctypes.util

    root = os.path.realpath(directory) + os.sep
    try:
        with open("/proc/self/maps") as f:
            spans = [line.split() for line in f]
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return 0
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dropped = 0
    for parts in spans:
        if len(parts) >= 6 and parts[5].startswith(root) and not parts[5].endswith(".so"):
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
                dropped += end - start
    return dropped


