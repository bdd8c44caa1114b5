#!/usr/bin/env python3
"""Mean word-time shift of a forced-aligner bundle on a synthetic split, per language.

Launcher of qwen3asr_tools.evaluate_aligner (python/qwen3asr_tools/evaluate_aligner.py; same as
`python -m qwen3asr_tools.evaluate_aligner`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("evaluate_aligner")
