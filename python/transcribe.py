#!/usr/bin/env python3
"""Transcribe an audio file with Qwen3-ASR.

    python python/transcribe.py --audio audio/en_demo.wav
    python python/transcribe.py --audio talk.flac --language English --format json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
log = logging.getLogger("transcribe")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Transcribe an audio file with Qwen3-ASR (ONNX Runtime CPU or Rockchip NPU).")
    ap.add_argument("--audio", required=True, help="audio file (WAV, FLAC, OGG, ...; any rate and channel count)")
    ap.add_argument("--model", default=None, help="model bundle directory (default: $QWEN3ASR_MODEL or models/default)")
    ap.add_argument("--language", default=None, help="force a language (e.g. English, Chinese, en, zh); default: detect")
    ap.add_argument("--context", default="", help="context text to bias recognition (names, terms)")
    ap.add_argument("--backend", default="auto", choices=["auto", "onnx", "rk"], help="inference backend")
    ap.add_argument("--encoder-form", default="merged", choices=["merged", "split"], help="encoder graphs to use")
    ap.add_argument("--decoder-dtype", default="auto", choices=["auto", "fp32", "int8", "int4"],
                    help="ONNX decoder weights (auto: int8 when the bundle has it)")
    ap.add_argument("--max-new-tokens", type=int, default=256, help="generation budget (default %(default)s)")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--repetition-penalty", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for ONNX Runtime")
    ap.add_argument("--format", default="text", choices=["text", "json", "srt", "vtt"], help="output format")
    ap.add_argument("--chunk-size", type=float, default=None,
                    help="decode in chunks of this many seconds (default: one pass if the audio fits the context and "
                         "the model's one-pass limit, else VAD segments (see --vad) or 30 s chunks)")
    ap.add_argument("--memory-num", type=int, default=2, help="chunks the decoder sees at once (default %(default)s)")
    ap.add_argument("--rollback-tokens", type=int, default=5,
                    help="tokens re-decoded at each chunk boundary (default %(default)s)")
    ap.add_argument("--start", type=float, default=0.0, help="start at this second")
    ap.add_argument("--duration", type=float, default=None, help="transcribe only this many seconds")
    ap.add_argument("--vad", dest="vad", action="store_const", const=True, default=None,
                    help="decode only speech (Silero VAD). Default: on for audio too long for one pass when the "
                         "Silero model is installed, else 30 s chunks")
    ap.add_argument("--no-vad", dest="vad", action="store_const", const=False,
                    help="never use VAD: audio too long for one pass is decoded in chunks of at most 30 s "
                         "(each ending at its last pause)")
    ap.add_argument("--no-itn", action="store_true", help="keep numbers as words (no inverse text normalisation)")
    ap.add_argument("--stream", action="store_true", help="print text as it is generated (text format)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return ap


def _vad_installed() -> bool:
    from qwen3asr.vad import find_model

    try:
        find_model()
    except FileNotFoundError:
        return False
    return True


def _progress_bar(done: float, total: float) -> None:
    width = 30
    fill = int(width * done / total) if total else width
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done:6.1f}/{total:.1f} s")
    sys.stderr.flush()


def _write_piece(piece: str) -> None:
    """--stream with text output: each committed piece as it comes."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        from qwen3asr import Qwen3ASREngine
        from qwen3asr.audio import AudioError
        from qwen3asr.bundle import BundleError
    except ImportError as exc:
        print(f"error: cannot import qwen3asr ({exc}); install the requirements: pip install -r requirements.txt",
              file=sys.stderr)
        return 1
    try:
        engine = Qwen3ASREngine(args.model, backend=args.backend, encoder_form=args.encoder_form,
                                decoder_dtype=args.decoder_dtype, threads=args.threads)
        on_text = _write_piece if args.stream and args.format == "text" else None
        from qwen3asr.audio import SAMPLE_RATE, prepare_audio

        pcm = prepare_audio(args.audio)  # decoded and resampled once; the engine takes the array
        chunk_size, vad = args.chunk_size, args.vad
        if chunk_size is None and not vad:
            from qwen3asr.longform import select_audio

            part = select_audio(pcm, args.start, args.duration) if args.start or args.duration is not None else pcm
            limit = engine.bundle.one_pass_seconds
            if not engine.fits_one_pass(part, args.context, args.language, args.max_new_tokens) or \
                    (limit is not None and part.shape[0] / SAMPLE_RATE > limit):
                # Too long for one pass (the context, or what the bundle says its model handles).
                # VAD-first segments when the Silero model is there: on the bundled model's long
                # clips they gave 2.8 % MER against 20.9 % for 30 s chunks ending at pauses
                # (docs/streaming.md), and silence costs nothing.
                if vad is None and _vad_installed():
                    vad = True
                    log.info("audio too long for one pass: decoding VAD speech segments (--no-vad for 30 s chunks)")
                else:
                    chunk_size = 30.0
                    log.info("audio too long for one pass: decoding chunks of at most %.0f s", chunk_size)
        progress = _progress_bar if sys.stderr.isatty() and not args.stream else None
        result = engine.transcribe(pcm, language=args.language, context=args.context,
                                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                                   top_p=args.top_p, repetition_penalty=args.repetition_penalty, seed=args.seed,
                                   on_text=on_text, chunk_size=chunk_size, memory_num=args.memory_num,
                                   rollback_tokens=args.rollback_tokens, start_second=args.start,
                                   duration=args.duration, vad=vad or None,
                                   itn=not (args.no_itn or args.stream), progress=progress)
        if progress is not None:
            sys.stderr.write("\r\033[K")
    except (AudioError, BundleError, ValueError, RuntimeError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    elif args.format in ("srt", "vtt"):
        from qwen3asr.subtitles import to_srt, to_vtt

        sys.stdout.write((to_srt if args.format == "srt" else to_vtt)(result.segments))
    elif args.stream:
        print()
    else:
        print(result.text)
    if result.truncated:
        print(f"warning: output truncated at --max-new-tokens {args.max_new_tokens}", file=sys.stderr)
    if args.verbose:
        s = result.stats
        print(f"[{result.language}] {s.audio_seconds:.2f} s audio, encoder {s.encoder_ms:.0f} ms, prefill "
              f"{s.prefill_tokens} tok {s.prefill_ms:.0f} ms, decode {s.decode_tokens} tok {s.decode_ms:.0f} ms, "
              f"RTF {s.real_time_factor:.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
