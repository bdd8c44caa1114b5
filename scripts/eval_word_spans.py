#!/usr/bin/env python3
"""Word spans fitted to the speech against the aligner's raw times, on synthetic speech.

Launcher of qwen3asr_tools.eval_word_spans (python/qwen3asr_tools/eval_word_spans.py; same as
`python -m qwen3asr_tools.eval_word_spans`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("eval_word_spans")
