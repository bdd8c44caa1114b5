# python/ (qwen3asr, qwen3asr_tools) and tests/ (bundles, fixtures) are on the import path through
# pyproject.toml's [tool.pytest.ini_options] pythonpath.
import os
import uuid

import pytest

import processes

# Every process a test starts inherits this (tests/processes.py): found and reported if left running.
RUN_ID = os.environ.setdefault(processes.MARKER, uuid.uuid4().hex)


@pytest.fixture(scope="module", autouse=True)
def _no_process_left_running(request):
    """Every test module stops the processes it starts (servers, CLIs, browsers, chroots):
    checked after its module-scoped fixtures are torn down (this fixture is set up first, so it
    is torn down last), orphans included."""
    yield
    left = processes.left_running(RUN_ID)
    if left:
        pytest.fail(f"{request.module.__name__} left {len(left)} process(es) running (killed now): "
                    + "; ".join(f"{pid}: {cmd[:200]}" for pid, cmd in sorted(left.items())), pytrace=False)


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


@pytest.fixture(scope="module")
def server_engine():
    """The bundled default model as tests/server_proc.ServerProcess serves it (ONNX Runtime, one
    thread): what a server's answers are compared with; closed after the module."""
    from qwen3asr import Qwen3ASREngine

    e = Qwen3ASREngine(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "default"),
                       backend="onnx", threads=1)
    yield e
    e.close()
