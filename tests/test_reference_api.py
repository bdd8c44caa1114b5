"""The API as users of the original (reference design) runtime write it: SileroVAD from a model
file, Qwen3ASREngine(model_dir, platform=, encoder_sizes=, enabled_cpus=, repeat_penalty=),
create_stream(vad=), and results read as mappings."""

from __future__ import annotations

import os

import pytest

from qwen3asr import Qwen3ASREngine
from qwen3asr import SileroVAD
from qwen3asr import prepare_audio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EN2 = os.path.join(ROOT, "audio", "en_2.wav")
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")


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
