# python/ (qwen3asr, qwen3asr_tools) and tests/ (bundles, fixtures) are on the import path through
# pyproject.toml's [tool.pytest.ini_options] pythonpath.
import pytest


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
