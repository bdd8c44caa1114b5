"""``python -m qwen3asr.server``: the same as ``qwen3asr-serve``."""

import sys

from .cli import main

sys.exit(main())
