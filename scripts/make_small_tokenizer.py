#!/usr/bin/env python3
"""Train a small Qwen2-style byte-level BPE for the bundled tiny Qwen3-ASR model.

Launcher of qwen3asr_tools.make_small_tokenizer (python/qwen3asr_tools/make_small_tokenizer.py; same as
`python -m qwen3asr_tools.make_small_tokenizer`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("make_small_tokenizer")
