"""A final pass's front end computed while the piece is spoken (qwen3asr.streaming.ahead): the
log-mel is byte-identical to the whole clip's, a split encoder's conv stems are reused only for
byte-identical chunks, and the final pass gives the ids it gives without any of it, with fewer
encoder calls after the end."""

import os

import numpy as np
import pytest

from qwen3asr import Qwen3ASREngine, prepare_audio
from qwen3asr.encoder import StemMemo
from qwen3asr.streaming import final

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def split_engine():
    """The bundled default model with its split encoder (front end per 1 s chunk + back ends)."""
    e = Qwen3ASREngine(backend="onnx", threads=2, encoder_form="split")
    yield e
    e.close()


def clip(name, seconds=None):
    pcm = prepare_audio(os.path.join(ROOT, "audio", name))
    return pcm if seconds is None else pcm[:int(seconds * 16000)]


def stream_final(engine, pcm, ahead=True, piece=1600, **kw):
    """Stream ``pcm`` with final passes; the session, its result and its last final pass."""
    original = final.FinalPasses.advance
    if not ahead:
        final.FinalPasses.advance = lambda self, audio: None
    try:
        s = engine.create_stream(chunk_size=2.0, final_pass=True, **kw)
        for a in range(0, len(pcm), piece):
            s.feed_audio(pcm[a:a + piece])
        start = s._finals.ahead.start  # the last piece's (pauses end pieces)
        seen = (start, s._finals.ahead.features(pcm[start:])) if ahead and s._finals.ahead.powers else (start, None)
        r = s.finish()
    finally:
        final.FinalPasses.advance = original
    return s, r, s._finals.last, seen


@pytest.mark.parametrize("name,seconds", [("en_2.wav", None), ("zh_2.wav", None), ("long_mixed.wav", 9.3)])
def test_the_final_pass_gives_the_same_ids_with_fewer_encoder_calls(split_engine, name, seconds):
    pcm = clip(name, seconds)
    _, r_on, on, (start, mel) = stream_final(split_engine, pcm)
    _, r_off, off, _ = stream_final(split_engine, pcm, ahead=False)
    assert on.token_ids == off.token_ids and r_on.text == r_off.text and on.text
    assert np.array_equal(mel, split_engine.features(pcm[start:]))  # the log-mel assembled from the chunks
    n = len(pcm) - start
    whole = n // 16000 - (n % 16000 < 40)  # the last piece's chunks complete with their 2.5 ms look-ahead
    # without: one front end per chunk and a back end per graph; with: the whole chunks' stems reused
    assert off.stats.encoder_calls - on.stats.encoder_calls == whole > 0


def test_split_and_merged_encoders_give_the_same_bytes(split_engine, default_engine):
    """What makes a split engine's final pass the merged one-pass's: the same float32 bytes
    (ONNX Runtime's CPU kernels, fp32 graphs), chained pieces included."""
    for seconds in (0.7, 1.0, 2.5, 9.3):
        mel = default_engine.features(clip("long_mixed.wav", seconds))
        assert np.array_equal(split_engine.encode(mel), default_engine.encode(mel)), seconds


def test_split_and_merged_give_the_same_bytes_on_random_weights(bundle_dir):
    rng = np.random.default_rng(3)
    with Qwen3ASREngine(bundle_dir, backend="onnx", encoder_form="split") as s, \
            Qwen3ASREngine(bundle_dir, backend="onnx", encoder_form="merged") as m:
        for frames in (80, 300, 731):
            mel = s.features(rng.standard_normal(frames * 160).astype(np.float32) * 0.1)
            assert np.array_equal(s.encode(mel), m.encode(mel)), frames


def test_a_louder_end_moves_the_clamp_and_the_chunks_run_again(split_engine):
    """The clamp is the piece's maximum: a tail louder than everything before it (here past the
    last whole chunk, so nothing ahead saw it) changes the earlier chunks' log-mel where it was
    clamped, so their stems computed ahead are not used; the ids stay the pass's."""
    x = clip("zh_3.wav").copy()
    last = np.nonzero(np.abs(x) > 0.05 * np.abs(x).max())[0][-1]
    x = x[:last + 800]
    x[:len(x) - 5600] *= 0.2  # all but the last 0.35 s, 14 dB down
    s_on, _, on, (start, _) = stream_final(split_engine, x)
    _, _, off, _ = stream_final(split_engine, x, ahead=False)
    assert start == 0 and on.token_ids == off.token_ids and on.text
    assert len(x) // 16000 == 2 and s_on._finals.last is on
    assert on.stats.encoder_calls == off.stats.encoder_calls  # both whole chunks ran again


def test_with_a_merged_encoder_only_the_log_mel_is_computed_ahead(default_engine):
    pcm = clip("zh_2.wav")
    s, _, on, (start, mel) = stream_final(default_engine, pcm)
    _, _, off, _ = stream_final(default_engine, pcm, ahead=False)
    assert s._finals.ahead.stems is None and s._finals.ahead.ran == 0
    assert on.token_ids == off.token_ids and on.stats.encoder_calls == off.stats.encoder_calls
    assert np.array_equal(mel, default_engine.features(pcm[start:]))


def test_pieces_of_any_size_give_the_same_final(split_engine):
    pcm = clip("en_3.wav")
    ids = {piece: stream_final(split_engine, pcm, piece=piece)[2].token_ids for piece in (160, 1600, 7777, len(pcm))}
    assert len(set(ids.values())) == 1


def test_no_work_ahead_without_final_passes(split_engine):
    s = split_engine.create_stream(chunk_size=2.0, final_pass=False)
    s.feed_audio(clip("en_3.wav"))
    assert s._finals.ahead is None
    s.finish()


def test_stem_memo_is_bounded_and_stems_need_a_split_encoder(split_engine, default_engine):
    memo = StemMemo(2)
    for k in range(3):
        memo.put(bytes([k]), np.zeros(1))
    assert len(memo) == 2 and memo.get(bytes([0])) is None and memo.get(bytes([2])) is not None
    memo.discard(bytes([2]))
    assert memo.get(bytes([2])) is None
    chunk = np.zeros((default_engine.n_mels, 100), np.float32)
    with pytest.raises(ValueError, match="split"):
        default_engine.encoder.stem(chunk)
    with pytest.raises(ValueError, match="whole chunk"):
        split_engine.encoder.stem(chunk[:, :50])
    with pytest.raises(ValueError, match="whole chunk"):
        split_engine.encoder.stem(chunk.astype(np.float64))
    assert split_engine.encoder.stem(chunk).shape[:2] == (1, 13)


def test_the_stream_counts_what_it_holds_ahead(split_engine):
    s = split_engine.create_stream(chunk_size=2.0, final_pass=True)
    x = clip("zh_2.wav")
    before = s.footprint()
    s.feed_audio(x)
    ahead = s._finals.ahead
    assert len(ahead.powers) == 3 and len(ahead.stems) == 3
    held = sum(p.nbytes for p in ahead.powers) + ahead.stems.nbytes
    assert held > 3 * (128 * 100 * 12) and s.footprint() - before >= held
    s.finish()
    assert s._finals.footprint() == 0


def test_only_a_split_encoder_takes_turns_of_the_model_ahead(default_engine, split_engine):
    """The log-mel ahead is host work; the stems are model work, each in a unit (a turn of the
    server's scheduler), as a chunk's encode is."""
    import contextlib

    from qwen3asr.work import Work

    pcm = clip("zh_2.wav")

    def turns(engine, ahead):
        n = [0]

        def gate():
            n[0] += 1
            return contextlib.nullcontext()

        original = final.FinalPasses.advance
        if not ahead:
            final.FinalPasses.advance = lambda self, audio: None
        try:
            s = engine.create_stream(chunk_size=2.0, final_pass=True, work=Work(gate=gate))
            for a in range(0, len(pcm), 1600):
                s.feed_audio(pcm[a:a + 1600])
            s.finish()
        finally:
            final.FinalPasses.advance = original
        return n[0]

    assert turns(default_engine, True) == turns(default_engine, False)
    assert turns(split_engine, True) == turns(split_engine, False) + 3  # zh_2: 3 whole chunks, one turn each
