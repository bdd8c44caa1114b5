"""Shell-script doubles of the programs setup_board.sh runs: a Python interpreter, ``sudo`` and
``apt-get``.

Contract checked: what deploy/setup_board.sh asks of them: the interpreter prints its version
(the script runs ``python -c 'print(sys.version_info)'``-style probes), ``python -c 'import venv,
ensurepip'`` fails when Debian's python3-venv is missing; and the apt-get commands it runs
(through sudo unless it runs as root) are logged one line per call instead of run.
"""

from __future__ import annotations

from pathlib import Path

from doubles.board import put


def fake_python(path: Path, version: str, venv: bool = True) -> Path:
    """An interpreter that prints ``version``; ``venv=False``: its ``import venv, ensurepip`` fails
    (Debian's python3 without python3-venv)."""
    no_venv = "" if venv else 'case "$2" in *ensurepip*) exit 1 ;; esac\n'
    put(path, f"#!/bin/sh\n{no_venv}echo {version}\n")
    path.chmod(0o755)
    return path


def apt_doubles(bin_dir: Path, log: Path) -> None:
    """``sudo`` (logs, then runs its arguments) and ``apt-get`` (logs only) in ``bin_dir``; each
    call is appended to ``log`` as one line ("sudo apt-get update", "apt-get update")."""
    put(bin_dir / "sudo", f'#!/bin/sh\necho "sudo $*" >> {log}\nexec "$@"\n')
    put(bin_dir / "apt-get", f'#!/bin/sh\necho "apt-get $*" >> {log}\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
