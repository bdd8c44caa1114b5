#!/usr/bin/env python3
"""Streaming versus offline on the long multi-utterance clip (audio/long_mixed.wav).

Launcher of qwen3asr_tools.eval_streaming (python/qwen3asr_tools/eval_streaming.py; same as
`python -m qwen3asr_tools.eval_streaming`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("eval_streaming")
