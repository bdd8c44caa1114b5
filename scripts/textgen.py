"""Seeded text content for the synthetic labelled-speech dataset (English and Mandarin).

Launcher of qwen3asr_tools.textgen (python/qwen3asr_tools/textgen.py; same as
`python -m qwen3asr_tools.textgen`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.textgen import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
