"""``POST /v1/audio/alignments``: the word times of a given transcript in an uploaded file
(forced alignment, ``engine.align``).

Multipart fields: ``file`` (the audio, as /v1/audio/transcriptions takes it, with the same
upload and duration limits), ``text`` (the transcript), optional ``language`` (a name or code the
aligner covers; absent: detected with the ASR model first) and ``word_spans`` (``speech``, the
default, ``raw`` or ``checked``: TranscribeOptions.word_spans; a collapsed piece's segment carries
``words_flag``). The answer::

    {"text": ..., "language": "English", "duration": 3.2,
     "words": [{"word": "open", "start": 0.24, "end": 0.48}, ...],
     "segments": [{"start": 0.0, "end": 3.2, "text": ..., "words": [...]}]}

A request is a "bulk" client of the scheduler, as an upload. Audio longer than one aligner pass
is cut at speech and transcribed to place the text (qwen3asr.aligner.long): ``segments`` then
holds one entry per aligned piece, each with its part of the text and its words.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import BinaryIO, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..aligner.model import AlignmentError
from ..audio import SAMPLE_RATE
from ..checks import show
from ..languages import LanguageError, resolve_language
from ..options import WORD_SPANS
from ..work import Cancelled
from .errors import ApiError
from .jobs import decode_upload
from .metrics import outcome_of
from .openai_api import _field, _read_form, _run_watched
from .scheduler import BULK

logger = logging.getLogger(__name__)

SURFACE = "alignments"
FIELDS = ("file", "text", "language", "model", "word_spans")
MAX_TEXT_CHARS = 20_000  # a transcript of 60 s of speech is far shorter


@dataclasses.dataclass(frozen=True)
class AlignmentRequest:
    file: BinaryIO  # the upload, spooled (the request closes it)
    filename: str
    text: str
    language: Optional[str]  # canonical name, None: detect
    word_spans: str = "speech"  # TranscribeOptions.word_spans


def _no_aligner() -> ApiError:
    return ApiError(400, "this server has no forced aligner, so no alignments: start it with --aligner DIR "
                         "(docs/aligner.md)", code="no_aligner")


async def _fields(form, rt) -> AlignmentRequest:
    unknown = sorted(set(form.keys()) - set(FIELDS))
    if unknown:
        raise ApiError(400, f"unknown field(s) {', '.join(show(k) for k in unknown[:5])}; accepted: "
                            f"{', '.join(FIELDS)}", code="unknown_field", param=str(unknown[0])[:40])
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ApiError(400, "missing the 'file' field: attach the audio file as multipart field 'file'",
                       code="missing_file", param="file")
    text = (_field(form, "text") or "").strip()
    if not text:
        raise ApiError(400, "missing the 'text' field: the transcript whose words are to be timed",
                       code="missing_text", param="text")
    if len(text) > MAX_TEXT_CHARS:
        raise ApiError(400, f"text is {len(text)} characters, over the limit of {MAX_TEXT_CHARS}",
                       code="text_too_long", param="text")
    try:
        language = resolve_language(_field(form, "language"))
    except LanguageError as exc:
        raise ApiError(400, str(exc), code="invalid_language", param="language") from None
    word_spans = _field(form, "word_spans") or "speech"
    if word_spans not in WORD_SPANS:
        raise ApiError(400, f"word_spans {show(word_spans)}: accepted {', '.join(WORD_SPANS)}",
                       code="unsupported_value", param="word_spans")
    upload.file.seek(0)
    return AlignmentRequest(upload.file, upload.filename or "file", text, language, word_spans)


def _check_aligner(engine, language: Optional[str]) -> None:
    """Loads the aligner; ApiError 400 when it cannot align ``language``."""
    try:
        aligner = engine.aligner
        if language is not None:
            aligner.check_language(language)
    except AlignmentError as exc:
        raise ApiError(400, f"cannot align: {exc}", code="unsupported_language" if language else "no_aligner",
                       param="language" if language else None) from None


def _align(engine, audio, req: AlignmentRequest, work) -> tuple[str, list]:
    """(language, segments with their words) of one request (qwen3asr.aligner.long)."""
    from ..aligner.long import align_long

    pcm = audio.read(0, audio.n_samples)
    language = req.language
    if language is None:  # detect it (the ASR model), then check the aligner has it
        language = engine.transcribe(pcm, language=None, word_timestamps=False, work=work).language
        if language is None:
            raise ApiError(400, "the ASR model heard no language in this audio; give 'language'",
                           code="unsupported_language", param="language")
        _check_aligner(engine, language)
    try:
        return language, align_long(engine, pcm, req.text, language, work=work, spans=req.word_spans)
    except AlignmentError as exc:
        raise ApiError(400, f"cannot align: {exc}", code="alignment_failed", param="text") from None


async def alignments(request: Request) -> Response:
    rt = request.app.state.runtime
    outcome, code = "client_error", None
    client = req = audio = None
    try:
        rt.check_key(request.headers.get("authorization"))
        engine = rt.ready_engine()
        if engine.aligner_dir is None:
            raise _no_aligner()
        client = rt.admit(f"align:{request.client.host if request.client else '?'}:{time.monotonic_ns()}", BULK)
        req = await _read_form(request, rt, _fields)
        await rt.run(_check_aligner, engine, req.language)
        audio = await rt.run(decode_upload, req.file, req.filename, rt.settings.max_audio_seconds)
        duration = audio.n_samples / SAMPLE_RATE
        try:
            result = await _run_watched(request, client, lambda: rt.run(_align, engine, audio, req, client.work))
        except Cancelled:
            raise rt.shutting_down() from None
        if result is None:
            outcome = "cancelled"
            return Response(status_code=499)
        language, segments = result
        rt.metrics.audio(SURFACE, duration, client.busy_ms / 1000)
        outcome = "ok"
        return JSONResponse({"text": req.text, "language": language, "duration": round(duration, 3),
                             "words": [w.to_dict() for s in segments for w in s.words],
                             "segments": [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
                                           "words": [w.to_dict() for w in s.words],
                                           **({"words_flag": s.words_flag} if s.words_flag else {})}
                                          for s in segments]})
    except ApiError as err:
        outcome, code = outcome_of(err.status), err.code
        raise err from None
    except BaseException:
        outcome, code = "error", "internal_error"
        raise
    finally:
        rt.metrics.request(SURFACE, outcome, code)
        if client is not None:
            client.close()
        if audio is not None:
            audio.close()
        if req is not None:
            req.file.close()
