#!/usr/bin/env python3
"""Make a seeded, reproducible synthetic labelled-speech dataset with espeak-ng and sox.

Launcher of qwen3asr_tools.make_dataset (python/qwen3asr_tools/make_dataset.py; same as
`python -m qwen3asr_tools.make_dataset`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("make_dataset")
