#!/usr/bin/env python3
"""Build a random-weight Qwen3-ASR checkpoint in the official layout.

Launcher of qwen3asr_tools.make_random_checkpoint (python/qwen3asr_tools/make_random_checkpoint.py; same as
`python -m qwen3asr_tools.make_random_checkpoint`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("make_random_checkpoint")
