#!/usr/bin/env python3
"""Train the bundled tiny Qwen3-ASR (official architecture) on synthetic speech, end to end.

Launcher of qwen3asr_tools.train_tiny (python/qwen3asr_tools/train_tiny.py; same as
`python -m qwen3asr_tools.train_tiny`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("train_tiny")
