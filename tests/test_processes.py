"""The check that every test module stops the processes it starts (conftest.py, processes.py)
finds a process a test left running, an orphan whose parent has gone included, and kills it."""

from __future__ import annotations

import subprocess
import sys
import time

import processes
from conftest import RUN_ID


def test_a_left_process_and_an_orphan_are_found_and_killed():
    direct = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # the parent starts a child and exits at once: the child is reparented (an orphan)
    code = ("import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(61)'], "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
    orphan_parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    orphan = int(orphan_parent.stdout)
    time.sleep(0.2)
    found = processes.marked(RUN_ID)
    assert direct.pid in found and "sleep(60)" in found[direct.pid]
    assert orphan in found and "sleep(61)" in found[orphan]
    left = processes.left_running(RUN_ID, grace=0.5)
    assert {direct.pid, orphan} <= set(left)
    direct.wait(10)  # killed
    time.sleep(0.2)
    assert orphan not in processes.marked(RUN_ID)
