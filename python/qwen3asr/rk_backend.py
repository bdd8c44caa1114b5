"""Rockchip NPU backend: RKNN audio encoder + RKLLM decoder in EMBED mode.

One request::

    audio -> log-mel (host) -> RKNN encoder (NPU) -> prompt ids -> host embedding with the
    audio spliced in (engine.embed_prompt) -> rkllm_run(EMBED) -> token ids -> engine.result

The RKLLM runtime generates by itself, so the engine's token-level sampler is not used: the
engine's :class:`~qwen3asr.decoding.DecodingOptions` are mapped onto the runtime's sampling
parameters (see :func:`rkllm_options`). Those are fixed at ``rkllm_init``, so a request with
other settings re-initialises the runtime (the model is loaded again, a few seconds).

Mapping of DecodingOptions to the runtime:

=====================  =====================================================================
``temperature == 0``   greedy: ``top_k = 1`` (temperature/top_p then do not matter)
``temperature > 0``    ``temperature``, ``top_p``, ``top_k`` (0 = all -> the vocabulary size)
``repetition_penalty`` ``repeat_penalty`` (the runtime penalises recent tokens, llama.cpp style;
                       1.0 = off as in the official decoding; W4A16 ports use about 1.15)
``max_new_tokens``     ``max_new_tokens``
``seed``               not supported by the runtime (a warning when sampling)
=====================  =====================================================================

Independent runs: the KV cache is cleared before each run (``rkllm_clear_kv_cache``) and the
run uses ``keep_history = 0``. Runaway repetition is stopped with ``rkllm_abort`` by the
binding's :class:`~qwen3asr.rkllm.RepetitionGuard`. The runtime's own figures (prefill and
generate time and tokens, peak memory) are returned in ``stats.runtime_perf``.

Everything that needs the board (rknnlite, librkllmrt.so) is imported or loaded only when the
backend is created.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .bundle import Bundle, BundleError, check_file
from .decoding import DecodingOptions, GenerationTimes
from .encoder import AudioEncoder
from .results import DecodeStats, Transcription
from .rknn_backend import SUPPORTED_SOCS

logger = logging.getLogger(__name__)

ENV_SOC = "QWEN3ASR_SOC"  # "rk3576" / "rk3588": skip device-tree detection
BASE_DOMAIN_ID = 1  # an RKNN model shares the process: the RKLLM model takes NPU IOMMU domain 1


class RKBackendError(RuntimeError):
    """The rk backend cannot run here or the bundle lacks its models (the message says what to do)."""


def _convert_hint(bundle_path: str, soc: str) -> str:
    return (f"convert the models on an x86 PC: python scripts/onnx2rknn.py --bundle {bundle_path} --target {soc} "
            f"and python scripts/export_rkllm.py --checkpoint CHECKPOINT --bundle {bundle_path} --out WORK_DIR "
            f"--target {soc} (docs/board.md)")


def rkllm_entry(bundle: Bundle, soc: str) -> dict:
    """The manifest's ``rk.rkllm.<soc>`` entry; RKBackendError naming the conversion step if absent."""
    rk = bundle.manifest.get("rk")
    if not rk:
        raise RKBackendError(f"the bundle {bundle.path} has no Rockchip models (no \"rk\" section in model.json); "
                             + _convert_hint(bundle.path, soc))
    per_soc = rk.get("rkllm") or {}
    if soc not in per_soc:
        have = ", ".join(sorted(per_soc)) or "none"
        raise RKBackendError(f"the bundle has no RKLLM decoder for {soc} (it has: {have}); run python "
                             f"scripts/export_rkllm.py --checkpoint CHECKPOINT --bundle {bundle.path} --out WORK_DIR "
                             f"--target {soc} on an x86 PC")
    entry = per_soc[soc]
    missing = [k for k in ("file", "quant", "max_context") if k not in entry]
    if missing:
        raise RKBackendError(f"model.json rk.rkllm.{soc} lacks {', '.join(missing)}; re-run scripts/export_rkllm.py")
    return entry


def rkllm_options(options: DecodingOptions, max_context: int, vocab_size: int, hidden_size: int,
                  repetition=None):
    """:class:`~qwen3asr.rkllm.RKLLMOptions` for ``options`` (see the module docstring for the mapping)."""
    from .rkllm import RepetitionGuard, RKLLMOptions

    if options.max_new_tokens >= max_context:
        raise ValueError(f"max_new_tokens={options.max_new_tokens} does not fit the RKLLM decoder's context of "
                         f"{max_context} tokens")
    if options.temperature == 0.0:
        sampling = {"top_k": 1, "top_p": 1.0, "temperature": 1.0}
    else:
        if options.seed is not None:
            logger.warning("the RKLLM runtime has no sampling seed: seed=%s is ignored", options.seed)
        sampling = {"top_k": options.top_k if options.top_k > 0 else vocab_size, "top_p": options.top_p,
                    "temperature": options.temperature}
    return RKLLMOptions(max_context_len=max_context, max_new_tokens=options.max_new_tokens,
                        repeat_penalty=options.repetition_penalty, base_domain_id=BASE_DOMAIN_ID, embed_flash=True,
                        hidden_size=hidden_size, skip_special_token=True,
                        repetition=repetition if repetition is not None else RepetitionGuard(), **sampling)


class _RuntimeTextDecoder:
    """Stands in for the tokenizer's incremental decoder inside the engine's TextStreamer.

    The runtime reports a token whose text ends inside a multi-byte character as WAITING
    and puts those bytes into the next NORMAL token's text; the binding forwards NORMAL
    tokens only. So the text pieces come from the runtime (complete characters), while
    TextStreamer still decides from the token ids what is transcript.
    """

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.text = ""  # text of the token being pushed (set by the caller)

    def push(self, token_id: int) -> str:
        return "" if self._tokenizer.is_special(token_id) else self.text

    def flush(self) -> str:
        return ""


class _StreamTokenizer:
    """The two things TextStreamer asks of a tokenizer, with runtime text as the pieces."""

    def __init__(self, tokenizer):
        self.asr_text = tokenizer.asr_text
        self.decoder = _RuntimeTextDecoder(tokenizer)

    def incremental_decoder(self, skip_special_tokens: bool = True) -> _RuntimeTextDecoder:
        return self.decoder


@dataclasses.dataclass
class RKBackend:
    """The RKNN encoder and the RKLLM decoder of one engine (``engine._rk``).

    Attributes:
      encoder: :class:`AudioEncoder` on the NPU.
      soc: "rk3576" or "rk3588".
      decoder_file: the ``.rkllm`` file.
      max_context: the decoder's KV-cache length (tokens), from the manifest.
    """

    encoder: AudioEncoder
    soc: str
    decoder_file: str
    max_context: int
    quant: str
    vocab_size: int
    hidden_size: int
    eos_ids: frozenset = frozenset()  # end-of-sequence ids (manifest "eos_token_ids"), dropped from the output
    lib_path: Optional[str] = None
    abi: Optional[str] = None
    repetition: Any = None
    runtime: Any = None  # RKLLMRuntime, created by load_decoder()

    def load_decoder(self, options: DecodingOptions = DecodingOptions()) -> None:
        """(Re)initialise the RKLLM runtime for ``options`` if its settings differ from the loaded ones."""
        from .rkllm import RKLLMRuntime

        wanted = rkllm_options(options, self.max_context, self.vocab_size, self.hidden_size, self.repetition)
        if self.runtime is not None:
            if self.runtime.options == wanted:
                return
            logger.info("re-initialising the RKLLM runtime for new sampling settings (the model is loaded again)")
            # the library and its ABI stay those found at the first init: no second search or probe
            self.lib_path, self.abi = self.runtime.lib_path, self.runtime.abi
            self.runtime.close()
            self.runtime = None
        self.runtime = RKLLMRuntime(self.decoder_file, lib_path=self.lib_path, abi=self.abi, options=wanted)

    def _run(self, prompt_embeds: np.ndarray, n_prompt: int, options: DecodingOptions,
             on_token: Optional[Callable[[int, str], None]]):
        """One EMBED run with a cleared cache: (runtime result, ids without end-of-sequence,
        GenerationTimes from the runtime's figures, or wall time if it gave none, wall ms)."""
        self.load_decoder(options)
        t0 = time.perf_counter()
        self.runtime.clear_kv_cache()
        res = self.runtime.run_embed(np.ascontiguousarray(prompt_embeds, dtype=np.float32), keep_history=False,
                                     on_token=on_token)
        wall_ms = (time.perf_counter() - t0) * 1000
        tokens = [t for t in res.token_ids if t not in self.eos_ids]
        if res.finish_reason == "repetition":
            logger.warning("the RKLLM decoder looped (runaway repetition) and was stopped after %d tokens",
                           len(res.token_ids))
        perf = res.perf
        times = GenerationTimes(
            prefill_tokens=perf.prefill_tokens if perf else n_prompt,
            prefill_ms=perf.prefill_time_ms if perf else 0.0,
            decode_tokens=perf.generate_tokens if perf else len(res.token_ids),
            decode_ms=perf.generate_time_ms if perf else wall_ms)
        return res, tokens, times, wall_ms

    def transcribe(self, engine, req, *, language: Optional[str] = None,
                   options: DecodingOptions = DecodingOptions(),
                   on_text: Optional[Callable[[str], None]] = None,
                   stop: Optional[Callable[[], bool]] = None) -> Transcription:
        """Decode one prepared clip (``engine.prepare``: encoded on the NPU, prompt embedded and checked
        against this decoder's context) on the RKLLM runtime; ``language`` is a resolved name or None;
        ``stop()`` returning True aborts the run (checked after each token)."""
        from .engine import TextStreamer

        on_token = None
        streamer = None
        if on_text is not None:
            stream_tok = _StreamTokenizer(engine.tokenizer)
            streamer = TextStreamer(stream_tok, on_text, language is not None)

            def on_token(token_id: int, text: str) -> bool:
                stream_tok.decoder.text = text
                streamer.push(token_id)
                return not (stop is not None and stop())
        elif stop is not None:
            def on_token(token_id: int, text: str) -> bool:
                return not stop()

        res, tokens, times, wall_ms = self._run(req.embeds, len(req.prompt), options, on_token)
        if streamer is not None:
            streamer.finish()
        runtime_perf = dataclasses.asdict(res.perf) if res.perf else {}
        runtime_perf.update({"finish_reason": res.finish_reason, "abi": self.runtime.abi, "soc": self.soc,
                             "quant": self.quant, "wall_ms": wall_ms})
        return engine.result(tokens, res.finish_reason == "length", language, req, times, runtime_perf)

    def decode_embeddings(self, prompt_embeds: np.ndarray, options: DecodingOptions = DecodingOptions(),
                          on_token: Optional[Callable[[int], None]] = None):
        """One RKLLM EMBED run on a whole embedded prompt with a cleared cache (the contract of
        Qwen3ASREngine.decode_embeddings, used by streaming and chunked long files).

        Returns (generated ids without end-of-sequence, DecodeStats) with the runtime's own timings.
        """
        if len(prompt_embeds) + options.max_new_tokens > self.max_context:
            raise ValueError(f"prompt of {len(prompt_embeds)} tokens + max_new_tokens={options.max_new_tokens} "
                             f"exceeds the RKLLM decoder's context of {self.max_context} tokens")
        cb = None
        if on_token is not None:
            def cb(token_id: int, text: str) -> Optional[bool]:
                if token_id not in self.eos_ids:
                    return on_token(token_id)
                return None
        res, tokens, t, _ = self._run(prompt_embeds, len(prompt_embeds), options, cb)
        reason = "length" if res.finish_reason == "length" else "eos"
        return tokens, DecodeStats(t.prefill_tokens, t.prefill_ms, t.decode_tokens, t.decode_ms, reason)

    def close(self) -> None:
        """Free the NPU: destroy the RKLLM handle and release the RKNN models."""
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
        release = getattr(self.encoder.runner, "release", None)
        if release is not None:
            release()


def decoder_path(bundle: Bundle, entry: dict, soc: str) -> str:
    """The ``.rkllm`` file of ``entry``; BundleError if missing or a Git LFS pointer."""
    return check_file(os.path.join(bundle.path, entry["file"]), f"RKLLM decoder for {soc}",
                      hint=f"Copy it from the PC that converted it, or run scripts/export_rkllm.py --target {soc} "
                           "again.")


def _check_machine(soc: Optional[str]) -> None:
    if soc is None and platform.machine() not in ("aarch64", "arm64"):
        raise RKBackendError(
            f"the rk backend runs on Rockchip RK3576/RK3588 boards only (this machine is {platform.machine()}); "
            "use backend 'onnx' here (transcribe.py --backend onnx, or auto). To prepare a board, see docs/board.md.")


def create_rk_backend(bundle: Bundle, encoder_form: str = "merged", encoder_sizes: Optional[Sequence[int]] = None,
                      soc: Optional[str] = None, *, core_mask: Any = None, lib_path: Optional[str] = None,
                      abi: Optional[str] = None, repetition=None, options: DecodingOptions = DecodingOptions(),
                      ) -> RKBackend:
    """The rk backend for ``bundle``: RKNN encoder (``create_rknn_encoder``) + RKLLM decoder.

    Args:
      encoder_form / encoder_sizes: which ``.rknn`` encoder variants to load.
      soc: "rk3576" / "rk3588"; default ``$QWEN3ASR_SOC``, else from the device tree.
      core_mask: NPU cores of the encoder (default all of the SoC).
      lib_path / abi: librkllmrt.so and its ABI ("1.2"/"1.3"), default: found and detected
        (``QWEN3ASR_RKLLM_LIB`` / ``QWEN3ASR_RKLLM_ABI``).
      repetition: :class:`~qwen3asr.rkllm.RepetitionGuard` (default: the binding's).
      options: decoding settings the runtime is first initialised with (greedy by default).

    Raises RKBackendError / BundleError / RKLLMError with what to do: not a board, no ``rk``
    section, wrong SoC, missing file or Git LFS pointer, missing rknnlite or librkllmrt.so.
    """
    soc = soc or os.environ.get(ENV_SOC) or None
    _check_machine(soc)
    from .rknn_backend import create_rknn_encoder, detect_soc

    soc = soc or detect_soc()
    if soc not in SUPPORTED_SOCS:
        raise ValueError(f"unsupported SoC {soc!r}: the rk backend supports {', '.join(SUPPORTED_SOCS)}")
    entry = rkllm_entry(bundle, soc)
    decoder_file = decoder_path(bundle, entry, soc)
    t = bundle.text_config
    encoder = create_rknn_encoder(bundle, encoder_form, encoder_sizes, soc=soc, core_mask=core_mask)
    backend = RKBackend(encoder=encoder, soc=soc, decoder_file=decoder_file, max_context=int(entry["max_context"]),
                        quant=str(entry["quant"]), vocab_size=int(t["vocab_size"]), hidden_size=int(t["hidden_size"]),
                        eos_ids=bundle.eos_token_ids, lib_path=lib_path, abi=abi, repetition=repetition)
    try:
        backend.load_decoder(options)
    except BaseException:
        backend.close()
        raise
    logger.info("rk backend on %s: %d encoder variants (%s), decoder %s (%s, context %d, ABI %s)", soc,
                len(encoder.variants), encoder_form, decoder_file, backend.quant, backend.max_context,
                backend.runtime.abi)
    return backend


__all__ = ["BASE_DOMAIN_ID", "ENV_SOC", "RKBackend", "RKBackendError", "create_rk_backend", "decoder_path",
           "rkllm_entry", "rkllm_options"]
