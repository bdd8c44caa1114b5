"""The Wyoming early final (qwen3asr.server.wyoming.early): the last piece's final pass run in
the silence before audio-stop gives the transcript the final pass at audio-stop gives.

Each utterance is driven step by step (``Utterance.step``, what the server's worker runs after
each audio-chunk), so whether the early pass ran does not depend on this machine's speed; one
case goes through the server over TCP. Bundled model and clips, no test double.
"""

from __future__ import annotations

import asyncio
import json
import os
import wave

import numpy as np
import pytest

from fixtures import ROOT

pytest.importorskip("wyoming", reason="the Wyoming server needs the wyoming package: pip install '.[server]'")

AUDIO_DIR = os.path.join(ROOT, "audio")
CLIPS = ("en_1.wav", "en_2.wav", "en_3.wav", "zh_1.wav", "zh_2.wav", "zh_3.wav")
with open(os.path.join(AUDIO_DIR, "transcripts.json"), encoding="utf-8") as _f:
    EXPECTED = {c["file"]: c["text"] for c in json.load(_f)["clips"]}
HA_SILENCE_S = 0.8  # trailing silence Home Assistant streams before audio-stop (0.7 s at its default)
STEP = 1600 * 2  # bytes of one 100 ms audio-chunk (16 kHz 16-bit mono)


def read_wav(name):
    with wave.open(os.path.join(AUDIO_DIR, name)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2")


def silence(seconds):
    return np.zeros(int(seconds * 16000), np.int16)


@pytest.fixture(scope="module")
def engine():
    from qwen3asr import Qwen3ASREngine

    return Qwen3ASREngine(os.path.join(ROOT, "models", "default"), backend="onnx", threads=2)


async def _drive(engine, pcm16, early_final, paced=True):
    """One utterance through Utterance as the worker runs it: each 100 ms chunk then a step
    (``paced``), or all chunks and audio-stop before the worker's first step. Returns the
    (text, language code) and the utterance."""
    from qwen3asr.audio import PcmFormat
    from qwen3asr.server.scheduler import LIVE, Scheduler
    from qwen3asr.server.wyoming.utterance import Utterance, UtteranceOptions, WyomingOptions

    client = Scheduler().admit("test", LIVE)
    sent = []

    async def send(piece):
        sent.append(piece)

    utt = Utterance(engine, client, PcmFormat(16000, 2, 1), UtteranceOptions(),
                    WyomingOptions(early_final=early_final))
    data = pcm16.astype("<i2").tobytes()
    for i in range(0, len(data), STEP):
        utt.add(data[i:i + STEP])
        if paced:
            await utt.step(send)
    utt.stop()
    if utt.pending:
        await utt.step(send)
    try:
        return await utt.final(send), utt
    finally:
        client.close()


def drive(engine, pcm16, early_final, paced=True):
    return asyncio.run(_drive(engine, pcm16, early_final, paced))


@pytest.mark.parametrize("clip", CLIPS)
def test_early_final_gives_todays_transcript(engine, clip):
    """A command, then the silence Home Assistant streams before audio-stop: the early pass ran
    in the silence and its text is the transcript, the one today's final pass gives."""
    pcm = np.concatenate([read_wav(clip), silence(HA_SILENCE_S)])
    (text, lang), utt = drive(engine, pcm, early_final=True)
    today, _ = drive(engine, pcm, early_final=False)
    assert utt.early.passes == 1 and utt.early.text(utt.session) is not None  # the early text was used
    assert utt.session.stats().final_passes == 0  # finish() never ran: no pass after audio-stop
    assert (text, lang) == today
    assert text == EXPECTED[clip]


def test_speech_after_the_early_pass_discards_it(engine):
    """en_1, a pause long enough for the early pass, then en_2 and audio-stop right after it:
    the early result (en_1 only) is dropped and the final covers all the speech."""
    pcm = np.concatenate([read_wav("en_1.wav"), silence(HA_SILENCE_S), read_wav("en_2.wav")])
    (text, _), utt = drive(engine, pcm, early_final=True)
    today, _ = drive(engine, pcm, early_final=False)
    assert utt.early.passes >= 1 and utt.early.result is not None
    assert utt.early.text(utt.session) is None  # speech came after its speech end
    assert text == today[0] == f"{EXPECTED['en_1.wav']} {EXPECTED['en_2.wav']}"


def test_speech_resuming_then_silence_runs_the_pass_again(engine):
    """Two commands with a pause, then silence: the second speech end runs the pass again over
    the whole open piece, and that text is the transcript (today's)."""
    pcm = np.concatenate([read_wav("en_1.wav"), silence(HA_SILENCE_S), read_wav("en_2.wav"),
                          silence(HA_SILENCE_S)])
    (text, _), utt = drive(engine, pcm, early_final=True)
    today, _ = drive(engine, pcm, early_final=False)
    assert utt.early.passes >= 2 and utt.early.text(utt.session) is not None
    assert text == today[0] == f"{EXPECTED['en_1.wav']} {EXPECTED['en_2.wav']}"


def test_audio_stop_right_after_speech_takes_todays_path(engine):
    """A client that sends audio-stop before the worker saw the silence: no early pass, the
    final pass runs after audio-stop as without the option."""
    pcm = np.concatenate([read_wav("zh_2.wav"), silence(HA_SILENCE_S)])
    (text, lang), utt = drive(engine, pcm, early_final=True, paced=False)
    assert utt.early.passes == 0 and utt.session.stats().final_passes == 1
    assert (text, lang) == drive(engine, pcm, early_final=False)[0]


def test_audio_stop_tells_the_scheduler_the_final_comes_next(engine):
    """Utterance.stop sets the client's ``ending``: its optional work (a preview) gives way from
    then (Work.newer, tested with the scheduler in tests/test_scheduler.py)."""
    from qwen3asr.audio import PcmFormat
    from qwen3asr.server.scheduler import LIVE, Scheduler
    from qwen3asr.server.wyoming.utterance import Utterance, UtteranceOptions, WyomingOptions

    client = Scheduler().admit("test", LIVE)
    utt = Utterance(engine, client, PcmFormat(16000, 2, 1), UtteranceOptions(), WyomingOptions())
    utt.add(np.zeros(1600, "<i2").tobytes())
    assert not client.ending.is_set() and not client.work.newer.is_set()
    utt.stop()
    assert client.ending.is_set() and client.work.newer.is_set()
    client.close()


def test_silence_only_has_no_early_pass(engine):
    (text, _), utt = drive(engine, silence(2.0), early_final=True)
    assert text == "" and utt.early.passes == 0 and utt.early.last_speech is None


def test_early_final_option_is_checked():
    from qwen3asr.server.wyoming import WyomingOptions

    with pytest.raises(ValueError, match="early_final must be True or False"):
        WyomingOptions(early_final="yes")
    assert WyomingOptions(early_final=True, final="stream").early_final  # accepted, used with "pieces" only
