#!/usr/bin/env python3
"""Convert the Qwen3-ASR decoder for the RKLLM runtime (RK3576 / RK3588), on an x86_64 PC.

Launcher of qwen3asr_tools.export_rkllm (python/qwen3asr_tools/export_rkllm.py; same as
`python -m qwen3asr_tools.export_rkllm`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("export_rkllm")
