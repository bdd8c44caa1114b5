"""StreamSession mechanics: chunking, encode-once, mel equality, window/prefix/rollback bookkeeping,
language header, commit rules, VAD gating, accounting and every error path.

The random-weight bundle runs the real encoder and decoder graphs; a scripted decoder
(doubles.decoder: engine.generate replaced) checks the text bookkeeping with known tokens."""

from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile as sf

from qwen3asr import mel as melmod
from qwen3asr.streaming import StreamOptions, StreamSession
from qwen3asr.text import join_text

from doubles.decoder import ScriptedDecoder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")
SR = 16000


@pytest.fixture(scope="module")
def pcm():
    x, sr = sf.read(LONG, dtype="float32")
    assert sr == SR
    return x


def _feed_random(session, x, seed):
    rng = np.random.default_rng(seed)
    i = 0
    while i < len(x):
        n = int(rng.choice([1, 160, 333, 1600, 7919, 40000]))
        session.feed_audio(x[i:i + n])
        i += n
    return session.finish()


# ----------------------------------------------------------------------------- real graphs
def test_random_pieces_equal_fixed_pieces(engine, pcm):
    x = pcm[:SR * 9]
    a = engine.create_stream(chunk_size=2.0, max_new_tokens=4)
    for i in range(0, len(x), SR):
        a.feed_audio(x[i:i + SR])
    ra = a.finish()
    rb = _feed_random(engine.create_stream(chunk_size=2.0, max_new_tokens=4), x, seed=1)
    assert ra.token_ids == rb.token_ids and len(ra.token_ids) > 0
    assert any(c.end - c.start < 2.0 for c in ra.chunks[:-1])  # a chunk cut short at a pause
    assert ra.text == rb.text and ra.segments == rb.segments
    assert [(c.start, c.end, c.prefill_tokens) for c in ra.chunks] == [(c.start, c.end, c.prefill_tokens)
                                                                       for c in rb.chunks]


def test_each_sample_encoded_once_and_accounting(engine, pcm):
    x = pcm[:int(SR * 7.3)]
    s = engine.create_stream(chunk_size=2.0, max_new_tokens=3, language="English", rollback_tokens=1,
                             pause_db=None)  # a fixed grid (pauses: the tests further down)
    r = _feed_random(s, x, seed=2)
    spans = [(c.start, c.end) for c in r.chunks]
    assert spans == [(0.0, 2.0), (2.0, 4.0), (4.0, 6.0), (6.0, 7.3)]
    st = r.stats
    assert st.encoder_calls == 4 and st.chunks == 4
    assert st.encoded_seconds == pytest.approx(7.3) and st.audio_seconds == pytest.approx(7.3)
    assert st.encoder_seconds == pytest.approx(8.0)  # 3 x 2 s graphs + the 2 s graph for the 1.3 s tail
    # prefill = template (15) + forced header (4) + window audio + text prefix
    template = len(engine.prompt(1, "", "English")) - 1
    audio = [26, 52, 52, 26 + 17]  # 13 tokens/s; the 1.3 s tail gives 13 + 4
    assert [c.prefill_tokens for c in r.chunks] == [template + a + c.prefix_tokens for a, c in zip(audio, r.chunks)]
    # chunk 1's 3 tokens - 1 rolled back; later: 3 - 1 rolled back - 1 carried from a chunk gone
    assert [c.prefix_tokens for c in r.chunks][1:] == [2, 1, 1]
    assert [c.window_chunks for c in r.chunks] == [1, 2, 2, 2]
    assert st.prefill_tokens == sum(c.prefill_tokens for c in r.chunks)
    assert st.prefill_tokens_per_second == pytest.approx(st.prefill_tokens / 7.3)
    assert st.decode_tokens == sum(c.decode_tokens for c in r.chunks)


def test_chunk_mel_equals_offline_frames(engine, pcm, monkeypatch):
    x = pcm[:int(SR * 5.55)]
    seen = []
    real = engine.encoder.encode
    monkeypatch.setattr(engine.encoder, "encode", lambda m, stems=None: (seen.append(m), real(m, stems))[1])
    full_power = melmod.log_mel_power(x, engine.n_mels)
    top = float(full_power.max())
    s = StreamSession(engine, StreamOptions(chunk_size=1.5, max_new_tokens=2), mel_ceiling=top)  # as long files
    _feed_random(s, x, seed=3)
    got = np.concatenate(seen, axis=1)
    want = melmod.log_mel(x, engine.n_mels)
    assert got.shape == want.shape == (engine.n_mels, 555)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_running_ceiling_without_future(engine, pcm, monkeypatch):
    x = pcm[:SR * 4]
    seen = []
    real = engine.encoder.encode
    monkeypatch.setattr(engine.encoder, "encode", lambda m, stems=None: (seen.append(m), real(m, stems))[1])
    s = engine.create_stream(chunk_size=2.0, max_new_tokens=2)
    s.feed_audio(x)
    s.finish()
    p = melmod.log_mel_power(x, engine.n_mels)
    first = melmod.normalize_log_mel(p[:, :200], float(p[:, :200].max()))
    np.testing.assert_allclose(seen[0], first, atol=1e-5)
    np.testing.assert_allclose(seen[1], melmod.normalize_log_mel(p[:, 200:], float(p.max())), atol=1e-5)


def test_generate_matches_transcribe(engine):
    clip = os.path.join(ROOT, "audio", "en_1.wav")
    r = engine.transcribe(clip, max_new_tokens=5, fallback=False)  # the one run generate makes
    pcm = engine.features(sf.read(clip, dtype="float32")[0])
    emb = engine.encode(pcm)
    x = engine.embed_prompt(engine.prompt(emb.shape[0]), emb)
    got = []
    tokens, st = engine.generate(x, engine_options(5), on_token=got.append)
    assert tuple(tokens) == r.token_ids and got == tokens
    assert st.prefill_tokens == r.stats.prefill_tokens and st.finish_reason == "length"


def engine_options(n):
    from qwen3asr import DecodingOptions

    return DecodingOptions(max_new_tokens=n)


# ----------------------------------------------------------------------------- scripted decoder
def _ids(engine, text):
    return engine.tokenizer.encode(text)


def test_prefix_rollback_commit_and_header(engine, pcm, monkeypatch):
    tok = engine.tokenizer
    hdr = _ids(engine, "language English<asr_text>")
    a, c = _ids(engine, " open the"), _ids(engine, " and the")
    b = a[-1:] + _ids(engine, " back door")  # chunk 2 decodes chunk 1's rolled-back " the" again
    script = ScriptedDecoder(engine, [hdr + a, b, c])
    monkeypatch.setattr(engine, "generate", script)
    committed = []
    s = engine.create_stream(chunk_size=1.0, memory_num=2, rollback_tokens=1, on_text=committed.append)
    r1 = s.feed_audio(pcm[:SR + 40])  # exactly one chunk with its look-ahead
    assert len(r1.chunks) == 1 and r1.committed == "" and r1.tail == "open the"
    assert r1.language == "English" and r1.chunks[0].prefix_tokens == 0
    r2 = s.feed_audio(pcm[SR + 40:2 * SR + 40])
    # window [c1, c2]: header + chunk 1's tokens minus the last one
    assert r2.chunks[1].prefix_tokens == len(hdr) + len(a) - 1
    assert script.tail_is(1, hdr + a[:-1])
    assert r2.committed == "" and r2.tail == tok.decode(a[:-1] + b).strip()
    r3 = s.feed_audio(pcm[2 * SR + 40:3 * SR + 40])
    # chunk 1 left the window: its remaining tokens are committed. The prefix is chunk 2's
    # tokens minus the rollback (1) and minus the " the" it carried from chunk 1, whose audio
    # has left the window; that " the" stays in chunk 2 and is committed with it.
    assert r3.committed == tok.decode(a[:-1]).strip() and committed == [tok.decode(a[:-1]).lstrip()]
    assert r3.chunks[2].prefix_tokens == len(hdr) + len(b) - 2
    assert script.tail_is(2, hdr + b[1:-1])
    r4 = s.finish()  # the 40 samples of look-ahead make no frame: nothing is left to decode
    assert len(r4.chunks) == 3 and r4.finished and r4.tail == ""
    assert r4.text == tok.decode(a[:-1] + b[:-1] + c).strip()
    assert "".join(committed) == r4.text
    assert [seg.text for seg in r4.segments] == [tok.decode(a[:-1]).strip(), tok.decode(b[:-1]).strip(),
                                                 tok.decode(c).strip()]
    assert [(seg.start, seg.end) for seg in r4.segments] == [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]


def test_tokens_carried_from_a_chunk_that_left_the_window_are_never_lost(engine, pcm, monkeypatch):
    """A chunk whose answer is only the tokens rolled back from the chunk before: once that
    chunk leaves the window, nothing in the window can decode them again. Seen on the trained
    model at 1.5 s chunks: " ten forty" was rolled back a second time and lost."""
    hdr = _ids(engine, "language English<asr_text>")
    zh = _ids(engine, "language Chinese<asr_text>")
    first, carried = _ids(engine, "call mom at"), _ids(engine, " ten forty")
    script = ScriptedDecoder(engine, [hdr + first + carried, carried, zh + _ids(engine, "六点半")])
    monkeypatch.setattr(engine, "generate", script)
    s = engine.create_stream(chunk_size=1.0, memory_num=2, rollback_tokens=2)
    r = s.feed_audio(pcm[:3 * SR + 40])
    assert [c.prefix_tokens for c in r.chunks] == [0, len(hdr) + len(first), 0]  # no prefix: all carried
    assert r.committed == "call mom at"
    r = s.finish()
    assert r.text == "call mom at ten forty六点半"


def test_an_answer_begun_afresh_is_spaced_from_the_committed_text(engine, pcm, monkeypatch):
    """With an empty window prefix the model starts its answer without a leading space; the
    committed text must not glue two words ("cookerclose", seen on the trained model)."""
    hdr = _ids(engine, "language English<asr_text>")
    zh = _ids(engine, "language Chinese<asr_text>")
    outputs = [hdr + _ids(engine, "start the rice cooker"), hdr + _ids(engine, "close the"),
               zh + _ids(engine, "六点半"), hdr + _ids(engine, "door"), hdr + _ids(engine, " open")]
    monkeypatch.setattr(engine, "generate", ScriptedDecoder(engine, outputs))
    committed = []
    s = engine.create_stream(chunk_size=1.0, memory_num=1, rollback_tokens=0, on_text=committed.append)
    r = _feed_random(s, pcm[:5 * SR + 40], 0)
    assert r.text == "start the rice cooker close the六点半door open"
    assert "".join(committed) == r.text


def test_language_none_and_no_header_restart(engine, pcm, monkeypatch):
    none = _ids(engine, "language None<asr_text>")
    zh = _ids(engine, "language Chinese<asr_text>")
    text = _ids(engine, "六点半")
    script = ScriptedDecoder(engine, [none, zh + text, []])
    monkeypatch.setattr(engine, "generate", script)
    s = engine.create_stream(chunk_size=1.0, rollback_tokens=0)
    s.feed_audio(pcm[:3 * SR])
    r = s.finish()
    assert [c.prefix_tokens for c in r.chunks] == [0, 0, len(zh) + len(text)]
    assert r.text == "六点半" and r.language == "Chinese"


def test_rollback_never_splits_a_character(engine, pcm, monkeypatch):
    ids = _ids(engine, "𝄞")  # 4 UTF-8 bytes: byte-level tokens
    assert len(ids) > 1
    # Rolling back 1 token would end the prefix inside the character: the cut grows to all of
    # it, the second run regenerates it whole, and no half character reaches the text.
    script = ScriptedDecoder(engine, [ids, ids, []])
    monkeypatch.setattr(engine, "generate", script)
    s = engine.create_stream(chunk_size=1.0, rollback_tokens=1, language="English")
    assert s.feed_audio(pcm[:2 * SR]).tail == "𝄞"  # chunk 1
    r = s.finish()  # chunk 2
    assert [c.prefix_tokens for c in r.chunks] == [0, 0] and r.text == "𝄞"
    assert r.token_ids == tuple(ids)


def test_tail_completes_a_character_split_by_a_commit(engine, pcm, monkeypatch):
    ids = _ids(engine, "𝄞x")
    assert len(engine.tokenizer.decode(ids[:1]).encode()) != 4  # the first token is part of "𝄞"
    # memory 1, no rollback: each chunk's tokens are committed when the next chunk arrives;
    # chunk 1 ends inside "𝄞", chunk 2 completes it.
    script = ScriptedDecoder(engine, [ids[:1], ids[1:], []])
    monkeypatch.setattr(engine, "generate", script)
    s = engine.create_stream(chunk_size=1.0, memory_num=1, rollback_tokens=0, language="English")
    r = s.feed_audio(pcm[:2 * SR + 40])
    assert r.committed == "" and r.tail == "𝄞x"
    assert s.finish().text == "𝄞x"


def test_unfixed_chunks_decode_without_prefix(engine, pcm, monkeypatch):
    a, b = _ids(engine, " open"), _ids(engine, " open the door")
    script = ScriptedDecoder(engine, [a, b, []])
    monkeypatch.setattr(engine, "generate", script)
    s = engine.create_stream(chunk_size=1.0, memory_num=3, unfixed_chunks=2, rollback_tokens=0, language="en")
    s.feed_audio(pcm[:3 * SR])
    r = s.finish()
    assert [c.prefix_tokens for c in r.chunks] == [0, 0, len(b)]
    assert r.text == "open the door"


def test_reset_and_finish_rules(engine, pcm):
    s = engine.create_stream(chunk_size=1.0, max_new_tokens=2)
    first = _feed_random(s, pcm[:SR * 3], seed=4)
    with pytest.raises(RuntimeError, match=r"after finish\(\); call reset\(\)"):
        s.feed_audio(pcm[:160])
    assert s.finish() == first  # finishing twice returns the same result
    s.reset()
    again = _feed_random(s, pcm[:SR * 3], seed=5)
    assert again.token_ids == first.token_ids and again.stats.audio_seconds == pytest.approx(3.0)


def test_bad_input_messages(engine):
    s = engine.create_stream()
    with pytest.raises(ValueError, match="float32.*got dtype int16"):
        s.feed_audio(np.zeros(1600, np.int16))
    with pytest.raises(ValueError, match="16000 Hz audio, got 44100 Hz; resample"):
        s.feed_audio(np.zeros(1600, np.float32), sample_rate=44100)
    with pytest.raises(ValueError, match=r"mono audio of shape \(samples,\), got shape \(1600, 2\)"):
        s.feed_audio(np.zeros((1600, 2), np.float32))
    with pytest.raises(ValueError, match="numpy float32 array, got list"):
        s.feed_audio([0.0] * 10)
    with pytest.raises(ValueError, match="NaN or infinite"):
        s.feed_audio(np.full(10, np.nan, np.float32))
    assert s.feed_audio(np.zeros(0, np.float32)).stats.audio_seconds == 0.0
    assert s.feed_audio(np.zeros((160, 1), np.float32)).stats.audio_seconds == 0.01


@pytest.mark.parametrize("kwargs, message", [
    (dict(chunk_size=0.1), r"chunk_size must be a number of seconds >= 0.2"),
    (dict(chunk_size=1.005), r"whole number of 10 ms frames"),
    (dict(memory_num=0), r"memory_num must be an integer >= 1"),
    (dict(rollback_tokens=-1), r"rollback_tokens must be an integer >= 0"),
    (dict(unfixed_chunks=2, memory_num=2), r"unfixed_chunks must be < memory_num \(2\)"),
    (dict(vad="yes"), r"vad must be None, True, False or a VADOptions"),
    (dict(language="Klingon"), r"accepted"),
])
def test_option_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StreamOptions(**kwargs)


def test_window_too_large_for_context(engine):
    with pytest.raises(ValueError, match=r"over the context of \d+"):
        engine.create_stream(chunk_size=200.0, memory_num=2)


def test_join_text():
    assert join_text("open the", "door") == "open the door"
    assert join_text("六点半", "open") == "六点半open"
    assert join_text("a ", " x ") == "a x "  # only the joint is normalised


# ----------------------------------------------------------------------------- VAD
def test_vad_encodes_only_speech(engine, pcm):
    from qwen3asr import vad as vadmod

    try:
        model = vadmod.SileroVAD()
    except FileNotFoundError as exc:
        pytest.skip(f"Silero VAD model not installed: {exc}")
    x = pcm[:SR * 20]
    segs = vadmod.speech_segments(x, model=model)
    assert len(segs) >= 3
    a = engine.create_stream(chunk_size=2.0, max_new_tokens=2, vad=True)
    ra = _feed_random(a, x, seed=6)
    rb = _feed_random(engine.create_stream(chunk_size=2.0, max_new_tokens=2, vad=True), x, seed=7)
    assert ra.token_ids == rb.token_ids and [c.start for c in ra.chunks] == [c.start for c in rb.chunks]
    # every chunk lies inside one speech segment; the chunks tile the segments exactly
    for c in ra.chunks:
        assert any(s.start_s - 1e-9 <= c.start and c.end <= s.end_s + 1e-9 for s in segs), c
    speech = sum((int(s.end_s * SR) - int(s.start_s * SR)) // 160 * 160 for s in segs) / SR
    assert ra.stats.encoded_seconds == pytest.approx(speech, abs=0.01 * len(segs))
    assert ra.stats.encoded_fraction < 0.9 and ra.stats.vad_ms > 0


def test_a_looping_chunk_is_collapsed_when_committed_and_never_changes_after(engine, pcm, monkeypatch):
    from qwen3asr.prompt import REPEAT_THRESHOLD, fix_repetitions

    hdr = _ids(engine, "language English<asr_text>")
    loop = _ids(engine, " open the") + _ids(engine, " door") * (REPEAT_THRESHOLD + 5)
    end = _ids(engine, " now")
    script = ScriptedDecoder(engine, [hdr + loop, end, []])
    monkeypatch.setattr(engine, "generate", script)
    committed = []
    s = engine.create_stream(chunk_size=1.0, memory_num=1, rollback_tokens=0, on_text=committed.append)
    r1 = s.feed_audio(pcm[:2 * SR + 40])
    looped = engine.tokenizer.decode(loop)
    assert r1.committed == fix_repetitions(looped).strip() == "open the door"  # collapsed before it was sent
    r = s.finish()
    assert r.text == "open the door now" and "".join(committed) == r.text  # nothing sent was retracted


def test_a_fresh_window_does_not_read_the_carried_words_again(engine, pcm, monkeypatch):
    """The window after an all-carried chunk is decoded afresh; the model (trained model, 2 s
    chunks) often starts by reading the carried words again, whose audio straddles the window
    start. That repeat is dropped: text compared without the leading space a fresh answer lacks."""
    hdr = _ids(engine, "language English<asr_text>")
    first, carried = _ids(engine, "call mom at"), _ids(engine, " ten forty")
    again = _ids(engine, "forty six")  # the window's fresh answer repeats the end of the carried text
    script = ScriptedDecoder(engine, [hdr + first + carried, carried, hdr + again])
    monkeypatch.setattr(engine, "generate", script)
    s = engine.create_stream(chunk_size=1.0, memory_num=2, rollback_tokens=2)
    s.feed_audio(pcm[:3 * SR + 40])
    assert s.finish().text == "call mom at ten forty six"


def test_a_rollback_leaves_at_least_one_token_of_the_older_text(engine, pcm, monkeypatch):
    """rollback_tokens >= the older chunk's own tokens: one stays, so the prefix is never
    emptied by the rollback (an empty prefix has the window decoded afresh)."""
    hdr = _ids(engine, "language English<asr_text>")
    a = _ids(engine, "open the")
    script = ScriptedDecoder(engine, [hdr + a, a[1:] + _ids(engine, " door")])
    monkeypatch.setattr(engine, "generate", script)
    s = engine.create_stream(chunk_size=1.0, memory_num=2, rollback_tokens=len(a) + 3)
    r = s.feed_audio(pcm[:2 * SR + 40])
    assert r.chunks[1].prefix_tokens == len(hdr) + 1
    assert script.tail_is(1, hdr + a[:1])
    assert s.finish().text == "open the door"


@pytest.mark.parametrize("gap, pause_db, fresh", [
    (True, 30.0, True),  # the boundary lies in a pause: the window ends there
    (False, 30.0, False),  # speech runs through the boundary: the window slides, 1 token rolled back
    (True, None, False),  # the rule switched off
])
def test_a_boundary_in_a_pause_ends_the_window(engine, monkeypatch, gap, pause_db, fresh):
    """A boundary with quiet audio on both sides cuts no word: the older chunk's text is
    committed whole and the new chunk is decoded afresh, as after a VAD speech end (trained
    model, five long clips, rollback 2 without VAD: 9.1 -> 4.7 % MER at 1.5 s chunks)."""
    hdr = _ids(engine, "language English<asr_text>")
    a, b = _ids(engine, " open the"), _ids(engine, " back door")
    script = ScriptedDecoder(engine, [hdr + a, hdr + b if fresh else a[-1:] + b])
    monkeypatch.setattr(engine, "generate", script)
    x = (0.3 * np.random.default_rng(0).standard_normal(2 * SR + 40)).astype(np.float32)
    if gap:
        x[SR - 1200:SR + 1200] *= 1e-3  # 60 dB down for 75 ms either side of the 1.0 s boundary
    committed = []
    s = engine.create_stream(chunk_size=1.0, memory_num=2, rollback_tokens=1, pause_db=pause_db,
                             on_text=committed.append)
    r = s.feed_audio(x)
    assert [c.window_chunks for c in r.chunks] == [1, 1 if fresh else 2]
    if fresh:
        assert r.chunks[1].prefix_tokens == 0 and len(script.prompts[1]) == len(script.prompts[0])
        assert r.committed == "open the" and committed == ["open the"] and r.tail == "back door"
    else:
        assert r.chunks[1].prefix_tokens == len(hdr) + len(a) - 1
        assert script.tail_is(1, hdr + a[:-1])
        assert r.committed == "" and committed == [] and r.tail == "open the back door"
    assert s.finish().text == "open the back door"


def test_a_click_does_not_make_speech_look_like_a_pause_for_long(engine, monkeypatch):
    """Quiet speech (-40 dB) after a full-scale click: pauses are judged against a quantile
    (LEVEL_QUANTILE) of the last LEVEL_SECONDS of frames, so once the click's 3 frames are
    under 1 % of them (3 s) speech is speech again, and a real gap 30 dB under the speech is
    still a pause. Against the stream's peak every later boundary would be a "pause"."""
    hdr = _ids(engine, "language English<asr_text>")
    a = _ids(engine, " open the")
    script = ScriptedDecoder(engine, [hdr + a] + [a[-1:]] * 5)
    monkeypatch.setattr(engine, "generate", script)
    x = (0.01 * np.random.default_rng(1).standard_normal(6 * SR + 40)).astype(np.float32)
    x[3200:3680] = np.sign(np.sin(np.arange(480) * 0.3)).astype(np.float32) * 0.99  # 30 ms click at 0.2 s
    x[5 * SR - 1200:5 * SR + 1200] *= 0.03  # a gap at the 5.0 s boundary
    s = engine.create_stream(chunk_size=1.0, memory_num=2, rollback_tokens=1)
    r = s.feed_audio(x)
    assert [c.window_chunks for c in r.chunks][3:] == [2, 2, 1]


BOTH_GAPS = ((0.1, 0.4), (1.2, 1.5))


@pytest.mark.parametrize("chunk_size, pause_db, gaps, spans", [
    (2.0, 25.0, BOTH_GAPS, [(0.0, 1.44), (1.44, 3.44), (3.44, 4.0)]),  # ends at the last pause after 0.5 s
    (2.0, None, BOTH_GAPS, [(0.0, 2.0), (2.0, 4.0)]),  # the rule switched off: a fixed grid
    (1.5, 25.0, BOTH_GAPS, [(0.0, 1.5), (1.5, 3.0), (3.0, 4.0)]),  # not below PAUSE_CUT_MIN_CHUNK
    (2.0, 25.0, BOTH_GAPS[:1], [(0.0, 2.0), (2.0, 4.0)]),  # a pause in the first quarter only: whole
])
def test_a_chunk_ends_early_at_a_pause(engine, monkeypatch, chunk_size, pause_db, gaps, spans):
    """Gaps at 0.1-0.4 s (inside the first quarter: not used) and 1.2-1.5 s: the chunk ends at
    the last point with 60 ms of quiet on both sides, 1.44 s; the next chunk starts afresh."""
    hdr = _ids(engine, "language English<asr_text>")
    script = ScriptedDecoder(engine, [hdr + _ids(engine, " open the")] + [_ids(engine, " door")] * 3)
    monkeypatch.setattr(engine, "generate", script)
    x = (0.3 * np.random.default_rng(2).standard_normal(4 * SR)).astype(np.float32)
    for a, b in gaps:
        x[int(a * SR):int(b * SR)] *= 1e-3
    s = engine.create_stream(chunk_size=chunk_size, memory_num=2, pause_db=pause_db)
    r = _feed_random(s, x, seed=3)
    assert [(c.start, c.end) for c in r.chunks] == [pytest.approx(sp) for sp in spans]
    assert r.stats.encoded_seconds == pytest.approx(4.0)
    if len(spans) == 3 and chunk_size == 2.0:
        assert [c.window_chunks for c in r.chunks] == [1, 1, 2]


def test_pause_db_is_checked():
    for bad in (0, -3.0, float("nan"), "30", True):
        with pytest.raises(ValueError, match=r"pause_db must be a number of dB > 0 or None"):
            StreamOptions(pause_db=bad)


# ------------------------------------------------------------------ final passes
def test_final_passes_decode_each_finished_piece_in_one_pass(default_engine):
    """final_pass: each piece of speech that ended (at a pause, or at finish()) is decoded again
    in one pass; that text replaces its streamed text and per-chunk segments."""
    from qwen3asr import prepare_audio

    pcm = prepare_audio(os.path.join(ROOT, "audio", "long_mixed.wav"))[:30 * SR]
    streamed = []
    s = default_engine.create_stream(chunk_size=2.0, final_pass=True, on_text=streamed.append)
    finals_seen = []
    for i in range(0, len(pcm), 4000):
        r = s.feed_audio(pcm[i:i + 4000])
        finals_seen.append(r.final_segments)
    r = s.finish()
    assert finals_seen == sorted(finals_seen) and r.final_segments == len(r.segments) >= 5
    assert r.stats.final_passes == len(r.segments)
    for seg in r.segments:  # each final segment is the one-pass text of its piece
        piece = pcm[int(round(seg.start * SR)):int(round(seg.end * SR))]
        assert seg.text == default_engine.transcribe(piece, one_pass=True, fallback=False).text
    assert r.text == r.committed
    plain = default_engine.create_stream(chunk_size=2.0)
    plain.feed_audio(pcm)
    assert plain.finish().text == "".join(streamed)  # the streamed pieces are the stream's own text


def test_a_piece_too_long_to_keep_keeps_its_streamed_text(default_engine, monkeypatch):
    from qwen3asr import prepare_audio
    from qwen3asr import plan

    monkeypatch.setattr(plan, "FINAL_PASS_MAX_SECONDS", 0.5)  # every piece is longer
    pcm = prepare_audio(os.path.join(ROOT, "audio", "long_mixed.wav"))[:12 * SR]
    s = default_engine.create_stream(chunk_size=2.0, final_pass=True)
    s.feed_audio(pcm)
    r = s.finish()
    plain = default_engine.create_stream(chunk_size=2.0)
    plain.feed_audio(pcm)
    assert r.stats.final_passes == 0 and r.text == plain.finish().text
