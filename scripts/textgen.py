#!/usr/bin/env python3
"""Seeded text content for the synthetic labelled-speech dataset (English and Mandarin).

Launcher of qwen3asr_tools.textgen (python/qwen3asr_tools/textgen.py; same as
`python -m qwen3asr_tools.textgen`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("textgen")
