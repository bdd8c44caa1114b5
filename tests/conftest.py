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


@pytest.fixture(scope="module")
def default_engine():
    """The bundled default model (models/default: the trained tiny model, its own small tokenizer
    and a 10 s one-pass limit) on ONNX Runtime with 2 threads; closed after the module."""
    from qwen3asr import Qwen3ASREngine

    e = Qwen3ASREngine(backend="onnx", threads=2)
    yield e
    e.close()
