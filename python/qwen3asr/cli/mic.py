"""qwen3asr-mic: live captions from a microphone (or any capture device) with Qwen3-ASR
(python python/mic_stream.py runs the same).

    qwen3asr-mic --list-devices
    qwen3asr-mic --device pulse --language English --vad

One terminal line shows the committed text and, dimmed, the unstable tail, redrawn in
place. Ctrl-C (or --max-seconds) flushes the last words, prints the final text and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import queue
import shutil
import signal
import sys

from .. import checks
from ..checks import show
from ..audio import MAX_STREAM_SECONDS, SAMPLE_RATE, PcmConverter, PcmFormat
from .common import (ArgumentParser, add_decoding_args, add_engine_args, backend_options_from_args, engine_from_args,
                     float_arg, options_from_args, setup_logging)

BLOCK_SECONDS = 0.1  # audio per capture callback
CLEAR = "\r\033[K"  # carriage return + erase to end of line
DIM, RESET = "\033[2m", "\033[0m"


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="qwen3asr-mic", description="Live captions from a capture device with Qwen3-ASR.")
    ap.add_argument("--list-devices", action="store_true", help="list capture devices and exit")
    ap.add_argument("--device", default=None, help="capture device: index or part of its name (default: system default)")
    add_engine_args(ap)
    add_decoding_args(ap)
    ap.add_argument("--max-seconds", type=float_arg, default=None, help="stop after this much audio")
    ap.add_argument("--vad", action="store_true", help="decode only speech (Silero VAD)")
    ap.add_argument("--final-pass", action=argparse.BooleanOptionalAction, default=False,
                    help="decode each finished piece of speech again in one pass, its text replacing the "
                         "streamed one (default off: at the default 4 s chunks the long test clips had the same "
                         "error rate with it for 1.8x the compute; with --chunk-size 1 or 2 it is worth it, "
                         "docs/streaming.md)")
    ap.add_argument("--partial-every", type=float_arg, default=None, metavar="SECONDS",
                    help="a preview of the open chunk every this many seconds of audio, shown greyed before the "
                         "chunk is complete: first words sooner, one decoder run each (default: none; "
                         "docs/streaming.md)")
    ap.add_argument("--first-words", type=float_arg, default=0.5, metavar="SECONDS",
                    help="previews as --partial-every, but only until each segment shows text: its first words "
                         "early for one or two decoder runs a segment (default %(default)s; 0: none)")
    ap.add_argument("--stats", action="store_true", help="print the compute accounting at the end (stderr)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    return ap


def _import_sounddevice():
    try:
        import sounddevice as sd
    except OSError as exc:  # the PortAudio shared library is missing
        raise SystemExit(f"error: PortAudio is not available ({exc}); install it: "
                         f"sudo apt-get install libportaudio2") from None
    except ImportError:
        raise SystemExit("error: the sounddevice package is missing: pip install sounddevice") from None
    return sd


def list_devices(sd) -> str:
    lines = []
    for i, d in enumerate(sd.query_devices()):
        if d["max_input_channels"] > 0:
            api = sd.query_hostapis(d["hostapi"])["name"]
            lines.append(f"{i:3d}  {d['name']}  ({api}, {d['max_input_channels']} in, "
                         f"{d['default_samplerate']:.0f} Hz)")
    if not lines:
        return ("no capture devices found. PortAudio sees none: connect a microphone, or start PulseAudio "
                "(the ALSA 'pulse' device needs libasound2-plugins); see docs/streaming.md")
    return "capture devices:\n" + "\n".join(lines)


def pick_device(sd, spec):
    """Device index for ``spec`` (None = default input); SystemExit with an explanation otherwise."""
    inputs = [i for i, d in enumerate(sd.query_devices()) if d["max_input_channels"] > 0]
    if not inputs:
        raise SystemExit("error: " + list_devices(sd))
    if spec is None:
        default = sd.default.device[0]
        return default if default is not None and default >= 0 else inputs[0]
    if spec.isdigit():
        idx = int(spec) if len(spec) <= 6 else -1  # (a longer number is no device index)
        if idx not in inputs:
            raise SystemExit(f"error: device {show(spec)} is not a capture device; run with --list-devices")
        return idx
    matches = [i for i in inputs if spec.lower() in sd.query_devices(i)["name"].lower()]
    if not matches:
        raise SystemExit(f"error: no capture device matches {show(spec)}; run with --list-devices")
    return matches[0]


class Line:
    """The live caption line: committed text, then the unstable tail, redrawn in place."""

    def __init__(self, out, tty: bool):
        self.out, self.tty = out, tty
        self.last = None

    def draw(self, committed: str, tail: str) -> None:
        if (committed, tail) == self.last:
            return
        self.last = (committed, tail)
        width = max(20, shutil.get_terminal_size((100, 20)).columns - 1)
        text = committed + (" " if committed and tail else "") + tail
        if len(text) > width:
            cut = len(text) - width + 1
            text = "\u2026" + text[cut:]
        split = max(0, len(text) - len(tail)) if tail else len(text)
        shown = text[:split] + (DIM + text[split:] + RESET if self.tty and tail else text[split:])
        self.out.write(CLEAR + shown)
        self.out.flush()

    def final(self, text: str) -> None:
        self.out.write(CLEAR + text + "\n")
        self.out.flush()


def run(args) -> int:
    # flags first: a bad one is refused before any device
    options = options_from_args(args, vad=bool(args.vad), final_pass=args.final_pass, partial_every=args.partial_every,
                                first_words=args.first_words or None)
    problem = checks.number("--max-seconds", args.max_seconds, 0, MAX_STREAM_SECONDS, low_open=True, optional=True)
    if problem:
        raise ValueError(problem)
    backend_options_from_args(args)
    sd = _import_sounddevice()
    if args.list_devices:
        print(list_devices(sd))
        return 0
    device = pick_device(sd, args.device)
    info = sd.query_devices(device)
    engine = engine_from_args(args)
    session = engine.create_stream(options)
    blocks: "queue.Queue" = queue.Queue()
    overflows = [0]

    def callback(indata, frames, time_info, status):  # PortAudio thread: only queue the data
        if status.input_overflow:
            overflows[0] += 1
        blocks.put(indata.astype("<f4", copy=False).tobytes())

    rate = SAMPLE_RATE
    try:
        sd.check_input_settings(device=device, channels=1, dtype="float32", samplerate=SAMPLE_RATE)
    except sd.PortAudioError:
        rate = int(info["default_samplerate"])
        logging.getLogger("mic_stream").info("device runs at %d Hz; resampling to 16 kHz", rate)
    converter = PcmConverter(PcmFormat(rate, 4, 1, "float"))  # (frames, 1) float32 blocks -> 16 kHz
    try:
        stream = sd.InputStream(device=device, channels=1, samplerate=rate, dtype="float32",
                                blocksize=int(rate * BLOCK_SECONDS), callback=callback)
    except sd.PortAudioError as exc:
        raise SystemExit(f"error: cannot open capture device {device} ({info['name']}): {exc}. It may be busy "
                         f"(used by another program) or unplugged; pick another with --device "
                         f"(see --list-devices)") from None
    line = Line(sys.stdout, sys.stdout.isatty())
    limit = None if args.max_seconds is None else int(args.max_seconds * SAMPLE_RATE)
    fed = 0
    stop = [False]

    def on_sigint(signum, frame):  # finish the current chunk, then flush: never interrupt a decode
        stop[0] = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        with stream:
            sys.stderr.write(f"listening on {info['name']} (Ctrl-C to stop)\n")
            sys.stderr.flush()
            while not stop[0] and (limit is None or fed < limit):
                try:
                    block = blocks.get(timeout=0.5)
                except queue.Empty:
                    continue
                pcm = converter.convert(block)
                if limit is not None:
                    pcm = pcm[:limit - fed]
                fed += pcm.shape[0]
                r = session.feed_audio(pcm)
                line.draw(r.committed, r.tail)
    finally:
        signal.signal(signal.SIGINT, previous)
    rest = converter.flush()  # the resampler's last samples (none at 16 kHz)
    if limit is not None:
        rest = rest[:limit - fed]
    session.feed_audio(rest)
    r = session.finish()
    line.final(r.text)
    if overflows[0]:
        sys.stderr.write(f"warning: {overflows[0]} capture overflows (audio lost: the machine is too slow for "
                         f"these settings; try a larger --chunk-size or --vad)\n")
    if args.stats:
        s = r.stats
        sys.stderr.write(f"{s.audio_seconds:.3f} s audio, {s.encoded_seconds:.3f} s encoded in {s.encoder_calls} "
                         f"calls, {s.prefill_tokens_per_second:.1f} prefill tok/s, "
                         f"{s.decode_tokens_per_second:.1f} decode tok/s, {s.compute_ms_per_second:.0f} ms compute "
                         f"per audio s\n")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        return run(args)
    except KeyboardInterrupt:  # Ctrl-C while loading the model
        return 0
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
