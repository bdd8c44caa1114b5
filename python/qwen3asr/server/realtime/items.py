"""The input audio buffer of one Realtime transcription session, cut into items.

Blocking (runs in the server's worker threads, one call at a time per session). Audio arrives
as (n,) float32 16 kHz. Each item is one live stream session of the engine
(``engine.create_stream`` with final passes): the audio is decoded chunk by chunk while it
arrives and every newly committed piece of text is a ``delta``; committing the item finishes
the stream, whose final text (each piece of the item decoded again in one pass) is the
``completed`` transcript. The deltas are its preview: they join to it unless the final text
revises them, and then ``completed`` is authoritative (docs/serving.md).

With ``server_vad`` the Silero VAD cuts items: an item opens at a speech start (padding
included) and is committed at its speech end. The VAD reports an end some time after it
happened, so audio reaches the item's stream LOOKAHEAD behind the newest audio and an item
gets exactly the audio between its start and end. Without turn detection an item opens with
the first audio after a commit and ends at the next commit.

The methods return the server events to send, as dicts without ``event_id``.
"""

from __future__ import annotations

import logging
import secrets
from typing import Callable, List, Optional

import numpy as np

from ...audio import SAMPLE_RATE
from ...languages import language_code
from ...vad_events import WINDOW_SAMPLES, SpeechStart
from ...work import Cancelled
from .config import RealtimeConfig

logger = logging.getLogger(__name__)

MIN_COMMIT_SAMPLES = SAMPLE_RATE // 10  # a commit needs at least 100 ms of audio (as OpenAI's)
# Each item's pieces decoded again in one pass at its commit: at the default delay (1 s chunks)
# the streamed text of the demo model's test-split commands was right on fewer than the final
# passes' (docs/streaming.md, "Each surface's default").
FINAL_PASS = True


class BufferError(Exception):
    """A client event the buffer cannot carry out (sent as an ``error`` event)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


def _ms(samples: int) -> int:
    return int(round(samples * 1000 / SAMPLE_RATE))


class Item:
    """One item: its stream session and what was sent of it."""

    def __init__(self, item_id: str, start: int, session, pieces: list):
        self.id = item_id
        self.start = start  # absolute sample (16 kHz, since the session began) of its first audio
        self.fed = start  # absolute sample up to which audio went to the session
        self.session = session
        self.pieces = pieces  # committed text not yet sent (the session's on_text)
        self.sent = ""  # text sent as deltas


class InputBuffer:
    """One session's audio buffer and items.

    create_stream: ``engine.create_stream`` with the session's scheduling (``work``) bound.
    vad_factory: makes a qwen3asr.vad.VADStream for VADOptions (server_vad).
    """

    def __init__(self, config: RealtimeConfig, create_stream: Callable, vad_factory: Callable):
        self.create_stream = create_stream
        self.vad_factory = vad_factory
        self.total = 0  # samples received since the session began
        self.buffer_start = 0  # first sample not yet committed or cleared
        self.hold = np.zeros(0, np.float32)  # audio from hold_start to total
        self.hold_start = 0
        self.item: Optional[Item] = None
        self.previous_id: Optional[str] = None  # the last committed item
        self.upcoming_id = new_id("item")  # id of the next item (speech_started names it before it exists)
        self.vad = None
        self.vad_origin = 0  # absolute sample of the VAD stream's sample 0
        self.config = config

    # ---------------------------------------------------------------- settings
    def configure(self, config: RealtimeConfig) -> None:
        """New settings: the next item uses them; a turn detection change restarts the VAD."""
        old = self.config
        self.config = config
        if config.turn_detection != old.turn_detection:
            self._restart_vad()

    def _restart_vad(self) -> None:
        """The VAD starts afresh at the next audio (its model loads only once audio comes, so a
        session that turns detection off first never loads it)."""
        self.vad = None
        self.vad_origin = self.total

    @property
    def lookahead(self) -> int:
        """Samples kept back from the item's stream until the VAD may still place the end there."""
        td = self.config.turn_detection
        if td is None:
            return 0
        pad = td.prefix_padding_ms * SAMPLE_RATE // 1000
        silence = td.silence_duration_ms * SAMPLE_RATE // 1000
        return max(silence - pad + WINDOW_SAMPLES, pad) + 2 * WINDOW_SAMPLES

    @property
    def preroll(self) -> int:
        """Samples kept before the newest audio while no item is open: a speech start is reported
        at most this late (padding, minimum speech, a pause within it, a few windows)."""
        td = self.config.turn_detection
        if td is None:
            return 0
        opts = td.vad_options()
        return int((opts.speech_pad_ms + opts.min_speech_ms + opts.min_silence_ms) * SAMPLE_RATE / 1000) \
            + 4 * WINDOW_SAMPLES

    # ---------------------------------------------------------------- client events
    def append(self, pcm: np.ndarray) -> List[dict]:
        events: List[dict] = []
        self.hold = np.concatenate([self.hold, pcm]) if self.hold.size else pcm
        if self.vad is None and self.config.turn_detection is not None:
            self.vad = self.vad_factory(self.config.turn_detection.vad_options())
            self.vad_origin = self.total
        self.total += pcm.shape[0]
        if self.vad is not None:
            for ev in self.vad.process(pcm):
                at = self.vad_origin + ev.sample
                if isinstance(ev, SpeechStart):
                    if self.item is None:
                        start = max(at, self.buffer_start, self.hold_start)
                        self._open(start)
                        events.append({"type": "input_audio_buffer.speech_started", "audio_start_ms": _ms(start),
                                       "item_id": self.item.id})
                elif self.item is not None:  # SpeechEnd
                    end = max(at, self.item.fed)
                    item_id = self.item.id
                    self._feed(end, events)
                    events.append({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": _ms(end),
                                   "item_id": item_id})
                    events.extend(self._commit(end))
        elif self.item is None and pcm.size:
            self._open(self.buffer_start)
        if self.item is not None:
            self._feed(self.total - self.lookahead, events)
        self._trim()
        return events

    def commit(self) -> List[dict]:
        """The client's commit: the open item (or the buffered audio) ends here."""
        if self.item is None:
            start = max(self.buffer_start, self.hold_start)
            if self.total - start < MIN_COMMIT_SAMPLES:
                raise BufferError("input_audio_buffer_commit_empty", f"buffer too small: expected at least 100 ms of "
                                  f"audio, have {_ms(self.total - start)} ms")
            self._open(start)
        events: List[dict] = []
        self._feed(self.total, events)
        events.extend(self._commit(self.total))
        self._restart_vad()  # speech that goes on makes a new item
        return events

    def clear(self) -> List[dict]:
        """Drop the uncommitted audio and the open item (its deltas stay sent; no completed follows)."""
        self.item = None
        self.upcoming_id = new_id("item")
        self.buffer_start = self.hold_start = self.total
        self.hold = np.zeros(0, np.float32)
        self._restart_vad()
        return [{"type": "input_audio_buffer.cleared"}]

    def finish(self) -> List[dict]:
        """End of the session (the server shuts down): the open item is committed."""
        if self.item is None:
            return []
        events: List[dict] = []
        self._feed(self.total, events)
        events.extend(self._commit(self.total))
        return events

    # ---------------------------------------------------------------- items
    def _open(self, start: int) -> None:
        c = self.config
        pieces: list = []
        session = self.create_stream(language=c.language, context=c.context, chunk_size=c.chunk_size,
                                     word_timestamps=c.words, word_spans=c.word_spans,
                                     final_pass=FINAL_PASS, on_text=pieces.append)
        self.item = Item(self.upcoming_id, start, session, pieces)
        self.upcoming_id = new_id("item")

    def _feed(self, upto: int, events: List[dict]) -> None:
        """Audio up to absolute sample ``upto`` to the open item's stream; a delta for new text."""
        item = self.item
        if upto > item.fed:
            a = item.fed - self.hold_start
            item.session.feed_audio(self.hold[a:upto - self.hold_start])
            item.fed = upto
        self._delta(item, events)

    def _delta(self, item: Item, events: List[dict]) -> None:
        if item.pieces:
            text = "".join(item.pieces)
            item.pieces.clear()
            item.sent += text
            events.append({"type": "conversation.item.input_audio_transcription.delta", "item_id": item.id,
                           "content_index": 0, "delta": text})

    def _commit(self, end: int) -> List[dict]:
        """Finish the open item (its audio ends at ``end``): committed, added, the last delta,
        completed, done."""
        item, self.item = self.item, None
        self.buffer_start = end
        prev, self.previous_id = self.previous_id, item.id
        events = [{"type": "input_audio_buffer.committed", "item_id": item.id, "previous_item_id": prev},
                  {"type": "conversation.item.added", "previous_item_id": prev, "item": _item(item.id, None)}]
        try:
            result = item.session.finish()
        except Cancelled:
            raise
        except Exception as exc:
            logger.error("realtime item %s failed", item.id, exc_info=exc)
            events.append({"type": "conversation.item.input_audio_transcription.failed", "item_id": item.id,
                           "content_index": 0, "error": {"type": "server_error", "code": "transcription_failed",
                                                         "message": f"{type(exc).__name__}: {exc}", "param": None}})
            return events
        self._delta(item, events)
        if item.sent != result.text:  # the deltas were the streamed preview; the final pass revised it
            logger.debug("realtime item %s: final text %r revises the deltas %r", item.id, result.text, item.sent)
        done = {"type": "conversation.item.input_audio_transcription.completed", "item_id": item.id,
                "content_index": 0, "transcript": result.text,
                "usage": {"type": "duration", "seconds": round((end - item.start) / SAMPLE_RATE, 3)}}
        if result.language:
            done["languages"] = [{"code": language_code(result.language)}]
        if self.config.words:  # this server's extension: word times in seconds since the session began
            offset = item.start / SAMPLE_RATE
            done["words"] = [w.shifted(offset).to_dict() for s in result.segments for w in s.words]
        events.append(done)
        events.append({"type": "conversation.item.done", "previous_item_id": prev, "item": _item(item.id, result.text)})
        return events

    def _trim(self) -> None:
        """Keep only the audio an item may still need."""
        keep = self.item.fed if self.item is not None else self.total - self.preroll
        keep = max(keep, self.hold_start)
        if keep > self.hold_start:
            self.hold = self.hold[keep - self.hold_start:].copy()
            self.hold_start = keep


def _item(item_id: str, transcript: Optional[str]) -> dict:
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_audio", "transcript": transcript}]}
