#!/usr/bin/env python3
"""Teacher-forced comparison of our backend against the official PyTorch Qwen3-ASR.

Launcher of qwen3asr_tools.compare_logits (python/qwen3asr_tools/compare_logits.py; same as
`python -m qwen3asr_tools.compare_logits`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("compare_logits")
