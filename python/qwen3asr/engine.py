"""Qwen3ASREngine: the loaded model, and the orchestrator of a request.

Every request, on every backend, runs the same stages::

    audio -> log-mel (mel) -> audio encoder (backend) -> prompt ids with the audio spliced in
    (prompt) -> text decoder (backend, the TextDecoder seam) -> text (prompt, text)

The engine loads the model, owns its lifetime, offers the entry points (``transcribe``,
``create_stream``, ``align``, ``start``) and the stage API, and calls the policies: the plan
(qwen3asr.plan: one pass or chunks), one pass (qwen3asr.onepass), long audio
(qwen3asr.longform), live audio (qwen3asr.streaming), decoding with its fallback
(qwen3asr.decoding), words (qwen3asr.aligner.segments). Backends never import the engine.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Optional, Union

import numpy as np

from . import checks
from . import mel as melmod
from .audio import (SAMPLE_RATE, AudioInput, prepare_audio)
from .backends import BACKENDS, create_backend, engine_backend_options
from .bundle import Bundle, EmbeddingTable, check_tokenizer, default_model_dir
from .decoding import DecodeOutcome, DecodingOptions, Generation, RepetitionGuard, decode_with_fallback
from .encoder import tokens_for_frames
from .errors import Qwen3ASRError
from .options import TranscribeOptions, build_options
from .plan import Planner, preload_seconds as plan_preload
from .prompt import Prompt, build_prompt
from .results import DecodeStats, EncodeStats, Request, Transcription
from .text import TextStreamer  # noqa: F401  (re-exported: tests and tools import it from here)
from .tokenizer import Tokenizer
from .aligner.segments import align_transcript, load_aligner, resolve_aligner_dir
from .work import NO_WORK, Work, check_hooks

logger = logging.getLogger(__name__)

__all__ = ["BACKENDS", "DecodeOutcome", "EncodeStats", "EngineClosed", "Qwen3ASREngine", "Request"]


class EngineClosed(Qwen3ASRError, RuntimeError):
    """The engine was closed (``engine.close()``); create a new Qwen3ASREngine."""


class Qwen3ASREngine:
    """A loaded Qwen3-ASR model.

    Args:
      model_dir: bundle made by scripts/export_onnx.py (default: $QWEN3ASR_MODEL or models/default).
      backend: "auto" (the NPU on a Rockchip board with its runtimes and RK models, else ONNX
        Runtime on the CPU), "onnx" (any CPU) or "rk" (fails with what is missing).
      encoder_form: "merged" (one graph per duration) or "split" (per-chunk front end + back end).
      encoder_sizes: only load these encoder durations (seconds); default all in the bundle.
      decoder_dtype: ONNX decoder weights: "auto" (int8 if present, else fp32; int4 first with
        ``memory="lean"``), "fp32", "int8", "int4".
      threads: CPU threads for ONNX Runtime (default: its own choice).
      spin_wait: ONNX Runtime's idle threads spin before they sleep: True, False (default), or "auto":
        a one-shot run's decoder only, if no other process runs at its load (docs/benchmarks.md).
      rk: board settings for the rk backend (qwen3asr.RKOptions: SoC, NPU cores, decoder CPUs, ...).
      options: the default TranscribeOptions of this engine's requests (each call may override).
      prefix_cache: reuse of the prompt prefix's KV cache on the ONNX decoder (qwen3asr.PrefixCacheOptions;
        max_entries=0 turns it off; default 8 prefixes, 128 MiB; rk: docs/rkllm_abi.md).
      memory: the ONNX Runtime memory profile: "default", or "lean" for small machines and one-shot
        runs (int4 decoder, smaller KV steps, with ``--memory lean`` bundles int8 encoder weights and
        mapped decoder weights; docs/benchmarks.md "Lean profile"); the aligner's too.
      preload_seconds: the first request's audio length (a one-shot CLI passes its file's): if the
        plan decodes it in one pass (qwen3asr.plan.preload_seconds) its encoder graphs load now (up to
        5 s with threads = the CPUs: one thread fewer) and the ONNX decoder in a thread, which that
        request waits for only when it decodes. Default None: on first use; rk: all at start.
      prepacked_cache: a directory keeping ONNX sessions' prepacked weights for a quicker next load.
      aligner: a forced-aligner bundle for word timestamps (docs/aligner.md); default
        ``$QWEN3ASR_ALIGNER``, else, with the bundled default model, the bundled demo aligner.
        Loaded on the first request that asks for words, with this engine's backend settings.
      platform / enabled_cpus / repeat_penalty: the spellings of ``rk.soc``, ``rk.cpus`` and
        ``options.repetition_penalty`` in the reference design (docs/reference_design.md).

    Use as ``with Qwen3ASREngine(...) as engine:`` or call ``close()`` to free the NPU and the
    sessions. One engine serves one request at a time (servers use qwen3asr.server.scheduler).
    """

    def __init__(self, model_dir: Optional[str] = None, backend: str = "auto", *, encoder_form: str = "merged",
                 encoder_sizes=None, decoder_dtype: str = "auto", threads: Optional[int] = None, rk=None,
                 options: Optional[TranscribeOptions] = None, platform: Optional[str] = None,
                 enabled_cpus=None, repeat_penalty: Optional[float] = None, prefix_cache=None,
                 spin_wait: Union[bool, str] = False, aligner: Optional[str] = None, memory: str = "default",
                 preload_seconds: Optional[float] = None, prepacked_cache: Optional[str] = None):
        for name, value in (("model_dir", model_dir), ("aligner", aligner)):
            problem = checks.path(name, value, optional=True)
            if problem:
                raise ValueError(problem)
        backend_options = engine_backend_options(
            backend, rk=rk, platform=platform, enabled_cpus=enabled_cpus, prefix_cache=prefix_cache,
            encoder_form=encoder_form, encoder_sizes=encoder_sizes, decoder_dtype=decoder_dtype, threads=threads,
            spin_wait=spin_wait, memory=memory, preload_seconds=preload_seconds, prepacked_cache=prepacked_cache)
        overrides = {} if repeat_penalty is None else {"repetition_penalty": repeat_penalty}
        self.options = build_options(options, overrides, "Qwen3ASREngine")
        self._closed = True  # until loaded: close() is harmless on a half-built engine
        self.bundle = Bundle.named(model_dir or default_model_dir(), "asr", memory, backend)  # a hub id: fetched
        self.bundle.require_kind("asr")
        self.tokenizer = Tokenizer.from_dir(self.bundle.path)
        check_tokenizer(self.bundle, self.tokenizer)
        self.embeddings = EmbeddingTable(self.bundle)
        self.n_mels = int(self.bundle.audio_config["num_mel_bins"])
        # audio that goes in chunks runs other graphs than its whole length's: nothing to preload
        backend_options = dataclasses.replace(backend_options, preload_seconds=plan_preload(
            preload_seconds, self.options, self.bundle.one_pass_seconds))
        loaded = create_backend(backend, self.bundle, backend_options, tokenizer=self.tokenizer,
                                embeddings=self.embeddings, decoding=self.options.decoding())
        self._backend = loaded
        self.backend = loaded.name
        self.encoder = loaded.encoder
        self.decoder = loaded.decoder
        self.decoder_dtype = getattr(self.decoder, "dtype", None)
        self.soc = loaded.soc  # the board's SoC with the rk backend, else None
        # one pass or chunks, at the decoder's context (an .rkllm model's KV length): every surface asks it
        self.planner = Planner(int(self.decoder.max_context), self.prompt_rows, self.bundle.one_pass_seconds,
                               lambda: self.aligner.piece_seconds)
        self._pool = None  # one background thread for encoder work overlapping the decoder (qwen3asr.streaming)
        self._backend_request = (backend, backend_options)
        self._aligner_dir = resolve_aligner_dir(aligner, self.bundle.path)
        self._aligner = None  # the ForcedAligner, loaded on first use
        self._closed = False
        logger.info("loaded %s (backend %s)", self.bundle.path, self.backend)

    @property
    def max_context(self) -> int:
        """Decoder positions (prompt + audio + generated tokens): the planner's limit."""
        return self.planner.max_context

    @max_context.setter
    def max_context(self, value: int) -> None:
        self.planner.max_context = int(value)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Free the NPU (RKLLM handle, RKNN models) or the ONNX sessions. Safe to call twice;
        any later use raises EngineClosed."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._aligner is not None:
            self._aligner.close()
            self._aligner = None
        self._backend.close()
        logger.info("closed %s", self.bundle.path)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Qwen3ASREngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_open(self) -> None:
        if self._closed:
            raise EngineClosed("this Qwen3ASREngine was closed (engine.close()); create a new one to transcribe")

    def background(self, fn: Callable, *args):
        """Run ``fn(*args)`` on the engine's one background thread; returns its Future. Used to
        encode the next chunk while the decoder works (TranscribeOptions.overlap)."""
        self.check_open()
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qwen3asr-encoder")
        return self._pool.submit(fn, *args)

    # ------------------------------------------------------------------ stages
    # The stage API: the contract that streaming (qwen3asr.streaming), long audio
    # (qwen3asr.longform), one pass (qwen3asr.onepass) and the tools build on. features, encode,
    # encode_timed, prompt, request_prompt, prompt_rows, embed_prompt, prefix_len, decoder_input,
    # generate, decode, prepare, background, planner, tokenizer, embeddings, max_context.
    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> log-mel (n_mels, frames) float32."""
        return melmod.log_mel(audio, self.n_mels)

    def encode(self, mel: np.ndarray) -> np.ndarray:  # -> audio embeddings (tokens, hidden) float32
        return self.encode_timed(mel)[0]

    def encode_timed(self, mel: np.ndarray, stems=None) -> tuple[np.ndarray, EncodeStats]:
        """log-mel (n_mels, frames) -> (embeddings (tokens, hidden) float32, EncodeStats); ``stems``: encoder.StemMemo."""
        self.check_open()
        t0 = time.perf_counter()
        calls0, secs0 = self.encoder.calls, self.encoder.seconds_encoded
        emb = self.encoder.encode(mel, stems)
        return emb, EncodeStats(self.encoder.calls - calls0, self.encoder.seconds_encoded - secs0,
                                (time.perf_counter() - t0) * 1000)

    def prompt(self, n_audio: int, context: str = "", language: Optional[str] = None,
               compact: bool = False) -> Prompt:
        """The prompt ids for ``n_audio`` audio rows (official template, or the compact one)."""
        return build_prompt(self.tokenizer, n_audio, context=context, language=language, compact=compact)

    def request_prompt(self, n_audio: int, options: TranscribeOptions) -> Prompt:
        """The prompt of a request with these options. A context that cannot fit the decoder
        context whatever its tokens is refused from its length, before it is tokenized."""
        n_bytes = len(options.context.encode("utf-8"))
        if n_bytes > self.max_context * self.tokenizer.max_token_bytes:
            raise ValueError(f"context is {n_bytes} bytes, at least {n_bytes // self.tokenizer.max_token_bytes} "
                             f"tokens: over the decoder context of {self.max_context} tokens; shorten it")
        return self.prompt(n_audio, options.context, options.language, options.compact_prompt)

    def prompt_rows(self, options: TranscribeOptions) -> int:
        """Decoder rows of a request's prompt without its audio (the system turn with the context,
        the chat template around the audio)."""
        return len(self.request_prompt(1, options)) - 1

    def check_prompt(self, options: TranscribeOptions) -> None:
        """ValueError when the prompt and the token budget leave no room for audio (Planner.check_prompt)."""
        self.planner.check_prompt(options)

    def embed_prompt(self, prompt: Prompt, audio_embeds: np.ndarray) -> np.ndarray:
        """Embed the prompt ids and splice the audio embeddings over the audio pads: (L, hidden) float32."""
        if audio_embeds.shape[0] != prompt.n_audio:
            raise ValueError(f"{audio_embeds.shape[0]} audio embeddings for {prompt.n_audio} audio pads")
        x = self.embeddings(prompt.ids)
        x[prompt.audio_slice] = audio_embeds
        return x

    def prefix_len(self, options: TranscribeOptions) -> int:
        """Rows of a request's decoder input before the first audio pad (the system turn with the
        context, then ``<|im_start|>user\n<|audio_start|>``): the prefix shared by every run with
        these prompt options, whose KV cache the decoder may reuse."""
        return self.request_prompt(1, options).audio_start

    def decoder_input(self, audio_embeds: np.ndarray, options: TranscribeOptions, answer_ids=()) -> np.ndarray:
        """The whole decoder input: the request's prompt with ``audio_embeds`` (tokens, hidden)
        spliced in, then the embedded ``answer_ids`` (text already in the assistant turn):
        (L, hidden) float32."""
        x = self.embed_prompt(self.request_prompt(audio_embeds.shape[0], options), audio_embeds)
        if len(answer_ids):
            x = np.concatenate([x, self.embeddings(np.asarray(answer_ids, dtype=np.int64))], axis=0)
        return x

    def generate(self, prompt_embeds: np.ndarray, options: DecodingOptions = DecodingOptions(),
                 on_token: Optional[Callable[[int], Optional[bool]]] = None,
                 prefix_len: Optional[int] = None,
                 guard: Optional[RepetitionGuard] = None, draft=()) -> tuple[list[int], DecodeStats]:
        """Generate from an embedded prompt, (L, hidden) float32 prefilled in one go, on this
        engine's decoder: (ids without end-of-sequence, DecodeStats). The arguments are the
        TextDecoder seam's (qwen3asr.decoding): ``on_token`` sees each id and stops the run by
        returning False; ``prefix_len`` rows are the shared prompt prefix (``prefix_len(options)``)
        whose KV cache may be reused; ``guard`` stops a runaway repetition; ``draft``: ids the
        decoder may verify in its prefill."""
        self.check_open()
        extra = {"draft": tuple(draft)} if len(draft) else {}
        return self.decoder.generate(prompt_embeds, options, on_token, prefix_len=prefix_len, guard=guard, **extra)

    def decode(self, prompt_embeds: np.ndarray, options: DecodingOptions, *, audio_seconds: float,
               prefix_len: Optional[int] = None, fallback: bool = False,
               on_token: Optional[Callable[[int], Optional[bool]]] = None, draft=()) -> DecodeOutcome:
        """One decoder run as every request makes it: ``generate`` with the loop guard of
        ``audio_seconds`` of audio and, with ``fallback``, the fallback tries
        (qwen3asr.decoding.decode_with_fallback). ``on_token`` sees the first try's tokens only;
        ``draft``: ids the decoder may verify in its prefill instead of generating them one by one."""
        return decode_with_fallback(self.generate, self.tokenizer.decode, prompt_embeds, options,
                                    audio_seconds=audio_seconds, prefix_len=prefix_len, fallback=fallback,
                                    on_token=on_token, draft=draft)

    def prepare(self, pcm: np.ndarray, options: Optional[TranscribeOptions] = None, *, front=None, **kw) -> Request:
        """16 kHz mono float32 (from prepare_audio) -> the embedded prompt, checked against the context;
        ``front``: its log-mel and conv stems partly computed ahead (qwen3asr.streaming.ahead)."""
        self.check_open()
        o = build_options(options or self.options, kw, "prepare")
        t0 = time.perf_counter()
        # checked against the context before the mel and the prompt are made: their size grows with the audio
        self.planner.check_context(pcm.shape[0], o)
        mel = self.features(pcm) if front is None else front.features(pcm)
        prompt = self.request_prompt(tokens_for_frames(mel.shape[1]), o)
        emb, es = self.encode_timed(mel, None if front is None else front.stems)
        return Request(prompt=prompt, embeds=self.embed_prompt(prompt, emb), audio_seconds=pcm.shape[0] / SAMPLE_RATE,
                       encoder_ms=(time.perf_counter() - t0) * 1000, encoder_calls=es.calls, t0=t0)

    # ------------------------------------------------------------------ public
    def start(self, audio: AudioInput, options: Optional[TranscribeOptions] = None, *,
              sample_rate: Optional[int] = None, **kw) -> tuple[Generation, Request]:
        """Encode and prepare one request; returns a (pausable, clonable) Generation and the Request.
        Only backends that sample on the host offer this (the ONNX one)."""
        self.check_open()
        if not hasattr(self.decoder, "start"):
            raise RuntimeError(f"start() needs a decoder that generates on the host (backend 'onnx'); the "
                               f"{self.backend} backend generates inside its runtime: use transcribe()")
        o = build_options(options or self.options, kw, "start")
        req = self.prepare(prepare_audio(audio, sample_rate), o)
        return self.decoder.start(req.embeds, o.decoding(), prefix_len=req.prompt.audio_start), req

    def create_stream(self, options: Optional[TranscribeOptions] = None, *,
                      on_text: Optional[Callable[[str], None]] = None, work: Work = NO_WORK, **kw):
        """A StreamSession for live audio (see qwen3asr.streaming and docs/streaming.md).

        options / keyword arguments: TranscribeOptions (stream defaults: 4 s chunks, memory 2,
          rollback 2, 128 tokens per chunk, pause rules on, VAD off). ``vad`` may also be a
          loaded qwen3asr.SileroVAD model (VAD on with default VADOptions, that model).
        on_text: called with each newly committed piece of text (never retracted).
        work: scheduling hooks (qwen3asr.work.Work): each chunk is one unit of model work.
        """
        self.check_open()
        check_hooks("create_stream", on_text=on_text, work=work)
        from .streaming import StreamSession
        from .vad import SileroVAD

        vad_model = None
        if isinstance(kw.get("vad"), SileroVAD):
            vad_model, kw["vad"] = kw["vad"], True
        o = build_options(options or self.options, kw, "create_stream")
        self.check_prompt(o.for_stream())
        if o.word_timestamps:
            self._check_words(o)
        return StreamSession(self, o, on_text=on_text, vad_model=vad_model, work=work)

    def transcribe(self, audio: AudioInput, options: Optional[TranscribeOptions] = None, *,
                   sample_rate: Optional[int] = None, start_second: float = 0.0, duration: Optional[float] = None,
                   on_text: Optional[Callable[[str], None]] = None,
                   progress: Optional[Callable[[float, float], None]] = None, work: Work = NO_WORK,
                   **kw) -> Transcription:
        """Transcribe one clip or a long recording.

        Audio that fits the decoder context and the model's declared one-pass limit goes in one
        pass (the official algorithm). Longer audio, or any request for chunking (chunk_size,
        vad, max_chunks), goes through qwen3asr.longform: VAD-first speech segments when VAD is
        on, or when ``vad`` is None and the Silero model is available; else chunks of at most
        30 s, each ending at its last pause (docs/streaming.md). ``plan()`` tells which.

        Args:
          audio: file path, binary file object or qwen3asr.audio.AudioFile (read block by block: a
            long file is never held whole), or numpy array (mono or multi-channel, any rate given
            by sample_rate).
          options / keyword arguments: TranscribeOptions (language, context, sampling,
            max_new_tokens, chunk_size, memory_num, rollback_tokens, vad, itn, max_chunks, ...).
          start_second/duration: transcribe only this part (seconds); segment times stay file times.
          on_text: called with each new piece of transcript text as it is generated (chunked: as committed).
          progress: called as progress(seconds_done, seconds_total) after each chunk.
          work: scheduling hooks (qwen3asr.work.Work): a one-pass clip is one unit of model work,
            chunked audio one unit per chunk; a set cancel flag raises qwen3asr.work.Cancelled.
        """
        self.check_open()
        check_hooks("transcribe", on_text=on_text, progress=progress, work=work)
        o = build_options(options or self.options, kw, "transcribe")
        from .longform import open_source, selection

        with open_source(audio, sample_rate) as source:  # a file is read block by block, never whole
            a, b = 0, source.n_samples
            if not (checks.is_number(start_second) and start_second == 0) or duration is not None:
                a, b = selection(source.n_samples, start_second, duration)  # checks both (finite, within the audio)
            if o.word_timestamps:
                self._check_words(o)
            plan = self.planner.plan(b - a, o)
            if not plan.one_pass:
                from .longform import transcribe_long

                # with word_timestamps the session aligns each segment as it commits it
                return transcribe_long(self, source, plan.options, offset=float(start_second), start=a, stop=b,
                                       on_text=on_text, progress=progress, work=work)
            from .onepass import transcribe_one_pass

            return transcribe_one_pass(self, source.read(a, b), o, offset=float(start_second), on_text=on_text,
                                       work=work)

    # ------------------------------------------------------------------ word timestamps
    @property
    def aligner(self):
        """The forced aligner (qwen3asr.aligner.ForcedAligner), loaded on first use with this
        engine's backend settings; AlignmentError when none was given or found."""
        self.check_open()
        if self._aligner is None:
            name, options = self._backend_request
            self._aligner = load_aligner(self._aligner_dir, name, options)
        return self._aligner

    @property
    def aligner_dir(self) -> Optional[str]:
        """The aligner bundle this engine uses for word timestamps (None: none available)."""
        return self._aligner_dir

    def align(self, audio: AudioInput, text: str, language: Optional[str] = None, *,
              sample_rate: Optional[int] = None, start_second: float = 0.0, word_spans: str = "speech") -> list:
        """Forced alignment of a given transcript: the Words of ``text`` (the aligner's word units,
        in order) with start and end in seconds of ``audio``, spans as TranscribeOptions.word_spans.

        language: a name or code the aligner covers; None detects it with the ASR model first.
        start_second: the input's time of the audio's first sample (added to every time).
        Audio longer than one aligner pass is cut at speech and transcribed to place the text
        (qwen3asr.aligner.long). AlignmentError when no aligner is available or the language is
        not covered.
        """
        self.check_open()
        return align_transcript(self, audio, text, language, sample_rate, start_second, word_spans)

    def _check_words(self, o: TranscribeOptions) -> None:
        """Before any decoding: an aligner is there (loaded now) and covers a forced language."""
        aligner = self.aligner  # loads it: a missing aligner is an error before the audio is decoded
        if o.language is not None:
            aligner.check_language(o.language)

    # ------------------------------------------------------------------ the plan
    def plan(self, pcm, options: Optional[TranscribeOptions] = None) -> tuple[str, TranscribeOptions]:
        """How ``transcribe`` decodes (n,) 16 kHz audio (``pcm``, or its length n in samples):
        ("one pass" | "VAD segments" | "chunks", the options with that mode's defaults filled in);
        qwen3asr.plan decides."""
        n = pcm if checks.is_integer(pcm) else pcm.shape[0]
        plan = self.planner.plan(n, options or self.options)
        return plan.mode, plan.options

    def fits_one_pass(self, pcm, options: Optional[TranscribeOptions] = None, **kw) -> bool:
        """Whether (n,) 16 kHz audio (``pcm``, or its length n in samples) fits one decoder pass
        (prompt + audio + max_new_tokens <= context); ``planner.fits_one_pass`` adds the one-pass
        limit in seconds, ``plan()`` tells what ``transcribe`` does."""
        o = build_options(options or self.options, kw, "fits_one_pass")
        return self.planner.fits_context(pcm if checks.is_integer(pcm) else pcm.shape[0], o)
