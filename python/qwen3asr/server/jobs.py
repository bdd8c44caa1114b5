"""Blocking work for the server's worker threads: decode an upload, transcribe a file.

Runs in Runtime.executor threads, never on the event loop."""

from __future__ import annotations

import logging
from typing import BinaryIO, Callable, Optional, Union

import numpy as np

from ..aligner.model import AlignmentError
from ..audio import SAMPLE_RATE, AudioError, AudioFile
from ..options import TranscribeOptions
from ..results import Transcription
from ..work import Work
from .errors import ApiError

logger = logging.getLogger(__name__)

_FORMATS_HINT = ("send WAV, FLAC, OGG/Vorbis, MP3 or another format libsndfile reads "
                 "(convert others with `ffmpeg -i input -ar 16000 -ac 1 out.wav`)")


def decode_upload(file: BinaryIO, filename: str, max_seconds: float) -> AudioFile:
    """An uploaded file (a seekable binary file) -> an AudioFile that reads it block by block as
    (n,) float32 16 kHz mono (the caller closes it).

    Raises ApiError 400 (empty, undecodable, unusable audio) or 413 (longer than max_seconds).
    """
    import soundfile as sf

    file.seek(0, 2)
    if file.tell() == 0:
        raise ApiError(400, f"the uploaded file {filename!r} is empty (0 bytes)", code="empty_file", param="file")
    file.seek(0)
    try:
        info = sf.info(file)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        reason = str(exc).split(": ", 1)[-1]  # no object repr
        raise ApiError(400, f"cannot decode {filename!r} as audio ({reason}); {_FORMATS_HINT}",
                       code="invalid_audio", param="file") from None
    if info.samplerate > 0 and info.frames / info.samplerate > max_seconds:
        raise ApiError(413, f"the audio is {info.frames / info.samplerate:.1f} s long, over this server's limit "
                            f"of {max_seconds:g} s; cut it shorter", code="audio_too_long", param="file")
    file.seek(0)
    try:
        audio = AudioFile(file, name=repr(filename))
    except AudioError as exc:
        raise ApiError(400, f"unusable audio in {filename!r}: {exc}", code="invalid_audio", param="file") from None
    if audio.n_samples / SAMPLE_RATE > max_seconds:
        audio.close()
        raise ApiError(413, f"the audio is {audio.n_samples / SAMPLE_RATE:.1f} s long, over this server's limit of "
                            f"{max_seconds:g} s; cut it shorter", code="audio_too_long", param="file")
    return audio


def transcribe_file(engine, audio: Union[np.ndarray, AudioFile], options: TranscribeOptions, *, work: Work,
                    on_text: Optional[Callable[[str], None]] = None) -> Transcription:
    """One uploaded file through the engine with the request's ``options`` (the engine's long-audio
    policy: one pass when the audio fits, else VAD speech segments or chunks, as the CLI); raises
    qwen3asr.work.Cancelled, and ApiError 400 for audio or words the engine cannot take."""
    try:
        return engine.transcribe(audio, options, on_text=on_text, work=work)
    except AlignmentError as exc:
        raise ApiError(400, f"no word timestamps: {exc}", code="unsupported_value",
                       param="timestamp_granularities[]") from None
    except AudioError as exc:
        raise ApiError(400, f"cannot transcribe this audio: {exc}", code="invalid_audio", param="file") from None
