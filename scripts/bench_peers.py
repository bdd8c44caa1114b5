#!/usr/bin/env python3
"""Our ONNX Runtime CPU path against the ggml ports of Qwen3-ASR (CrispASR, llama.cpp), fresh
processes, interleaved.

Launcher of qwen3asr_tools.bench_peers (python/qwen3asr_tools/bench_peers.py; same as
`python -m qwen3asr_tools.bench_peers`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_peers")
