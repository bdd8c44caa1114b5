#!/usr/bin/env python3
"""Which final transcript should the Wyoming server send: the stream's, or one pass over the utterance?

Launcher of qwen3asr_tools.wyoming_finals (python/qwen3asr_tools/wyoming_finals.py; same as
`python -m qwen3asr_tools.wyoming_finals`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("wyoming_finals")
