"""The engine as one orchestrator over one decoder seam, with one options object:
sampling honoured in every mode, the long-audio policy inside transcribe() (API == CLI),
close(), the reference design's API, the compact prompt, and no module importing the engine."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from qwen3asr import (Cancelled, EngineClosed, Qwen3ASREngine, SileroVAD, TranscribeOptions, prepare_audio)
from qwen3asr.prompt import build_prompt, compact_savings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "python", "qwen3asr")
EN2 = os.path.join(ROOT, "audio", "en_2.wav")
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")


@pytest.fixture(scope="module")
def engine():
    """The bundled default model (its own small tokenizer and a 10 s one-pass limit)."""
    e = Qwen3ASREngine(backend="onnx", threads=2)
    yield e
    e.close()


# ------------------------------------------------------------------ sampling in every mode

@pytest.mark.parametrize("mode", ["one pass", "chunks", "stream"])
def test_sampling_is_honoured_in_every_mode_and_reproducible_with_a_seed(engine, mode):
    def run(**kw):
        if mode == "one pass":
            return engine.transcribe(EN2, **kw).token_ids
        if mode == "chunks":
            return engine.transcribe(EN2, chunk_size=1.0, **kw).token_ids
        s = engine.create_stream(chunk_size=1.0, **kw)
        s.feed_audio(prepare_audio(EN2))
        return s.finish().token_ids

    greedy = run()
    hot = run(temperature=5.0, seed=1)
    assert hot != greedy  # before the options object, chunked requests decoded greedily whatever was asked
    assert run(temperature=5.0, seed=1) == hot
    assert run(temperature=5.0, seed=2) != hot
    assert run(temperature=0.0, seed=1) == greedy


def test_chunk_seeds_differ_and_do_not_depend_on_anything_else():
    o = TranscribeOptions(temperature=1.0, seed=7)
    seeds = [o.chunk_seed(k) for k in range(5)]
    assert len(set(seeds)) == 5 and seeds == [TranscribeOptions(seed=7).chunk_seed(k) for k in range(5)]
    assert TranscribeOptions().chunk_seed(3) is None


def test_one_options_object_is_validated_once_with_clear_errors(engine):
    with pytest.raises(ValueError, match=r"temperature must be a number >= 0.*top_p must be in \(0, 1\]"):
        TranscribeOptions(temperature=-1, top_p=0)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'temprature'; options are: language, "):
        engine.transcribe(EN2, temprature=0.5)
    with pytest.raises(ValueError, match="compact_prompt has no system turn"):
        engine.transcribe(EN2, compact_prompt=True, context="Anna")
    o = TranscribeOptions(language="zh", temperature=0.5, seed=3)
    assert o.language == "Chinese" and o.decoding().temperature == 0.5
    # keyword arguments override an options object
    r = engine.transcribe(EN2, o, language=None, temperature=0.0)
    assert r.token_ids == engine.transcribe(EN2).token_ids


# ------------------------------------------------------------------ the long-audio policy

def test_api_and_cli_give_the_same_text_for_the_long_clip(engine):
    mode, o = engine.plan(prepare_audio(LONG))
    assert mode == "VAD segments" and o.chunk_size == 30.0  # the bundle's one-pass limit is 10 s
    api = engine.transcribe(LONG, itn=True)  # the CLI applies ITN unless --no-itn
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, os.path.join(ROOT, "python", "transcribe.py"), "--audio", LONG,
                          "--backend", "onnx", "--threads", "2", "--format", "json"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    cli = json.loads(out.stdout)
    assert cli["text"] == api.text and cli["token_ids"] == list(api.token_ids)
    assert [s["start"] for s in cli["segments"]] == [s.start for s in api.segments]
    # one pass of the whole clip (what the API did before the policy moved in) is much worse
    one = engine.transcribe(LONG, max_new_tokens=512, one_pass=True)
    assert one.token_ids != api.token_ids


def test_without_the_vad_model_long_audio_goes_in_chunks(engine, monkeypatch):
    from qwen3asr import engine as engine_mod

    monkeypatch.setattr(engine_mod, "vad_available", lambda: False)
    mode, o = engine.plan(prepare_audio(LONG))
    assert (mode, o.chunk_size, o.rollback_tokens, o.vad_options) == ("chunks", 30.0, 5, None)
    r = engine.transcribe(LONG)
    assert r.stats.encoder_calls > 3 and len(r.segments) >= 3
    assert engine.plan(prepare_audio(LONG), TranscribeOptions(vad=False))[0] == "chunks"
    assert engine.plan(prepare_audio(EN2))[0] == "one pass"


# ------------------------------------------------------------------ lifetime

def test_close_is_harmless_twice_and_use_after_close_is_a_clear_error():
    with Qwen3ASREngine(backend="onnx", threads=1) as e:
        assert e.transcribe(EN2).text
        s = e.create_stream()
    assert e.closed
    e.close()
    for call in (lambda: e.transcribe(EN2), lambda: e.create_stream(), lambda: s.feed_audio(prepare_audio(EN2)),
                 lambda: e.start(EN2)):
        with pytest.raises(EngineClosed, match=r"was closed \(engine.close\(\)\); create a new one"):
            call()


# ------------------------------------------------------------------ the reference design's API

def test_reference_design_snippets_run_as_written(tmp_path, monkeypatch):
    import shutil

    from qwen3asr.vad import find_model

    shutil.copy(find_model(), tmp_path / "silero_vad.onnx")  # a model file where a user keeps it
    monkeypatch.chdir(tmp_path)
    model_dir = os.path.join(ROOT, "models", "default")
    # as users of the original runtime write it (off a board, platform= names the SoC the
    # bundle has no RK models for, so auto runs on the CPU)
    from qwen3asr import SileroVAD as _S  # noqa: F401  (the import itself is part of the API)
    vad = SileroVAD("silero_vad.onnx")
    engine = Qwen3ASREngine(model_dir, platform="rk3576", encoder_sizes=[2, 3, 4], enabled_cpus=2,
                            repeat_penalty=1.15)
    assert engine.backend == "onnx" and engine.options.repetition_penalty == 1.15
    assert sorted(v.n_chunks for v in engine.encoder.variants) == [2, 3, 4]
    stream = engine.create_stream(vad=vad)
    pcm = prepare_audio(LONG)[:16000 * 12]
    for i in range(0, pcm.shape[0], 1600):
        stream.feed_audio(pcm[i:i + 1600])
    final = stream.finish()
    assert final.text and stream._vad.model is vad  # the given model, not a new one
    result = engine.transcribe(EN2)
    assert result["text"] == result.text
    assert result["stats"]["rtf"] == result.stats.real_time_factor
    assert result["language"] == result.language and result["segments"][0]["text"] == result.text
    with pytest.raises(TypeError):
        result["stats"]["rtf"] = 0  # a read-only view
    engine.close()


# ------------------------------------------------------------------ compact prompt

def test_compact_prompt_drops_the_system_turn_and_the_header(engine):
    tok = engine.tokenizer
    official = build_prompt(tok, 13)
    compact = build_prompt(tok, 13, compact=True)
    text = tok.decode(compact.ids.tolist(), skip_special_tokens=False)
    assert text.startswith("<|im_start|>user\n<|audio_start|>") and text.endswith("<|im_start|>assistant\n<asr_text>")
    assert "system" not in text
    saved = compact_savings(tok)
    assert len(official) - len(compact) == saved["system"] - 1
    assert saved["total"] == saved["system"] + saved["header"] and saved["header"] >= 2
    r_off = engine.transcribe(EN2)
    r_cmp = engine.transcribe(EN2, compact_prompt=True)
    assert r_cmp.stats.prefill_tokens == r_off.stats.prefill_tokens - (saved["system"] - 1)
    assert r_cmp.language is None and "language" not in r_cmp.raw_text
    assert engine.transcribe(EN2, compact_prompt=True, language="en").language == "English"


# ------------------------------------------------------------------ no cycle

def test_no_library_module_imports_the_engine():
    allowed = {"__init__.py", "engine.py"}
    offenders = []
    for dirpath, _, files in os.walk(PKG):
        rel_dir = os.path.relpath(dirpath, PKG)
        if rel_dir.split(os.sep)[0] in ("cli", "server"):
            continue  # the programs and servers sit on top of the engine
        for f in files:
            if not f.endswith(".py") or (rel_dir == "." and f in allowed):
                continue
            tree = ast.parse(open(os.path.join(dirpath, f)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1] == "engine":
                    offenders.append(f"{rel_dir}/{f}:{node.lineno}")  # from .engine / qwen3asr.engine import
                if isinstance(node, ast.ImportFrom) and any(a.name in ("engine", "Qwen3ASREngine")
                                                            for a in node.names) and \
                        (node.level or (node.module or "").split(".")[0] == "qwen3asr"):
                    offenders.append(f"{rel_dir}/{f}:{node.lineno}")  # from . / qwen3asr import engine, Qwen3ASREngine
                if isinstance(node, ast.Import) and any(a.name.split(".")[-1] == "engine" and
                                                        a.name.startswith("qwen3asr") for a in node.names):
                    offenders.append(f"{rel_dir}/{f}:{node.lineno}")  # import qwen3asr.engine
    assert offenders == []


def test_a_cancel_stops_a_stream_chunk(engine):
    import threading

    from qwen3asr import Work

    flag = threading.Event()
    s = engine.create_stream(chunk_size=1.0, work=Work(cancel=flag))
    pcm = prepare_audio(EN2)
    s.feed_audio(pcm[:16000])
    flag.set()
    with pytest.raises(Cancelled):
        s.feed_audio(pcm[16000:])
    assert np.isfinite(engine.transcribe(EN2).stats.real_time_factor)
