#!/usr/bin/env python3
"""Our forced aligner against the official Qwen3-ForcedAligner on the same input.

Launcher of qwen3asr_tools.compare_aligner (python/qwen3asr_tools/compare_aligner.py; same as
`python -m qwen3asr_tools.compare_aligner`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("compare_aligner")
