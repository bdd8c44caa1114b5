"""backends.host: the runnable tasks of other processes, from /proc (what spin_wait="auto" asks)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from qwen3asr.backends import host


def _fake_proc(root, running, states, comm="python3"):
    os.makedirs(root / "self" / "task")
    (root / "stat").write_text(f"cpu  1 2 3 4\nctxt 99\nprocs_running {running}\nprocs_blocked 0\n")
    for tid, state in enumerate(states, start=100):
        d = root / "self" / "task" / str(tid)
        d.mkdir()
        (d / "stat").write_text(f"{tid} ({comm}) {state} 1 2 3 4 5\n")


def test_others_are_the_running_tasks_less_this_process_threads(tmp_path):
    _fake_proc(tmp_path, 5, ["R", "S", "R", "D"])
    assert host.others_running(str(tmp_path)) == 3
    assert not host.quiet(str(tmp_path))


def test_a_process_alone_is_quiet(tmp_path):
    _fake_proc(tmp_path, 2, ["R", "R", "S"], comm="odd name) R (x")  # the state follows the last ')'
    assert host.others_running(str(tmp_path)) == 0
    assert host.quiet(str(tmp_path))


@pytest.mark.parametrize("stat", ["", "cpu 1 2\n", "procs_running many\n"])
def test_unreadable_proc_is_unknown_and_not_quiet(tmp_path, stat):
    (tmp_path / "stat").write_text(stat)
    assert host.others_running(str(tmp_path)) is None
    assert not host.quiet(str(tmp_path))
    assert host.others_running(str(tmp_path / "missing")) is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux /proc")
def test_a_busy_process_beside_is_seen():
    """A child that never sleeps is a runnable task of another process at every look."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # past its start-up
        seen = [host.others_running() for _ in range(5)]
    finally:
        hog.kill()
        hog.wait()
    assert all(n is not None and n >= 1 for n in seen), seen
