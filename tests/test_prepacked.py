"""ONNX sessions kept with their prepacked weights (``prepacked_cache``, backends/prepacked.py).

A second load reads the saved graph and gives the same numbers bit for bit (the bundled model's
decoder logits and encoder output, and the tiny-a lean bundle's int4 decoder with its mapped
pages dropped); the entry is keyed by the graph's files, so a changed bundle makes a new one; an
entry that does not load, a cache that cannot be written and an ONNX Runtime too old to save are
warnings and the session is made from the bundle; the option is checked and reaches the engine
from the programs' flag."""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest

from qwen3asr import Qwen3ASREngine
from qwen3asr.audio import prepare_audio
from qwen3asr.backends import BackendOptions, prepacked
from qwen3asr.backends.onnx import make_session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIP = os.path.join(ROOT, "audio", "en_1.wav")
DEFAULT = os.path.join(ROOT, "models", "default")


def _numbers(engine) -> tuple:
    """The encoder's output for CLIP and the decoder's logits after its prompt and a few ids."""
    pcm = prepare_audio(CLIP)
    emb = engine.encode(engine.features(pcm))
    x = engine.embed_prompt(engine.prompt(emb.shape[0]), emb)
    return emb, engine.decoder.text_logits(x)([5, 17, 230])


def _entries(cache: str) -> list:
    return sorted(d for d in os.listdir(cache) if os.path.isfile(os.path.join(cache, d, prepacked.COMPLETE)))


def _saved(caplog) -> int:
    return sum("saved in" in r.getMessage() for r in caplog.records if r.name == "qwen3asr.backends.prepacked")


def test_a_second_load_reads_the_saved_weights_and_gives_the_same_numbers(tmp_path, caplog):
    cache = str(tmp_path / "cache")
    with Qwen3ASREngine(DEFAULT, backend="onnx", threads=1) as plain:
        want = _numbers(plain)
        text = plain.transcribe(CLIP).text
    caplog.set_level(logging.INFO, logger="qwen3asr.backends.prepacked")
    for n in (1, 2):
        caplog.clear()
        with Qwen3ASREngine(DEFAULT, backend="onnx", threads=1, prepacked_cache=cache) as e:
            got = _numbers(e)
            assert e.transcribe(CLIP).text == text == "open the back door"
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        # the first load saves the decoder's and the encoder graph's entries, the second only reads them
        assert _saved(caplog) == (2 if n == 1 else 0)
    entries = _entries(cache)
    assert [e.split("-")[0] for e in entries] == ["decoder_int8", "merged_2s"], entries
    data = os.path.join(cache, entries[0], "decoder_int8.onnx.data")
    plain_data = os.path.join(DEFAULT, "decoder", "decoder_int8.onnx.data")
    if os.path.exists(plain_data):  # the saved file holds the packed weights beside the originals
        assert os.path.getsize(data) > os.path.getsize(plain_data)
    assert not [d for d in os.listdir(cache) if d.startswith(".new-")]


def test_a_changed_bundle_gets_a_new_entry(tmp_path, caplog):
    bundle, cache = str(tmp_path / "bundle"), str(tmp_path / "cache")
    shutil.copytree(DEFAULT, bundle)
    graph = os.path.join(bundle, "decoder", "decoder_int8.onnx")
    make_session(graph, 1, prepacked=cache)
    first = _entries(cache)
    make_session(graph, 1, prepacked=cache)
    assert _entries(cache) == first
    st = os.stat(graph)
    os.utime(graph, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the same bytes, a newer file
    make_session(graph, 1, prepacked=cache)
    assert len(_entries(cache)) == 2 and set(first) < set(_entries(cache))


def test_an_entry_that_does_not_load_is_made_again(tmp_path, caplog):
    cache = str(tmp_path / "cache")
    graph = os.path.join(DEFAULT, "decoder", "decoder_int8.onnx")
    make_session(graph, 1, prepacked=cache)
    entry = os.path.join(cache, _entries(cache)[0])
    data = os.path.join(entry, "decoder_int8.onnx.data")
    os.truncate(data, os.path.getsize(data) // 2)  # a cut write: ONNX Runtime finds it out of bounds
    caplog.set_level(logging.INFO, logger="qwen3asr.backends.prepacked")
    with Qwen3ASREngine(DEFAULT, backend="onnx", threads=1, prepacked_cache=cache) as e:
        assert e.transcribe(CLIP).text == "open the back door"
    assert any("does not load" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert os.path.getsize(data) > 0 and _saved(caplog) >= 1
    with Qwen3ASREngine(DEFAULT, backend="onnx", threads=1, prepacked_cache=cache) as e:
        assert e.transcribe(CLIP).text == "open the back door"


def test_a_cache_that_cannot_be_written_is_a_warning(tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    caplog.set_level(logging.WARNING, logger="qwen3asr.backends.prepacked")
    with Qwen3ASREngine(DEFAULT, backend="onnx", threads=1, prepacked_cache=str(blocker / "cache")) as e:
        assert e.transcribe(CLIP).text == "open the back door"
    assert any("cannot write the prepacked cache" in r.getMessage() for r in caplog.records)


def test_an_onnxruntime_that_cannot_save_is_a_warning(tmp_path, caplog, monkeypatch):
    import onnxruntime

    monkeypatch.setattr(onnxruntime, "__version__", "1.19.2")
    caplog.set_level(logging.WARNING, logger="qwen3asr.backends.prepacked")
    make_session(os.path.join(DEFAULT, "decoder", "decoder_int8.onnx"), 1, prepacked=str(tmp_path / "c"))
    assert any("cannot save prepacked weights" in r.getMessage() for r in caplog.records)
    assert not os.path.exists(tmp_path / "c")


def test_the_key_follows_the_cpu_and_the_runtime(monkeypatch):
    import onnxruntime

    graph = os.path.join(DEFAULT, "decoder", "decoder_int8.onnx")
    key = prepacked.cache_key(onnxruntime, graph)
    assert key.startswith("decoder_int8-") and key == prepacked.cache_key(onnxruntime, graph)
    monkeypatch.setattr(prepacked, "cpu_signature", lambda: "vendor_id: other\nflags: sse2")
    assert prepacked.cache_key(onnxruntime, graph) != key
    monkeypatch.undo()
    monkeypatch.setattr(onnxruntime, "__version__", "9.9.9")
    assert prepacked.cache_key(onnxruntime, graph) != key
    assert prepacked.cpu_signature()  # this machine's is read


def test_the_option_is_checked():
    with pytest.raises(ValueError, match="prepacked_cache"):
        BackendOptions(prepacked_cache=3)
    assert BackendOptions(prepacked_cache=__import__("pathlib").Path("/x")).prepacked_cache == "/x"


def test_the_programs_flag_reaches_the_engine(tmp_path, monkeypatch):
    from qwen3asr.cli import common
    from qwen3asr.cli.transcribe import build_parser

    parse = build_parser().parse_args
    assert common.backend_options_from_args(parse(["--audio", CLIP])).prepacked_cache is None
    monkeypatch.setenv("QWEN3ASR_CACHE", str(tmp_path / "models-cache"))
    bare = common.backend_options_from_args(parse(["--audio", CLIP, "--prepacked-cache"]))
    assert bare.prepacked_cache == str(tmp_path / "models-cache" / "prepacked")
    args = parse(["--audio", CLIP, "--prepacked-cache", str(tmp_path / "c"), "--backend", "onnx"])
    with common.engine_from_args(args) as e:
        assert e.transcribe(CLIP).text == "open the back door"
    assert _entries(str(tmp_path / "c"))
    monkeypatch.setenv("QWEN3ASR_PREPACKED_CACHE", str(tmp_path / "env"))
    assert common.backend_options_from_args(build_parser().parse_args(["--audio", CLIP])).prepacked_cache == \
        str(tmp_path / "env")


@pytest.mark.slow
def test_the_lean_int4_decoder_with_its_pages_dropped(tmp_path):
    """The lean profile's int4 decoder (mapped weights, pages dropped after the load) from the cache:
    the same logits as without it."""
    pytest.importorskip("torch", reason="random checkpoints are built with the official code (torch)")
    import bundles

    _, lean = bundles.bundle("tiny-a", "bfloat16", memory="lean")
    with Qwen3ASREngine(lean, backend="onnx", threads=1, memory="lean") as plain:
        want = _numbers(plain)
    for _ in range(2):
        with Qwen3ASREngine(lean, backend="onnx", threads=1, memory="lean", prepacked_cache=str(tmp_path)) as e:
            assert e.decoder_dtype == "int4"
            got = _numbers(e)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert any(d.startswith("decoder_int4-") for d in _entries(str(tmp_path)))


def test_the_aligner_loads_from_the_cache_too(tmp_path):
    """Word times of the bundled demo aligner (loaded with the engine's settings) from the cache:
    the same as without it, and its graphs have entries of their own."""
    cache = str(tmp_path)
    text = "open the back door"
    with Qwen3ASREngine(DEFAULT, backend="onnx", threads=1) as plain:
        want = plain.align(CLIP, text, language="English")
    before = set()
    for _ in range(2):
        with Qwen3ASREngine(DEFAULT, backend="onnx", threads=1, prepacked_cache=cache) as e:
            before = before or set(_entries(cache))
            assert e.align(CLIP, text, language="English") == want
    aligner_dir = os.path.realpath(os.path.join(ROOT, "models", "default-aligner"))
    made = set(_entries(cache)) - before
    assert made and all(open(os.path.join(cache, d, prepacked.COMPLETE)).read().startswith(aligner_dir)
                        for d in made)


def test_a_load_that_another_program_saved_first_keeps_theirs(tmp_path):
    """Two programs starting at once with an empty cache: each saves into a temporary directory of
    its own; the one that finishes second finds the entry made and drops its copy (no half-written
    directory is left, the entry loads)."""
    import onnxruntime

    cache = str(tmp_path)
    graph = os.path.join(DEFAULT, "decoder", "decoder_int8.onnx")

    def create(path, entries, optimized=None):
        if optimized:  # while this one saves, the other program finishes first
            make_session(graph, 1, prepacked=cache)
            first[:] = _entries(cache)
        so = onnxruntime.SessionOptions()
        for k, v in entries.items():
            so.add_session_config_entry(k, v)
        if optimized:
            so.optimized_model_filepath = optimized
        return onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    first: list = []
    session, mapped = prepacked.cached_session(onnxruntime, graph, cache, create)
    assert session.get_inputs() and len(first) == 1
    assert sorted(os.listdir(cache)) == first == _entries(cache)  # theirs kept, ours dropped
    assert mapped == os.path.dirname(graph)  # made from the bundle: its files are the ones mapped
    assert prepacked.cached_session(onnxruntime, graph, cache, create)[1] == os.path.join(cache, first[0])
