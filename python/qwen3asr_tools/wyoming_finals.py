#!/usr/bin/env python3
"""Which final transcript should the Wyoming server send: the stream's, one pass over the
utterance, or one pass over each finished piece of it (final passes)?

For each bundled short command (and commands joined by pauses), or each utterance of a
dataset split (``--manifest``, e.g. the test split of make_dataset.py), the audio goes through
the server's own PCM conversion (16 kHz 16-bit mono, and 44.1 kHz 16-bit stereo), then into a
stream session in 100 ms pieces (as Home Assistant sends it) with several chunk sizes, with
and without final passes, and through one ``engine.transcribe`` pass. Prints, per setting, how
many transcripts equal the reference and how many equal the one-pass text, and the work left
after audio-stop (ms).

    python scripts/wyoming_finals.py [--model models/default] [--threads 2]
    python scripts/wyoming_finals.py --manifest build/evaldata/test/manifest.jsonl --chunk-sizes 2
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from . import REPO_ROOT as ROOT

CHUNK_SIZES = (0.5, 1.0, 2.0, 4.0)
JOINED = (("en_1.wav", "en_2.wav"), ("en_2.wav", "en_3.wav"), ("en_1.wav", "en_2.wav", "en_3.wav"),
          ("zh_1.wav", "zh_3.wav"))
GAP_S = 1.0  # silence between joined commands


def load_cases(audio_dir):
    import soundfile as sf

    with open(os.path.join(audio_dir, "transcripts.json"), encoding="utf-8") as f:
        clips = {c["file"]: c for c in json.load(f)["clips"] if c["language"] in ("English", "Chinese")}

    def read(name):
        return sf.read(os.path.join(audio_dir, name), dtype="int16")[0]

    cases = [(name, read(name), c["text"]) for name, c in sorted(clips.items())]
    for names in JOINED:
        parts = []
        for n in names:
            parts += [read(n), np.zeros(int(GAP_S * 16000), np.int16)]
        sep = "" if names[0].startswith("zh") else " "
        cases.append(("+".join(names), np.concatenate(parts[:-1]), sep.join(clips[n]["text"] for n in names)))
    return cases


def server_pcm(pcm16, stereo_44k):
    """What the Wyoming server feeds its session for this audio sent in the given format."""
    import soxr

    from qwen3asr.audio import PcmConverter, PcmFormat

    if stereo_44k:
        x = soxr.resample(pcm16.astype(np.float32) / 32768, 16000, 44100, quality="VHQ")
        data = np.clip(np.round(np.stack([x, 0.6 * x], axis=1) * 32768), -32768, 32767).astype("<i2").tobytes()
        fmt = PcmFormat(44100, 2, 2)
    else:
        data, fmt = pcm16.astype("<i2").tobytes(), PcmFormat(16000, 2, 1)
    conv = PcmConverter(fmt)
    step = fmt.rate // 10 * fmt.frame_bytes
    return [conv.convert(data[i:i + step]) for i in range(0, len(data), step)] + [conv.flush()]


def manifest_cases(path):
    """(name, int16 16 kHz samples, reference) of every utterance with text in a dataset manifest."""
    from qwen3asr import prepare_audio

    base = os.path.dirname(os.path.abspath(path))
    cases = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            if item["text"]:
                x = prepare_audio(os.path.join(base, item["audio"]))
                cases.append((item["audio"], np.clip(np.round(x * 32768), -32768, 32767).astype(np.int16),
                              item["text"]))
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--manifest", default=None, help="a dataset manifest (jsonl) instead of the bundled clips")
    ap.add_argument("--chunk-sizes", default=",".join(f"{c:g}" for c in CHUNK_SIZES))
    ap.add_argument("--mono-only", action="store_true", help="only the 16 kHz mono format")
    args = ap.parse_args()
    from qwen3asr import Qwen3ASREngine

    chunk_sizes = [float(c) for c in args.chunk_sizes.split(",") if c.strip()]
    engine = Qwen3ASREngine(args.model, backend="onnx", threads=args.threads)
    cases = manifest_cases(args.manifest) if args.manifest else load_cases(os.path.join(ROOT, "audio"))
    joined = 0 if args.manifest else len(JOINED)
    for stereo in (False,) if args.mono_only else (False, True):
        rows = {}
        for name, pcm16, ref in cases:
            pieces = server_pcm(pcm16, stereo)
            whole = np.concatenate(pieces)
            t0 = time.perf_counter()
            one = engine.transcribe(whole, one_pass=True).text
            rows.setdefault("one pass", []).append((one == ref, True, (time.perf_counter() - t0) * 1000, name, one))
            for cs in chunk_sizes:
                for final in (False, True):
                    s = engine.create_stream(chunk_size=cs, final_pass=final)
                    for p in pieces:
                        s.feed_audio(p)
                    t0 = time.perf_counter()
                    text = s.finish().text
                    rows.setdefault(f"{'pieces' if final else 'stream'} {cs:g} s", []).append(
                        (text == ref, text == one, (time.perf_counter() - t0) * 1000, name, text))
        print(f"\n{'44.1 kHz 16-bit stereo' if stereo else '16 kHz 16-bit mono'}, sent in 100 ms chunks "
              f"({len(cases)} utterances: {len(cases) - joined} commands, {joined} joined by "
              f"{GAP_S:g} s pauses)")
        print(f"{'final text':<14} {'= reference':>12} {'= one pass':>11} {'after-stop ms (mean)':>21}")
        for key, r in rows.items():
            print(f"{key:<14} {sum(x[0] for x in r):>12} {sum(x[1] for x in r):>11} "
                  f"{np.mean([x[2] for x in r]):>21.0f}")
        for key, r in rows.items():
            for ok, _, _, name, text in r:
                if not ok:
                    print(f"  {key}: {name}: {text!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
