#!/usr/bin/env python3
"""Where a CPU process's bytes and seconds go, default against lean, in fresh processes.

Launcher of qwen3asr_tools.profile_memory (python/qwen3asr_tools/profile_memory.py; same as
`python -m qwen3asr_tools.profile_memory`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("profile_memory")
