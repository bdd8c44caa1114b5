"""qwen3asr-transcribe: transcribe an audio file (python python/transcribe.py runs the same).

    qwen3asr-transcribe --audio audio/en_1.wav
    qwen3asr-transcribe --audio talk.flac --language English --format json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from ..options import WORD_SPANS
from .common import (ArgumentParser, add_decoding_args, add_engine_args, engine_from_args, float_arg,
                     options_from_args, setup_logging)

log = logging.getLogger("transcribe")


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="qwen3asr-transcribe",
                        description="Transcribe an audio file with Qwen3-ASR (ONNX Runtime CPU or Rockchip "
                                    "NPU).")
    ap.add_argument("--audio", required=True, help="audio file (WAV, FLAC, OGG, ...; any rate and channel count)")
    add_engine_args(ap, spin_default="auto")  # one file, one call: the decoder spins on a quiet host
    ap.add_argument("--decoder-dtype", default="auto", choices=["auto", "fp32", "int8", "int4"],
                    help="ONNX decoder weights (auto: int8 when the bundle has it)")
    add_decoding_args(ap)
    ap.add_argument("--format", default="text", choices=["text", "json", "srt", "vtt"], help="output format")
    ap.add_argument("--word-timestamps", action="store_true",
                    help="when each word was said (the forced aligner, --aligner): json gains \"words\", srt/vtt "
                         "cues are cut at words and vtt cues carry every word's time")
    ap.add_argument("--word-spans", default="speech", choices=WORD_SPANS,
                    help="with --word-timestamps, what word times say: speech (spans fitted to the speech), raw "
                         "(the aligner's own) or checked (speech, with the words of the pieces between pauses "
                         "checked by the ASR model and each piece aligned again as the mean of four shifted passes: "
                         "closer, several times the alignment's CPU; docs/aligner.md)")
    ap.add_argument("--start", type=float_arg, default=0.0, help="start at this second")
    ap.add_argument("--duration", type=float_arg, default=None, help="transcribe only this many seconds")
    ap.add_argument("--vad", dest="vad", action="store_const", const=True, default=None,
                    help="decode only speech (Silero VAD). Default: on for audio too long for one pass when the "
                         "Silero model is installed, else 30 s chunks")
    ap.add_argument("--no-vad", dest="vad", action="store_const", const=False,
                    help="never use VAD: audio too long for one pass is decoded in chunks of at most 30 s "
                         "(each ending at its last pause)")
    ap.add_argument("--itn", action="store_true",
                    help="inverse text normalisation of the finished text (spoken numbers as digits; qwen3asr.itn). "
                         "Off by default, as in the library and the servers: the text is the model's own")
    ap.add_argument("--no-itn", action="store_true", help="the default (kept for scripts written when ITN was on)")
    ap.add_argument("--stream", action="store_true",
                    help="print text as it is generated (text format); turns ITN off, since printed text "
                         "cannot be rewritten")
    ap.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return ap


def _progress_bar(done: float, total: float) -> None:
    width = 30
    fill = int(width * done / total) if total else width
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done:6.1f}/{total:.1f} s")
    sys.stderr.flush()


def _write_piece(piece: str) -> None:
    """--stream with text output: each committed piece as it comes."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def _selected_seconds(audio, args) -> float:
    """The seconds of the file the request transcribes (the engine preloads the encoder graphs for
    them when the plan may decode them in one pass: qwen3asr.plan.preload_seconds). ValueError: a
    bad selection."""
    from ..audio import SAMPLE_RATE
    from ..longform import selection

    a, b = selection(audio.n_samples, args.start, args.duration) if args.start or args.duration is not None \
        else (0, audio.n_samples)
    return (b - a) / SAMPLE_RATE


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    from ..audio import AudioError, AudioFile
    from ..bundle import BundleError

    try:
        options = options_from_args(args, vad=args.vad, itn=args.itn and not (args.no_itn or args.stream),
                                    word_timestamps=args.word_timestamps, word_spans=args.word_spans)
        # the file first: a bad one is reported before any model loads, and its length tells the
        # engine which encoder graphs to load first, the decoder loading while they encode (preload_seconds)
        with AudioFile(args.audio) as audio:
            engine = engine_from_args(args, preload_seconds=_selected_seconds(audio, args), options=options)
            on_text = _write_piece if args.stream and args.format == "text" else None
            progress = _progress_bar if sys.stderr.isatty() and not args.stream else None
            with engine:
                result = engine.transcribe(audio, options, start_second=args.start, duration=args.duration,
                                           on_text=on_text, progress=progress)
        if progress is not None:
            sys.stderr.write("\r\033[K")
    except (AudioError, BundleError, ValueError, RuntimeError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False))
    elif args.format in ("srt", "vtt"):
        from ..subtitles import to_srt, to_vtt, word_cues

        cues = word_cues(result.segments) if args.word_timestamps else result.segments
        sys.stdout.write(to_srt(cues) if args.format == "srt" else to_vtt(cues, inline_words=args.word_timestamps))
    elif args.stream:
        print()
    else:
        print(result.text)
    if result.truncated:
        print(f"warning: output truncated at {options.decoding().max_new_tokens} new tokens (--max-new-tokens)",
              file=sys.stderr)
    if args.verbose:
        s = result.stats
        print(f"[{result.language}] {s.audio_seconds:.2f} s audio, encoder {s.encoder_ms:.0f} ms, prefill "
              f"{s.prefill_tokens} tok {s.prefill_ms:.0f} ms, decode {s.decode_tokens} tok {s.decode_ms:.0f} ms, "
              f"RTF {s.real_time_factor:.3f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
