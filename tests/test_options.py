"""One options object (TranscribeOptions) for every mode, on the bundled default model: sampling
honoured in one pass, chunks and streams and reproducible with a seed, per-chunk seeds, and
validation once with errors that list what is accepted."""

from __future__ import annotations

import os

import pytest

from qwen3asr import TranscribeOptions
from qwen3asr import prepare_audio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EN2 = os.path.join(ROOT, "audio", "en_2.wav")


@pytest.fixture(scope="module")
def engine(default_engine):
    """The bundled default model (conftest's ``engine`` is a random-weight bundle)."""
    return default_engine


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


# ------------------------------------------------------------------ validation

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
