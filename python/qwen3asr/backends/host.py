"""What a one-shot run asks of the host at load, and what it changes for it (``one_shot``).

ONNX Runtime's worker threads that spin between runs make a quiet machine's decode steps faster
(no wake-up per step) and a busy one's slower (they hold cores the working threads need):
docs/benchmarks.md, "Spinning bounded in time" and "The wait before the first call". A one-shot
run decides once, when its decoder's session is made: it spins if, at that moment, no task of
another process is runnable. Linux only (``/proc``); elsewhere the answer is unknown (None) and
the caller does not spin.
"""

from __future__ import annotations

import logging
import os
from typing import Optional, Tuple

logger = logging.getLogger(__name__)

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


SHORT_PRELOAD_SECONDS = 5.0  # a one-shot run of at most this much audio: a command


def one_shot(threads: Optional[int], spin_wait, preload_seconds: Optional[float]) -> Tuple[Optional[int], bool, bool]:
    """(the encoder's threads, whether its threads spin, whether the decoder's spin) for the ONNX
    sessions of BackendOptions ``threads`` / ``spin_wait`` / ``preload_seconds``.

    A one-shot run (``preload_seconds``) loads its decoder in a thread while its encoder loads and
    runs; the decoder's session (prepacking its weights, one core's work) is the critical path,
    then its decode (docs/benchmarks.md, "The wait before the first call"). So a short one (at most
    SHORT_PRELOAD_SECONDS, with ``threads`` = the CPUs, at least 2) gives its encoder one thread
    fewer, leaving that core to the load; and ``spin_wait="auto"`` spins the decoder's threads if
    the host is quiet when it loads. ``spin_wait=True`` spins every session; otherwise none spins."""
    encoder_threads = threads
    if preload_seconds is not None and preload_seconds <= SHORT_PRELOAD_SECONDS and threads and threads >= cpus() >= 2:
        encoder_threads = threads - 1
    decoder_spins = spin_wait is True or (spin_wait == "auto" and preload_seconds is not None and quiet())
    if preload_seconds is not None:
        logger.debug("one-shot load: encoder threads %s, decoder threads %s", encoder_threads,
                     "spinning" if decoder_spins else "sleeping")
    return encoder_threads, spin_wait is True, decoder_spins


__all__ = ["SHORT_PRELOAD_SECONDS", "cpus", "one_shot", "others_running", "quiet"]
