"""Make a seeded, reproducible synthetic labelled-speech dataset with espeak-ng and sox.

Launcher of qwen3asr_tools.make_dataset (python/qwen3asr_tools/make_dataset.py; same as
`python -m qwen3asr_tools.make_dataset`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.make_dataset import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
