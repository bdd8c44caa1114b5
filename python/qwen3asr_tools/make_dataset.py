"""Make a seeded, reproducible synthetic labelled-speech dataset with espeak-ng and sox.

Usage:
    python scripts/make_dataset.py --out data/synth --n-train 2000 --n-dev 200 --n-test 400 \
        --seed 0 --jobs 2
    python scripts/make_dataset.py --demo-clips audio/      # regenerate the committed demo clips

Each split directory gets audio files and a ``manifest.jsonl`` with one JSON object per
clip: {"audio": path relative to the manifest, "text": label, "language": "English" |
"Chinese" | "None", "voice", "speed" (wpm), "duration" (s), plus "kind", "pitch",
"noise", "snr_db", "via_rate", "sample_rate", "channels"}. Texts come from textgen.py and are
disjoint between splits; the test split uses voice variants and a speed band never used
in train/dev. The same arguments give the same files byte for byte (all random choices
are drawn up front from the seed; sox runs in repeatable mode). See docs/dataset.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from . import textgen

SAMPLE_RATE = 16000          # Hz, the default stored rate
SYNTH_RATE = 22050           # Hz, espeak-ng's output rate; mixing happens at this rate
EN_VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan",
             "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
# espeak-ng 1.51's "cmn" voice reads characters as pinyin spelled out in English
# ("da three kai one"); "cmn-latn-pinyin" uses the same dictionary with real Mandarin phonemes.
ZH_VOICE = "cmn-latn-pinyin"
# espeak-ng voice variants ("" = the base voice). Test variants never occur in train/dev.
TRAIN_VARIANTS = ("", "m1", "m2", "m4", "m5", "m6", "m7", "f1", "f3", "f4", "klatt", "klatt2",
                  "klatt4", "Andy", "Annie", "steph", "max", "paul", "robert", "Alicia", "linda")
TEST_VARIANTS = ("m3", "m8", "f2", "f5", "klatt3", "Michael", "belinda", "rob")
# Speaking rate bands in words per minute (espeak-ng -s); the test band is held out.
TRAIN_SPEED_BANDS = ((120, 149), (181, 220))
TEST_SPEED_BANDS = ((150, 180),)
PITCH_RANGE = (25, 75)               # espeak-ng -p, 0..99 (50 = the variant's own pitch)
SNR_RANGE_DB = (10.0, 30.0)          # speech-to-noise ratio of noisy clips
CLEAN_FRACTION = 0.15                # speech clips with no added noise
NONSPEECH_FRACTION = 0.08            # clips with no speech (2/3 noise, 1/3 near silence)
NOISE_COLORS = ("white", "pink", "brown")
NOISE_POOL_SECONDS = 60.0            # length of each sox-synthesised noise pool
NOISE_LEVEL_DBFS = (-50.0, -20.0)    # RMS of noise-only clips
SILENCE_LEVEL_DBFS = (-80.0, -62.0)  # RMS of near-silence clips
PEAK_DBFS = (-25.0, -3.0)            # speech clips are scaled to a peak in this range
PAD_SECONDS = (0.1, 0.6)             # noise/silence before and after the speech
NONSPEECH_SECONDS = (1.0, 6.0)
STORE_RATES = ((SAMPLE_RATE, 0.82), (8000, 0.06), (22050, 0.06), (44100, 0.06))
VIA_RATES = (8000, 22050, 44100)     # 16 kHz clips sometimes go through these and back
VIA_FRACTION = 0.2
STEREO_FRACTION = 0.05
FLAC_FRACTION = 0.1
TRIM_THRESHOLD = 0.002               # of the peak: espeak-ng's leading/trailing silence is cut

INSTALL_HINT = "install them with: sudo apt-get install $(cat scripts/apt-packages.txt)"


@dataclass(frozen=True)
class ClipSpec:
    """Every choice needed to render one clip; drawn up front so rendering is a pure function."""
    name: str                  # file name inside the split directory
    text: str                  # label ("" for no speech)
    language: str              # "English", "Chinese" or "None"
    kind: str                  # textgen kind, or "noise" / "silence"
    voice: str                 # espeak-ng voice[+variant], "none" for no speech
    speed: int | None          # words per minute
    pitch: int | None          # espeak-ng pitch 0..99
    noise: str                 # "white", "pink", "brown" or "none"
    snr_db: float | None       # speech-to-noise ratio when noise is added to speech
    level_dbfs: float | None   # RMS level of a no-speech clip
    noise_offset: float        # where in the noise pool to start, fraction 0..1
    pad_before: float          # seconds
    pad_after: float           # seconds
    nonspeech_seconds: float   # length of a no-speech clip
    peak_dbfs: float           # target peak of speech clips
    via_rate: int | None       # resample to this rate and back (band limiting)
    sample_rate: int           # stored rate, Hz
    channels: int              # 1, or 2 (both channels the same speech, second at -2 dB)


def check_tools() -> None:
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    if missing:
        raise RuntimeError(f"{' and '.join(missing)} not found on PATH; {INSTALL_HINT}")


@functools.lru_cache(maxsize=1)
def installed_voices() -> tuple[frozenset, frozenset]:
    """(language voice names, variant names) that this espeak-ng knows."""
    langs = subprocess.run(["espeak-ng", "--voices"], capture_output=True, text=True).stdout
    variants = subprocess.run(["espeak-ng", "--voices=variant"], capture_output=True, text=True).stdout
    names = {line.split()[1] for line in langs.splitlines()[1:] if len(line.split()) > 1}
    return frozenset(names), frozenset(re.findall(r"!v/(\S+)", variants))


def check_voice(voice: str) -> None:
    """Raise ValueError unless espeak-ng has ``voice`` ("name" or "name+variant").

    espeak-ng itself silently falls back to its default voice for unknown names.
    """
    names, variants = installed_voices()
    name, _, variant = voice.partition("+")
    if name not in names:
        raise ValueError(f"espeak-ng has no voice {name!r} (see `espeak-ng --voices`)")
    if variant and variant not in variants:
        raise ValueError(f"espeak-ng has no voice variant {variant!r} (see `espeak-ng --voices=variant`)")


def check_all_voices() -> None:
    """Raise ValueError naming every configured voice or variant this espeak-ng lacks."""
    names, variants = installed_voices()
    missing = [v for v in EN_VOICES + (ZH_VOICE,) if v not in names]
    missing += [f"+{v}" for v in TRAIN_VARIANTS + TEST_VARIANTS if v and v not in variants]
    if missing:
        raise ValueError(f"espeak-ng lacks voices {missing}; install the Debian espeak-ng-data "
                         "package or edit EN_VOICES / *_VARIANTS in python/qwen3asr_tools/make_dataset.py")


def _uniform(rng: random.Random, lo_hi: tuple[float, float], ndigits: int = 2) -> float:
    return round(rng.uniform(*lo_hi), ndigits)


def _speed(rng: random.Random, bands) -> int:
    lo, hi = rng.choice(bands)
    return rng.randint(lo, hi)


def plan_split(split: str, n: int, seed: int, start: int = 0) -> list[ClipSpec]:
    """The ``n`` clips of ``split`` for ``seed``, named from index ``start``.

    Voices and speeds of "test" come from TEST_VARIANTS / TEST_SPEED_BANDS, those of
    "train" and "dev" from TRAIN_VARIANTS / TRAIN_SPEED_BANDS. Train texts may repeat;
    dev and test texts are distinct.
    """
    if split not in textgen.SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {textgen.SPLITS}")
    rng = random.Random(f"plan/{seed}/{split}")
    held_out = split == "test"
    variants = TEST_VARIANTS if held_out else TRAIN_VARIANTS
    bands = TEST_SPEED_BANDS if held_out else TRAIN_SPEED_BANDS
    roles = []
    for _ in range(n):
        r = rng.random()
        if r < NONSPEECH_FRACTION:
            roles.append("noise" if rng.random() < 2 / 3 else "silence")
        else:
            roles.append("English" if rng.random() < 0.5 else "Chinese")
    texts = {lang: iter(textgen.sample_texts(split, lang, roles.count(lang), seed, unique=split != "train"))
             for lang in textgen.LANGUAGES}
    specs = []
    for i, role in enumerate(roles):
        fmt = "flac" if rng.random() < FLAC_FRACTION else "wav"
        rates, weights = zip(*STORE_RATES)
        sample_rate = rng.choices(rates, weights)[0]
        via = rng.choice(VIA_RATES) if sample_rate == SAMPLE_RATE and rng.random() < VIA_FRACTION else None
        common = dict(name=f"{split}_{start + i:06d}.{fmt}", noise_offset=round(rng.random(), 4),
                      pad_before=_uniform(rng, PAD_SECONDS), pad_after=_uniform(rng, PAD_SECONDS),
                      peak_dbfs=_uniform(rng, PEAK_DBFS), via_rate=via, sample_rate=sample_rate,
                      channels=2 if rng.random() < STEREO_FRACTION else 1)
        if role in ("noise", "silence"):
            level = NOISE_LEVEL_DBFS if role == "noise" else SILENCE_LEVEL_DBFS
            specs.append(ClipSpec(text="", language="None", kind=role, voice="none", speed=None,
                                  pitch=None, noise=rng.choice(NOISE_COLORS), snr_db=None,
                                  level_dbfs=_uniform(rng, level),
                                  nonspeech_seconds=_uniform(rng, NONSPEECH_SECONDS), **common))
            continue
        utt = next(texts[role])
        base = rng.choice(EN_VOICES) if role == "English" else ZH_VOICE
        variant = rng.choice(variants)
        noisy = rng.random() >= CLEAN_FRACTION
        specs.append(ClipSpec(text=utt.text, language=role, kind=utt.kind,
                              voice=f"{base}+{variant}" if variant else base,
                              speed=_speed(rng, bands), pitch=rng.randint(*PITCH_RANGE),
                              noise=rng.choice(NOISE_COLORS) if noisy else "none",
                              snr_db=_uniform(rng, SNR_RANGE_DB) if noisy else None,
                              level_dbfs=None, nonspeech_seconds=0.0, **common))
    return specs


# ---------------------------------------------------------------- rendering


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {' '.join(cmd)}\n"
                           f"{proc.stderr.decode(errors='replace')}")


def make_noise_pool(directory: str) -> None:
    """Write NOISE_POOL_SECONDS of each noise colour at SYNTH_RATE (sox synth, repeatable)."""
    for color in NOISE_COLORS:
        _run(["sox", "-R", "-V1", "-n", "-r", str(SYNTH_RATE), "-b", "32", "-e", "float",
              os.path.join(directory, f"{color}.wav"), "synth", str(NOISE_POOL_SECONDS),
              f"{color}noise"])


_POOL_CACHE: dict[tuple[str, str], np.ndarray] = {}


def _noise(pool_dir: str, color: str, n: int, offset: float) -> np.ndarray:
    """``n`` samples of unit-RMS noise from the pool, starting at fraction ``offset``."""
    key = (pool_dir, color)
    if key not in _POOL_CACHE:
        x, _ = sf.read(os.path.join(pool_dir, f"{color}.wav"), dtype="float64")
        x = x - x.mean()
        _POOL_CACHE[key] = x / np.sqrt(np.mean(x**2))
    pool = _POOL_CACHE[key]
    if n > len(pool):
        pool = np.tile(pool, n // len(pool) + 1)
    start = int(offset * (len(pool) - n))
    return pool[start:start + n]


def synthesize(text: str, voice: str, speed: int, pitch: int, tmp_dir: str) -> np.ndarray:
    """espeak-ng speech, leading/trailing silence trimmed: (n,) float64 at SYNTH_RATE."""
    check_voice(voice)
    path = os.path.join(tmp_dir, "speech.wav")
    _run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", path, text])
    x, rate = sf.read(path, dtype="float64")
    if rate != SYNTH_RATE:
        raise RuntimeError(f"espeak-ng wrote {rate} Hz, expected {SYNTH_RATE} Hz")
    loud = np.flatnonzero(np.abs(x) > TRIM_THRESHOLD * np.abs(x).max())
    if len(loud) == 0:
        raise RuntimeError(f"espeak-ng produced silence for voice {voice!r}, text {text!r}")
    return x[loud[0]:loud[-1] + 1]


def _db(x: float) -> float:
    return 10 ** (x / 20)


def _mix(spec: ClipSpec, pool_dir: str, tmp_dir: str) -> tuple[np.ndarray, float]:
    """The clip at SYNTH_RATE as (n,) float64 and the gain in dB sox should apply."""
    if spec.language == "None":
        n = int(round(spec.nonspeech_seconds * SYNTH_RATE))
        return _noise(pool_dir, spec.noise, n, spec.noise_offset) * _db(spec.level_dbfs), 0.0
    speech = synthesize(spec.text, spec.voice, spec.speed, spec.pitch, tmp_dir)
    before, after = (int(round(p * SYNTH_RATE)) for p in (spec.pad_before, spec.pad_after))
    x = np.concatenate([np.zeros(before), speech, np.zeros(after)])
    if spec.noise != "none":
        speech_rms = np.sqrt(np.mean(speech**2))
        x = x + _noise(pool_dir, spec.noise, len(x), spec.noise_offset) * speech_rms / _db(spec.snr_db)
    x = x / np.abs(x).max() * 0.5  # headroom for resampling; the real level is set by sox gain
    return x, spec.peak_dbfs - 20 * math.log10(0.5)


def _sox_out(x: np.ndarray, out_path: str, tmp_dir: str, gain_db: float,
             via_rate: int | None, sample_rate: int, channels: int) -> None:
    """Write ``x`` (SYNTH_RATE float) to ``out_path`` as 16-bit audio through one sox chain."""
    mix = os.path.join(tmp_dir, "mix.wav")
    sf.write(mix, x.astype(np.float32), SYNTH_RATE, subtype="FLOAT")
    effects = []
    if via_rate:
        effects += ["rate", "-h", str(via_rate)]
    effects += ["rate", "-h", str(sample_rate)]
    if gain_db:
        effects += ["gain", f"{gain_db:.2f}"]
    if channels == 2:
        effects += ["remix", "1", "1v0.8"]
    _run(["sox", "-R", "-D", "-V1", mix, "-b", "16", out_path] + effects)


def render_clip(spec: ClipSpec, split_dir: str, pool_dir: str) -> dict:
    """Render one clip into ``split_dir``; return its manifest row."""
    with tempfile.TemporaryDirectory(prefix="synth-") as tmp_dir:
        x, gain_db = _mix(spec, pool_dir, tmp_dir)
        out_path = os.path.join(split_dir, spec.name)
        _sox_out(x, out_path, tmp_dir, gain_db, spec.via_rate, spec.sample_rate, spec.channels)
    info = sf.info(out_path)
    return {"audio": spec.name, "text": spec.text, "language": spec.language, "voice": spec.voice,
            "speed": spec.speed, "duration": round(info.frames / info.samplerate, 3),
            "kind": spec.kind, "pitch": spec.pitch, "noise": spec.noise, "snr_db": spec.snr_db,
            "via_rate": spec.via_rate, "sample_rate": info.samplerate, "channels": info.channels}


def _render_star(args) -> dict:
    return render_clip(*args)


def make_split(out_dir: str, split: str, n: int, seed: int, jobs: int, pool_dir: str) -> list[dict]:
    """Render ``n`` clips of ``split`` into ``out_dir/split`` and write its manifest.jsonl."""
    split_dir = os.path.join(out_dir, split)
    os.makedirs(split_dir, exist_ok=True)
    specs = plan_split(split, n, seed)
    rows: list[dict] = []
    t0 = time.perf_counter()
    work = [(spec, split_dir, pool_dir) for spec in specs]
    if jobs > 1 and n > 1:
        with ProcessPoolExecutor(max_workers=jobs) as ex:
            results = ex.map(_render_star, work, chunksize=4)
            for row in results:
                rows.append(row)
                _progress(split, len(rows), n, t0)
    else:
        for args in work:
            rows.append(_render_star(args))
            _progress(split, len(rows), n, t0)
    with open(os.path.join(split_dir, "manifest.jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return rows


def _progress(split: str, done: int, n: int, t0: float) -> None:
    if done == n or done % 25 == 0:
        dt = time.perf_counter() - t0
        print(f"[{split}] {done}/{n} clips, {dt:.1f} s, {done / max(dt, 1e-9):.2f} clips/s",
              file=sys.stderr, flush=True)


# ---------------------------------------------------------------- demo clips

DEMO_PAUSES = (0.5, 3.0)        # seconds between utterances of the long clip
DEMO_LONG_SECONDS = 75.0        # the long clip is at least this long
DEMO_LONG_SNR_DB = 30.0         # pink noise under the whole long clip, relative to speech RMS
DEMO_MAX_SHORT_SECONDS = 3.5    # the short demo clips are at most about this long


def _demo_utterances(seed: int, language: str, n: int) -> list[textgen.Utterance]:
    """Short test-split texts (commands and times) for the demo clips."""
    pool = textgen.sample_texts("test", language, 400, seed)
    return [u for u in pool if u.kind in ("command", "time")][:n]


def make_demo_clips(out_dir: str, seed: int = 0) -> dict:
    """Write the committed demo clips (16 kHz mono WAV) and transcripts.json into ``out_dir``."""
    check_tools()
    check_all_voices()
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(f"demo/{seed}")
    entries = []
    with tempfile.TemporaryDirectory(prefix="synth-demo-") as tmp:
        pool_dir = os.path.join(tmp, "pool")
        os.makedirs(pool_dir)
        make_noise_pool(pool_dir)

        def voice_for(language: str) -> tuple[str, int, int]:
            base = rng.choice(EN_VOICES) if language == "English" else ZH_VOICE
            return f"{base}+{rng.choice(TEST_VARIANTS)}", _speed(rng, TEST_SPEED_BANDS), rng.randint(*PITCH_RANGE)

        shorts = []
        for language, tag in (("English", "en"), ("Chinese", "zh")):
            picked = 0
            for utt in _demo_utterances(seed, language, 40):
                voice, speed, pitch = voice_for(language)
                speech = synthesize(utt.text, voice, speed, pitch, tmp)
                if len(speech) / SYNTH_RATE > DEMO_MAX_SHORT_SECONDS:
                    continue
                picked += 1
                shorts.append((f"{tag}_{picked}.wav", utt, voice, speed, speech))
                if picked == 3:
                    break
        for name, utt, voice, speed, speech in shorts:
            pad = int(0.3 * SYNTH_RATE)
            x = np.concatenate([np.zeros(pad), speech, np.zeros(pad)])
            x = x + _noise(pool_dir, "pink", len(x), rng.random()) * np.sqrt(np.mean(speech**2)) / _db(25.0)
            _write_demo(x, os.path.join(out_dir, name), tmp)
            entries.append(_entry(name, utt.text, utt.language, voice, speed,
                                  [_segment(0.3, 0.3 + len(speech) / SYNTH_RATE, utt.text, utt.language)]))

        n = int(3.0 * SYNTH_RATE)
        _write_demo(_noise(pool_dir, "brown", n, rng.random()) * _db(-30.0),
                    os.path.join(out_dir, "noise.wav"), tmp)
        entries.append(_entry("noise.wav", "", "None", "none", None, []))

        used = {e["text"] for e in entries}
        queues = {lang: [u for u in textgen.sample_texts("test", lang, 200, seed + 1) if u.text not in used]
                  for lang in textgen.LANGUAGES}
        pieces, segments, t = [], [], 0.0
        lead = int(0.5 * SYNTH_RATE)
        pieces.append(np.zeros(lead))
        t = lead / SYNTH_RATE
        i = 0
        while t < DEMO_LONG_SECONDS:
            language = textgen.LANGUAGES[i % 2] if rng.random() < 0.7 else rng.choice(textgen.LANGUAGES)
            utt = queues[language].pop(0)
            voice, speed, pitch = voice_for(language)
            speech = synthesize(utt.text, voice, speed, pitch, tmp)
            speech = speech / np.abs(speech).max() * _db(rng.uniform(-4.0, 0.0)) * 0.5
            pieces.append(speech)
            segments.append(_segment(t, t + len(speech) / SYNTH_RATE, utt.text, language,
                                     voice=voice, speed=speed))
            t += len(speech) / SYNTH_RATE
            pause = int(round(rng.uniform(*DEMO_PAUSES) * SYNTH_RATE))
            pieces.append(np.zeros(pause))
            t += pause / SYNTH_RATE
            i += 1
        x = np.concatenate(pieces)
        speech_rms = np.sqrt(np.mean(np.concatenate(pieces[1::2]) ** 2))
        x = x + _noise(pool_dir, "pink", len(x), rng.random()) * speech_rms / _db(DEMO_LONG_SNR_DB)
        _write_demo(x, os.path.join(out_dir, "long_mixed.wav"), tmp)
        text = " ".join(seg["text"] for seg in segments)
        entries.append(_entry("long_mixed.wav", text, "Mixed", "several", None, segments))

    for e in entries:
        e["duration"] = round(sf.info(os.path.join(out_dir, e["file"])).duration, 3)
    transcripts = {
        "sample_rate": SAMPLE_RATE,
        "generator": f"scripts/make_dataset.py --demo-clips <dir> --seed {seed}",
        "espeak_ng": _version(["espeak-ng", "--version"]), "sox": _version(["sox", "--version"]),
        "note": "Test-split texts and held-out voices. Times are seconds from the start of the file. "
                "language 'Mixed' means per-segment languages apply.",
        "clips": entries,
    }
    with open(os.path.join(out_dir, "transcripts.json"), "w", encoding="utf-8") as f:
        json.dump(transcripts, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return transcripts


def _segment(start: float, end: float, text: str, language: str, **extra) -> dict:
    """One utterance of a demo clip; times in seconds from the start of the file."""
    return {"start": round(start, 3), "end": round(end, 3), "text": text, "language": language, **extra}


def _entry(name: str, text: str, language: str, voice: str, speed: int | None,
           segments: list[dict]) -> dict:
    """One clip of transcripts.json."""
    return {"file": name, "text": text, "language": language, "voice": voice, "speed": speed,
            "segments": segments}


def _write_demo(x: np.ndarray, path: str, tmp_dir: str) -> None:
    peak = np.abs(x).max()
    x = x / peak * 0.5
    _sox_out(x, path, tmp_dir, gain_db=-6.0 - 20 * math.log10(0.5), via_rate=None,
             sample_rate=SAMPLE_RATE, channels=1)


# ---------------------------------------------------------------- CLI


def make_dataset(out_dir: str, counts: dict[str, int], seed: int, jobs: int) -> dict:
    """Render every split into ``out_dir``; return the dataset description written to dataset.json."""
    check_tools()
    check_all_voices()
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    for split, n in counts.items():
        if n < 0:
            raise ValueError(f"--n-{split} must be >= 0, got {n}")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="synth-pool-") as pool_dir:
        make_noise_pool(pool_dir)
        for split, n in counts.items():
            make_split(out_dir, split, n, seed, jobs, pool_dir)
    info = {"seed": seed, "counts": counts, "sample_rate": SAMPLE_RATE,
            "en_voices": list(EN_VOICES), "zh_voice": ZH_VOICE,
            "train_variants": list(TRAIN_VARIANTS), "test_variants": list(TEST_VARIANTS),
            "train_speed_bands": TRAIN_SPEED_BANDS, "test_speed_bands": TEST_SPEED_BANDS,
            "espeak_ng": _version(["espeak-ng", "--version"]), "sox": _version(["sox", "--version"])}
    with open(os.path.join(out_dir, "dataset.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    return info


def _version(cmd: list[str]) -> str:
    """The first dotted version number a tool prints, e.g. "1.51" for espeak-ng."""
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    match = re.search(r"\d+\.\d+(?:\.\d+)?", out)
    return match.group(0) if match else "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory (one subdirectory per split)")
    ap.add_argument("--n-train", type=int, default=0)
    ap.add_argument("--n-dev", type=int, default=0)
    ap.add_argument("--n-test", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="parallel worker processes")
    ap.add_argument("--demo-clips", metavar="DIR", help="write the demo clips into DIR instead")
    args = ap.parse_args(argv)
    try:
        if args.demo_clips:
            make_demo_clips(args.demo_clips, args.seed)
            return 0
        if not args.out:
            ap.error("--out is required (or --demo-clips)")
        t0 = time.perf_counter()
        counts = {"train": args.n_train, "dev": args.n_dev, "test": args.n_test}
        make_dataset(args.out, counts, args.seed, args.jobs)
        total = sum(counts.values())
        dt = time.perf_counter() - t0
        print(f"{total} clips in {dt:.1f} s ({total / max(dt, 1e-9):.2f} clips/s) -> {args.out}",
              file=sys.stderr)
    except (RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
