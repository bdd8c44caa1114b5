"""OpenAI-compatible HTTP: POST /v1/audio/transcriptions and GET /v1/models.

The request fields, response formats and streaming events follow the OpenAI audio API, so the
official clients work unchanged (see docs/serving.md for what each field does here).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import zlib
from typing import BinaryIO, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from .. import checks
from ..audio import SAMPLE_RATE
from ..checks import SHOW_CHARS, show
from ..languages import LanguageError, resolve_language
from ..options import WORD_SPANS, TranscribeOptions
from ..results import Transcription
from ..work import Cancelled
from .errors import ApiError
from .jobs import decode_upload, transcribe_file
from .metrics import outcome_of
from .scheduler import BULK
from .settings import MAX_CONTEXT_CHARS

logger = logging.getLogger(__name__)

SURFACE = "transcriptions"  # the metrics' name of this endpoint

# An upload stays in the file the multipart parser spooled it to (in memory up to 1 MiB, on disk
# beyond) and is decoded from there in 10 s blocks: a request never holds its upload or its audio
# whole (docs/serving.md "Memory ceilings of one request").
RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
MAX_TEMPERATURE = 2.0  # OpenAI's audio API accepts 0..2
FIELDS = ("file", "model", "language", "prompt", "response_format", "temperature", "stream",
          "timestamp_granularities[]", "timestamp_granularities", "include[]", "chunking_strategy", "word_spans")


@dataclasses.dataclass(frozen=True)
class TranscriptionRequest:
    """The validated fields of one POST /v1/audio/transcriptions."""

    file: BinaryIO  # the uploaded file, spooled to disk (the request closes it)
    filename: str
    language: Optional[str]  # canonical name ("English") or None: detect
    context: str  # the prompt, used as context biasing
    response_format: str  # one of RESPONSE_FORMATS
    temperature: float  # 0 = greedy
    stream: bool  # Server-Sent Events
    words: bool = False  # timestamp_granularities[] has "word": verbose_json gains "words"
    word_spans: Optional[str] = None  # "speech", "raw" or "checked" (TranscribeOptions.word_spans); None: the engine's

    def options(self, base: TranscribeOptions) -> TranscribeOptions:
        """The engine's options ``base`` with this request's language, prompt (as context),
        temperature and word timestamps; the rest (max_new_tokens, chunking) stays the engine's."""
        return dataclasses.replace(base, language=self.language, context=self.context, temperature=self.temperature,
                                   word_timestamps=self.words, word_spans=self.word_spans or base.word_spans)


class _BodyTooLarge(Exception):
    pass


def _limited(receive, limit: int):
    """An ASGI receive that raises _BodyTooLarge once more than ``limit`` body bytes arrived."""
    seen = 0

    async def wrapped():
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise _BodyTooLarge()
        return message

    return wrapped


def _too_large(limit_mb: float) -> ApiError:
    return ApiError(413, f"the request is larger than this server's upload limit of {limit_mb:g} MB; send a "
                         f"shorter or compressed file (FLAC, OGG)", code="file_too_large", param="file")


async def _read_form(request: Request, rt, parse=None):
    """The multipart form of an upload, limited to the server's upload size, parsed by ``parse``
    (async (form, rt) -> request; default: a transcription's fields); the parsed request owns the
    upload's file (it closes it)."""
    parse = parse or _fields
    settings = rt.settings
    ctype = request.headers.get("content-type", "")
    if not ctype.lower().startswith("multipart/form-data"):
        raise ApiError(400, f"expected a multipart/form-data body with a 'file' field, got content type "
                            f"{show(ctype or 'none')}", code="invalid_content_type")
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > settings.max_upload_bytes:
        raise _too_large(settings.max_upload_mb)
    limited = Request(request.scope, _limited(request.receive, settings.max_upload_bytes))
    try:
        form = await limited.form(max_files=1, max_fields=32)
    except _BodyTooLarge:
        raise _too_large(settings.max_upload_mb) from None
    except Exception as exc:  # python-multipart / starlette parse errors
        reason = getattr(exc, "detail", None) or exc
        raise ApiError(400, f"malformed multipart/form-data body ({reason}); send the audio as field 'file'",
                       code="invalid_multipart") from None
    try:
        return await parse(form, rt)  # the request owns the upload's file from here (it closes it)
    except BaseException:
        await form.close()
        raise


def _field(form, name: str) -> Optional[str]:
    v = form.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ApiError(400, f"field {show(name)} must be text, not a file", code="invalid_field", param=name)
    return v


GRANULARITIES = ("segment", "word")


def _granularities(form) -> set:
    """The timestamp_granularities[] asked for (OpenAI: "segment", "word")."""
    asked = set()
    for name in ("timestamp_granularities[]", "timestamp_granularities"):
        for v in form.getlist(name):
            if v not in GRANULARITIES:
                raise ApiError(400, f"{name} {show(v)} is not supported; accepted: {', '.join(GRANULARITIES)}",
                               code="unsupported_value", param=name)
            asked.add(v)
    return asked


def _check_unsupported(form) -> None:
    """OpenAI fields this server accepts only with the value it really implements."""
    _granularities(form)
    if form.getlist("include[]"):
        raise ApiError(400, "include[] is not supported (no log probabilities are computed)",
                       code="unsupported_value", param="include[]")
    strategy = _field(form, "chunking_strategy")
    if strategy not in (None, "auto"):
        raise ApiError(400, f"chunking_strategy {show(strategy)} is not supported; long audio is always cut "
                            f"at speech (VAD) or in 30 s chunks ('auto')", code="unsupported_value",
                       param="chunking_strategy")


async def _fields(form, rt) -> TranscriptionRequest:
    unknown = sorted(set(form.keys()) - set(FIELDS))
    if unknown:
        raise ApiError(400, f"unknown field(s) {', '.join(show(k) for k in unknown[:5])}"
                            f"{', ...' if unknown[5:] else ''}; accepted: {', '.join(FIELDS[:7])}",
                       code="unknown_field", param=unknown[0][:SHOW_CHARS])
    upload = form.get("file")
    if upload is None:
        raise ApiError(400, "missing the 'file' field: attach the audio file as multipart field 'file'",
                       code="missing_file", param="file")
    if isinstance(upload, str):
        raise ApiError(400, "the 'file' field must be a file upload, not text", code="invalid_file", param="file")
    _check_unsupported(form)
    model = _field(form, "model")
    if model is not None and model != rt.settings.model_name:
        if rt.settings.strict_model:
            raise ApiError(400, f"unknown model {show(model)}; this server serves {rt.settings.model_name!r} "
                                f"(GET /v1/models)", code="model_not_found", param="model")
        logger.info("a request names model %r; serving it with %r (--strict-model refuses other names)",
                    model[:100], rt.settings.model_name)
    try:
        language = resolve_language(_field(form, "language"))
    except LanguageError as exc:
        raise ApiError(400, str(exc), code="invalid_language", param="language") from None
    fmt = (_field(form, "response_format") or "json").strip()
    if fmt not in RESPONSE_FORMATS:
        raise ApiError(400, f"unknown response_format {show(fmt)}; accepted: {', '.join(RESPONSE_FORMATS)}",
                       code="invalid_response_format", param="response_format")
    raw_t = _field(form, "temperature")
    temperature = 0.0
    if raw_t is not None and raw_t.strip():
        try:
            temperature = float(raw_t)
        except ValueError:
            temperature = float("nan")
        if checks.number("temperature", temperature, 0, MAX_TEMPERATURE):
            accepted = checks.requirement("a number", 0, MAX_TEMPERATURE)
            raise ApiError(400, checks.problem("temperature", accepted, raw_t), code="invalid_temperature",
                           param="temperature")
    raw_s = (_field(form, "stream") or "false").strip().lower()
    if raw_s not in ("true", "false", "1", "0"):
        raise ApiError(400, f"stream must be true or false, got {show(raw_s)}", code="invalid_stream", param="stream")
    stream = raw_s in ("true", "1")
    if stream and fmt not in ("json", "text"):
        raise ApiError(400, f"stream=true sends text events; response_format {fmt!r} cannot be streamed "
                            f"(use json or text)", code="invalid_response_format", param="response_format")
    words = "word" in _granularities(form)
    if words and fmt != "verbose_json":
        raise ApiError(400, f"timestamp_granularities[]=word needs response_format verbose_json (got {fmt!r}), as "
                            f"OpenAI's API", code="invalid_response_format", param="timestamp_granularities[]")
    if words and rt.engine is not None and rt.engine.aligner_dir is None:
        raise ApiError(400, "this server has no forced aligner, so no word timestamps: start it with --aligner DIR "
                            "(docs/aligner.md)", code="unsupported_value", param="timestamp_granularities[]")
    word_spans = _field(form, "word_spans")
    if word_spans is not None and (not words or word_spans not in WORD_SPANS):
        raise ApiError(400, f"word_spans {show(word_spans)}: accepted {', '.join(WORD_SPANS)}, with "
                            f"timestamp_granularities[]=word", code="unsupported_value", param="word_spans")
    context = _field(form, "prompt") or ""
    if len(context) > MAX_CONTEXT_CHARS:
        raise ApiError(400, f"prompt is {len(context)} characters, over the limit of {MAX_CONTEXT_CHARS}",
                       code="prompt_too_long", param="prompt")
    upload.file.seek(0)
    return TranscriptionRequest(file=upload.file, filename=upload.filename or "file", language=language,
                                context=context, response_format=fmt, temperature=temperature, stream=stream,
                                words=words, word_spans=word_spans)


# ---------------------------------------------------------------------- responses
def _segments(engine, result: Transcription, temperature: float) -> list:
    out = []
    for i, seg in enumerate(result.segments):
        enc = seg.text.encode("utf-8")
        out.append({
            "id": i, "seek": int(round(seg.start * 100)), "start": round(seg.start, 3), "end": round(seg.end, 3),
            "text": seg.text, "tokens": engine.tokenizer.encode(seg.text), "temperature": temperature,
            "compression_ratio": len(enc) / len(zlib.compress(enc)) if enc else 0.0,
            "language": seg.language, "finish_reason": seg.finish_reason,
            **({"words_flag": seg.words_flag} if seg.words_flag else {}),
        })
    return out


def format_result(engine, result: Transcription, req: TranscriptionRequest, duration: float) -> Response:
    """The body of a finished transcription in the requested response_format."""
    fmt = req.response_format
    if fmt == "text":
        return PlainTextResponse(result.text)
    if fmt in ("srt", "vtt"):
        from ..subtitles import to_srt, to_vtt

        body = (to_srt if fmt == "srt" else to_vtt)(result.segments)
        return PlainTextResponse(body, media_type="text/vtt" if fmt == "vtt" else "application/x-subrip")
    usage = {"type": "duration", "seconds": round(duration, 3)}
    if fmt == "json":
        return JSONResponse({"text": result.text, "usage": usage})
    body = {
        "task": "transcribe", "language": (result.language or "").lower(), "language_code": result.language_code,
        "duration": round(duration, 3), "text": result.text, "segments": _segments(engine, result, req.temperature),
        "usage": usage,
    }
    if req.words:  # OpenAI's TranscriptionVerbose.words
        body["words"] = [w.to_dict() for w in result.words]
    return JSONResponse(body)


async def _wait_disconnect(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _run_watched(request: Request, client, coro_fn):
    """Await the engine call; if the HTTP client disconnects first, cancel its scheduler client."""
    job = asyncio.ensure_future(coro_fn())
    watcher = asyncio.ensure_future(_wait_disconnect(request.receive))
    try:
        done, _ = await asyncio.wait({job, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server gave up on this request (grace period over)
        client.cancel()
        watcher.cancel()
        raise
    if job in done:
        watcher.cancel()
        return job.result()
    logger.info("client %s disconnected; cancelling its transcription", client.name)
    client.cancel()
    try:
        await job
    except Cancelled:
        pass
    return None


def _sse(event) -> bytes:
    if isinstance(event, str):
        return f"data: {event}\n\n".encode()
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


async def _stream_events(rt, client, req: TranscriptionRequest, audio):
    """SSE: a transcript.text.delta per committed piece, transcript.text.done, [DONE]."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def on_text(piece: str) -> None:  # in the worker thread
        loop.call_soon_threadsafe(queue.put_nowait, ("delta", piece))

    async def run():
        try:
            result = await rt.run(transcribe_file, rt.engine, audio, req.options(rt.engine.options),
                                  work=client.work, on_text=on_text)
            queue.put_nowait(("done", result))
        except BaseException as exc:
            queue.put_nowait(("error", exc))

    job = asyncio.ensure_future(run())
    outcome, code = "cancelled", None  # until an answer was sent
    try:
        while True:
            kind, value = await queue.get()
            if kind == "delta":
                yield _sse({"type": "transcript.text.delta", "delta": value})
            elif kind == "done":
                outcome = "ok"
                rt.metrics.audio(SURFACE, audio.n_samples / SAMPLE_RATE, client.busy_ms / 1000)
                yield _sse({"type": "transcript.text.done", "text": value.text,
                            "usage": {"type": "duration", "seconds": round(audio.n_samples / SAMPLE_RATE, 3)}})
                yield _sse("[DONE]")
                return
            else:
                if isinstance(value, ApiError):
                    err = value
                elif isinstance(value, Cancelled):  # not the client's doing (it would not read this): shutdown
                    err = rt.shutting_down()
                else:
                    err = ApiError(500, f"transcription failed: {value}", code="internal_error")
                    logger.error("streamed transcription failed", exc_info=value)
                outcome, code = outcome_of(err.status), err.code
                yield _sse({"type": "error", **err.body()})
                yield _sse("[DONE]")
                return
    finally:  # also when the client disconnected (the generator is closed or cancelled)
        rt.metrics.request(SURFACE, outcome, code)
        if not job.done():
            logger.info("client %s left during a streamed transcription; cancelling it", client.name)
            client.cancel()
            try:
                await job
            except BaseException:
                pass
        client.close()
        audio.close()
        req.file.close()


async def transcriptions(request: Request) -> Response:
    rt = request.app.state.runtime
    try:
        response = await _transcriptions(request, rt)
    except ApiError as err:
        rt.metrics.request(SURFACE, outcome_of(err.status), err.code)
        raise
    except BaseException:
        rt.metrics.request(SURFACE, "error", "internal_error")
        raise
    if not isinstance(response, StreamingResponse):  # a stream counts itself when it ends
        rt.metrics.request(SURFACE, outcome_of(response.status_code))
    return response


async def _transcriptions(request: Request, rt) -> Response:
    rt.check_key(request.headers.get("authorization"))
    engine = rt.ready_engine()
    client = rt.admit(f"http:{request.client.host if request.client else '?'}:{time.monotonic_ns()}", BULK)
    handed_over = False
    req = audio = None
    try:
        req = await _read_form(request, rt)
        audio = await rt.run(decode_upload, req.file, req.filename, rt.settings.max_audio_seconds)
        duration = audio.n_samples / SAMPLE_RATE
        if req.stream:
            handed_over = True
            return StreamingResponse(_stream_events(rt, client, req, audio), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            result = await _run_watched(request, client, lambda: rt.run(
                transcribe_file, engine, audio, req.options(engine.options), work=client.work))
        except Cancelled:  # not the client's doing: the scheduler closed (shutdown)
            raise rt.shutting_down() from None
        if result is None:
            return Response(status_code=499)  # nobody is listening any more
        rt.metrics.audio(SURFACE, duration, client.busy_ms / 1000)
        return format_result(engine, result, req, duration)
    finally:
        if not handed_over:
            client.close()
            if audio is not None:
                audio.close()
            if req is not None:
                req.file.close()


async def models(request: Request) -> Response:
    rt = request.app.state.runtime
    rt.check_key(request.headers.get("authorization"))
    return JSONResponse({"object": "list", "data": [
        {"id": rt.settings.model_name, "object": "model", "created": 0, "owned_by": "qwen3asr-rk"}]})
