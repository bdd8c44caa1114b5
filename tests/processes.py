"""Which processes a test run started and left running.

conftest.py marks the test process's environment with ``QWEN3ASR_TEST_RUN=<id>``; every process a
test starts inherits it (subprocesses, servers, browsers, chroots), including processes whose
parent has gone (orphans, reparented to init), which a walk of the process tree would miss.
"""

from __future__ import annotations

import os
import signal
import time

MARKER = "QWEN3ASR_TEST_RUN"


def marked(run_id: str) -> dict[int, str]:
    """pid -> command line of every process (but this one) whose environment holds the marker."""
    want = f"{MARKER}={run_id}".encode()
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if want not in env:
                continue
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # a zombie: exited, its parent has not collected it yet
            with open(f"/proc/{name}/cmdline", "rb") as f:
                out[int(name)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):  # gone, or not ours to read
            continue
    return out


def left_running(run_id: str, grace: float = 5.0) -> dict[int, str]:
    """The marked processes still alive after ``grace`` seconds (processes shutting down get
    that long); they are then killed, so one leak does not pile onto the next."""
    end = time.monotonic() + grace
    left = marked(run_id)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = marked(run_id)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left
