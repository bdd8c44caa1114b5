"""A Realtime transcription session's settings: parsed from ``session.update`` (the GA form,
``session.type == "transcription"``) or ``transcription_session.update`` (the beta form), and
echoed back in ``session.created`` / ``session.updated`` as the effective configuration.

Audio formats: ``audio/pcm`` (16-bit little-endian mono; 24 kHz by default, any rate
8000..192000 Hz accepted as ``format.rate``), ``audio/pcmu`` and ``audio/pcma`` (G.711 at 8 kHz);
the beta names ``pcm16``, ``g711_ulaw``, ``g711_alaw``. Everything is converted to 16 kHz float32.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import numpy as np

from ... import checks
from ...audio import PcmConverter, PcmFormat
from ...languages import LanguageError, language_code, resolve_language
from ...options import WORD_SPANS
from ...vad_events import VADOptions
from ..settings import MAX_CONTEXT_CHARS

logger = logging.getLogger(__name__)

PCM_RATE = 24000  # Hz: the Realtime API's PCM rate, the default here
G711_RATE = 8000  # Hz of G.711 (pcmu / pcma)
MIN_RATE, MAX_RATE = 8000, 192000  # Hz accepted as audio/pcm format.rate
FORMATS = ("audio/pcm", "audio/pcmu", "audio/pcma")
BETA_FORMATS = {"pcm16": "audio/pcm", "g711_ulaw": "audio/pcmu", "g711_alaw": "audio/pcma"}
# transcription.delay -> seconds of audio per decoded chunk (StreamOptions.chunk_size): a longer
# chunk reads more context at once (fewer errors), a delta comes later. Default "low" (1 s, as the
# /v1/stream default).
DELAYS = {"minimal": 0.5, "low": 1.0, "medium": 2.0, "high": 4.0, "xhigh": 8.0}
DEFAULT_DELAY = "low"
INCLUDE_LOGPROBS = "item.input_audio_transcription.logprobs"  # refused: the decoder keeps no log probabilities
INCLUDE_WORDS = "item.input_audio_transcription.words"  # this server's extension: word times (the aligner)
MAX_SILENCE_MS = 10_000  # longest silence_duration_ms / prefix_padding_ms accepted


class ConfigError(ValueError):
    """A session field this server cannot take: sent as an ``error`` event; the session keeps
    its previous settings."""

    def __init__(self, message: str, *, param: str, code: str = "invalid_value"):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


@dataclasses.dataclass(frozen=True)
class TurnDetection:
    """``server_vad``: the Silero VAD with these settings cuts the audio into items."""

    threshold: float = 0.5  # speech probability at or above which a 32 ms window is speech
    prefix_padding_ms: int = 300  # audio kept before (and after) the detected speech (VADOptions.speech_pad_ms)
    silence_duration_ms: int = 500  # silence that ends an item (VADOptions.min_silence_ms)

    def vad_options(self) -> VADOptions:
        return VADOptions(threshold=self.threshold, min_silence_ms=float(self.silence_duration_ms),
                          speech_pad_ms=float(self.prefix_padding_ms))

    def describe(self) -> dict:
        return {"type": "server_vad", "threshold": self.threshold, "prefix_padding_ms": self.prefix_padding_ms,
                "silence_duration_ms": self.silence_duration_ms}


@dataclasses.dataclass(frozen=True)
class RealtimeConfig:
    """The effective settings of one transcription session (validated by ``update``)."""

    format: str = "audio/pcm"  # one of FORMATS
    rate: int = PCM_RATE  # Hz of audio/pcm (G.711: 8000)
    language: Optional[str] = None  # canonical name; None: detected per item
    prompt: str = ""  # context biasing text
    keywords: tuple = ()  # more context biasing (joined after the prompt)
    model: Optional[str] = None  # the transcription model named (any name is served, as /v1/audio/transcriptions)
    delay: str = DEFAULT_DELAY  # a key of DELAYS
    turn_detection: Optional[TurnDetection] = TurnDetection()  # None: the client commits
    words: bool = False  # INCLUDE_WORDS asked: word times in each completed event
    word_spans: str = "speech"  # transcription.word_spans (this server's extension): TranscribeOptions.word_spans

    @property
    def chunk_size(self) -> float:
        return DELAYS[self.delay]

    @property
    def context(self) -> str:
        return "\n".join([self.prompt] + [", ".join(self.keywords)] * bool(self.keywords)).strip()

    def converter(self) -> "AudioConverter":
        return AudioConverter(self.format, self.rate)

    # ---------------------------------------------------------------- parsing
    def update(self, session, *, beta: bool, has_aligner: bool, model_name: str, strict_model: bool) -> "RealtimeConfig":
        """These settings with the fields of a ``session`` object applied (absent fields stay)."""
        if not isinstance(session, dict):
            raise ConfigError(f"session must be an object, got {checks.show(session)}", param="session")
        if beta:
            return self._update_beta(session, has_aligner, model_name, strict_model)
        kind = session.get("type", "transcription")
        if kind != "transcription":
            raise ConfigError(f"this server serves transcription sessions only (session.type \"transcription\"), "
                              f"not {checks.show(kind)}: connect with ?intent=transcription",
                              param="session.type", code="unsupported_session_type")
        known = {"type", "audio", "include", "object", "id", "expires_at", "client_secret"}
        _unknown(session, known, "session")
        new = self
        audio = _object(session.get("audio", {}), "session.audio")
        _unknown(audio, {"input", "output"}, "session.audio")
        inp = _object(audio.get("input", {}), "session.audio.input")
        _unknown(inp, {"format", "transcription", "turn_detection", "noise_reduction"}, "session.audio.input")
        if "format" in inp:
            new = new._format(inp["format"], "session.audio.input.format")
        if "transcription" in inp:
            new = new._transcription(inp["transcription"], "session.audio.input.transcription", model_name,
                                     strict_model)
        if "turn_detection" in inp:
            new = new._turn_detection(inp["turn_detection"], "session.audio.input.turn_detection")
        if inp.get("noise_reduction") is not None:
            logger.info("a realtime session asked for noise reduction: not applied (the audio is transcribed as sent)")
        if "include" in session:
            new = new._include(session["include"], "session.include", has_aligner)
        return new

    def _update_beta(self, s: dict, has_aligner: bool, model_name: str, strict_model: bool) -> "RealtimeConfig":
        known = {"input_audio_format", "input_audio_transcription", "turn_detection", "input_audio_noise_reduction",
                 "include", "modalities", "object", "id", "expires_at", "client_secret"}
        _unknown(s, known, "session")
        new = self
        if "input_audio_format" in s:
            fmt = s["input_audio_format"]
            if fmt not in BETA_FORMATS:
                raise ConfigError(f"input_audio_format must be one of {', '.join(BETA_FORMATS)}, got "
                                  f"{checks.show(fmt)}", param="session.input_audio_format",
                                  code="invalid_audio_format")
            name = BETA_FORMATS[fmt]
            new = dataclasses.replace(new, format=name, rate=PCM_RATE if name == "audio/pcm" else G711_RATE)
        if "input_audio_transcription" in s:
            new = new._transcription(s["input_audio_transcription"], "session.input_audio_transcription",
                                     model_name, strict_model)
        if "turn_detection" in s:
            new = new._turn_detection(s["turn_detection"], "session.turn_detection")
        if s.get("input_audio_noise_reduction") is not None:
            logger.info("a realtime session asked for noise reduction: not applied (the audio is transcribed as sent)")
        if "include" in s:
            new = new._include(s["include"], "session.include", has_aligner)
        return new

    def _format(self, fmt, param: str) -> "RealtimeConfig":
        fmt = _object(fmt, param)
        _unknown(fmt, {"type", "rate"}, param)
        kind = fmt.get("type", "audio/pcm")
        if kind not in FORMATS:
            raise ConfigError(f"{param}.type must be one of {', '.join(FORMATS)}, got {checks.show(kind)}",
                              param=f"{param}.type", code="invalid_audio_format")
        if kind != "audio/pcm":
            if fmt.get("rate", G711_RATE) != G711_RATE:
                raise ConfigError(f"{kind} is {G711_RATE} Hz; got rate {checks.show(fmt.get('rate'))}",
                                  param=f"{param}.rate", code="invalid_audio_format")
            return dataclasses.replace(self, format=kind, rate=G711_RATE)
        rate = fmt.get("rate", PCM_RATE)
        problem = checks.integer(f"{param}.rate", rate, MIN_RATE, MAX_RATE)
        if problem:
            raise ConfigError(problem, param=f"{param}.rate", code="invalid_audio_format")
        return dataclasses.replace(self, format=kind, rate=rate)

    def _transcription(self, t, param: str, model_name: str, strict_model: bool) -> "RealtimeConfig":
        if t is None:  # "turn transcription off": a transcription session always transcribes
            return self
        t = _object(t, param)
        _unknown(t, {"model", "language", "languages", "prompt", "keywords", "delay", "word_spans"}, param)
        changes = {}
        if "model" in t:
            model = t["model"]
            if not isinstance(model, str):
                raise ConfigError(f"{param}.model must be a string", param=f"{param}.model")
            if strict_model and model != model_name:
                raise ConfigError(f"unknown model {checks.show(model)}; this server serves {model_name!r}",
                                  param=f"{param}.model", code="model_not_found")
            changes["model"] = model
        if "language" in t or "languages" in t:
            given = t.get("language")
            if given is None and isinstance(t.get("languages"), list) and len(t["languages"]) == 1:
                given = t["languages"][0]  # one possible language: forced; several: detected
            try:
                changes["language"] = resolve_language(given)
            except LanguageError as exc:
                raise ConfigError(str(exc), param=f"{param}.language", code="invalid_language") from None
        if "prompt" in t:
            prompt = t["prompt"] or ""
            problem = checks.text(f"{param}.prompt", prompt, MAX_CONTEXT_CHARS)
            if problem:
                raise ConfigError(problem, param=f"{param}.prompt")
            changes["prompt"] = prompt
        if "keywords" in t:
            kw = t["keywords"] or []
            if not isinstance(kw, list) or not all(isinstance(k, str) for k in kw) or \
                    sum(len(k) + 2 for k in kw) > MAX_CONTEXT_CHARS:
                raise ConfigError(f"{param}.keywords must be a list of strings of at most {MAX_CONTEXT_CHARS} "
                                  f"characters in all", param=f"{param}.keywords")
            changes["keywords"] = tuple(kw)
        if "delay" in t:
            if t["delay"] not in DELAYS:
                raise ConfigError(f"{param}.delay must be one of {', '.join(DELAYS)} (seconds of audio per decoded "
                                  f"chunk: {', '.join(f'{k} {v:g}' for k, v in DELAYS.items())}), got "
                                  f"{checks.show(t['delay'])}", param=f"{param}.delay")
            changes["delay"] = t["delay"]
        if "word_spans" in t:
            if t["word_spans"] not in WORD_SPANS:
                raise ConfigError(f"{param}.word_spans must be one of {', '.join(WORD_SPANS)} (what the word times of "
                                  f"{INCLUDE_WORDS} say), got {checks.show(t['word_spans'])}",
                                  param=f"{param}.word_spans")
            changes["word_spans"] = t["word_spans"]
        new = dataclasses.replace(self, **changes)
        if len(new.context) > MAX_CONTEXT_CHARS:
            raise ConfigError(f"prompt and keywords are {len(new.context)} characters, over the limit of "
                              f"{MAX_CONTEXT_CHARS}", param=f"{param}.prompt")
        return new

    def _turn_detection(self, td, param: str) -> "RealtimeConfig":
        if td is None:
            return dataclasses.replace(self, turn_detection=None)
        td = _object(td, param)
        kind = td.get("type", "server_vad")
        if kind != "server_vad":
            raise ConfigError(f"{param}.type {checks.show(kind)} is not supported; use \"server_vad\" (Silero VAD) "
                              f"or turn_detection null (commit yourself)", param=f"{param}.type",
                              code="unsupported_value")
        _unknown(td, {"type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response",
                      "interrupt_response", "idle_timeout_ms"}, param)
        base = self.turn_detection or TurnDetection()
        threshold = td.get("threshold", base.threshold)
        if checks.number(f"{param}.threshold", threshold, 0, 1) or not 0 < threshold < 1:
            raise ConfigError(f"{param}.threshold must be a number in (0, 1), got {checks.show(threshold)}",
                              param=f"{param}.threshold")
        values = {}
        for name in ("prefix_padding_ms", "silence_duration_ms"):
            values[name] = td.get(name, getattr(base, name))
            problem = checks.integer(f"{param}.{name}", values[name], 0, MAX_SILENCE_MS)
            if problem:
                raise ConfigError(problem, param=f"{param}.{name}")
        return dataclasses.replace(self, turn_detection=TurnDetection(float(threshold), **values))

    def _include(self, include, param: str, has_aligner: bool) -> "RealtimeConfig":
        if include is None:
            include = []
        if not isinstance(include, list):
            raise ConfigError(f"{param} must be a list", param=param)
        for item in include:
            if item == INCLUDE_LOGPROBS:
                raise ConfigError(f"{INCLUDE_LOGPROBS} is not supported: this server's decoder keeps no log "
                                  f"probabilities", param=param, code="unsupported_value")
            if item != INCLUDE_WORDS:
                raise ConfigError(f"{param} entry {checks.show(item)} is not supported; accepted: {INCLUDE_WORDS}",
                                  param=param, code="unsupported_value")
        words = INCLUDE_WORDS in include
        if words and not has_aligner:
            raise ConfigError(f"{INCLUDE_WORDS} needs a forced aligner: start the server with --aligner DIR "
                              f"(docs/aligner.md)", param=param, code="unsupported_value")
        return dataclasses.replace(self, words=words)

    # ---------------------------------------------------------------- echo
    def describe(self, session_id: str, *, beta: bool, model_name: str) -> dict:
        """The session object of ``session.created`` / ``session.updated`` (GA) or
        ``transcription_session.updated`` (beta)."""
        transcription = {"model": self.model or model_name, "language": _code(self.language),
                         "prompt": self.prompt, "delay": self.delay, "word_spans": self.word_spans}
        if self.keywords:
            transcription["keywords"] = list(self.keywords)
        turn = self.turn_detection.describe() if self.turn_detection else None
        include = [INCLUDE_WORDS] if self.words else []
        if beta:
            beta_format = {v: k for k, v in BETA_FORMATS.items()}[self.format]
            return {"id": session_id, "object": "realtime.transcription_session", "input_audio_format": beta_format,
                    "input_audio_transcription": transcription, "turn_detection": turn,
                    "input_audio_noise_reduction": None, "include": include}
        fmt = {"type": self.format, "rate": self.rate} if self.format == "audio/pcm" else {"type": self.format}
        return {"type": "transcription", "id": session_id, "object": "realtime.transcription_session",
                "audio": {"input": {"format": fmt, "transcription": transcription, "turn_detection": turn,
                                    "noise_reduction": None}},
                "include": include}


def _code(language: Optional[str]) -> Optional[str]:
    return None if language is None else language_code(language)


def _object(value, param: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{param} must be an object, got {checks.show(value)}", param=param)
    return value


def _unknown(obj: dict, known: set, param: str) -> None:
    extra = sorted(set(obj) - known)
    if extra:
        raise ConfigError(f"unknown field(s) {', '.join(checks.show(k) for k in extra[:5])} in {param}; accepted: "
                          f"{', '.join(sorted(known))}", param=f"{param}.{str(extra[0])[:40]}", code="unknown_parameter")


# ---------------------------------------------------------------------- audio
def _ulaw_table() -> np.ndarray:
    """G.711 mu-law byte -> int16 sample (ITU-T G.711, as audioop.ulaw2lin)."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent, mantissa = (u >> 4) & 7, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(u & 0x80, -magnitude, magnitude).astype("<i2")


def _alaw_table() -> np.ndarray:
    """G.711 A-law byte -> int16 sample (ITU-T G.711, as audioop.alaw2lin)."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    exponent, mantissa = (a >> 4) & 7, a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(a & 0x80, magnitude, -magnitude).astype("<i2")


G711_TABLES = {"audio/pcmu": _ulaw_table(), "audio/pcma": _alaw_table()}


class AudioConverter:
    """Bytes of one session format -> (n,) float32 16 kHz, append by append (a partial PCM16
    sample waits for the next append; ``flush()`` returns the resampler's last samples)."""

    def __init__(self, fmt: str, rate: int):
        self.table = G711_TABLES.get(fmt)
        self.pcm = PcmConverter(PcmFormat(rate, 2, 1))
        self.rate = rate

    def convert(self, data: bytes) -> np.ndarray:
        if self.table is not None:
            data = self.table[np.frombuffer(data, np.uint8)].tobytes()
        return self.pcm.convert(data)

    def flush(self) -> np.ndarray:
        return self.pcm.flush()
