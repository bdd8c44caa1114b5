#!/usr/bin/env python3
"""Transcribe an audio file with Qwen3-ASR: the same program as the ``qwen3asr-transcribe``
console script, runnable from a checkout (python python/transcribe.py --audio audio/en_1.wav).
"""

import sys

try:
    from qwen3asr.cli.transcribe import main
except ImportError as exc:
    sys.exit(f"error: cannot import qwen3asr ({exc}); install it: pip install . (or make setup)")

if __name__ == "__main__":
    sys.exit(main())
