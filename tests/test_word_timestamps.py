"""Word timestamps through the engine: transcribe(word_timestamps=True) in one pass and in
segments, live streams, engine.align, and the errors. The bundled demo ASR model gives real text;
the aligner is a random-weight official one (its times are checked against the aligner itself,
segment by segment; tests/test_aligner.py checks the aligner against the official one)."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

pytest.importorskip("torch", reason="the random aligner checkpoint is built with the official code (torch)")

import bundles  # noqa: E402
from qwen3asr import Qwen3ASREngine, prepare_audio  # noqa: E402
from qwen3asr.aligner import AlignmentError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EN = os.path.join(ROOT, "audio", "en_1.wav")
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")
SR = 16000


@pytest.fixture(scope="module")
def engine():
    _, aligner = bundles.aligner_bundle()
    with Qwen3ASREngine(os.path.join(ROOT, "models", "default"), backend="onnx", threads=2, aligner=aligner) as e:
        yield e


def _own(engine, pcm, seg, offset=0.0):
    """What the aligner gives the segment's audio and text on its own (times in seconds of
    ``pcm``, then shifted by ``offset``, the time of its first sample)."""
    from qwen3asr.results import Word

    a, b = int(round((seg.start - offset) * SR)), int(round((seg.end - offset) * SR))
    words = engine.aligner.align(pcm[a:b], seg.text, seg.language, offset=a / SR)
    return tuple(Word(w.word, round(w.start + offset, 3), round(w.end + offset, 3)) for w in words)


def test_one_pass_words_are_the_aligners_on_the_raw_text(engine):
    pcm = prepare_audio(EN)
    r = engine.transcribe(EN, word_timestamps=True, word_spans="raw")  # the official times (the default fits them
    assert r.text and len(r.segments) == 1 and r.words == r.segments[0].words  # to the speech: test_word_spans.py)
    assert r.words == engine.aligner.align(pcm, r.text, r.language)
    assert [w.word for w in r.words] == r.text.split()  # plain English words: the units are the words
    shifted = engine.transcribe(pcm, word_timestamps=True, start_second=0.5, word_spans="raw")
    assert shifted.words == engine.aligner.align(pcm[SR // 2:], shifted.text, shifted.language, offset=0.5)
    assert all(0.5 <= w.start <= w.end <= pcm.shape[0] / SR for w in shifted.words)
    d = r.to_dict()
    assert d["words"] == [{"word": w.word, "start": w.start, "end": w.end} for w in r.words]
    assert d["segments"][0]["words"] == d["words"]
    assert "words" not in engine.transcribe(EN).to_dict()  # only when asked for


def test_words_come_from_the_raw_text_before_itn(engine):
    clip = os.path.join(ROOT, "audio", "zh_2.wav")
    raw = engine.transcribe(clip, word_timestamps=True)
    itn = engine.transcribe(clip, word_timestamps=True, itn=True)
    assert itn.words == raw.words and itn.text != raw.text  # the clip has a spoken number


def test_segments_of_a_long_file_each_get_their_own_words(engine):
    pcm = prepare_audio(LONG)[:30 * SR]
    r = engine.transcribe(pcm, word_timestamps=True, start_second=0.0, word_spans="raw")
    assert len(r.segments) >= 4
    for seg in r.segments:
        assert seg.words == _own(engine, pcm, seg)
        assert all(seg.start <= w.start <= w.end <= seg.end for w in seg.words)
    later = engine.transcribe(LONG, word_timestamps=True, start_second=40.0, duration=20.0, word_spans="raw")
    assert later.segments and all(s.start >= 40.0 for s in later.segments)
    full = prepare_audio(LONG)
    for seg in later.segments:
        assert seg.words == _own(engine, full[40 * SR:60 * SR], seg, offset=40.0)


def test_a_live_stream_gives_every_finished_segment_its_words(engine):
    pcm = prepare_audio(LONG)[:25 * SR]
    results = []
    for seed in (0, 1):  # the words do not depend on how the audio is fed
        s = engine.create_stream(word_timestamps=True, word_spans="raw")
        rng = np.random.default_rng(seed)
        i = 0
        while i < pcm.shape[0]:
            n = int(rng.integers(1, 8000))
            r = s.feed_audio(pcm[i:i + n])
            assert all(seg.words or not seg.text.strip() for seg in r.segments)  # committed: aligned
            i += n
        results.append(s.finish())
    final = results[0]
    assert final.words == results[1].words and len(final.segments) >= 4
    for seg in final.segments:
        assert seg.words == _own(engine, pcm, seg)


def test_align_detects_the_language_when_not_given(engine):
    words = engine.align(EN, "open the back door")
    assert [w.word for w in words] == ["open", "the", "back", "door"]
    assert words == engine.align(EN, "open the back door", "English")
    assert engine.align(EN, "open the back door", "en", start_second=2.0)[0].start >= 2.0


def test_a_language_the_aligner_does_not_cover(engine, caplog):
    with pytest.raises(AlignmentError, match="covers .*not Swedish"):
        engine.transcribe(EN, language="Swedish", word_timestamps=True)
    with pytest.raises(AlignmentError, match="not Swedish"):
        engine.create_stream(language="Swedish", word_timestamps=True)
    with pytest.raises(AlignmentError, match="not Swedish"):
        engine.align(EN, "hej", "sv")


def test_without_an_aligner_asking_for_words_is_a_clear_error(bundle_dir, monkeypatch):
    monkeypatch.delenv("QWEN3ASR_ALIGNER", raising=False)
    with Qwen3ASREngine(bundle_dir, backend="onnx") as e:
        assert e.aligner_dir is None
        assert e.transcribe(EN, max_new_tokens=4).words == ()  # nothing asked, nothing loaded
        for call in (lambda: e.transcribe(EN, word_timestamps=True), lambda: e.create_stream(word_timestamps=True),
                     lambda: e.align(EN, "open", "English")):
            with pytest.raises(AlignmentError, match="need a forced aligner: pass Qwen3ASREngine\\(aligner=DIR\\)"):
                call()


def test_the_aligner_loads_on_first_use_and_the_environment_names_it(bundle_dir, monkeypatch, caplog):
    _, aligner = bundles.aligner_bundle()
    monkeypatch.setenv("QWEN3ASR_ALIGNER", aligner)
    with Qwen3ASREngine(bundle_dir, backend="onnx") as e:
        assert e.aligner_dir == aligner and e._aligner is None
        with caplog.at_level(logging.INFO, logger="qwen3asr.aligner.segments"):
            e.transcribe(EN, language="English", word_timestamps=True, max_new_tokens=8)
        assert e._aligner is not None and "loaded the aligner" in caplog.text


def test_a_decoder_dtype_the_aligner_lacks_lets_the_aligner_pick_its_own(caplog):
    """decoder_dtype names the ASR decoder: an aligner bundle without that dtype (here int8 only,
    the ASR model asked for fp32) scores with its own, and gives the words an engine with the
    default dtype gives."""
    _, int8_only = bundles.aligner_bundle(decoders=("int8",))
    demo = os.path.join(ROOT, "models", "default")
    with Qwen3ASREngine(demo, backend="onnx", threads=2, decoder_dtype="fp32", aligner=int8_only) as e:
        with caplog.at_level(logging.INFO, logger="qwen3asr.aligner.segments"):
            got = e.transcribe(EN, language="English", word_timestamps=True, word_spans="raw")
        assert e.aligner.scorer.dtype == "int8" and "picks its own" in caplog.text
    with Qwen3ASREngine(demo, backend="onnx", threads=2, aligner=int8_only) as e:  # the default dtype
        want = e.aligner.align(prepare_audio(EN), got.text, "English")
    assert got.words and got.words == tuple(want)


def test_word_requests_are_cut_to_what_the_aligner_takes(monkeypatch):
    """An aligner with few positions (an RKLLM aligner run with max_context=1024 takes 27 s of
    dense speech) sets how long a piece with words may be: one pass up to its piece_seconds, longer
    audio in chunks no longer than that, a live stream's chunks no longer either, and no final pass
    over a piece it could not align; no request fails in the aligner."""
    from qwen3asr.aligner.model import DENSE_TEXT_POSITIONS_PER_SECOND, MAX_ALIGN_SECONDS

    _, aligner = bundles.aligner_bundle()
    with Qwen3ASREngine(os.path.join(ROOT, "models", "default"), backend="onnx", threads=2, aligner=aligner) as e:
        scorer = e.aligner.scorer
        assert scorer.max_positions >= 4096 and e.aligner.piece_seconds == MAX_ALIGN_SECONDS
        per_s = 13 + DENSE_TEXT_POSITIONS_PER_SECOND
        monkeypatch.setattr(scorer, "max_positions", 2 + 4 * per_s + 5)
        assert e.aligner.piece_seconds == 4.0
        pcm = prepare_audio(LONG)[2 * SR:8 * SR]  # 6 s: within the demo model's 10 s one-pass limit
        mode, o = e.plan(pcm, e.options.__class__(word_timestamps=True, vad=False))
        assert mode == "chunks" and o.chunk_size == 4.0
        assert e.plan(pcm[:4 * SR], e.options.__class__(word_timestamps=True))[0] == "one pass"
        r = e.transcribe(pcm, word_timestamps=True, vad=False)
        assert r.segments and all(s.end - s.start <= 4.0 + 1e-6 for s in r.segments)
        assert any(s.words for s in r.segments)
        with pytest.raises(ValueError, match=r"chunk_size=5 s with word timestamps: .* at most 4 s"):
            e.create_stream(word_timestamps=True, chunk_size=5.0)
        s = e.create_stream(word_timestamps=True, chunk_size=2.0, final_pass=True)
        s.feed_audio(pcm)
        final = s.finish()  # a 6 s piece: no final pass (4 s at most), its chunks aligned instead
        assert final.segments and all(seg.words or not seg.text.strip() for seg in final.segments)
