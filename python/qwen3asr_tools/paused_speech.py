"""Paused synthetic speech for the demo aligner, with exact word times.

The make_dataset clips are one utterance spoken in one go between 0.1-0.6 s of silence; an
aligner trained on them alone learns their rhythm rather than the audio (read word by word
with pauses, its later words drift early; docs/training.md, "The demo aligner"). Each
example here is built in memory from libespeak-ng (``espeak_align.spoken``), one language:

- ``words``: one utterance spoken in groups of words (often one word at a time) with gaps of
  0-1.5 s between the groups;
- ``isolated``: one word alone;
- ``joined``: 2 or more utterances (each spoken whole or in groups) with pauses of 0-1.5 s
  between them, 5-30 s in all (a tenth of them up to 55 s, under the engine's 60 s pass);

with 0-1.5 s of silence before and after, a voice (base voice and variant) and a speaking rate
of 80-260 words per minute drawn per utterance, white, pink or brown noise under the whole
input in most examples (15-40 dB below the speech) and a peak level of -25 to -3 dBFS.
Every word's start and end is where its group's espeak-ng word events put it (a group of one
word: its trimmed audio), so the times are exact. Texts come from textgen's split (disjoint
between train, dev and test) and the test split uses make_dataset's held-out voice variants.

An example's plan (texts, voices, rates, pitches, gaps, noise) is a pure function of (split,
index, seed); ``make_set`` runs them in worker processes. Its audio is not quite: libespeak-ng
carries state from one synthesis to the next, so the same example rendered after other syntheses
(another ``jobs``, another start) differs by a few samples and its word times by up to about 20
ms; compare aligners on one saved rendering (docs/aligner.md). Training tooling only: never
imported by the runtime.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from . import espeak_align
from . import make_dataset as md
from . import textgen

KINDS = (("words", 0.4), ("isolated", 0.1), ("joined", 0.5))
SPEED_RANGE = (80, 260)          # espeak-ng words per minute (make_dataset: 120-149, 181-220; test 150-180)
GAP_SECONDS = (0.0, 1.5)         # between word groups and between utterances
SHORT_GAP_SHARE = 0.4            # of the gaps between word groups: 0-0.3 s instead
EDGE_SECONDS = (0.0, 1.5)        # silence before and after the speech
JOINED_SECONDS = (5.0, 30.0)     # target length of a joined example
LONG_SHARE = 0.1                 # of joined examples: up to LONG_SECONDS instead
LONG_SECONDS = 55.0
NOISE_SHARE = 0.75               # examples with noise under the whole input
SNR_RANGE_DB = (15.0, 40.0)
POOL_TEXTS = 3000                # texts per language drawn from the split


@dataclass(frozen=True)
class Example:
    """One input and its reference: ``audio`` (n,) float32 16 kHz; ``words`` the espeak-ng words of
    ``text`` (espeak_align.Word: character offset in ``text``, start and end in seconds)."""
    kind: str
    language: str
    text: str
    words: Tuple["espeak_align.Word", ...]
    audio: np.ndarray


@functools.lru_cache(maxsize=8)
def _texts(split: str, language: str, seed: int) -> Tuple[str, ...]:
    return tuple(u.text for u in textgen.sample_texts(split, language, POOL_TEXTS, seed, unique=False))


def _noise(rng: np.random.Generator, n: int, color: str) -> np.ndarray:
    """Unit-RMS white, pink (1/f) or brown (1/f^2) noise of n samples."""
    x = rng.standard_normal(n)
    if color != "white":
        f = np.fft.rfftfreq(n)
        f[0] = f[1] if n > 1 else 1.0
        x = np.fft.irfft(np.fft.rfft(x) / (f ** (0.5 if color == "pink" else 1.0)), n)
    x = x - x.mean()
    return x / max(np.sqrt(np.mean(x ** 2)), 1e-12)


def _groups(n: int, style: str, rng: random.Random) -> List[Tuple[int, int]]:
    """(first, stop) word index ranges of the groups an utterance of n words is spoken in."""
    if style == "whole" or n == 1:
        return [(0, n)]
    cut = 1.0 if style == "words" else rng.uniform(0.2, 0.7)
    bounds = [0] + [i for i in range(1, n) if rng.random() < cut] + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def _gap(rng: random.Random) -> float:
    return rng.uniform(0.0, 0.3) if rng.random() < SHORT_GAP_SHARE else rng.uniform(*GAP_SECONDS)


def _utterance(text: str, language: str, split: str, style: str, rng: random.Random):
    """(pieces of float64 22050 Hz audio, [(word, char offset in text, start s, end s)], seconds)."""
    variants = md.TEST_VARIANTS if split == "test" else md.TRAIN_VARIANTS
    base = rng.choice(md.EN_VOICES) if language == "English" else md.ZH_VOICE
    variant = rng.choice(variants)
    voice = f"{base}+{variant}" if variant else base
    speed, pitch = rng.randint(*SPEED_RANGE), rng.randint(*md.PITCH_RANGE)
    units = espeak_align.label_words(text)
    sep = " " if language == "English" else ""
    pieces, words, t = [], [], 0.0
    for g, (a, b) in enumerate(_groups(len(units), style, rng)):
        if g:
            gap = _gap(rng)
            pieces.append(np.zeros(int(round(gap * md.SYNTH_RATE))))
            t += len(pieces[-1]) / md.SYNTH_RATE
        audio, ws = espeak_align.spoken(sep.join(w for _, w in units[a:b]), voice, speed, pitch)
        if [w.text for w in ws] != [w for _, w in units[a:b]]:
            raise ValueError(f"espeak-ng words {[w.text for w in ws]} of {text!r}")
        audio = audio / max(np.abs(audio).max(), 1.0) * rng.uniform(0.5, 1.0)  # a level per group
        pieces.append(audio)
        words += [(w, units[a + k][0], t + x.start, t + x.end) for k, (w, x) in enumerate(zip((w for _, w in units[a:b]), ws))]
        t += len(audio) / md.SYNTH_RATE
    return pieces, words, t


def make_example(split: str, index: int, seed: int = 0) -> Example:
    """Example ``index`` of ``split`` (a pure function of its arguments; see the module doc).
    Drawn again (another seeded draw) when espeak-ng's word events do not match the words."""
    for attempt in range(10):
        try:
            return _draw(split, seed, f"paused/{seed}/{split}/{index}" + (f"/{attempt}" if attempt else ""))
        except ValueError:
            continue
    raise ValueError(f"no usable draw for paused example {index} of {split}")


def _draw(split: str, seed: int, key: str) -> Example:
    from qwen3asr.audio import prepare_audio

    rng = random.Random(key)
    kinds, weights = zip(*KINDS)
    kind = rng.choices(kinds, weights)[0]
    language = rng.choice(textgen.LANGUAGES)
    pool = _texts(split, language, seed)
    sep = " " if language == "English" else ""
    if kind == "isolated":
        units = espeak_align.label_words(rng.choice(pool))
        texts = [rng.choice(units)[1]]
        target = 0.0
    elif kind == "words":
        texts, target = [rng.choice(pool)], 0.0
    else:
        texts = [rng.choice(pool)]
        target = rng.uniform(JOINED_SECONDS[1], LONG_SECONDS) if rng.random() < LONG_SHARE else rng.uniform(*JOINED_SECONDS)
    lead, trail = rng.uniform(*EDGE_SECONDS), rng.uniform(*EDGE_SECONDS)
    pieces = [np.zeros(int(round(lead * md.SYNTH_RATE)))]
    t, offset, words, speech, text = len(pieces[0]) / md.SYNTH_RATE, 0, [], [], ""
    while True:
        utt = texts[-1]
        style = "words" if kind == "words" and rng.random() < 0.7 else \
            "mixed" if kind == "words" else rng.choice(("whole", "whole", "words", "mixed"))
        ps, ws, secs = _utterance(utt, language, split, style, rng)
        if kind == "joined" and len(texts) > 2 and t + secs + trail > target:
            texts.pop()
            break
        text = text + sep + utt if text else utt
        pieces += ps
        speech += [p for p in ps if p.any()]
        words += [espeak_align.Word(w, offset + c, t + a, t + b) for w, c, a, b in ws]
        offset = len(text) + len(sep)
        t += secs
        if kind != "joined" or t >= target - trail:
            break
        pause = np.zeros(int(round(rng.uniform(*GAP_SECONDS) * md.SYNTH_RATE)))
        pieces.append(pause)
        t += len(pause) / md.SYNTH_RATE
        texts.append(rng.choice(pool))
    if not pieces[-1].any():   # the last pause before a dropped utterance
        t -= len(pieces.pop()) / md.SYNTH_RATE
    pieces.append(np.zeros(int(round(trail * md.SYNTH_RATE))))
    x = np.concatenate(pieces)
    nrng = np.random.default_rng(rng.randrange(2 ** 32))
    if rng.random() < NOISE_SHARE:
        rms = np.sqrt(np.mean(np.concatenate(speech) ** 2))
        x = x + _noise(nrng, len(x), rng.choice(md.NOISE_COLORS)) * rms / 10 ** (rng.uniform(*SNR_RANGE_DB) / 20)
    x = x / np.abs(x).max() * 10 ** (rng.uniform(*md.PEAK_DBFS) / 20)
    audio = prepare_audio(x.astype(np.float32), sample_rate=md.SYNTH_RATE)
    return Example(kind, language, text, tuple(words), audio)


def _example_star(args) -> Example:
    return make_example(*args)


def make_set(split: str, n: int, seed: int = 0, jobs: int = 2, start: int = 0) -> List[Example]:
    """Examples ``start .. start + n - 1`` of ``split``, in order (``jobs`` worker processes)."""
    work = [(split, i, seed) for i in range(start, start + n)]
    if jobs <= 1 or n < 8:
        return [make_example(*w) for w in work]
    from multiprocessing import get_context

    with get_context("fork").Pool(jobs) as pool:
        return pool.map(_example_star, work, chunksize=16)


def aligner_units(ex: Example) -> Tuple[Tuple[str, ...], Tuple[float, ...], Tuple[float, ...]]:
    """The aligner's word units of ``ex.text`` with their reference start and end (seconds);
    ValueError if the spoken words cleaned as the aligner cleans them are not exactly them."""
    from qwen3asr.aligner.words import align_words, clean_word

    kept = [(clean_word(w.text), w) for w in ex.words]
    kept = [(c, w) for c, w in kept if c]
    want = align_words(ex.text, ex.language)
    if [c for c, _ in kept] != want:
        raise ValueError(f"spoken words {[c for c, _ in kept]} are not the aligner's units {want}")
    return tuple(want), tuple(w.start for _, w in kept), tuple(w.end for _, w in kept)


def summary(examples: Sequence[Example]) -> dict:
    """Counts and seconds per kind and language (for the logs and docs)."""
    out: dict = {}
    for ex in examples:
        k = out.setdefault(f"{ex.kind}/{ex.language}", {"n": 0, "seconds": 0.0, "words": 0})
        k["n"] += 1
        k["seconds"] += ex.audio.shape[0] / 16000.0
        k["words"] += len(ex.words)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write a few examples as WAV files with their word times (to listen to them)."""
    import argparse
    import json
    import os

    import soundfile as sf

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", default="test", choices=textgen.SPLITS)
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for i, ex in enumerate(make_set(args.split, args.n, args.seed)):
        name = f"{args.split}_{i:04d}_{ex.kind}"
        sf.write(os.path.join(args.out, name + ".wav"), ex.audio, 16000, subtype="PCM_16")
        with open(os.path.join(args.out, name + ".json"), "w", encoding="utf-8") as f:
            json.dump({"text": ex.text, "language": ex.language, "kind": ex.kind,
                       "words": [[w.text, round(w.start, 3), round(w.end, 3)] for w in ex.words]}, f,
                      ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
