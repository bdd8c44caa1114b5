#!/usr/bin/env python3
"""Train the bundled demo forced aligner (official Qwen3-ForcedAligner architecture) on synthetic speech.

Launcher of qwen3asr_tools.train_aligner (python/qwen3asr_tools/train_aligner.py; same as
`python -m qwen3asr_tools.train_aligner`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("train_aligner")
