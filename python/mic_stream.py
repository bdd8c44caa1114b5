#!/usr/bin/env python3
"""Live captions from a microphone with Qwen3-ASR: the same program as the ``qwen3asr-mic``
console script, runnable from a checkout (python python/mic_stream.py --list-devices).
"""

import sys

try:
    from qwen3asr.cli.mic import main
except ImportError as exc:
    sys.exit(f"error: cannot import qwen3asr ({exc}); install it: pip install '.[mic]' (or make setup)")

if __name__ == "__main__":
    sys.exit(main())
