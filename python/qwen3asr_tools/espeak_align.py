"""Word timings of the synthetic training clips, from espeak-ng itself.

espeak-ng reports a WORD event (text position and sample offset) for every word it speaks
when it is driven through its library (libespeak-ng) instead of the command line; the
audio is the same (same voice, rate and pitch give the same samples). ``clip_words``
replays one clip of ``make_dataset.plan_split`` and returns where each word of its label
lies in the finished clip (after the same trim and padding make_dataset applies), and
``token_spans`` turns that into per-token spans for a tokenizer's ids.

Training uses these spans for a frame-level loss on the audio encoder (train_tiny.py):
with only utterance-level labels the encoder of a model this small stayed on the CTC
plateau (blank + label prior) for the whole of a 40-minute run (docs/training.md).

Training tooling only: never imported by the runtime.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

from qwen3asr.encoder import CHUNK_FRAMES, TOKENS_PER_CHUNK

from . import make_dataset as md

_LIB_NAMES = ("libespeak-ng.so.1", "libespeak-ng.so")
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_RATE, _PITCH = 1, 3                   # espeak_PARAMETER: espeakRATE, espeakPITCH
_CHARS_UTF8, _PHONEMES, _ENDPAUSE = 1, 0x100, 0x1000  # the command line's -w synthesis flags (+ UTF-8 input)


class _Event(ctypes.Structure):
    """espeak_EVENT of speak_lib.h (x86_64 / aarch64 LP64 layout, 40 bytes)."""
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", ctypes.c_void_p)]


class _Voice(ctypes.Structure):
    """espeak_VOICE of speak_lib.h."""
    _fields_ = [("name", ctypes.c_char_p), ("languages", ctypes.c_char_p), ("identifier", ctypes.c_char_p),
                ("gender", ctypes.c_ubyte), ("age", ctypes.c_ubyte), ("variant", ctypes.c_ubyte),
                ("xx1", ctypes.c_ubyte), ("score", ctypes.c_int), ("spare", ctypes.c_void_p)]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


class Espeak:
    """libespeak-ng in synchronous mode: audio plus word events of one text at a time."""

    def __init__(self):
        lib = None
        for name in _LIB_NAMES:
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise RuntimeError(f"libespeak-ng not found ({' / '.join(_LIB_NAMES)}); {md.INSTALL_HINT}")
        self.lib = lib
        self.rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, None, 0)
        if self.rate != md.SYNTH_RATE:
            raise RuntimeError(f"libespeak-ng runs at {self.rate} Hz, make_dataset expects {md.SYNTH_RATE} Hz")
        self._chunks: List[np.ndarray] = []
        self._words: List[Tuple[int, int, int]] = []   # (text position 1-based in bytes, length, sample)
        self._cb = _CALLBACK(self._on_audio)   # kept alive as long as the library may call it
        lib.espeak_SetSynthCallback(self._cb)

    def _on_audio(self, wav, n, events) -> int:
        if n > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, (n,)).copy())
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            e = events[i]
            if e.type == _EVENT_WORD:
                self._words.append((e.text_position, e.length, e.sample))
            i += 1
        return 0

    def synth(self, text: str, voice: str, speed: int, pitch: int) -> Tuple[np.ndarray, List[Tuple[int, int, int]]]:
        """(int16 samples at 22050 Hz, [(text position, length, start sample)] per spoken word)."""
        md.check_voice(voice)
        # As the espeak-ng command line does: by name, else by language ("en-gb+Andy").
        if self.lib.espeak_SetVoiceByName(voice.encode()) != 0 and \
                self.lib.espeak_SetVoiceByProperties(ctypes.byref(_Voice(languages=voice.encode()))) != 0:
            raise RuntimeError(f"libespeak-ng refused voice {voice!r}")
        self.lib.espeak_SetParameter(_RATE, int(speed), 0)
        self.lib.espeak_SetParameter(_PITCH, int(pitch), 0)
        self._chunks, self._words = [], []
        data = text.encode("utf-8") + b"\0"
        err = self.lib.espeak_Synth(data, ctypes.c_size_t(len(data)), 0, 0, 0,
                                    _CHARS_UTF8 | _PHONEMES | _ENDPAUSE, None, None)
        if err != 0:
            raise RuntimeError(f"espeak_Synth failed ({err}) for {text!r}")
        self.lib.espeak_Synchronize()
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
        return audio, list(self._words)


@functools.lru_cache(maxsize=1)
def _engine() -> Espeak:
    return Espeak()


@dataclass(frozen=True)
class Word:
    text: str
    char_start: int     # offset of the word in the label (characters)
    start: float        # seconds in the finished clip
    end: float


def label_words(text: str) -> List[Tuple[int, str]]:
    """(character offset, word) of every word of a label as espeak-ng speaks them: English
    words are space-separated, every Chinese character is a word of its own."""
    out, i = [], 0
    for part in text.split(" "):
        if part:
            if part.isascii():
                out.append((i, part))
            else:
                out += [(i + k, ch) for k, ch in enumerate(part)]
        i += len(part) + 1
    return out


def clip_words(spec: "md.ClipSpec") -> List[Word]:
    """Where each word of ``spec.text`` lies in the clip make_dataset renders from ``spec``.

    A word runs from its WORD event to the next event (the last one to the end of the
    trimmed speech); espeak-ng sometimes speaks two short words under one event ("on the"),
    and then their span is shared in proportion to their lengths. pad_before shifts
    everything; resampling does not change timing. Raises ValueError if the events cannot
    be matched to the label's words.
    """
    if spec.language == "None":
        return []
    _, words = spoken(spec.text, spec.voice, spec.speed, spec.pitch)
    return [Word(w.text, w.char_start, spec.pad_before + w.start, spec.pad_before + w.end) for w in words]


def spoken(text: str, voice: str, speed: int, pitch: int) -> Tuple[np.ndarray, List[Word]]:
    """espeak-ng speech of ``text`` with its leading and trailing silence cut as make_dataset cuts
    it (``(n,)`` float64 at SYNTH_RATE, int16 scale) and every word of the text with its start and
    end in seconds from the first kept sample (as ``clip_words`` places them)."""
    audio, events = _engine().synth(text, voice, speed, pitch)
    x = audio.astype(np.float64)
    loud = np.flatnonzero(np.abs(x) > md.TRIM_THRESHOLD * np.abs(x).max()) if x.size else x
    if len(loud) == 0:
        raise ValueError(f"espeak-ng produced silence for {text!r}")
    first, last = int(loud[0]), int(loud[-1]) + 1
    words = label_words(text)
    # Event -> index of the label word holding its (1-based, character) text position;
    # position 0 marks the end of the text and is no word.
    owner = {}
    for pos, _, sample in events:
        if pos <= 0:
            continue
        k = max((i for i, (c, _) in enumerate(words) if c <= pos - 1), default=None)
        if k is None or k in owner or (owner and k < max(owner)):
            raise ValueError(f"espeak-ng word events {events} do not follow the words of {text!r}")
        owner[k] = max(first, min(last, sample))
    if 0 not in owner:
        raise ValueError(f"espeak-ng gave no event for the first word of {text!r}")
    heads = sorted(owner)
    rate = float(md.SYNTH_RATE)
    out = []
    for g, k in enumerate(heads):
        stop = heads[g + 1] if g + 1 < len(heads) else len(words)
        s0 = owner[k]
        s1 = owner[heads[g + 1]] if g + 1 < len(heads) else last
        sizes = [len(words[i][1]) for i in range(k, stop)]
        t = float(s0)
        for i, n in zip(range(k, stop), sizes):
            d = (s1 - s0) * n / sum(sizes)
            out.append(Word(words[i][1], words[i][0], (t - first) / rate, (t + d - first) / rate))
            t += d
    return x[first:last], out


def token_spans(tokenizer, text: str, words: Sequence[Word]) -> List[Tuple[int, float, float]]:
    """(token id, start s, end s) for every token of ``tokenizer.encode(text)``.

    Each word's span is shared evenly by its characters; a token spans its characters
    (leading spaces excluded), so a token of two Chinese characters covers both words
    and an English word of two tokens is split between them by length.
    """
    ids = tokenizer.encode(text)
    pieces = [tokenizer.decode([i]) for i in ids]
    if "".join(pieces) != text:
        raise ValueError(f"tokens of {text!r} do not decode piece by piece to the text")
    char_t: List[Tuple[float, float] | None] = [None] * len(text)
    for w in words:
        step = (w.end - w.start) / len(w.text)
        for k in range(len(w.text)):
            char_t[w.char_start + k] = (w.start + k * step, w.start + (k + 1) * step)
    spans, pos = [], 0
    for tid, p in zip(ids, pieces):
        times = [t for t in char_t[pos:pos + len(p)] if t is not None]
        pos += len(p)
        if times:
            spans.append((tid, times[0][0], times[-1][1]))
    return spans


def frame_centres(n_tokens: int) -> np.ndarray:
    """Centre time in seconds of each audio token of a clip: the conv stem turns every
    100-frame (1 s) chunk into 13 tokens of 8 mel frames each, the last one 4 frames."""
    j = np.arange(n_tokens)
    chunk, i = j // TOKENS_PER_CHUNK, j % TOKENS_PER_CHUNK
    first = i * 8
    width = np.minimum(8, CHUNK_FRAMES - first)
    return chunk * (CHUNK_FRAMES / 100.0) + (first + width / 2.0) / 100.0


def frame_labels(spans: Sequence[Tuple[int, float, float]], n_tokens: int, blank: int) -> np.ndarray:
    """Encoder-rate targets (n_tokens,): the token whose span holds the centre of each
    audio token, ``blank`` outside every span."""
    out = np.full(n_tokens, blank, dtype=np.int64)
    centres = frame_centres(n_tokens)
    for tid, s, e in spans:
        out[(centres >= s) & (centres < e)] = tid
    return out
