"""Qwen3ASREngine: the loaded model (bundle + backend) and one-shot transcription."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Optional, Tuple

import numpy as np

from . import mel as melmod
from .audio import SAMPLE_RATE, AudioError, AudioInput, prepare_audio
from .bundle import Bundle, EmbeddingTable, default_model_dir
from .decoding import DecodingOptions, Generation, GenerationTimes
from .encoder import TOKENS_PER_CHUNK, tokens_for_frames
from .languages import language_code, resolve_language
from .prompt import Prompt, build_prompt, parse_asr_output
from .results import DecodeStats, Segment, Transcription, TranscriptionStats
from .tokenizer import Tokenizer
from .work import NO_WORK, Work

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "onnx", "rk")


@dataclasses.dataclass(frozen=True)
class Request:
    """One clip made ready for the decoder (Qwen3ASREngine.prepare)."""

    prompt: Prompt  # token ids of the prompt, audio pads included
    embeds: np.ndarray  # (len(prompt), hidden) float32: embedded prompt with the audio spliced in
    audio_seconds: float  # duration of the clip
    encoder_ms: float  # mel + encoder wall time
    encoder_calls: int  # encoder graph executions
    t0: float  # time.perf_counter() when preparation started (for total_ms)


class TextStreamer:
    """Turns generated token ids into transcript text pieces for a callback.

    Only the transcription is emitted: the ``language X`` prefix and ``<asr_text>`` tag are
    held back (unless the language was forced, in which case everything is transcript),
    special tokens are skipped, and a multi-byte character is emitted only once complete.
    """

    def __init__(self, tokenizer: Tokenizer, callback: Callable[[str], None], forced: bool):
        self._dec = tokenizer.incremental_decoder(skip_special_tokens=True)
        self._cb = callback
        self._asr_text_id = tokenizer.asr_text
        self._in_text = forced
        self._started = False

    def push(self, token_id: int) -> None:
        if token_id == self._asr_text_id and not self._in_text:
            self._in_text = True
            self._dec.flush()  # drop the buffered prefix
            return
        piece = self._dec.push(token_id)
        if self._in_text and piece:
            self._emit(piece)

    def finish(self) -> None:
        piece = self._dec.flush()
        if self._in_text and piece:
            self._emit(piece)

    def _emit(self, piece: str) -> None:
        if not self._started:
            piece = piece.lstrip()
            if not piece:
                return
            self._started = True
        self._cb(piece)


class Qwen3ASREngine:
    """A loaded Qwen3-ASR model.

    Args:
      model_dir: bundle made by scripts/export_onnx.py (default: $QWEN3ASR_MODEL or models/default).
      backend: "auto" (RK NPU on a Rockchip board with the runtimes installed, else ONNX Runtime),
        "onnx" (any CPU) or "rk".
      encoder_form: "merged" (one graph per duration) or "split" (per-chunk front end + back end).
      encoder_sizes: only load these encoder durations (seconds); default all in the bundle.
      decoder_dtype: ONNX decoder weights: "auto" (int8 if present, else fp32), "fp32", "int8", "int4".
      threads: CPU threads for ONNX Runtime (default: its own choice).
    """

    def __init__(self, model_dir: Optional[str] = None, backend: str = "auto", *, encoder_form: str = "merged",
                 encoder_sizes=None, decoder_dtype: str = "auto", threads: Optional[int] = None):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        self.bundle = Bundle.load(model_dir or default_model_dir())
        self.tokenizer = Tokenizer.from_dir(self.bundle.path)
        self._check_specials()
        self.embeddings = EmbeddingTable(self.bundle)
        self.n_mels = int(self.bundle.audio_config["num_mel_bins"])
        self.max_context = self.bundle.max_context
        soc = None
        if backend == "auto":
            backend, soc = _auto_backend(self.bundle)
        self.backend = backend
        if backend == "rk":
            from .rk_backend import create_rk_backend  # lazy: needs the board SDKs

            self._rk = create_rk_backend(self.bundle, encoder_form=encoder_form, encoder_sizes=encoder_sizes,
                                         soc=soc)
            self.encoder = self._rk.encoder
            self.decoder = None
            self.max_context = self._rk.max_context  # the .rkllm model's own KV-cache length
        else:
            from .onnx_backend import OnnxDecoder, create_onnx_encoder

            self._rk = None
            self.encoder = create_onnx_encoder(self.bundle, encoder_form, encoder_sizes, threads)
            dtypes = self.bundle.decoder_dtypes()
            if decoder_dtype == "auto":
                decoder_dtype = "int8" if "int8" in dtypes else "fp32"
            if decoder_dtype not in ("fp32", "int8", "int4"):
                raise ValueError(f"decoder_dtype must be auto, fp32, int8 or int4, got {decoder_dtype!r}")
            self.decoder_dtype = decoder_dtype
            t = self.bundle.text_config
            self.decoder = OnnxDecoder(self.bundle.decoder_path(decoder_dtype), t["num_hidden_layers"],
                                       t["num_key_value_heads"], t["head_dim"], threads,
                                       max_positions=self.max_context)
        logger.info("loaded %s (backend %s)", self.bundle.path, self.backend)

    def _check_specials(self) -> None:
        for name, tid in self.bundle.special_tokens.items():
            if self.tokenizer.token_id(name) != tid:
                raise RuntimeError(f"tokenizer and manifest disagree on {name}: {self.tokenizer.token_id(name)} vs {tid}")
        eos = self.bundle.eos_token_ids
        if eos != set(self.tokenizer.eos_ids):
            raise RuntimeError(f"manifest end-of-sequence ids {sorted(eos)} differ from the tokenizer's "
                               f"{list(self.tokenizer.eos_ids)}; re-export the bundle")

    # ------------------------------------------------------------------ stages
    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> log-mel (n_mels, frames) float32."""
        return melmod.log_mel(audio, self.n_mels)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """log-mel (n_mels, frames) -> audio embeddings (tokens, hidden) float32."""
        return self.encoder.encode(mel)

    def prompt(self, n_audio: int, context: str = "", language: Optional[str] = None) -> Prompt:
        return build_prompt(self.tokenizer, n_audio, context=context, language=language)

    def embed_prompt(self, prompt: Prompt, audio_embeds: np.ndarray) -> np.ndarray:
        """Embed the prompt ids and splice the audio embeddings over the audio pads: (L, hidden) float32."""
        if audio_embeds.shape[0] != prompt.n_audio:
            raise ValueError(f"{audio_embeds.shape[0]} audio embeddings for {prompt.n_audio} audio pads")
        x = self.embeddings(prompt.ids)
        x[prompt.audio_slice] = audio_embeds
        return x

    def check_length(self, n_audio: int, n_prompt: int, max_new_tokens: int, audio_seconds: float) -> None:
        need = n_prompt + max_new_tokens
        if need > self.max_context:
            limit_s = max(0.0, (self.max_context - (n_prompt - n_audio) - max_new_tokens) / TOKENS_PER_CHUNK)
            raise AudioError(
                f"audio too long for one pass: {audio_seconds:.1f} s gives {n_audio} audio tokens; with the "
                f"prompt and max_new_tokens={max_new_tokens} that is {need} tokens, over the decoder context of "
                f"{self.max_context} tokens (about {limit_s:.0f} s of audio). Transcribe it in chunks "
                f"(chunk_size) or cut it shorter.")

    # ------------------------------------------------------------------ public
    def prepare(self, pcm: np.ndarray, *, language: Optional[str] = None, context: str = "",
                max_new_tokens: int = 256) -> Request:
        """16 kHz mono float32 (from prepare_audio) -> the embedded prompt, checked against the context."""
        t0 = time.perf_counter()
        mel = self.features(pcm)
        n_audio = tokens_for_frames(mel.shape[1])
        prompt = self.prompt(n_audio, context, language)
        self.check_length(n_audio, len(prompt), max_new_tokens, pcm.shape[0] / SAMPLE_RATE)
        calls0 = self.encoder.calls
        emb = self.encode(mel)
        return Request(prompt=prompt, embeds=self.embed_prompt(prompt, emb), audio_seconds=pcm.shape[0] / SAMPLE_RATE,
                       encoder_ms=(time.perf_counter() - t0) * 1000, encoder_calls=self.encoder.calls - calls0, t0=t0)

    def start(self, audio: AudioInput, *, sample_rate: Optional[int] = None, language: Optional[str] = None,
              context: str = "", options: DecodingOptions = DecodingOptions()) -> tuple[Generation, Request]:
        """Encode and prepare one request; returns a (pausable, clonable) Generation and the Request."""
        if self.decoder is None:
            raise RuntimeError("start() needs the ONNX decoder; the rk backend generates inside the RKLLM runtime")
        req = self.prepare(prepare_audio(audio, sample_rate), language=language, context=context,
                           max_new_tokens=options.max_new_tokens)
        return Generation(self.decoder, req.embeds, self.tokenizer.eos_ids, self.embeddings.row, options), req

    def decode_embeddings(self, prompt_embeds: np.ndarray, options: DecodingOptions = DecodingOptions(),
                          on_token: Optional[Callable[[int], Optional[bool]]] = None) -> tuple[list[int], DecodeStats]:
        """Generate from an embedded prompt: the one decoder call streaming and long files need.

        Args:
          prompt_embeds: (L, hidden) float32, the whole prompt embedded (audio rows spliced in,
            assistant-turn text such as a transcript prefix appended); prefilled in one go.
          options: sampling settings and max_new_tokens.
          on_token: called with each generated id (end-of-sequence ids are not generated); returning
            False stops the generation there.
        Returns:
          (generated ids without end-of-sequence, DecodeStats). Backends: ONNX runs a Generation;
          the rk backend must provide ``decode_embeddings(prompt_embeds, options, on_token)`` with
          the same contract (one RKLLM EMBED run with a cleared cache).
        """
        if self._rk is not None:
            return self._rk.decode_embeddings(prompt_embeds, options, on_token)
        gen = Generation(self.decoder, prompt_embeds, self.tokenizer.eos_ids, self.embeddings.row, options)
        gen.run(on_token=on_token)
        t = gen.times
        return list(gen.tokens), DecodeStats(t.prefill_tokens, t.prefill_ms, t.decode_tokens, t.decode_ms,
                                             gen.finish_reason or "length")

    def create_stream(self, language: Optional[str] = None, context: str = "", chunk_size: float = 4.0,
                      memory_num: int = 2, unfixed_chunks: int = 0, rollback_tokens: int = 2,
                      max_new_tokens: int = 128, on_text: Optional[Callable[[str], None]] = None, vad=None,
                      itn: bool = False, pause_db: Optional[float] = 25.0, work: Work = NO_WORK):
        """A StreamSession for live audio (see qwen3asr.stream and docs/streaming.md).

        vad: None/False (decode everything), True (Silero VAD with default VADOptions) or VADOptions.
        on_text: called with each newly committed piece of text (never retracted).
        pause_db: audio this many dB below the recent speech level is a pause: chunks of 2 s or
          more end at their last pause, and a boundary in a pause commits the window's text and
          starts the next chunk afresh (None: fixed chunks, a window that only slides); see
          StreamOptions.
        work: scheduling hooks (qwen3asr.work.Work): each chunk is one unit of model work.
        """
        from .stream import StreamOptions, StreamSession

        opts = StreamOptions(language=language, context=context, chunk_size=chunk_size, memory_num=memory_num,
                             unfixed_chunks=unfixed_chunks, rollback_tokens=rollback_tokens,
                             max_new_tokens=max_new_tokens, vad=vad, itn=itn,
                             pause_db=pause_db)
        return StreamSession(self, opts, on_text=on_text, work=work)

    def transcribe(self, audio: AudioInput, *, sample_rate: Optional[int] = None, language: Optional[str] = None,
                   context: str = "", max_new_tokens: int = 256, temperature: float = 0.0, top_k: int = 0,
                   top_p: float = 1.0, repetition_penalty: float = 1.0, seed: Optional[int] = None,
                   on_text: Optional[Callable[[str], None]] = None, chunk_size: Optional[float] = None,
                   memory_num: int = 2, rollback_tokens: int = 5, start_second: float = 0.0,
                   duration: Optional[float] = None, max_chunks: Optional[int] = None, vad=None, itn: bool = False,
                   progress: Optional[Callable[[float, float], None]] = None, work: Work = NO_WORK) -> Transcription:
        """Transcribe one clip or a long recording.

        With chunk_size None, no VAD and no max_chunks, the audio is transcribed in one pass (the
        official algorithm; AudioError if it does not fit the decoder context, see fits_one_pass);
        with any of them set it goes through qwen3asr.longform (chunks of chunk_size s, default 30
        with VAD/max_chunks alone; see docs/streaming.md).

        Args:
          audio: file path or numpy array (mono or multi-channel, any rate given by sample_rate).
          language: force a language (name or BCP-47 code); None detects it.
          context: system text to bias recognition (names, terms); may be empty.
          max_new_tokens: generation budget; ``truncated`` tells when it ran out.
          temperature/top_k/top_p/repetition_penalty/seed: sampling (default greedy, as official).
          on_text: called with each new piece of transcript text as it is generated (chunked: as committed).
          chunk_size/memory_num/rollback_tokens: chunked decoding (seconds per chunk, chunks in the
            decoder's window, tokens re-decoded at each chunk boundary).
          start_second/duration: transcribe only this part (seconds); segment times stay file times.
          max_chunks: stop after this many chunks (``truncated`` is then True).
          vad: True or VADOptions to decode only speech (Silero VAD).
          itn: inverse text normalisation of the result text (numbers as digits).
          progress: called as progress(seconds_done, seconds_total) after each chunk.
          work: scheduling hooks (qwen3asr.work.Work): a one-pass clip is one unit of model work,
            chunked audio one unit per chunk; a set cancel flag raises qwen3asr.work.Cancelled.
        """
        pcm = prepare_audio(audio, sample_rate)
        if start_second or duration is not None:
            from .longform import select_audio

            pcm = select_audio(pcm, start_second, duration)
        if chunk_size is not None or vad or max_chunks is not None:
            from .longform import transcribe_long

            return transcribe_long(self, pcm, offset=float(start_second), language=language, context=context,
                                   chunk_size=30.0 if chunk_size is None else chunk_size, memory_num=memory_num,
                                   rollback_tokens=rollback_tokens, max_new_tokens=max_new_tokens,
                                   max_chunks=max_chunks, vad=vad, itn=itn, on_text=on_text, progress=progress,
                                   work=work)
        with work.unit():
            result = self._transcribe_one(pcm, language=language, context=context, max_new_tokens=max_new_tokens,
                                      temperature=temperature, top_k=top_k, top_p=top_p,
                                      repetition_penalty=repetition_penalty, seed=seed, on_text=on_text,
                                      work=work)
        text = result.text
        if itn and text:
            from .itn import inverse_normalize

            text = inverse_normalize(text, result.language)
        end = float(start_second) + pcm.shape[0] / SAMPLE_RATE
        segments = (Segment(float(start_second), end, text, result.language),) if text else ()
        return dataclasses.replace(result, text=text, segments=segments)

    def fits_one_pass(self, pcm: np.ndarray, context: str = "", language: Optional[str] = None,
                      max_new_tokens: int = 256) -> bool:
        """Whether (n,) 16 kHz audio fits one decoder pass (prompt + audio + max_new_tokens <= context)."""
        n_audio = tokens_for_frames(melmod.n_frames(pcm.shape[0]))
        return len(self.prompt(max(n_audio, 1), context, language)) + max_new_tokens <= self.max_context

    def _transcribe_one(self, pcm: np.ndarray, *, language: Optional[str], context: str, max_new_tokens: int,
                        temperature: float, top_k: int, top_p: float, repetition_penalty: float,
                        seed: Optional[int], on_text, work: Work) -> Transcription:
        options = DecodingOptions(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                  top_p=top_p, repetition_penalty=repetition_penalty, seed=seed)
        forced = resolve_language(language)
        req = self.prepare(pcm, language=forced, context=context, max_new_tokens=max_new_tokens)
        if self._rk is not None:
            result = self._rk.transcribe(self, req, language=forced, options=options, on_text=on_text,
                                         stop=lambda: work.cancelled)
            work.check()
            return result
        gen = Generation(self.decoder, req.embeds, self.tokenizer.eos_ids, self.embeddings.row, options)
        streamer = TextStreamer(self.tokenizer, on_text, forced is not None) if on_text else None

        def on_token(tok: int) -> bool:
            if streamer is not None:
                streamer.push(tok)
            return not work.cancelled

        gen.run(on_token=on_token)
        work.check()
        if streamer:
            streamer.finish()
        return self.result(gen.tokens, gen.finish_reason == "length", forced, req, gen.times)

    def result(self, tokens, truncated: bool, forced: Optional[str], req: Request, times: GenerationTimes,
               runtime_perf: Optional[dict] = None) -> Transcription:
        raw = self.tokenizer.decode(tokens, skip_special_tokens=True)
        lang, text = parse_asr_output(raw, forced)
        stats = TranscriptionStats(
            audio_seconds=req.audio_seconds, encoder_ms=req.encoder_ms, encoder_calls=req.encoder_calls,
            prefill_tokens=times.prefill_tokens, prefill_ms=times.prefill_ms, decode_tokens=times.decode_tokens,
            decode_ms=times.decode_ms, total_ms=(time.perf_counter() - req.t0) * 1000, backend=self.backend,
            runtime_perf=runtime_perf)
        return Transcription(text=text, language=lang, language_code=language_code(lang) if lang else None,
                             token_ids=tuple(int(t) for t in tokens), raw_text=raw, truncated=truncated, stats=stats)


def _auto_backend(bundle: Bundle) -> Tuple[str, Optional[str]]:
    """("rk", SoC) on an RK3576/RK3588 with rknn-toolkit-lite2 and a bundle holding RK models for
    that SoC; else ("onnx", None). (A missing librkllmrt.so is then reported by the rk backend.)"""
    import importlib.util
    import os

    from .rk_backend import ENV_SOC
    from .rknn_backend import detect_soc

    try:
        soc = os.environ.get(ENV_SOC) or detect_soc()
    except RuntimeError:
        return "onnx", None  # not a (supported) Rockchip board
    rkllm = bundle.manifest.get("rk", {}).get("rkllm", {})
    if soc not in rkllm:
        logger.info("%s board found but the bundle has no RKLLM decoder for it; using ONNX Runtime on the CPU", soc)
        return "onnx", None
    if importlib.util.find_spec("rknnlite") is None:
        logger.warning("%s board found but rknn-toolkit-lite2 is not installed; using the CPU backend", soc)
        return "onnx", None
    return "rk", soc
