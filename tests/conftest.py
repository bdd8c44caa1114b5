import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("python", "scripts", "tests"):
    p = os.path.join(ROOT, sub)
    if p not in sys.path:
        sys.path.insert(0, p)


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def bundle_dir():
    """A random-weight bundle (tiny-a, bf16 checkpoint) exported by the real exporter; modules that
    need another preset define their own ``bundle_dir``."""
    pytest.importorskip("torch", reason="random checkpoints are built with the official code (torch)")
    import bundles

    return bundles.bundle("tiny-a", "bfloat16")[1]


@pytest.fixture(scope="module")
def engine(bundle_dir):
    """The ONNX engine (fp32 decoder) on ``bundle_dir``."""
    from qwen3asr import Qwen3ASREngine

    return Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="fp32")
