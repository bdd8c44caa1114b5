#!/usr/bin/env python3
"""Is the verified final the one-pass final, token for token?

Launcher of qwen3asr_tools.verified_finals (python/qwen3asr_tools/verified_finals.py; same as
`python -m qwen3asr_tools.verified_finals`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("verified_finals")
