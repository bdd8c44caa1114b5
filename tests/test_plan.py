"""The one plan (qwen3asr.plan): every surface that asks "one pass or chunks?" gets the same
answer, and that answer is the documented rule, written out again here from its parts (the
decoder context, the bundle's one-pass limit, the aligner's piece)."""

import dataclasses
import os
import random

import numpy as np
import pytest

from qwen3asr import Qwen3ASREngine, TranscribeOptions, plan
from qwen3asr.audio import SAMPLE_RATE as SR
from qwen3asr.audio import PcmFormat
from qwen3asr.encoder import tokens_for_frames
from qwen3asr.mel import n_frames

import bundles

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def engine():
    """The demo model (10 s one-pass limit) with an aligner whose piece is shrunk to 7 s."""
    from qwen3asr.aligner.model import DENSE_TEXT_POSITIONS_PER_SECOND

    _, aligner = bundles.aligner_bundle()
    with Qwen3ASREngine(os.path.join(ROOT, "models", "default"), backend="onnx", threads=2, aligner=aligner) as e:
        scorer = e.aligner.scorer
        full = scorer.max_positions
        scorer.max_positions = 2 + 7 * (13 + DENSE_TEXT_POSITIONS_PER_SECOND) + 5
        assert e.aligner.piece_seconds == 7.0
        yield e
        scorer.max_positions = full


def rule(e, n: int, o: TranscribeOptions) -> bool:
    """The documented rule, from its parts: one pass when forced, or when no chunks are asked for,
    the prompt, the audio rows and the token budget fit the context, and the audio is within the
    bundle's limit and, with words, the aligner's piece."""
    if o.one_pass:
        return True
    if o.chunk_size is not None or o.vad_options is not None or o.max_chunks is not None:
        return False
    rows = len(e.request_prompt(1, o)) - 1
    fits = rows + max(tokens_for_frames(n_frames(n)), 1) + o.decoding().max_new_tokens <= e.max_context
    limits = [e.bundle.one_pass_seconds] + ([e.aligner.piece_seconds] if o.word_timestamps else [])
    return fits and n <= min(x for x in limits if x is not None) * SR


def random_options(rng) -> TranscribeOptions:
    one_pass = rng.random() < 0.15
    return TranscribeOptions(
        word_timestamps=rng.random() < 0.5, one_pass=one_pass, language=rng.choice([None, "English", "Chinese"]),
        context=rng.choice(["", "kitchen lights " * rng.randint(1, 30)]), max_new_tokens=rng.choice([None, 32, 200]),
        vad=rng.choice([None, False]), chunk_size=None if one_pass or rng.random() < 0.85 else rng.choice([2.0, 4.0]))


def test_every_surface_agrees_with_the_rule_on_random_lengths_and_options(engine):
    from qwen3asr.server.scheduler import LIVE, Scheduler
    from qwen3asr.server.wyoming.utterance import Utterance, UtteranceOptions, WyomingOptions

    e = engine
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    scheduler = Scheduler()
    full_context = e.max_context
    try:
        for trial in range(120):
            e.max_context = full_context if trial % 3 else rng.choice([160, 260, 400])  # a shrunk decoder too
            o = random_options(rng)
            n = int(rng.uniform(0.05, rng.choice([12, 12, 80])) * SR)  # most near the 7 s and 10 s limits
            try:
                e.planner.check_prompt(o)
            except ValueError:
                continue  # the prompt alone leaves no room: every surface refuses it (tested elsewhere)
            want = rule(e, n, o)
            seen[want] += 1
            mode, resolved = e.plan(n, o)
            assert (mode == "one pass") == want, (trial, n, o)
            if not want:  # the chunks the plan picks are ones a stream accepts, unless none would fit
                try:
                    e.planner.check_stream(resolved)
                except ValueError as err:  # asked-for chunks, or even 1 s ones, overflow this shrunk decoder
                    assert (o.chunk_size is not None or resolved.chunk_size == 1.0) and "over the context" in str(err)
            # the CLI's preload hint covers every one-pass request (it cannot know the context yet)
            hint = plan.preload_seconds(n / SR, o, e.bundle.one_pass_seconds)
            assert hint is not None or not want
            # a stream's final pass of a finished piece of n samples: the rule without one_pass
            # and without chunks (a stream's own chunk size does not make its final pass chunked)
            final_rule = rule(e, n, dataclasses.replace(plan.final_pass_options(o), one_pass=False)) \
                and n <= plan.FINAL_PASS_MAX_SECONDS * SR
            if not o.one_pass and (o.chunk_size is None or not o.word_timestamps
                                   or o.chunk_size <= e.aligner.piece_seconds):
                try:
                    s = e.create_stream(o, final_pass=True)
                except ValueError:
                    assert e.planner.window_positions(o.for_stream()) > e.max_context
                else:
                    s._finals.open(0)
                    got = s._finals.audio(n, lambda a, b: np.zeros(b - a, np.float32)) is not None
                    assert got == final_rule, (trial, n, o)
            # the Wyoming utterance's one-pass final (no words there: the server's options)
            if not o.word_timestamps and not o.one_pass and o.chunk_size is None and o.vad is None \
                    and o.max_new_tokens is None and n <= 60 * SR:
                client = scheduler.admit("plan-test", LIVE)
                try:
                    u = Utterance(e, client, PcmFormat(SR, 2, 1), UtteranceOptions(o.language, o.context),
                                  WyomingOptions(final="one-pass"))
                    u._append(np.zeros(n, np.float32))
                    u.stop()
                    assert u.one_pass == rule(e, n, u.final_options), (trial, n, o)
                finally:
                    client.close()
    finally:
        e.max_context = full_context
        scheduler.close()
    assert seen[True] > 20 and seen[False] > 20  # both answers were exercised


def test_one_pass_true_is_one_pass_whatever_the_length(engine):
    for seconds in (0.5, 9.0, 11.0, 40.0):
        assert engine.plan(int(seconds * SR), TranscribeOptions(one_pass=True, word_timestamps=True))[0] == "one pass"


def test_a_stream_with_words_refuses_chunks_longer_than_the_aligner_piece(engine):
    with pytest.raises(ValueError, match=r"chunk_size=8 s with word timestamps: .* at most 7 s"):
        engine.create_stream(word_timestamps=True, chunk_size=8.0)
    engine.create_stream(word_timestamps=True, chunk_size=7.0)


def test_the_preload_hint_follows_the_options():
    o = TranscribeOptions()
    assert plan.preload_seconds(3.0, o, None) == 3.0
    assert plan.preload_seconds(3.0, o, 2.0) is None  # over the bundle's one-pass limit: chunks
    assert plan.preload_seconds(3.0, TranscribeOptions(chunk_size=2.0), None) is None
    assert plan.preload_seconds(30.0, TranscribeOptions(one_pass=True), 10.0) == 30.0
    assert plan.preload_seconds(61.0, TranscribeOptions(word_timestamps=True), None) is None
    assert plan.preload_seconds(59.0, TranscribeOptions(word_timestamps=True), None) == 59.0
    assert plan.preload_seconds(None, o, None) is None
