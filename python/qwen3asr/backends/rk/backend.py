"""Rockchip NPU backend: RKNN audio encoder + RKLLM decoder in EMBED mode.

One request::

    audio -> log-mel (host) -> RKNN encoder (NPU) -> prompt ids -> host embedding with the
    audio spliced in (engine) -> RKLLMTextDecoder.generate: rkllm_run(EMBED) -> token ids -> engine

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

A draft (the streamed text of a final pass, ``generate(draft=...)``) is verified as on the CPU
(qwen3asr.decoding.verify_draft): one GET_LOGITS run on prompt + draft gives the logits after the
prompt and after each draft id; the ids greedy decoding confirms are kept, and so is the choice
after them (its logits came with the run); unless that choice ends the text, a GENERATE run on
prompt + those ids decodes the rest. Only greedy runs
without a repetition penalty verify (the runtime's penalty is not the host's); a runtime whose
GET_LOGITS run does not return those rows, or fails, turns verification off for the decoder, with a warning
(docs/rkllm_abi.md, "Draft verification").

Independent runs: the KV cache is cleared before each run (``rkllm_clear_kv_cache``) and the
run uses ``keep_history = 0``. Runaway repetition is stopped with ``rkllm_abort`` by the
engine's loop guard of the run (:class:`~qwen3asr.decoding.RepetitionGuard`, as on the CPU;
without one, the binding's default). The runtime's own figures (prefill and
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
from typing import Callable, Optional, Sequence

import numpy as np

from ...bundle import Bundle, check_file
from ...decoding import DecodingOptions
from ...encoder import AudioEncoder
from ...errors import Qwen3ASRError
from ...results import DecodeStats
from .options import RKOptions
from .soc import ENV_SOC, SUPPORTED_SOCS, board_ram_bytes

logger = logging.getLogger(__name__)

BASE_DOMAIN_ID = 1  # an RKNN model shares the process: the RKLLM model takes NPU IOMMU domain 1


class RKBackendError(Qwen3ASRError, RuntimeError):
    """The rk backend cannot run here or the bundle lacks its models (the message says what to do)."""


def _convert_hint(bundle_path: str, soc: str) -> str:
    return (f"convert the models on an x86 PC: python scripts/onnx2rknn.py --bundle {bundle_path} --target {soc} "
            f"and python scripts/export_rkllm.py --checkpoint CHECKPOINT --bundle {bundle_path} --out WORK_DIR "
            f"--target {soc} (docs/board.md)")


def rkllm_entry(bundle: Bundle, soc: str) -> dict:
    """The manifest's ``rk.rkllm.<soc>`` entry; RKBackendError naming the conversion step if absent."""
    if not bundle.has_rk_models:
        raise RKBackendError(f"the bundle {bundle.path} has no Rockchip models (no \"rk\" section in model.json); "
                             + _convert_hint(bundle.path, soc))
    entry = bundle.rkllm_entry(soc)
    if entry is None:
        have = ", ".join(bundle.rkllm_socs()) or "none"
        raise RKBackendError(f"the bundle has no RKLLM decoder for {soc} (it has: {have}); run python "
                             f"scripts/export_rkllm.py --checkpoint CHECKPOINT --bundle {bundle.path} --out WORK_DIR "
                             f"--target {soc} on an x86 PC")
    missing = [k for k in ("file", "quant", "max_context") if k not in entry]
    if missing:
        raise RKBackendError(f"model.json rk.rkllm.{soc} lacks {', '.join(missing)}; re-run scripts/export_rkllm.py")
    return entry


def rkllm_options(options: DecodingOptions, max_context: int, vocab_size: int, hidden_size: int,
                  repetition=None, *, embed_flash: bool = True, cpu_mask: int = 0):
    """:class:`~qwen3asr.backends.rk.rkllm.RKLLMOptions` for ``options`` (see the module docstring for the mapping)."""
    from ...decoding import RepetitionGuard
    from .rkllm import RKLLMOptions

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
                        repeat_penalty=options.repetition_penalty, base_domain_id=BASE_DOMAIN_ID,
                        embed_flash=embed_flash, enabled_cpus_mask=cpu_mask, hidden_size=hidden_size,
                        skip_special_token=True,
                        repetition=repetition if repetition is not None else RepetitionGuard(), **sampling)


class RKLLMTextDecoder:
    """The rk backend's text decoder (the engine's TextDecoder seam): the RKLLM runtime in
    EMBED mode, one run per ``generate`` with a cleared KV cache.

    Attributes: soc, decoder_file, quant, max_context (the KV-cache length given to the
    runtime), runtime (RKLLMRuntime once loaded).
    """

    name = "rk"

    def __init__(self, decoder_file: str, soc: str, quant: str, max_context: int, vocab_size: int,
                 hidden_size: int, eos_ids: frozenset, rk: RKOptions = RKOptions(), repetition=None,
                 embed: Optional[Callable[[int], np.ndarray]] = None):
        self.decoder_file, self.soc, self.quant = decoder_file, soc, quant
        self.embed = embed  # token id -> (hidden,) float32 (the engine's table); None: drafts are ignored
        self.drafts = rk.drafts and embed is not None  # turned off when the runtime gives no per-row logits
        self.max_context, self.vocab_size, self.hidden_size = int(max_context), int(vocab_size), int(hidden_size)
        self.eos_ids = frozenset(eos_ids)
        self.rk = rk
        self.cpu_mask = rk.cpu_mask()
        self.lib_path, self.abi = rk.lib_path, rk.abi
        self.repetition = repetition
        self.runtime = None
        self.no_logits: Optional[str] = None  # why this runtime gives no per-row logits, once a run showed it

    def load(self, options: DecodingOptions = DecodingOptions()) -> None:
        """(Re)initialise the RKLLM runtime for ``options`` if its settings differ from the loaded ones."""
        from .rkllm import RKLLMRuntime

        wanted = rkllm_options(options, self.max_context, self.vocab_size, self.hidden_size, self.repetition,
                               embed_flash=self.rk.embed_flash, cpu_mask=self.cpu_mask)
        if self.runtime is not None:
            if self.runtime.options == wanted:
                return
            logger.info("re-initialising the RKLLM runtime for new sampling settings (the model is loaded again)")
            # the library and its ABI stay those found at the first init: no second search or probe
            self.lib_path, self.abi = self.runtime.lib_path, self.runtime.abi
            self.runtime.close()
            self.runtime = None
        self.runtime = RKLLMRuntime(self.decoder_file, lib_path=self.lib_path, abi=self.abi, options=wanted)

    def generate(self, prompt_embeds: np.ndarray, options: DecodingOptions = DecodingOptions(),
                 on_token: Optional[Callable[[int], Optional[bool]]] = None,
                 prefix_len: Optional[int] = None, guard=None, draft=()) -> tuple[list[int], DecodeStats]:
        """Generate from the whole embedded prompt ``(L, hidden) float32``: one EMBED run with a
        cleared cache (with a usable ``draft``, a GET_LOGITS run first, and the EMBED run only for
        the ids past the confirmed ones).

        ``on_token`` gets every generated id (the runtime's WAITING ones too), end-of-sequence
        ids excluded; returning False stops the run (finish_reason "stopped"). Returns (ids
        without end-of-sequence, DecodeStats with the runtime's own timings and figures).
        ``prefix_len`` is ignored: the whole prompt is prefilled every run, because the runtime's
        prefix reuse with EMBED input is reported broken on 1.2.3 and unverified on 1.3
        (docs/rkllm_abi.md, "Prefix KV reuse"). ``draft``: ids verified in a GET_LOGITS run
        first (the module docstring); the result is the one without it.
        """
        if len(prompt_embeds) + options.max_new_tokens > self.max_context:
            raise ValueError(f"prompt of {len(prompt_embeds)} tokens + max_new_tokens={options.max_new_tokens} "
                             f"exceeds the RKLLM decoder's context of {self.max_context} tokens")
        self.load(options)
        prompt = np.ascontiguousarray(prompt_embeds, dtype=np.float32)
        t0 = time.perf_counter()
        draft = self._usable_draft(draft, options)
        known, first = [], None  # ids settled by the logits run (the kept draft ids, then its next choice)
        if draft:
            loop = guard if guard is not None else self.runtime.options.repetition  # run_embed's guard
            checked = self._verify(prompt, draft, options, loop)
            if checked is not None:
                known, next_id, first = checked
                if next_id not in self.eos_ids:
                    known = known + [next_id]  # its logits came with the run: fed with the prompt below
                for i, t in enumerate(known if on_token is not None else ()):
                    if on_token(t) is False:
                        return self._stats_only(known[:i + 1], first, "stopped", t0)
                if next_id in self.eos_ids:
                    return self._stats_only(known, first, "eos", t0)
                if loop.triggered(known):  # as a step-by-step decode: the loop's last id kept, then stop
                    return self._stats_only(known, first, "repetition", t0)
                if len(known) >= options.max_new_tokens:
                    return self._stats_only(known, first, "length", t0)
        on_id = None
        if on_token is not None:
            def on_id(token_id: int) -> Optional[bool]:
                return None if token_id in self.eos_ids else on_token(token_id)
        if known:
            rows = np.stack([self.embed(t) for t in known]).astype(np.float32)
            prompt = np.ascontiguousarray(np.concatenate([prompt, rows]))
        self.runtime.clear_kv_cache()
        res = self.runtime.run_embed(prompt, keep_history=False, on_id=on_id, repetition=guard,
                                     max_new_tokens=options.max_new_tokens - len(known) if known else None,
                                     history=known)
        wall_ms = (time.perf_counter() - t0) * 1000
        tokens = known + [t for t in res.token_ids if t not in self.eos_ids]
        if res.finish_reason == "repetition":
            logger.warning("the RKLLM decoder looped (runaway repetition) and was stopped after %d tokens",
                           len(tokens))
        perf = res.perf
        runtime_perf = dataclasses.asdict(perf) if perf else {}
        runtime_perf.update({"finish_reason": res.finish_reason, "abi": self.runtime.abi, "soc": self.soc,
                             "quant": self.quant, "wall_ms": wall_ms})
        reason = {"length": "length", "aborted": "stopped", "repetition": "repetition"}.get(res.finish_reason, "eos")
        stats = DecodeStats(
            prefill_tokens=perf.prefill_tokens if perf else len(prompt),
            prefill_ms=perf.prefill_time_ms if perf else 0.0,
            decode_tokens=perf.generate_tokens if perf else len(res.token_ids),
            decode_ms=perf.generate_time_ms if perf else wall_ms,
            finish_reason=reason, runtime_perf=runtime_perf)
        return tokens, self._with_logits_run(stats, first)

    def text_logits(self, prompt_embeds: np.ndarray):
        """Texts scored after one prompt (qwen3asr.aligner.checked): a function of token ids ->
        (len(ids) + 1, vocab) float32, the logits after the ``(L, hidden) float32`` prompt and
        after each id, each call one GET_LOGITS prefill of the prompt and the ids' embeddings
        (the runtime keeps no cache to branch from). Raises RKLLMRunError as ``run_logits``;
        RKBackendError at once, with no run, after one run showed that this runtime returns
        fewer rows (a draft's verification or a text's)."""
        from .rkllm import RKLLMLogitsUnavailable

        if self.embed is None:
            raise RKBackendError("this RKLLM decoder has no embedding table to feed texts with")
        if self.no_logits:
            raise RKBackendError(f"this RKLLM runtime gives no per-row logits: {self.no_logits}")
        if self.runtime is None:
            self.load()
        prompt = np.ascontiguousarray(prompt_embeds, dtype=np.float32)

        def logits(ids) -> np.ndarray:
            rows = [prompt] + [self.embed(int(t))[None, :].astype(np.float32) for t in ids]
            try:
                return self.runtime.run_logits(np.ascontiguousarray(np.concatenate(rows)), len(ids) + 1,
                                               self.vocab_size)
            except RKLLMLogitsUnavailable as exc:
                self.no_logits = str(exc)
                raise

        return logits

    def _usable_draft(self, draft, options: DecodingOptions) -> list:
        """The ids of ``draft`` worth verifying: none unless greedy without a repetition penalty
        (the runtime's penalty is applied to its own window of ids, which the host does not know),
        and never up to the budget's last token (as on the CPU)."""
        if not self.drafts or not len(draft) or options.temperature != 0.0 or options.repetition_penalty != 1.0:
            return []
        return [int(t) for t in draft][:max(0, options.max_new_tokens - 1)]

    def _verify(self, prompt: np.ndarray, draft: list, options: DecodingOptions, guard):
        """One GET_LOGITS run on prompt + draft: (the kept ids, the greedy choice after them, the
        run's perf and wall ms), or None when this runtime gives no such logits or the run fails
        (verification is then off for this decoder; the request decodes without the draft)."""
        from ...decoding import verify_draft
        from .rkllm import RKLLMLogitsUnavailable, RKLLMRunError

        rows = np.stack([self.embed(t) for t in draft]).astype(np.float32)
        t0 = time.perf_counter()
        try:
            logits = self.runtime.run_logits(np.ascontiguousarray(np.concatenate([prompt, rows])), len(draft) + 1,
                                             self.vocab_size)
        except RKLLMRunError as exc:  # no such rows here (RKLLMLogitsUnavailable), or the mode failed
            self.drafts = False
            if isinstance(exc, RKLLMLogitsUnavailable):
                self.no_logits = str(exc)
            logger.warning("draft verification is off for this decoder: %s. Final passes decode every id "
                           "(docs/rkllm_abi.md, \"Draft verification\")", exc)
            return None
        n = verify_draft(logits, draft, options, [], sorted(self.eos_ids), guard)
        first = {"perf": self.runtime.last_perf, "wall_ms": (time.perf_counter() - t0) * 1000,
                 "draft": len(draft), "kept": n}
        return draft[:n], int(np.argmax(logits[n])), first

    def _with_logits_run(self, stats: DecodeStats, first: Optional[dict]) -> DecodeStats:
        """``stats`` of the GENERATE run with the GET_LOGITS run's rows and time added (if there was one)."""
        if first is None:
            return stats
        perf = first["perf"]
        rows = perf.prefill_tokens if perf else 0
        ms = perf.prefill_time_ms if perf else first["wall_ms"]
        runtime_perf = dict(stats.runtime_perf, logits_run={**(dataclasses.asdict(perf) if perf else {}),
                                                            "wall_ms": first["wall_ms"]})
        return dataclasses.replace(stats, prefill_tokens=stats.prefill_tokens + rows,
                                   prefill_ms=stats.prefill_ms + ms, draft_tokens=first["draft"],
                                   verified_tokens=first["kept"], runtime_perf=runtime_perf)

    def _stats_only(self, known: list, first: dict, reason: str, t0: float):
        """The result when the GET_LOGITS run settled it (the text ended after the confirmed ids,
        the id after them ends a loop or the budget, or ``on_token`` stopped): no GENERATE run."""
        stats = DecodeStats(prefill_tokens=0, prefill_ms=0.0, decode_tokens=0, decode_ms=0.0, finish_reason=reason,
                            runtime_perf={"finish_reason": reason, "abi": self.runtime.abi, "soc": self.soc,
                                          "quant": self.quant, "wall_ms": (time.perf_counter() - t0) * 1000})
        return known, self._with_logits_run(stats, first)

    def close(self) -> None:
        """Destroy the RKLLM handle (safe to call twice)."""
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None


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


# A board with less RAM than this (a "4 GB" board) runs each RKLLM handle with at most
# SMALL_BOARD_CONTEXT positions unless RKOptions.max_context says otherwise: with word timestamps
# the two handles' KV caches for their converted contexts (4096 + 2048, fp16, 112 KiB a position)
# would put RK3588's high memory estimate 350 MB over a 4 GB board's budget; at 1024 it fits with
# 120 MB to spare (docs/board.md section 8). Longer audio then goes in segments, words in pieces
# of at most 27 s (ForcedAligner.piece_seconds).
SMALL_BOARD_RAM = 5_000_000_000
SMALL_BOARD_CONTEXT = 1024


def resolve_rkllm(bundle: Bundle, rk: RKOptions, what: str):
    """The SoC (``rk.soc``, ``$QWEN3ASR_SOC`` or detected), the bundle's RKLLM entry for it, the
    .rkllm path and the context to run it with (``rk.max_context``, else the converted one, at
    most SMALL_BOARD_CONTEXT on a board with less than SMALL_BOARD_RAM), after checking this
    machine can run it and that ``rk.max_context`` does not exceed the converted context
    (``what`` names the model in errors)."""
    soc = rk.soc or os.environ.get(ENV_SOC) or None
    _check_machine(soc)
    from .soc import detect_soc

    soc = soc or detect_soc()
    if soc not in SUPPORTED_SOCS:
        raise ValueError(f"unsupported SoC {soc!r}: the rk backend supports {', '.join(SUPPORTED_SOCS)}")
    entry = rkllm_entry(bundle, soc)
    decoder_file = decoder_path(bundle, entry, soc)
    converted = int(entry["max_context"])
    if rk.max_context is not None and rk.max_context > converted:
        raise ValueError(f"max_context={rk.max_context} is over the {converted} tokens the {what} was converted "
                         f"for; use at most {converted} or convert again with scripts/export_rkllm.py --max-context")
    context = rk.max_context if rk.max_context is not None else converted
    ram = board_ram_bytes() if rk.max_context is None else None
    if ram is not None and ram < SMALL_BOARD_RAM and context > SMALL_BOARD_CONTEXT:
        logger.info("%s: context %d instead of the converted %d on this %.1f GB board (max_context sets it)",
                    what, SMALL_BOARD_CONTEXT, converted, ram / 1e9)
        context = SMALL_BOARD_CONTEXT
    return soc, entry, decoder_file, context


def create_rk_backend(bundle: Bundle, encoder_form: str = "merged", encoder_sizes: Optional[Sequence[int]] = None,
                      rk: RKOptions = RKOptions(), *, repetition=None,
                      options: DecodingOptions = DecodingOptions(),
                      embed: Optional[Callable[[int], np.ndarray]] = None) -> tuple[AudioEncoder, RKLLMTextDecoder]:
    """The rk backend for ``bundle``: (RKNN encoder on the NPU, RKLLM text decoder), loaded.

    Args:
      encoder_form / encoder_sizes: which ``.rknn`` encoder variants to load.
      rk: board settings (SoC, NPU cores, decoder CPUs, library, ABI, context, embed_flash).
      repetition: the binding's default :class:`~qwen3asr.decoding.RepetitionGuard` (runs without a guard of their own).
      options: decoding settings the runtime is first initialised with (greedy by default).
      embed: token id -> (hidden,) float32 row of the engine's embedding table, for drafts
        (``RKLLMTextDecoder.generate``); None: drafts are ignored.

    Raises RKBackendError / BundleError / RKLLMError with what to do: not a board, no ``rk``
    section, wrong SoC, missing file or Git LFS pointer, missing rknnlite or librkllmrt.so.
    """
    soc, entry, decoder_file, context = resolve_rkllm(bundle, rk, "RKLLM model")
    from .rknn import create_rknn_encoder
    t = bundle.text_config
    decoder = RKLLMTextDecoder(decoder_file, soc, str(entry["quant"]), context,
                               int(t["vocab_size"]), int(t["hidden_size"]), bundle.eos_token_ids, rk, repetition, embed)
    encoder = create_rknn_encoder(bundle, encoder_form, encoder_sizes, soc=soc, core_mask=rk.npu_cores)
    try:
        decoder.load(options)
    except BaseException:
        encoder.close()
        raise
    logger.info("rk backend on %s: %d encoder variants (%s), decoder %s (%s, context %d, ABI %s, CPU mask %#x)",
                soc, len(encoder.variants), encoder_form, decoder_file, decoder.quant, decoder.max_context,
                decoder.runtime.abi, decoder.cpu_mask)
    return encoder, decoder


__all__ = ["BASE_DOMAIN_ID", "RKBackendError", "RKLLMTextDecoder", "create_rk_backend", "decoder_path",
           "rkllm_entry", "rkllm_options"]
