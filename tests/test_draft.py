"""A draft verified in the prefill (qwen3asr.decoding.verify_draft): the decoder's result is
the one it gives without a draft, and each confirmed id saves a decode step."""

import os

import numpy as np
import pytest

from qwen3asr import prepare_audio
from qwen3asr.decoding import DecodingOptions

pytest.importorskip("torch", reason="building the random checkpoint needs torch (the dev extra: pip install -e '.[dev]')")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIPS = ("en_1", "en_2", "en_3", "zh_1", "zh_2", "zh_3")


def prompts(engine, n=6, length=40, seed=0):
    rng = np.random.default_rng(seed)
    hidden = engine.embeddings(np.array([0])).shape[1]
    return [rng.standard_normal((length, hidden)).astype(np.float32) * 0.5 for _ in range(n)]


def margin(engine, x, tokens, i, opts):
    """The top-2 gap of the logits that chose tokens[i] in a step-by-step run."""
    gen = engine.decoder.start(x, opts)
    for t in tokens[:i]:
        gen.feed(t)
    top = np.sort(gen.next_logits)[-2:]
    return float(top[1] - top[0])


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_a_full_draft_gives_the_same_ids_with_no_decode_steps(engine, penalty):
    opts = DecodingOptions(max_new_tokens=24, repetition_penalty=penalty)
    flips = []
    for x in prompts(engine):
        want, plain = engine.generate(x, opts)
        got, st = engine.generate(x, opts, draft=want)
        assert st.draft_tokens == min(len(want), opts.max_new_tokens - 1)
        if got != want:  # only a near tie flipped by a many-row prefill against single steps may differ
            i = next(k for k, (a, b) in enumerate(zip(got, want)) if a != b)
            flips.append(margin(engine, x, want, i, opts))
            continue
        assert st.verified_tokens == st.draft_tokens
        assert st.decode_tokens == plain.decode_tokens - st.verified_tokens
        assert st.prefill_tokens == plain.prefill_tokens + st.draft_tokens
    assert len(flips) <= 1 and all(m < 1e-3 for m in flips), flips


def test_a_draft_wrong_at_k_keeps_k_and_decodes_the_rest(engine):
    opts = DecodingOptions(max_new_tokens=20)
    for k, x in zip((0, 3, 7, 12), prompts(engine, 4, seed=1)):
        want, _ = engine.generate(x, opts)
        draft = list(want)
        draft[k] = (draft[k] + 1) % 1000
        got, st = engine.generate(x, opts, draft=draft)
        assert got == want and st.verified_tokens == k
        assert st.decode_tokens == len(want) - k - (1 if len(want) == opts.max_new_tokens else 0)


def test_a_draft_is_ignored_when_sampling_and_with_a_reused_prefix_gives_the_same(engine):
    x = prompts(engine, 1, seed=2)[0]
    sampled = DecodingOptions(max_new_tokens=16, temperature=0.8, seed=5)
    want, _ = engine.generate(x, sampled)
    got, st = engine.generate(x, sampled, draft=want)
    assert got == want and st.draft_tokens == 0
    greedy = DecodingOptions(max_new_tokens=16)
    want, _ = engine.generate(x, greedy, prefix_len=10)
    got, st = engine.generate(x, greedy, prefix_len=10, draft=want)
    assert got == want and st.verified_tokens == len(want) - 1


def test_on_token_sees_the_confirmed_ids_and_can_stop_among_them(engine):
    x = prompts(engine, 1, seed=3)[0]
    opts = DecodingOptions(max_new_tokens=16)
    want, _ = engine.generate(x, opts)
    seen = []
    got, st = engine.generate(x, opts, on_token=lambda t: seen.append(t) or len(seen) < 5, draft=want)
    assert got == seen == want[:5] and st.finish_reason == "stopped"


def test_final_passes_with_the_streamed_draft_give_the_one_pass_text(default_engine, monkeypatch):
    """The bundled commands at the Wyoming server's 2 s chunks: the final text and ids equal the
    final pass without a draft, and most of the text comes confirmed from the stream."""
    from qwen3asr.streaming import final

    def finals(draft_on):
        out = []
        for clip in CLIPS:
            s = default_engine.create_stream(chunk_size=2.0, final_pass=True)
            s.feed_audio(prepare_audio(os.path.join(ROOT, "audio", f"{clip}.wav")))
            r = s.finish()
            out.append((r.text, s._finals.last.token_ids, s._finals.last.stats.verified_tokens))
        return out

    with_draft = finals(True)
    monkeypatch.setattr(final.FinalPasses, "draft", lambda self, language, ids: [])
    without = finals(False)
    assert [w[:2] for w in with_draft] == [w[:2] for w in without]
    assert all(w[2] == 0 for w in without)
    verified = sum(w[2] for w in with_draft)
    generated = sum(len(w[1]) for w in with_draft)
    assert verified >= generated // 2, (verified, generated)


# ------------------------------------------------------------------ partial decodes (previews)

def stream_all(engine, pcm, piece=1600, **kw):
    s = engine.create_stream(**kw)
    seen = []
    for a in range(0, pcm.shape[0], piece):
        r = s.feed_audio(pcm[a:a + piece])
        seen.append((min(pcm.shape[0], a + piece), r.committed, r.tail))
    return s, s.finish(), seen


def test_previews_show_text_before_the_first_chunk_and_change_nothing_committed(default_engine):
    pcm = np.concatenate([prepare_audio(os.path.join(ROOT, "audio", f"{c}.wav")) for c in ("en_2", "zh_2")])
    _, plain, plain_seen = stream_all(default_engine, pcm, chunk_size=2.0)
    s, prev, seen = stream_all(default_engine, pcm, chunk_size=2.0, partial_every=0.5)
    assert prev.text == plain.text and prev.token_ids == plain.token_ids and prev.segments == plain.segments
    assert [x[1] for x in seen] == [x[1] for x in plain_seen]  # committed text at every feed: the same
    assert prev.stats.partials > 0 and plain.stats.partials == 0
    assert prev.stats.chunks == plain.stats.chunks  # previews are not chunks
    first = next(t for t, _, tail in seen if tail)
    assert first < 2.0 * 16000 <= next(t for t, c, tail in plain_seen if c or tail)  # text before the first chunk


def test_a_chunk_decode_replaces_the_preview(default_engine):
    pcm = prepare_audio(os.path.join(ROOT, "audio", "en_2.wav"))
    _, _, plain_seen = stream_all(default_engine, pcm, chunk_size=2.0)
    _, _, seen = stream_all(default_engine, pcm, chunk_size=2.0, partial_every=1.5)
    # 1.5 s previews: at 2.1 s the first chunk is decoded and no new preview is due, so the
    # tail is the chunk's own, as without previews
    at = {t: tail for t, _, tail in seen}
    want = {t: tail for t, _, tail in plain_seen}
    t = next(t for t in sorted(at) if t >= 2.1 * 16000)
    assert at[t] == want[t]


def test_partial_every_is_checked():
    from qwen3asr import TranscribeOptions

    with pytest.raises(ValueError, match="partial_every must be a number of seconds"):
        TranscribeOptions(partial_every=0.01)


class FlipsAfter:
    """A Work.newer flag: not set for its first ``n`` looks, then set until ``clear()``."""

    def __init__(self, n):
        self.n, self.looks, self.forced = n, 0, None

    def is_set(self):
        self.looks += 1
        return self.forced if self.forced is not None else self.looks > self.n

    def clear(self):
        self.forced = False


def test_no_preview_starts_while_newer_work_waits(default_engine):
    import threading

    from qwen3asr.work import Work

    pcm = prepare_audio(os.path.join(ROOT, "audio", "en_2.wav"))
    waiting = threading.Event()
    waiting.set()
    _, plain, plain_seen = stream_all(default_engine, pcm, chunk_size=2.0)
    s, r, seen = stream_all(default_engine, pcm, chunk_size=2.0, partial_every=0.5, work=Work(newer=waiting))
    assert r.stats.partials == 0 and s._partials.dropped == 0
    assert r.token_ids == plain.token_ids and [x[1:] for x in seen] == [x[1:] for x in plain_seen]


def test_a_running_preview_stops_for_newer_work_and_is_dropped(default_engine):
    from qwen3asr.work import Work

    pcm = prepare_audio(os.path.join(ROOT, "audio", "en_2.wav"))
    _, plain, plain_seen = stream_all(default_engine, pcm, chunk_size=2.0)
    flag = FlipsAfter(1)  # the check before the preview passes; its decode sees newer input at once
    s = default_engine.create_stream(chunk_size=2.0, partial_every=0.5, work=Work(newer=flag))
    r = s.feed_audio(pcm[:9600])  # 0.6 s: a preview is due
    assert s._partials.dropped == 1 and r.stats.partials == 0 and s._partials.ids is None and not r.tail
    flag.clear()  # no newer input any more: the next preview runs
    r = s.feed_audio(pcm[9600:17600])
    assert r.stats.partials == 1 and s._partials.dropped == 1 and r.tail
    for a in range(17600, pcm.shape[0], 1600):
        s.feed_audio(pcm[a:a + 1600])
    assert s.finish().token_ids == plain.token_ids


def test_a_cancel_still_stops_the_stream_during_a_preview(default_engine):
    from qwen3asr.work import Cancelled, Work

    pcm = prepare_audio(os.path.join(ROOT, "audio", "en_2.wav"))
    cancel = FlipsAfter(2)  # the unit's two checks pass; the preview's decode sees the cancel
    s = default_engine.create_stream(chunk_size=2.0, partial_every=0.5, work=Work(cancel=cancel))
    with pytest.raises(Cancelled):
        s.feed_audio(pcm[:9600])
    assert s._partials.dropped == 0


def test_first_words_preview_only_until_the_segment_shows_text(default_engine):
    """first_words: previews until the open segment shows words, then none until the next
    segment; the committed text as without previews."""
    pcm = np.concatenate([prepare_audio(os.path.join(ROOT, "audio", f"{c}.wav")) for c in ("en_2", "zh_2")])
    _, plain, plain_seen = stream_all(default_engine, pcm, chunk_size=2.0)
    _, every, _ = stream_all(default_engine, pcm, chunk_size=2.0, partial_every=0.5)
    s, first, seen = stream_all(default_engine, pcm, chunk_size=2.0, first_words=0.5)
    assert first.token_ids == plain.token_ids and [x[1] for x in seen] == [x[1] for x in plain_seen]
    shown = next(t for t, _, tail in seen if tail)
    assert shown < 2.0 * 16000  # words before the first chunk is complete
    assert 1 <= first.stats.partials <= 3 < every.stats.partials  # 0.5 s previews up to the first words only
    # no preview once the segment shows text: every preview was made before the first words
    # plus at most the chunk boundary, and the stream's tail after that is the chunks' own
    later = [(t, tail) for t, _, tail in seen if t >= 2.1 * 16000]
    assert later == [(t, tail) for t, _, tail in plain_seen if t >= 2.1 * 16000]


def test_first_words_and_partial_every_are_checked():
    from qwen3asr import TranscribeOptions

    with pytest.raises(ValueError, match="first_words must be a number of seconds"):
        TranscribeOptions(first_words=0.05)
