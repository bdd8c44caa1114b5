"""Flags shared by the command-line programs, mapped onto the engine's options objects."""

from __future__ import annotations

import argparse
import logging
import os

from ..checks import show
from ..options import TranscribeOptions


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose error line quotes no more than a part of an overlong value (a
    1 MB argument given to a choice flag is not echoed back whole)."""

    MAX_ERROR_CHARS = 400

    def error(self, message: str):
        n = self.MAX_ERROR_CHARS // 2
        if len(message) > 2 * n:
            message = f"{message[:n]} ... {message[-n:]}"
        super().error(message)


def int_arg(text: str) -> int:
    """argparse type of an integer flag (the range is the options' check; the error never
    echoes more than a short quote of the value)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value: {show(text)}") from None


def float_arg(text: str) -> float:
    """argparse type of a number flag (NaN and infinities parse; the options refuse them)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number value: {show(text)}") from None


SPIN_WAITS = {"on": True, "off": False, "auto": "auto"}  # --spin-wait -> Qwen3ASREngine(spin_wait=)


def add_engine_args(ap: argparse.ArgumentParser, spin_default: str = "off") -> None:
    """--model, --backend, --encoder-form, --threads and the board knobs (RKOptions);
    ``spin_default``: the program's --spin-wait (a one-shot program's "auto")."""
    ap.add_argument("--model", default=None, help="a model bundle directory, a hub id (Org/Name[@revision], fetched and "
                    "converted once) or a known name: 0.6b, 1.7b (default: $QWEN3ASR_MODEL or models/default)")
    ap.add_argument("--backend", default="auto", choices=["auto", "onnx", "rk"],
                    help="auto: the NPU on a Rockchip board with its runtimes, else the CPU (default)")
    ap.add_argument("--aligner", default=None,
                    help="forced-aligner bundle directory or hub id (aligner = Qwen/Qwen3-ForcedAligner-0.6B) for word "
                         "timestamps (default: $QWEN3ASR_ALIGNER, else the bundled "
                         "demo aligner with the bundled model; loaded when words are first asked for)")
    ap.add_argument("--encoder-form", default="merged", choices=["merged", "split"],
                    help="encoder graphs: merged (one per duration) or split (a front end per 1 s chunk + back "
                         "ends). On the CPU split gives the same result as fast, and a live stream's final pass "
                         "reuses the chunks' conv stems computed while the speaker talked (docs/streaming.md); "
                         "default %(default)s")
    ap.add_argument("--threads", type=int_arg, default=None, help="CPU threads for ONNX Runtime")
    ap.add_argument("--spin-wait", nargs="?", const="on", default=spin_default, choices=["on", "off", "auto"],
                    help="ONNX Runtime's idle threads spin before sleeping: faster on a quiet machine, slower on a "
                         "busy one. auto: a one-shot run's decoder spins if no other process is running when it "
                         "loads. Bare --spin-wait = on (default %(default)s)")
    ap.add_argument("--memory", default="default", choices=["default", "lean"],
                    help="CPU memory profile: lean = int4 decoder by default and smaller KV-cache steps; with a "
                         "bundle exported --memory lean also int8 encoder weights and memory-mapped decoder "
                         "weights (docs/benchmarks.md \"Lean profile\"; default %(default)s)")
    ap.add_argument("--prepacked-cache", nargs="?", const="", metavar="DIR",
                    default=os.environ.get("QWEN3ASR_PREPACKED_CACHE") or None,
                    help="keep ONNX Runtime's prepacked weights in DIR and load them from there next time: a "
                         "quicker start for one-shot runs, for this CPU and onnxruntime only, about twice the "
                         "weights on disk (bare: prepacked/ in the models' cache, ~/.cache/qwen3asr or "
                         "$QWEN3ASR_CACHE; default $QWEN3ASR_PREPACKED_CACHE, else off; docs/benchmarks.md)")
    rk = ap.add_argument_group("board (rk backend)")
    rk.add_argument("--soc", default=None, choices=["rk3576", "rk3588"],
                    help="the board's SoC (default: $QWEN3ASR_SOC, else the device tree)")
    rk.add_argument("--npu-cores", default=None,
                    help="NPU cores of the encoder: auto, 0, 1, 2, 0_1, 0_1_2 (default: all of the SoC)")
    rk.add_argument("--cpus", default=None,
                    help="CPUs of the RKLLM decoder: a count (the fastest cores, e.g. 4) or a list (e.g. 4-7) "
                         "(default: the runtime's choice)")
    rk.add_argument("--rkllm-lib", default=None, help="path of librkllmrt.so (default: $QWEN3ASR_RKLLM_LIB, "
                                                      "else searched: lib/, /usr/lib, ...)")
    rk.add_argument("--rkllm-abi", default=None, choices=["1.2", "1.3"], help="C layout of librkllmrt.so "
                                                                             "(default: detected)")
    rk.add_argument("--max-context", type=int_arg, default=None,
                    help="RKLLM KV-cache length (<= the converted model's; default: the model's)")
    rk.add_argument("--no-embed-flash", action="store_true", help="keep the RKLLM embedding table in RAM")
    rk.add_argument("--no-rk-drafts", action="store_true",
                    help="final passes decode every id on the RKLLM decoder instead of verifying the streamed "
                         "text in one GET_LOGITS run first (docs/rkllm_abi.md, \"Draft verification\")")


def add_decoding_args(ap: argparse.ArgumentParser) -> None:
    """The TranscribeOptions flags (None = the mode's default, as documented in qwen3asr.options)."""
    ap.add_argument("--language", default=None, help="force a language (English, Chinese, en, zh, ...); default: detect")
    ap.add_argument("--context", default="", help="context text to bias recognition (names, terms)")
    ap.add_argument("--max-new-tokens", type=int_arg, default=None,
                    help="generation budget (per chunk when chunked; default 256, streams 128)")
    ap.add_argument("--temperature", type=float_arg, default=0.0, help="0 = greedy (default)")
    ap.add_argument("--top-k", type=int_arg, default=0)
    ap.add_argument("--top-p", type=float_arg, default=1.0)
    ap.add_argument("--repetition-penalty", type=float_arg, default=1.0, help="1 = off (default, as official)")
    ap.add_argument("--seed", type=int_arg, default=None, help="sampling seed (reproducible sampled output)")
    ap.add_argument("--chunk-size", type=float_arg, default=None,
                    help="seconds per chunk (files: default one pass if the audio fits, else VAD segments or 30 s "
                         "chunks; streams: 4)")
    ap.add_argument("--memory-num", type=int_arg, default=2,
                    help="chunks the decoder sees at once (default %(default)s)")
    ap.add_argument("--rollback-tokens", type=int_arg, default=None,
                    help="tokens re-decoded at each chunk boundary (default: files 5, streams 2)")
    ap.add_argument("--no-fallback", action="store_true",
                    help="keep a decoder run that looped as it is (default for files: decode it again with a "
                         "repetition penalty, then sampling, and keep the best try)")
    ap.add_argument("--no-pauses", action="store_true",
                    help="fixed chunks and a sliding window (no pause rules, docs/streaming.md)")
    ap.add_argument("--compact-prompt", action="store_true",
                    help="the compact prompt of the reference design (docs/reference_design.md): no system turn, "
                         "no language header (no detection)")


def prepacked_dir(flag):
    """--prepacked-cache's directory: None (off), the one given, or for the bare flag ("")
    prepacked/ in the models' cache (qwen3asr.hub.cache.cache_root)."""
    if flag != "":
        return flag
    from ..hub.cache import cache_root

    return os.path.join(cache_root(), "prepacked")


def backend_options_from_args(args):
    """The BackendOptions of the engine flags (checked here, before any model loads: ValueError)."""
    from ..backends import BackendOptions, RKOptions

    rk = RKOptions(soc=args.soc, npu_cores=args.npu_cores, cpus=args.cpus, lib_path=args.rkllm_lib,
                   abi=args.rkllm_abi, max_context=args.max_context, embed_flash=not args.no_embed_flash,
                   drafts=not args.no_rk_drafts)
    return BackendOptions(encoder_form=args.encoder_form,
                          decoder_dtype=getattr(args, "decoder_dtype", "auto"), threads=args.threads,  # mic: none
                          spin_wait=SPIN_WAITS[args.spin_wait], rk=rk, memory=args.memory,
                          prepacked_cache=prepacked_dir(getattr(args, "prepacked_cache", None)))


def engine_from_args(args, preload_seconds=None, options=None):
    """The engine of the flags; ``preload_seconds`` and ``options``: Qwen3ASREngine's (the one-shot
    CLI's file length and its request's options, from which the plan tells what to preload)."""
    from .. import Qwen3ASREngine

    o = backend_options_from_args(args)
    return Qwen3ASREngine(args.model, backend=args.backend, threads=o.threads, rk=o.rk, spin_wait=o.spin_wait,
                          encoder_form=o.encoder_form, decoder_dtype=o.decoder_dtype, aligner=args.aligner,
                          memory=o.memory, preload_seconds=preload_seconds, options=options,
                          prepacked_cache=o.prepacked_cache)


def options_from_args(args, **extra) -> TranscribeOptions:
    return TranscribeOptions(
        language=args.language, context=args.context, max_new_tokens=args.max_new_tokens,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        repetition_penalty=args.repetition_penalty, seed=args.seed, chunk_size=args.chunk_size,
        memory_num=args.memory_num, rollback_tokens=args.rollback_tokens,
        pause_db=None if args.no_pauses else TranscribeOptions.pause_db, compact_prompt=args.compact_prompt,
        fallback=False if args.no_fallback else None, **extra)


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
