"""What the host offers a one-shot run at load: its CPUs, and whether anything else is running
(what ``spin_wait="auto"`` asks).

ONNX Runtime's worker threads that spin between runs make a quiet machine's decode steps faster
(no wake-up per step) and a busy one's slower (they hold cores the working threads need):
docs/benchmarks.md, "Spinning bounded in time" and "The wait before the first call". A one-shot
run decides once, when its decoder's session is made: it spins if, at that moment, no task of
another process is runnable. Linux only (``/proc``); elsewhere the answer is unknown (None) and
the caller does not spin.
"""

from __future__ import annotations

import os
from typing import Optional

PROC = "/proc"


def _state(stat_line: str) -> str:
    """The state letter of a ``/proc/<pid>/stat`` line (after the command name, which may hold
    spaces and parentheses)."""
    rest = stat_line[stat_line.rfind(")") + 1:].split()
    return rest[0] if rest else ""


def others_running(proc: str = PROC) -> Optional[int]:
    """Runnable tasks on the host that are not threads of this process: ``procs_running`` of
    ``/proc/stat`` (every runnable thread, the caller's included) less this process's threads in
    state R. None where these files cannot be read."""
    try:
        with open(os.path.join(proc, "stat"), encoding="ascii", errors="replace") as f:
            running = next((int(line.split()[1]) for line in f if line.startswith("procs_running ")), None)
        if running is None:
            return None
        tasks = os.path.join(proc, "self", "task")
        own = 0
        for tid in os.listdir(tasks):
            try:
                with open(os.path.join(tasks, tid, "stat"), encoding="utf-8", errors="replace") as f:
                    own += _state(f.read()) == "R"
            except OSError:  # the thread ended meanwhile
                continue
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - own)


def cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it, else the count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def quiet(proc: str = PROC) -> bool:
    """No other process's task is runnable now (False when that cannot be told)."""
    return others_running(proc) == 0


__all__ = ["cpus", "others_running", "quiet"]
