"""Shared by the launchers in scripts/: run ``qwen3asr_tools.<name>.main()``, or say what to install.

A launcher is ``python scripts/NAME.py ...``; Python puts scripts/ first on the path, so
``from _launch import run`` finds this file.
"""

import importlib
import sys


def run(name: str) -> None:
    try:
        module = importlib.import_module(f"qwen3asr_tools.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != "qwen3asr_tools":
            raise
        sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
                 "(or set PYTHONPATH=python)")
    sys.exit(module.main())
