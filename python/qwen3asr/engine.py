"""Qwen3ASREngine: the loaded model and the only orchestrator of a request.

Every request, on every backend, runs the same stages::

    audio -> log-mel (mel) -> audio encoder (backend) -> prompt ids with the audio spliced in
    (prompt, here) -> text decoder (backend, the TextDecoder seam) -> text (prompt, text)

One pass for a clip that fits; chunks for long files and live streams (qwen3asr.streaming,
qwen3asr.longform), which call back into the stage methods here. Backends never import the
engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import time
from typing import Callable, Optional

import numpy as np

from . import checks
from . import mel as melmod
from .audio import (MAX_STREAM_SECONDS, SAMPLE_RATE, ArrayAudio, AudioError, AudioFile, AudioInput, checked_rate,
                    prepare_audio)
from .backends import BACKENDS, BackendOptions, PrefixCacheOptions, create_backend
from .bundle import Bundle, BundleError, EmbeddingTable, default_model_dir
from .decoding import (COMPRESSION_LIMIT, FALLBACK_STEPS, FINISH_RANK, compression_ratio, DecodingOptions, Generation, RepetitionGuard, fallback_options,
                       fallback_rank, loop_guard)
from .encoder import TOKENS_PER_CHUNK, tokens_for_frames
from .errors import Qwen3ASRError
from .languages import language_code
from .options import TranscribeOptions, build_options
from .prompt import Prompt, build_prompt, parse_asr_output
from .results import DecodeStats, Segment, Transcription, TranscriptionStats
from .text import TextStreamer
from .tokenizer import Tokenizer
from .work import NO_WORK, Work

logger = logging.getLogger(__name__)

__all__ = ["BACKENDS", "DecodeOutcome", "EncodeStats", "EngineClosed", "Qwen3ASREngine", "Request"]


class EngineClosed(Qwen3ASRError, RuntimeError):
    """The engine was closed (``engine.close()``); create a new Qwen3ASREngine."""


@dataclasses.dataclass(frozen=True)
class EncodeStats:
    """What one encoder call cost."""

    calls: int  # encoder graph executions
    graph_seconds: float  # capacity of the fixed-size graphs run (s, padding included)
    ms: float  # wall time (ms)


@dataclasses.dataclass(frozen=True)
class DecodeOutcome:
    """One decoder run as Qwen3ASREngine.decode makes it (loop guard, fallback tries)."""

    tokens: list  # generated ids of the kept try (end-of-sequence excluded)
    stats: DecodeStats  # of the kept try, with the prefill and decode costs of every try
    tries: int  # fallback tries made after the first run
    looped: bool  # the first run was stopped by the loop guard


@dataclasses.dataclass(frozen=True)
class Request:
    """One clip made ready for the decoder (Qwen3ASREngine.prepare)."""

    prompt: Prompt  # token ids of the prompt, audio pads included
    embeds: np.ndarray  # (len(prompt), hidden) float32: embedded prompt with the audio spliced in
    audio_seconds: float  # duration of the clip
    encoder_ms: float  # mel + encoder wall time
    encoder_calls: int  # encoder graph executions
    t0: float  # time.perf_counter() when preparation started (for total_ms)


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
      spin_wait: ONNX Runtime's idle worker threads spin a while before they sleep (its own
        default). Off here: on a busy or shared CPU spinning threads take time from the ones with
        work. On a machine that does little else it makes the int4 decode step ~15 % faster
        (waking sleeping threads costs a few ms per token; docs/benchmarks.md).
      rk: board settings for the rk backend (qwen3asr.RKOptions: SoC, NPU cores,
        decoder CPUs, librkllmrt.so path and ABI, max context, embed_flash).
      options: the default TranscribeOptions of this engine's requests (each call may override).
      prefix_cache: reuse of the prompt prefix's KV cache on the ONNX decoder
        (qwen3asr.PrefixCacheOptions: entries and bytes kept; max_entries=0 turns it off; default
        8 prefixes, 128 MiB). The rk backend prefills the whole prompt every time (why:
        docs/rkllm_abi.md).
      memory: the ONNX Runtime memory profile: "default", or "lean" for small machines and
        one-shot runs (int4 decoder by default, KV cache grown in smaller steps; a bundle exported
        with ``--memory lean`` adds int8 encoder weights and memory-mapped decoder weights).
        Measured in docs/benchmarks.md "Lean profile". The aligner is loaded with it too.
      preload_seconds: the length of the audio the first request brings in one pass (a one-shot
        CLI passes its file's): the encoder graphs a one-pass decode of it runs are loaded during
        the engine's load, beside the decoder's (ONNX Runtime, in a thread), instead of by that
        request. Ignored over the bundle's one-pass limit (such audio goes in chunks). Default None:
        each graph on first use. The rk backend loads every graph at start anyway.
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
                 spin_wait: bool = False, aligner: Optional[str] = None, memory: str = "default",
                 preload_seconds: Optional[float] = None):
        from .backends import RKOptions

        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ValueError(f"unknown backend {checks.show(backend)}; choose one of {', '.join(BACKENDS)}")
        for name, value in (("model_dir", model_dir), ("aligner", aligner)):
            problem = checks.path(name, value, optional=True)
            if problem:
                raise ValueError(problem)
        if rk is not None and not isinstance(rk, RKOptions):
            raise TypeError(f"rk must be a qwen3asr.RKOptions, got {type(rk).__name__}")
        rk = rk or RKOptions()
        if platform is not None or enabled_cpus is not None:
            rk = dataclasses.replace(rk, soc=platform if platform is not None else rk.soc,
                                     cpus=enabled_cpus if enabled_cpus is not None else rk.cpus)
        backend_options = BackendOptions(
            encoder_form=encoder_form, encoder_sizes=encoder_sizes, decoder_dtype=decoder_dtype, threads=threads,
            spin_wait=spin_wait, prefix_cache=PrefixCacheOptions() if prefix_cache is None else prefix_cache, rk=rk,
            memory=memory, preload_seconds=preload_seconds)
        overrides = {} if repeat_penalty is None else {"repetition_penalty": repeat_penalty}
        self.options = build_options(options, overrides, "Qwen3ASREngine")
        self._closed = True  # until loaded: close() is harmless on a half-built engine
        self.bundle = Bundle.load(model_dir or default_model_dir())
        self.bundle.require_kind("asr")
        self.tokenizer = Tokenizer.from_dir(self.bundle.path)
        self._check_specials()
        self.embeddings = EmbeddingTable(self.bundle)
        self.n_mels = int(self.bundle.audio_config["num_mel_bins"])
        limit = self.bundle.one_pass_seconds
        if preload_seconds is not None and limit is not None and preload_seconds > limit:
            # such audio goes in chunks, whose graphs are not the whole length's: nothing to preload
            logger.debug("no preload: %.1f s is over the bundle's one-pass limit of %g s", preload_seconds, limit)
            backend_options = dataclasses.replace(backend_options, preload_seconds=None)
        loaded = create_backend(backend, self.bundle, backend_options, tokenizer=self.tokenizer,
                                embeddings=self.embeddings, decoding=self.options.decoding())
        self._backend = loaded
        self.backend = loaded.name
        self.encoder = loaded.encoder
        self.decoder = loaded.decoder
        self.decoder_dtype = getattr(self.decoder, "dtype", None)
        self.soc = loaded.soc  # the board's SoC with the rk backend, else None
        self.max_context = int(self.decoder.max_context)  # the decoder's own (an .rkllm model's KV length)
        self._pool = None  # one background thread for encoder work overlapping the decoder (qwen3asr.streaming)
        self._backend_request = (backend, backend_options)
        self._aligner_dir = _aligner_dir(aligner, self.bundle.path)
        self._aligner = None  # the ForcedAligner, loaded on first use
        self._closed = False
        logger.info("loaded %s (backend %s)", self.bundle.path, self.backend)

    def _check_specials(self) -> None:
        """BundleError when the bundle's tokenizer files and its manifest disagree (a bundle put
        together from two exports)."""
        for name, tid in self.bundle.special_tokens.items():
            if self.tokenizer.token_id(name) != tid:
                raise BundleError(f"{self.bundle.path}: the tokenizer and model.json disagree on {name} "
                                  f"({self.tokenizer.token_id(name)} vs {tid}); re-export the bundle with "
                                  "scripts/export_onnx.py")
        eos = self.bundle.eos_token_ids
        if eos != set(self.tokenizer.eos_ids):
            raise BundleError(f"manifest end-of-sequence ids {sorted(eos)} differ from the tokenizer's "
                              f"{list(self.tokenizer.eos_ids)}; re-export the bundle")

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
    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> log-mel (n_mels, frames) float32."""
        return melmod.log_mel(audio, self.n_mels)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """log-mel (n_mels, frames) -> audio embeddings (tokens, hidden) float32."""
        return self.encode_timed(mel)[0]

    def encode_timed(self, mel: np.ndarray) -> tuple[np.ndarray, EncodeStats]:
        """log-mel (n_mels, frames) -> (audio embeddings (tokens, hidden) float32, EncodeStats)."""
        self.check_open()
        t0 = time.perf_counter()
        calls0, secs0 = self.encoder.calls, self.encoder.seconds_encoded
        emb = self.encoder.encode(mel)
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

    def check_prompt(self, options: TranscribeOptions) -> None:
        """ValueError when the prompt alone (the system turn with the context) and the token
        budget of ``options`` (resolved for their mode) leave no room for audio in the decoder."""
        n_prompt = len(self.request_prompt(1, options)) - 1
        budget = options.decoding().max_new_tokens
        if n_prompt + budget >= self.max_context:
            raise ValueError(f"the prompt takes {n_prompt} tokens (the context {len(options.context)} characters) and "
                             f"max_new_tokens={budget}: no room for audio in the decoder context of "
                             f"{self.max_context} tokens; shorten the context or lower max_new_tokens")

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
                 guard: Optional[RepetitionGuard] = None) -> tuple[list[int], DecodeStats]:
        """Generate from an embedded prompt on this engine's decoder (the TextDecoder seam).

        Args:
          prompt_embeds: (L, hidden) float32, the whole prompt embedded (audio rows spliced in,
            assistant-turn text such as a transcript prefix appended); prefilled in one go.
          options: sampling settings and max_new_tokens.
          on_token: called with each generated id (end-of-sequence ids are not generated);
            returning False stops the generation there (finish_reason "stopped").
          prefix_len: leading rows of ``prompt_embeds`` that are the shared prompt prefix
            (``Prompt.audio_start``, ``prefix_len(options)``); the decoder may reuse their KV cache
            from an earlier run with the same rows (same result; DecodeStats.reused_tokens).
          guard: stops a runaway repetition (finish_reason "repetition"); None: no loop guard.
        Returns:
          (generated ids without end-of-sequence, DecodeStats).
        """
        self.check_open()
        return self.decoder.generate(prompt_embeds, options, on_token, prefix_len=prefix_len, guard=guard)

    def decode(self, prompt_embeds: np.ndarray, options: DecodingOptions, *, audio_seconds: float,
               prefix_len: Optional[int] = None, fallback: bool = False,
               on_token: Optional[Callable[[int], Optional[bool]]] = None) -> "DecodeOutcome":
        """One decoder run as every request makes it: ``generate`` with the loop guard of
        ``audio_seconds`` of audio (qwen3asr.decoding.loop_guard); with ``fallback``, a run that
        looped (the guard stopped it, or it ran out of tokens on text that repeats itself:
        compression ratio over COMPRESSION_LIMIT) is decoded again with the fallback settings
        (qwen3asr.decoding.FALLBACK_STEPS) until a try ends at end-of-sequence, and the best try
        is kept. A run cut by ``max_new_tokens`` on text that does not repeat is kept as it is (the
        budget is the caller's). ``on_token`` sees the first try's tokens only."""
        guard = loop_guard(audio_seconds)
        tokens, ds = self.generate(prompt_embeds, options, on_token, prefix_len=prefix_len, guard=guard)
        text = self.tokenizer.decode(tokens)
        looped = ds.finish_reason == "repetition" or (
            ds.finish_reason == "length" and compression_ratio(text) > COMPRESSION_LIMIT)
        if looped:
            logger.warning("the decoder looped over %.1f s of audio (%s after %d tokens)%s", audio_seconds,
                           ds.finish_reason, len(tokens),
                           "; decoding it again with the fallback settings" if fallback else "")
        if not fallback or not looped:
            return DecodeOutcome(tokens, ds, 0, looped)
        budget = options.max_new_tokens
        best = (fallback_rank(ds.finish_reason, text), tokens, ds)
        tries, spent = 0, [ds]
        for step in range(len(FALLBACK_STEPS)):
            tries += 1
            opts = fallback_options(options, step, budget)
            t, d = self.generate(prompt_embeds, opts, prefix_len=prefix_len, guard=guard)
            spent.append(d)
            rank = fallback_rank(d.finish_reason, self.tokenizer.decode(t))
            logger.info("fallback try %d (%s): %s after %d tokens", step + 1, FALLBACK_STEPS[step], d.finish_reason,
                        len(t))
            if rank < best[0]:
                best = (rank, t, d)
            if d.finish_reason in ("eos", "stopped"):
                break
        # the kept try's stats, with the time and positions of every try (what the request cost)
        cost = {k: sum(getattr(x, k) for x in spent) for k in ("prefill_tokens", "prefill_ms", "decode_tokens",
                                                               "decode_ms", "reused_tokens")}
        return DecodeOutcome(best[1], dataclasses.replace(best[2], **cost), tries, looped)

    def _check_length(self, n_audio: int, n_prompt: int, max_new_tokens: int, audio_seconds: float) -> None:
        need = n_prompt + max_new_tokens
        if need > self.max_context:
            limit_s = max(0.0, (self.max_context - (n_prompt - n_audio) - max_new_tokens) / TOKENS_PER_CHUNK)
            raise AudioError(
                f"audio too long for one pass: {audio_seconds:.1f} s gives {n_audio} audio tokens; with the "
                f"prompt and max_new_tokens={max_new_tokens} that is {need} tokens, over the decoder context of "
                f"{self.max_context} tokens (about {limit_s:.0f} s of audio). Transcribe it in chunks "
                f"(chunk_size) or cut it shorter.")

    def prepare(self, pcm: np.ndarray, options: Optional[TranscribeOptions] = None, **kw) -> Request:
        """16 kHz mono float32 (from prepare_audio) -> the embedded prompt, checked against the context."""
        self.check_open()
        o = build_options(options or self.options, kw, "prepare")
        t0 = time.perf_counter()
        # checked against the context before the mel and the prompt are made: their size grows with the audio
        n_audio = tokens_for_frames(melmod.n_frames(pcm.shape[0]))
        self._check_length(n_audio, len(self.request_prompt(1, o)) - 1 + n_audio, o.decoding().max_new_tokens,
                           pcm.shape[0] / SAMPLE_RATE)
        mel = self.features(pcm)
        prompt = self.request_prompt(tokens_for_frames(mel.shape[1]), o)
        emb, es = self.encode_timed(mel)
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
        _check_hooks("create_stream", on_text=on_text, work=work)
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
        _check_hooks("transcribe", on_text=on_text, progress=progress, work=work)
        o = build_options(options or self.options, kw, "transcribe")
        if isinstance(audio, AudioFile):  # opened by the caller, who closes it
            return self._transcribe_source(audio, o, start_second, duration, on_text, progress, work)
        if isinstance(audio, np.ndarray) or not isinstance(audio, (str, os.PathLike)) and not hasattr(audio, "read"):
            source = ArrayAudio(prepare_audio(audio, sample_rate))
        else:  # a file, read block by block: a long one is never held whole
            if sample_rate is not None:
                checked_rate(sample_rate)  # checked even when ignored, as prepare_audio does
            source = AudioFile(audio)
        with contextlib.closing(source) if isinstance(source, AudioFile) else contextlib.nullcontext():
            return self._transcribe_source(source, o, start_second, duration, on_text, progress, work)

    def _transcribe_source(self, source, o: TranscribeOptions, start_second, duration, on_text, progress,
                           work: Work) -> Transcription:
        """transcribe() of an AudioFile or ArrayAudio: one pass holds the selected audio (it fits
        the decoder context); chunked audio is read piece by piece."""
        a, b = 0, source.n_samples
        if not (checks.is_number(start_second) and start_second == 0) or duration is not None:
            from .longform import selection

            a, b = selection(source.n_samples, start_second, duration)  # checks both (finite, within the audio)
        if o.word_timestamps:
            self._check_words(o)
        mode, o = self.plan(b - a, o)
        offset = float(start_second)
        if mode != "one pass":
            from .longform import transcribe_long

            # with word_timestamps the session aligns each segment as it commits it
            return transcribe_long(self, source, o, offset=offset, start=a, stop=b, on_text=on_text,
                                   progress=progress, work=work)
        pcm = source.read(a, b)
        with work.unit():
            result = self._transcribe_one(pcm, o, on_text, work)
        raw = result.text
        end = offset + pcm.shape[0] / SAMPLE_RATE
        segments = (Segment(offset, end, raw, result.language, finish_reason=result.finish_reason),) if raw else ()
        result = dataclasses.replace(result, segments=segments)
        if o.word_timestamps:  # on the raw text, before ITN, as the official chain
            result = self._with_words(result, pcm, o, offset, work)
        if o.itn and raw:
            from .itn import inverse_normalize

            text = inverse_normalize(raw, result.language)
            result = dataclasses.replace(result, text=text, segments=tuple(
                dataclasses.replace(seg, text=text) for seg in result.segments))
        return result

    # ------------------------------------------------------------------ word timestamps
    @property
    def aligner(self):
        """The forced aligner (qwen3asr.aligner.ForcedAligner), loaded on first use with this
        engine's backend settings; AlignmentError when none was given or found."""
        self.check_open()
        if self._aligner is None:
            from .aligner import AlignmentError, ForcedAligner
            from .aligner.model import DEFAULT_ALIGNER_ENV

            if self._aligner_dir is None:
                raise AlignmentError(
                    f"word timestamps need a forced aligner: pass Qwen3ASREngine(aligner=DIR) (CLI --aligner DIR) or "
                    f"set {DEFAULT_ALIGNER_ENV}; docs/aligner.md converts Qwen3-ForcedAligner-0.6B into one")
            t0 = time.perf_counter()
            name, options = self._backend_request
            options = dataclasses.replace(options, preload_seconds=None)  # the ASR encoder's, not the aligner's
            if options.decoder_dtype != "auto" and \
                    options.decoder_dtype not in Bundle.load(self._aligner_dir).decoder_dtypes():
                # decoder_dtype names the ASR decoder; an aligner without that dtype picks its own
                logger.info("the aligner has no %s scorer: it picks its own (auto)", options.decoder_dtype)
                options = dataclasses.replace(options, decoder_dtype="auto")
            self._aligner = ForcedAligner(self._aligner_dir, backend=name, options=options)
            logger.info("loaded the aligner %s in %.0f ms", self._aligner_dir, (time.perf_counter() - t0) * 1000)
        return self._aligner

    @property
    def aligner_dir(self) -> Optional[str]:
        """The aligner bundle this engine uses for word timestamps (None: none available)."""
        return self._aligner_dir

    def align(self, audio: AudioInput, text: str, language: Optional[str] = None, *,
              sample_rate: Optional[int] = None, start_second: float = 0.0) -> list:
        """Forced alignment of a given transcript: the Words of ``text`` (the aligner's word units,
        in order) with start and end in seconds of ``audio``.

        language: a name or code the aligner covers; None detects it with the ASR model first.
        start_second: the input's time of the audio's first sample (added to every time).
        Audio longer than the aligner's pass (60 s) is refused: transcribe(word_timestamps=True)
        splits long audio. AlignmentError when no aligner is available or the language is not
        covered.
        """
        self.check_open()
        problem = checks.number("start_second", start_second, 0, MAX_STREAM_SECONDS, kind="a number of seconds")
        if problem:
            raise ValueError(problem)
        pcm = prepare_audio(audio, sample_rate)
        if language is None:
            detected = self.transcribe(pcm, language=None, one_pass=True, word_timestamps=False).language
            if detected is None:
                from .aligner import AlignmentError

                raise AlignmentError("the ASR model heard no language in this audio; give language=")
            language = detected
        return list(self.aligner.align(pcm, text, language, offset=start_second))

    def _check_words(self, o: TranscribeOptions) -> None:
        """Before any decoding: an aligner is there (loaded now) and covers a forced language."""
        aligner = self.aligner  # loads it: a missing aligner is an error before the audio is decoded
        if o.language is not None:
            aligner.check_language(o.language)

    def _with_words(self, result: Transcription, pcm: np.ndarray, o: TranscribeOptions, offset: float,
                    work: Work) -> Transcription:
        """``result`` with every segment's words: each segment's audio (``pcm`` holds the audio from
        ``offset`` on) aligned with its raw text, in the segment's language. A segment in a language
        the aligner does not cover keeps no words (logged once per language)."""
        aligner = self.aligner
        out, skipped = [], set()
        for seg in result.segments:
            lang = o.language or seg.language or result.language
            if not seg.text or not aligner.supports(lang):
                if seg.text:
                    skipped.add(lang)
                out.append(seg)
                continue
            a = max(0, int(round((seg.start - offset) * SAMPLE_RATE)))
            b = min(pcm.shape[0], int(round((seg.end - offset) * SAMPLE_RATE)))
            with work.unit():
                words = aligner.align(pcm[a:b], seg.text, lang, offset=offset + a / SAMPLE_RATE)
            out.append(dataclasses.replace(seg, words=words))
        for lang in skipped:
            logger.warning("no word timestamps for %s text: the aligner covers %s", lang or "undetected",
                           ", ".join(aligner.languages))
        return dataclasses.replace(result, segments=tuple(out))

    def plan(self, pcm, options: Optional[TranscribeOptions] = None) -> tuple[str, TranscribeOptions]:
        """How ``transcribe`` decodes (n,) 16 kHz audio (``pcm``, or its length n in samples):
        ("one pass" | "VAD segments" | "chunks", the options with that mode's defaults filled in)."""
        o = options or self.options
        n = pcm if checks.is_integer(pcm) else pcm.shape[0]
        self.check_prompt(o)
        if o.one_pass:
            return "one pass", o
        if not o.wants_chunks():
            limit = self.bundle.one_pass_seconds
            if o.word_timestamps:  # each segment is aligned in one aligner pass
                limit = self.aligner.piece_seconds if limit is None else min(limit, self.aligner.piece_seconds)
            fits = self.fits_one_pass(n, o)
            if fits and (limit is None or n / SAMPLE_RATE <= limit):
                return "one pass", o
            why = "the decoder context" if not fits else f"the one-pass limit of {limit:g} s"
            if o.vad is None and vad_available():
                resolved = self._fitting_chunks(o.for_file_chunks(vad=dataclasses.replace(o, vad=True).vad_options))
                logger.info("%.1f s of audio is over %s: decoding VAD speech segments (vad=False for chunks)",
                            n / SAMPLE_RATE, why)
                return "VAD segments", resolved
            resolved = self._fitting_chunks(o.for_file_chunks())
            logger.info("%.1f s of audio is over %s: decoding chunks of at most %g s", n / SAMPLE_RATE,
                        why, resolved.chunk_size)
            return "chunks", resolved
        resolved = o.for_file_chunks(vad=o.vad_options)
        if o.chunk_size is None:
            resolved = self._fitting_chunks(resolved)
        return ("VAD segments" if resolved.vad_options else "chunks"), resolved

    def _fitting_chunks(self, o: TranscribeOptions) -> TranscribeOptions:
        """``o`` with its default chunk size lowered, in whole seconds, until the decoder window
        fits this decoder's context (a 1024-position RKLLM model takes 30 s x 2 chunks no more)
        and, with word timestamps, a chunk fits one aligner pass (ForcedAligner.piece_seconds)."""
        from .streaming import positions_needed

        size = o.chunk_size
        if o.word_timestamps and size > self.aligner.piece_seconds:
            size = self.aligner.piece_seconds
            o = dataclasses.replace(o, chunk_size=size)
        while size > 1 and positions_needed(self, o) > self.max_context:
            size = float(math.ceil(size) - 1)
            o = dataclasses.replace(o, chunk_size=size)
        return o

    def fits_one_pass(self, pcm, options: Optional[TranscribeOptions] = None, **kw) -> bool:
        """Whether (n,) 16 kHz audio (``pcm``, or its length n in samples) fits one decoder pass
        (prompt + audio + max_new_tokens <= context)."""
        o = build_options(options or self.options, kw, "fits_one_pass")
        n = pcm if checks.is_integer(pcm) else pcm.shape[0]
        n_audio = max(tokens_for_frames(melmod.n_frames(n)), 1)
        return len(self.request_prompt(1, o)) - 1 + n_audio + o.decoding().max_new_tokens <= self.max_context

    def _transcribe_one(self, pcm: np.ndarray, o: TranscribeOptions, on_text, work: Work) -> Transcription:
        req = self.prepare(pcm, o)
        in_text = o.language is not None or o.compact_prompt  # the answer starts inside the transcript
        streamer = TextStreamer(self.tokenizer, on_text, in_text) if on_text else None

        def on_token(tok: int) -> bool:
            if streamer is not None:
                streamer.push(tok)
            return not work.cancelled

        fallback = o.fallback if o.fallback is not None else on_text is None  # printed text cannot be redone
        out = self.decode(req.embeds, o.decoding(), audio_seconds=req.audio_seconds,
                          prefix_len=req.prompt.audio_start, fallback=fallback, on_token=on_token)
        work.check()
        if streamer:
            streamer.finish()
        return self._result(out.tokens, out.stats, o, req, out)

    def _result(self, tokens, ds: DecodeStats, options: TranscribeOptions, req: Request,
                outcome: Optional["DecodeOutcome"] = None) -> Transcription:
        """The Transcription of one decoder run's ``tokens`` for ``req``."""
        raw = self.tokenizer.decode(tokens, skip_special_tokens=True)
        lang, text = parse_asr_output(raw, options.language, text_only=options.compact_prompt)
        stats = TranscriptionStats(
            audio_seconds=req.audio_seconds, encoder_ms=req.encoder_ms, encoder_calls=req.encoder_calls,
            prefill_tokens=ds.prefill_tokens, prefill_ms=ds.prefill_ms, decode_tokens=ds.decode_tokens,
            decode_ms=ds.decode_ms, total_ms=(time.perf_counter() - req.t0) * 1000, backend=self.backend,
            runtime_perf=ds.runtime_perf, fallback_tries=outcome.tries if outcome else 0,
            loops=int(outcome.looped) if outcome else int(ds.finish_reason == "repetition"))
        return Transcription(text=text, language=lang, language_code=language_code(lang) if lang else None,
                             token_ids=tuple(int(t) for t in tokens), raw_text=raw,
                             truncated=ds.finish_reason == "length", stats=stats,
                             finish_reason=ds.finish_reason if ds.finish_reason in FINISH_RANK else "eos")


def _check_hooks(where: str, work: Work, **callbacks) -> None:
    """TypeError unless every callback is callable or None and ``work`` is a qwen3asr.work.Work."""
    for name, fn in callbacks.items():
        if fn is not None and not callable(fn):
            raise TypeError(f"{where}(): {name} must be a function or None (got {checks.show(fn)})")
    if not isinstance(work, Work):
        raise TypeError(f"{where}(): work must be a qwen3asr.work.Work (got {checks.show(work)})")


def _aligner_dir(given: Optional[str], model_dir: str) -> Optional[str]:
    """The aligner bundle to use: ``given``, else ``$QWEN3ASR_ALIGNER``, else the bundled demo
    aligner when ``model_dir`` is the bundled default model; None when there is none."""
    import os

    from .aligner.model import DEFAULT_ALIGNER_ENV
    from .bundle import BUNDLED_ALIGNER, bundled_model_dir

    if given is not None:
        return os.fspath(given)
    env = os.environ.get(DEFAULT_ALIGNER_ENV)
    if env:
        return env
    default = bundled_model_dir()
    if default is not None and os.path.realpath(model_dir) == os.path.realpath(default):
        demo = os.path.join(os.path.dirname(default), BUNDLED_ALIGNER)
        if os.path.isdir(demo):
            return demo
    return None


def vad_available() -> bool:
    """Whether the Silero VAD model can be found (qwen3asr.vad.find_model)."""
    from .vad import find_model

    try:
        find_model()
    except FileNotFoundError:
        return False
    return True
