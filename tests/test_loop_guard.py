"""The loop guard and fallback decoding (qwen3asr.decoding, Qwen3ASREngine.decode) on decoders
that really loop: random-weight official models repeat one token forever under greedy decoding
(20 in a row within a few dozen tokens on every bundled clip), so the guard, the fallback tries
and the kept try are checked on real runs, on files, long files and streams."""

from __future__ import annotations

import os

import pytest

from qwen3asr import TranscribeOptions
from qwen3asr.decoding import (FALLBACK_STEPS, LOOP_MIN_TOKENS, RepetitionGuard, fallback_options, fallback_rank,
                               loop_guard)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIP = os.path.join(ROOT, "audio", "en_1.wav")  # 1.78 s
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")


def _same_run(tokens, k=20):
    return len(tokens) >= k and len(set(tokens[-k:])) == 1


def test_the_guard_waits_for_what_the_audio_can_hold():
    g = RepetitionGuard(min_tokens=30)
    loop = [5] * 25
    assert RepetitionGuard().triggered(loop) and not g.triggered(loop)  # 25 < 30: maybe real speech
    assert g.triggered([7] * 10 + [5] * 20)
    phrase = [1, 2, 3] * 6  # "open the door" said six times is not a loop over 10 s of audio
    assert RepetitionGuard().triggered(phrase) and not loop_guard(10.0).triggered(phrase)
    assert loop_guard(0.5).min_tokens == LOOP_MIN_TOKENS and loop_guard(10.0).min_tokens == 100
    with pytest.raises(ValueError, match="min_tokens must be an integer >= 0"):
        RepetitionGuard(min_tokens=-1)


def test_fallback_settings_never_weaken_the_request():
    from qwen3asr.decoding import DecodingOptions

    base = DecodingOptions(max_new_tokens=50, repetition_penalty=1.3, seed=None)
    tries = [fallback_options(base, i, 50) for i in range(len(FALLBACK_STEPS))]
    assert all(t.repetition_penalty >= 1.3 for t in tries)
    assert tries[-1].temperature > 0 and tries[-1].seed == 0  # reproducible sampling
    assert fallback_rank("eos", "a b c") < fallback_rank("length", "a") < fallback_rank("repetition", "a")


def test_a_looping_run_is_stopped_reported_and_logged(engine, caplog):
    r = engine.transcribe(CLIP, max_new_tokens=200, fallback=False)
    assert r.finish_reason == "repetition" and r.segments[0].finish_reason == "repetition"
    assert _same_run(r.token_ids) and len(r.token_ids) < 200  # stopped where the loop showed, not at the budget
    assert len(r.token_ids) >= loop_guard(r.stats.audio_seconds).min_tokens
    assert r.stats.loops == 1 and r.stats.fallback_tries == 0 and not r.truncated
    assert r.to_dict()["finish_reason"] == "repetition"
    assert "the decoder looped over 1.8 s of audio" in caplog.text


def test_fallback_decodes_again_and_keeps_the_best_try(engine):
    from qwen3asr import prepare_audio

    o = TranscribeOptions(max_new_tokens=200)
    r = engine.transcribe(CLIP, o)  # fallback is on for files
    assert r.stats.loops == 1 and 1 <= r.stats.fallback_tries <= len(FALLBACK_STEPS)
    # the same tries by hand: the first, then each fallback step until one ends at end-of-sequence
    req = engine.prepare(prepare_audio(CLIP), o)
    tries = [engine.generate(req.embeds, o.decoding(), prefix_len=req.prompt.audio_start,
                             guard=loop_guard(req.audio_seconds))]
    for step in range(r.stats.fallback_tries):
        tries.append(engine.generate(req.embeds, fallback_options(o.decoding(), step, 200),
                                     prefix_len=req.prompt.audio_start, guard=loop_guard(req.audio_seconds)))
    ranked = [(fallback_rank(ds.finish_reason, engine.tokenizer.decode(t)), i) for i, (t, ds) in enumerate(tries)]
    best = tries[min(ranked)[1]]
    assert r.token_ids == tuple(best[0]) and r.finish_reason == best[1].finish_reason
    assert tries[0][1].finish_reason == "repetition" and best is not tries[0]  # a fallback try did better
    # what every try cost is counted
    assert r.stats.prefill_tokens == sum(ds.prefill_tokens for _, ds in tries)


def test_long_files_and_streams_guard_every_chunk(engine):
    long = engine.transcribe(LONG, chunk_size=4.0, max_chunks=3, vad=False, max_new_tokens=120, language="English")
    assert long.segments and all(s.finish_reason in ("eos", "length", "repetition") for s in long.segments)
    s = engine.create_stream(chunk_size=2.0, max_new_tokens=120, language="English")
    from qwen3asr import prepare_audio

    pcm = prepare_audio(LONG)[:6 * 16000]
    s.feed_audio(pcm)
    r = s.finish()
    assert r.stats.loops >= 1 and r.stats.fallback_tries == 0  # streams: no fallback by default
    assert all(c.generated < 120 for c in r.chunks if c.finish_reason == "repetition")
    on = engine.create_stream(chunk_size=2.0, max_new_tokens=120, language="English", fallback=True)
    on.feed_audio(pcm)
    assert on.finish().stats.fallback_tries >= 1
