#!/usr/bin/env python3
"""Does the Wyoming server's early final give today's final text?

Launcher of qwen3asr_tools.wyoming_early (python/qwen3asr_tools/wyoming_early.py; same as
`python -m qwen3asr_tools.wyoming_early`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("wyoming_early")
