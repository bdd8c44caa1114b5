#!/usr/bin/env python3
"""Train the bundled demo forced aligner (official Qwen3-ForcedAligner architecture) on synthetic speech.

    python scripts/train_aligner.py --work build/aligner --out models/default-aligner

One command, fixed seeds. Stages (each skipped when its output already exists, so an
interrupted run restarts cheaply; training itself resumes from its last snapshot):

1. data:      scripts/make_dataset.py -> WORK/data/{train,dev,test} (the ASR demo's generator;
              the test split is seeded by its name, so it is the ASR demo's test split)
2. tokenizer: models/default's BPE (vocab.json, merges.txt) with the aligner's added tokens,
              ``<timestamp>`` right after the ASR ones -> WORK/tokenizer/
3. features:  official log-mel of every train/dev clip (train_tiny.make_features)
4. words:     every clip's aligner word units (qwen3asr.aligner.words) with their start and end
              from libespeak-ng's word events (espeak_align.clip_words), and the token spans the
              auxiliary frame loss uses -> WORK/words_{train,dev}.pkl
5. training:  ``Qwen3ASRForConditionalGeneration`` from the official code with thinker
              model_type "qwen3_forced_aligner" (head = Linear(hidden, classify_num)), at the
              ASR demo's widths, every weight but the head read from the ASR demo's bundle
              (``--init-from``; from scratch, phase 1 trains the audio encoder alone on the frame
              loss first: train_tiny.pretrain_encoder). Phase 2: the whole model on the official
              input (``build_input``), cross-entropy at the ``<timestamp>`` rows only against the
              80 ms classes around each word's start and end (soft targets), unshifted (paper
              3.3), plus the frame loss.
              A share of the clips is joined into multi-utterance examples (up to 60 s).
              ``--paused N`` adds N paused-speech examples (paused_speech.py: words and
              utterances with gaps of 0-1.5 s, isolated words, silence around, joined inputs up
              to 55 s; WORK/paused_{train,dev}.npz/.pkl) to the clips, ``--paused-long N`` N more of
              at least 10 s (the plan's next ones, shorter ones skipped; WORK/paused_long_train.*);
              ``--init-from`` an aligner bundle (this script's output) continues from its weights,
              head included.
              Experiments on paused speech (docs/training.md, "Fifth run"): ``--decoder-layers`` grows
              the decoder (new identity layers below the bundle's), ``--position-weight`` a training-only
              probe that makes the audio rows carry their own time class at the last layer's input,
              ``--attention-weight`` a training-only loss that makes head 0 of the last layer attend
              from each slot to its word's audio rows (``--attention-heads`` / ``--attention-layers``:
              heads 0..K-1 of the last L layers; docs/training.md, "Seventh run"). The forward stays
              the official one.
6. checkpoint: ``save_pretrained`` + side files + tokenizer, config.json patched back to the
              aligner type -> WORK/checkpoint/
7. export:    export_onnx.export -> OUT (an aligner bundle, model.json "kind": "aligner")

See docs/training.md ("The demo aligner") for the numbers of the committed run.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import pickle
import random
import shutil
import time
from dataclasses import asdict, dataclass, replace
from typing import List, Optional, Sequence, Tuple

import numpy as np

from qwen3asr.aligner.refine import HORIZON_PIECES_CHARACTERS, SPLIT_PAUSE_S
from qwen3asr.encoder import tokens_for_frames as n_audio_tokens

from . import REPO_ROOT as ROOT
from . import train_tiny as tt
from .make_random_checkpoint import (ALIGNER_MAX_POSITIONS, ALIGNER_MODEL_TYPE, TIMESTAMP_SEGMENT_TIME, config_dict,
                                     restore_aligner_type, write_side_files)

log = logging.getLogger("train_aligner")

# The engine aligns at most MAX_ALIGN_SECONDS (60 s) per pass: 750 classes of 80 ms cover it.
# (The real aligner has 5000: 400 s.) A smaller head keeps the bundle small.
CLASSIFY_NUM = 750
LANGUAGES = ("Chinese", "English")  # what the synthetic data speaks: the bundle refuses the others
ASR_DEMO = os.path.join(ROOT, "models", "default")  # its tokenizer is the aligner's base vocabulary


@dataclass(frozen=True)
class AlignerTrainConfig:
    """Settings of one run."""
    seed: int = 0
    n_train: int = 12000            # training clips generated
    n_dev: int = 200
    n_test: int = 500
    # Every weight but the head from this ASR bundle (the demo ASR model, same widths); "" = from scratch.
    init_from: str = ASR_DEMO
    pretrain_minutes: float = 0.0   # phase 1: the audio encoder alone on the frame loss (from scratch: 8)
    minutes: float = 45.0           # phase 2 (whole model) time budget
    steps: int = 100000             # upper bound on phase-2 steps; the time budget normally ends it
    batch_frames: int = 4000        # mel frames per batch (about 40 s of audio)
    max_batch: int = 24
    lr: float = 1e-3
    min_lr_ratio: float = 0.05
    warmup: int = 200
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    frame_weight: float = 0.2       # auxiliary frame loss on the encoder output (phase 2)
    # Soft targets: each slot's target is spread over the classes near its true time,
    # exp(-((k x 80 ms - t) / target_sigma_ms)^2 / 2), so the head learns distance in time
    # rather than one class against all (argmax still lands on the nearest class).
    target_sigma_ms: float = 40.0
    # Multi-utterance examples: a share of the clips joined 2-4 at a time (<= 30 s) and a
    # chance per example of a long one (6-24 clips, <= 60 s, the engine's longest pass).
    concat_share: float = 0.3
    concat_max_frames: int = 3000
    long_share: float = 0.01
    long_max_frames: int = 6000
    spec_freq_masks: int = 2
    spec_time_masks: int = 2
    # Intra-op threads. 1: with other jobs on the 2 cores (load average 13-16) two threads made a
    # step more than 6x slower than one (docs/training.md, "The demo aligner").
    threads: int = 1
    # Paused speech (paused_speech.py): this many extra training examples (words and utterances with
    # gaps, isolated words, silence around, joined inputs up to 55 s), and dev examples to watch.
    paused: int = 0
    paused_dev: int = 60
    # More long paused examples: this many of at least paused_long_seconds, taken in order from the
    # paused_speech plan after the first ``paused`` ones (the shorter ones skipped).
    paused_long: int = 0
    paused_long_seconds: float = 10.0
    eval_every: int = 500           # steps between dev checks and snapshots
    # Decoder depth (0 = the ASR demo's 3). More layers than the --init-from bundle has: its layers
    # become the top ones and the new ones below them start as the identity (o_proj and down_proj
    # zero), so step 0 is the bundle's model.
    decoder_layers: int = 0
    # Training-only position loss: a probe (Linear(hidden, classes)) on the audio rows at the input of
    # the last decoder layer must tell each row's own time class, so the rows the slots read there
    # carry their absolute time (the encoder's output knows its place only within each 1 s chunk).
    position_weight: float = 0.0
    # Training-only attention loss: head 0 of the last decoder layer, at each slot row, must put its
    # weight on the audio rows of the slot's word (-log of the weight there), so the slots read
    # the rows where their word sounds rather than count words.
    attention_weight: float = 0.0
    # The heads 0..attention_heads-1 of each of the last attention_layers decoder layers carry that
    # loss (its mean over them); 1 and 1: head 0 of the last layer alone. attention_at, when given,
    # names the (layer, head) pairs instead (layer -1 the last, -2 the one below it, ...).
    attention_heads: int = 1
    attention_layers: int = 1
    attention_at: Optional[Tuple[Tuple[int, int], ...]] = None
    # Windows of paused examples, as the engine's word spans align them (qwen3asr.aligner.refine,
    # assigned_at_pauses): each epoch, with this chance per paused example, one more example of its
    # audio cut in the middle of two of its pauses (gaps of at least window_pause_s between words, or
    # its edges) holding 1..window_pieces of the pieces between them, with the words inside. The
    # defaults are the word spans' own: their cut, and their longest window in Chinese.
    window_share: float = 0.0
    window_pieces: int = HORIZON_PIECES_CHARACTERS + 1
    window_pause_s: float = SPLIT_PAUSE_S
    # The chance that such a window's text starts one word off, as it does after the word spans gave
    # the piece before it a word too few or too many: half of them start with the word before the
    # window (its audio not in it; target: the window's start), half leave out its first word (the
    # audio kept). Taught to place the rest where they sound, a window stops such an error there.
    window_shift: float = 0.0


# --------------------------------------------------------------------------- stages 2 and 4


def make_aligner_tokenizer(work: str, asr_dir: str = ASR_DEMO) -> str:
    """The demo ASR model's BPE with the aligner's added tokens (renumbered after the base
    vocabulary as the ASR ones are, so ``<timestamp>`` = the real 151705 - 151643 + base), and
    its preprocessor_config.json: a directory the official processor loads."""
    from .make_small_tokenizer import small_tokenizer_config
    from .make_tokenizer_files import write_json

    out = os.path.join(work, "tokenizer")
    cfg_path = os.path.join(out, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        log.info("tokenizer: %s exists", out)
        return out
    with open(os.path.join(asr_dir, "vocab.json"), encoding="utf-8") as f:
        base = len(json.load(f))
    with open(os.path.join(asr_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        asr_cfg = json.load(f)
    if asr_cfg != small_tokenizer_config(base):
        raise RuntimeError(f"{asr_dir}/tokenizer_config.json is not the small-tokenizer layout this script extends")
    os.makedirs(out + ".tmp", exist_ok=True)
    for name in ("vocab.json", "merges.txt", "chat_template.json", "preprocessor_config.json"):
        shutil.copyfile(os.path.join(asr_dir, name), os.path.join(out + ".tmp", name))
    write_json(os.path.join(out + ".tmp", "tokenizer_config.json"), small_tokenizer_config(base, aligner=True))
    os.replace(out + ".tmp", out)
    return out


@dataclass(frozen=True)
class ClipWords:
    """One clip's aligner words and times."""
    words: Tuple[str, ...]          # the aligner's word units of the label
    starts: Tuple[float, ...]       # seconds in the clip
    ends: Tuple[float, ...]
    spans: tuple                    # ((token id, start s, end s), ...) of the ASR tokenization (frame loss)


def clip_units(spec, tok=None) -> ClipWords:
    """The aligner word units of ``spec`` (a make_dataset.ClipSpec) with espeak-ng's times for them,
    and with ``tok`` (a qwen3asr Tokenizer) the token spans of the frame loss (else none).

    Each word espeak-ng speaks (``espeak_align.label_words``) is cleaned as the aligner cleans
    words; the result must be exactly ``align_words(text, language)`` (ValueError otherwise).
    """
    from qwen3asr.aligner.words import align_words, clean_word

    from . import espeak_align

    if not spec.text:
        return ClipWords((), (), (), ())
    ws = espeak_align.clip_words(spec)
    kept = [(clean_word(w.text), w) for w in ws]
    kept = [(c, w) for c, w in kept if c]
    want = align_words(spec.text, spec.language)
    if [c for c, _ in kept] != want:
        raise ValueError(f"espeak-ng words {[c for c, _ in kept]} are not the aligner's units {want}")
    spans = espeak_align.token_spans(tok, spec.text, ws) if tok is not None else ()
    return ClipWords(tuple(want), tuple(w.start for _, w in kept), tuple(w.end for _, w in kept), tuple(spans))


def make_words(work: str, data: str, split: str, n: int, seed: int, tok_dir: str) -> List[ClipWords]:
    """ClipWords of every clip of ``split`` (cached in WORK/words_{split}.pkl with the seed and
    count of the plan they follow: data regenerated with another seed is never paired with them)."""
    from qwen3asr.tokenizer import Tokenizer

    from . import make_dataset

    path = os.path.join(work, f"words_{split}.pkl")
    rows = tt.read_manifest(os.path.join(data, split))
    if os.path.isfile(path):
        with open(path, "rb") as f:
            cached = pickle.load(f)
        if isinstance(cached, dict) and (cached["seed"], cached["n"], len(cached["words"])) == (seed, n, len(rows)):
            return cached["words"]
    tok = Tokenizer.from_dir(tok_dir)
    t0 = time.time()
    out = []
    for spec, row in zip(make_dataset.plan_split(split, n, seed), rows):
        if (spec.name, spec.text) != (row["audio"], row["text"]):
            raise RuntimeError(f"the {split} manifest does not match make_dataset's plan at {row['audio']}; "
                               f"delete {data} and run again")
        out.append(clip_units(spec, tok))
    with open(path + ".tmp", "wb") as f:
        pickle.dump({"seed": seed, "n": n, "words": out}, f)
    os.replace(path + ".tmp", path)
    log.info("words: %s, %d clips in %.0f s", split, len(out), time.time() - t0)
    return out


def make_paused(work: str, split: str, n: int, seed: int, tok_dir: str, first: int = 0, min_seconds: float = 0.0,
                jobs: int = 2):
    """({"mel", "offsets"} as make_features gives them, [ClipWords]) of paused_speech examples
    0..n-1 of ``split``, cached in WORK/paused_{split}.npz / .pkl (with the seed and count).
    With ``min_seconds``: the first ``n`` examples of at least that length from example ``first``
    on (the shorter ones skipped), cached in WORK/paused_long_{split}.npz / .pkl."""
    from qwen3asr.mel import log_mel
    from qwen3asr.tokenizer import Tokenizer

    from . import espeak_align, paused_speech

    path = os.path.join(work, f"paused_long_{split}" if min_seconds > 0 else f"paused_{split}")
    key = (seed, n, first, min_seconds) if min_seconds > 0 else (seed, n)
    if os.path.isfile(path + ".pkl") and os.path.isfile(path + ".npz"):
        with open(path + ".pkl", "rb") as f:
            cached = pickle.load(f)
        if (cached["seed"], cached["n"], cached.get("first", 0), cached.get("min_seconds", 0.0))[:len(key)] == key:
            with np.load(path + ".npz") as z:
                return {"mel": z["mel"], "offsets": z["offsets"]}, cached["words"]
    tok = Tokenizer.from_dir(tok_dir)
    t0 = time.time()
    mels, words = [], []
    start = first
    while len(words) < n:  # in slices: the audio of all of them at once is large
        size = min(200, n - len(words)) if min_seconds <= 0 else 200
        for ex in paused_speech.make_set(split, size, seed, jobs=jobs, start=start):
            if len(words) == n or len(ex.audio) < min_seconds * paused_speech.md.SAMPLE_RATE:
                continue
            units, starts, ends = paused_speech.aligner_units(ex)
            mels.append(log_mel(ex.audio, tt.N_MELS).astype(np.float16))
            words.append(ClipWords(units, starts, ends, tuple(espeak_align.token_spans(tok, ex.text, ex.words))))
        start += size
        log.info("paused %s: %d/%d examples (%d drawn), %.0f s", split, len(words), n, start - first, time.time() - t0)
    offsets = np.cumsum([0] + [m.shape[1] for m in mels]).astype(np.int64)
    np.savez(path + ".tmp.npz", mel=np.concatenate(mels, axis=1), offsets=offsets)
    os.replace(path + ".tmp.npz", path + ".npz")
    with open(path + ".tmp", "wb") as f:
        pickle.dump({"seed": seed, "n": n, "first": first, "min_seconds": min_seconds, "words": words}, f)
    os.replace(path + ".tmp", path + ".pkl")
    log.info("paused %s: %d examples, %.0f s of audio, in %.0f s", split, n, offsets[-1] / 100.0, time.time() - t0)
    return {"mel": np.concatenate(mels, axis=1), "offsets": offsets}, words


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class AlignerInput:
    """One training example as the official aligner reads it."""
    ids: np.ndarray                 # (L,) int64: <|audio_start|> <|audio_pad|> x n <|audio_end|> w1 <ts> <ts> ...
    slots: np.ndarray               # (2 x words,) int64: positions of the <timestamp> tokens in ids
    targets_ms: np.ndarray          # (2 x words,) float32: start, end of every word (ms of the audio)


def build_input(tok, n_audio: int, words: Sequence[str], starts: Sequence[float],
                ends: Sequence[float]) -> AlignerInput:
    """The official aligner's input for audio of ``n_audio`` encoder tokens and ``words`` (the
    aligner's word units), with the time targets of its slots: the layout of
    ``Qwen3ForcedAligner.align()`` (audio block, then every word followed by two ``<timestamp>``),
    tokenized as the runtime tokenizes it (qwen3asr.aligner.words.encode_words)."""
    from qwen3asr.aligner.words import encode_words

    if not words:
        raise ValueError("an example needs at least one word")
    layout = encode_words(tok, words)
    head = [tok.audio_start] + [tok.audio_pad] * n_audio + [tok.audio_end]
    ids = np.concatenate([np.asarray(head, np.int64), layout.ids])
    t = np.empty(2 * len(words), np.float32)
    t[0::2], t[1::2] = np.asarray(starts) * 1000.0, np.asarray(ends) * 1000.0
    return AlignerInput(ids, layout.slots + len(head), t)


@dataclass(frozen=True)
class Example:
    clips: Tuple[int, ...]          # clip indices, joined in this order
    frames: int                     # mel frames of the joined audio
    crop: Optional[Tuple[int, int]] = None  # mel frames [a, b) of the joined audio kept (window_crops)
    shift: int = 0  # a crop's text: -1 the word before it first, +1 without its first word (window_shift)


def compose(frames: Sequence[int], has_words: Sequence[bool], cfg: AlignerTrainConfig,
            rng: random.Random) -> List[Example]:
    """One epoch's examples: every clip once, a ``cfg.concat_share`` share of them joined 2-4 at a
    time (<= ``concat_max_frames``), with chance ``long_share`` per example a long one (6-24 clips,
    <= ``long_max_frames``); no-speech clips only inside joined examples (alone they have no word)."""
    order = list(range(len(frames)))
    rng.shuffle(order)
    q = cfg.concat_share / (3.0 - 2.0 * cfg.concat_share)  # start probability: mean 3 parts (train_tiny.compose)
    out, i = [], 0
    while i < len(order):
        r = rng.random()
        if r < cfg.long_share:
            k, cap = rng.randint(6, 24), cfg.long_max_frames
        elif r < cfg.long_share + q:
            k, cap = rng.randint(2, 4), cfg.concat_max_frames
        else:
            k, cap = 1, 0
        parts, total = [order[i]], frames[order[i]]
        while len(parts) < k and i + len(parts) < len(order) and total + frames[order[i + len(parts)]] <= cap:
            parts.append(order[i + len(parts)])
            total += frames[parts[-1]]
        i += len(parts)
        if any(has_words[p] for p in parts):
            out.append(Example(tuple(parts), total))
    return out


def window_crops(examples: Sequence[Example], words: Sequence[ClipWords], first_paused: int,
                 cfg: AlignerTrainConfig, rng: random.Random) -> List[Example]:
    """The epoch's extra window examples (``cfg.window_share``): for a paused example alone in an
    Example (clip index >= ``first_paused``), with that chance, its audio from the middle of one
    pause (or its start) to the middle of the pause 1..window_pieces pieces later (or its end), a
    pause being a gap of at least window_pause_s between consecutive words: what one window of
    assigned_at_pauses hears."""
    out = []
    for ex in examples:
        if len(ex.clips) != 1 or ex.clips[0] < first_paused or rng.random() >= cfg.window_share:
            continue
        cw = words[ex.clips[0]]
        cuts = [round(50.0 * (e + s)) for e, s in zip(cw.ends, cw.starts[1:]) if s - e >= cfg.window_pause_s]
        bounds = [0] + cuts + [ex.frames]
        i = rng.randrange(len(bounds) - 1)
        j = min(len(bounds) - 1, i + rng.randint(1, cfg.window_pieces))
        a, b = bounds[i], bounds[j]
        inside = [k for k, (s, e) in enumerate(zip(cw.starts, cw.ends)) if _inside(s, e, (a, b))]
        if (a, b) != (0, ex.frames) and b - a >= 20 and inside:
            shift = 0
            if rng.random() < cfg.window_shift:
                shift = -1 if rng.random() < 0.5 else 1
                if (shift < 0 and inside[0] == 0) or (shift > 0 and len(inside) < 2):
                    shift = 0
            out.append(Example(ex.clips, b - a, (a, b), shift))
    return out


def _inside(start: float, end: float, crop: Tuple[int, int]) -> bool:
    """Whether a word of [start, end] seconds lies in the crop (mel frames [a, b)), to a frame: an
    example's last word may end a millisecond past its last whole frame."""
    return start >= crop[0] / 100.0 - 0.01 and end <= crop[1] / 100.0 + 0.01


def example_mel(mel_all: np.ndarray, off: np.ndarray, ex: Example) -> np.ndarray:
    """(128, frames) float32 log-mel of the example's clips joined (train_tiny.joined_mel), cut to
    its crop: the cut audio's log-mel but for its quiet frames, which keep the whole's clamp (its
    maximum - 8): above the cut's own by at most the difference of their loudest frames (tested)."""
    m = tt.joined_mel(mel_all, off, ex.clips)
    return m if ex.crop is None else m[:, ex.crop[0]:ex.crop[1]]


def example_words(words: Sequence[ClipWords], off: np.ndarray, ex: Example):
    """(words, starts, ends, token spans) of the joined clips, times shifted by each part's start;
    of a crop, the words (and spans) wholly inside it, times from its start, its text one word off
    as its ``shift`` says (the word before it at 0-0 s first, or its first word left out)."""
    w, s, e, sp, t = [], [], [], [], 0.0
    for i in ex.clips:
        cw = words[i]
        w += cw.words
        s += [x + t for x in cw.starts]
        e += [x + t for x in cw.ends]
        sp += [(tid, a + t, b + t) for tid, a, b in cw.spans]
        t += (off[i + 1] - off[i]) / 100.0
    if ex.crop is not None:
        lo = ex.crop[0] / 100.0
        keep = [k for k in range(len(w)) if _inside(s[k], e[k], ex.crop)]
        if ex.shift > 0:
            keep = keep[1:]
        before = w[keep[0] - 1] if ex.shift < 0 else None  # a word whose audio is before the window
        w, s, e = [w[k] for k in keep], [s[k] - lo for k in keep], [e[k] - lo for k in keep]
        if before is not None:  # ... placed at its start
            w, s, e = [before] + w, [0.0] + s, [0.0] + e
        sp = [(tid, a - lo, b - lo) for tid, a, b in sp if _inside(a, b, ex.crop)]
    return w, s, e, sp


def soft_targets(targets_ms, classes: int, sigma_ms: float):
    """(n, classes) float32 target distributions: a Gaussian of width ``sigma_ms`` around each
    time, on the classes within 3 sigma (sigma 0: one-hot at the nearest class)."""
    import torch

    t = torch.as_tensor(targets_ms, dtype=torch.float32).unsqueeze(1)
    centres = torch.arange(classes, dtype=torch.float32).unsqueeze(0) * TIMESTAMP_SEGMENT_TIME
    if sigma_ms <= 0:
        near = torch.clamp(torch.round(t / TIMESTAMP_SEGMENT_TIME), 0, classes - 1).long()
        return torch.zeros((t.shape[0], classes)).scatter_(1, near, 1.0)
    d = (centres - torch.clamp(t, 0, (classes - 1) * TIMESTAMP_SEGMENT_TIME)) / sigma_ms
    p = torch.exp(-0.5 * d * d) * (d.abs() <= 3.0)
    return p / p.sum(dim=1, keepdim=True)


def attention_pairs(heads: int = 1, layers: int = 1, at=None) -> List[Tuple[int, int]]:
    """The (layer, head) pairs the attention loss covers (layer -1 the last): ``at`` when given, else
    heads 0..heads-1 of each of the last ``layers`` layers, the last layer's first."""
    return [tuple(p) for p in at] if at else [(-1 - l, h) for l in range(layers) for h in range(heads)]


def slot_logits(model, mels, inputs: Sequence[AlignerInput], pad_id: int, audio_pad_id: int, rows: Optional[list] = None,
                attention: Optional[list] = None, pairs: Sequence[Tuple[int, int]] = ((-1, 0),)):
    """The thinker's head at every slot of a batch, ``(sum slots, classes)``, in example order,
    and the encoder output ``(sum audio tokens, hidden)``: the official forward (the audio
    tower by train_tiny.encode_audio, which runs the official windows for several clips at once).
    With ``rows`` (a list), the audio rows' hidden at the input of the last decoder layer,
    ``(sum audio tokens, hidden)``, is appended to it (the position loss; the forward is unchanged).
    With ``attention`` (a list), the attention weights at each example's slot rows of the (layer,
    head) ``pairs`` (``attention_pairs``; layer -1 the last), ``(pairs, slots, length)`` per example
    in that order, are appended to it (recomputed beside the forward)."""
    import torch

    thinker = model.thinker
    length = max(x.ids.shape[0] for x in inputs)
    ids = torch.full((len(inputs), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(inputs), length), dtype=torch.long)
    slot_mask = torch.zeros((len(inputs), length), dtype=torch.bool)
    for b, x in enumerate(inputs):
        ids[b, :x.ids.shape[0]] = torch.from_numpy(x.ids)
        attn[b, :x.ids.shape[0]] = 1
        slot_mask[b, torch.from_numpy(x.slots)] = True
    emb = thinker.get_input_embeddings()(ids)
    audio = tt.encode_audio(thinker.audio_tower, mels).to(emb.dtype)
    emb = emb.masked_scatter((ids == audio_pad_id).unsqueeze(-1).expand_as(emb), audio)
    pos = torch.arange(length).view(1, 1, length).expand(3, len(inputs), length)
    hook = None
    if rows is not None:
        audio_mask = ids == audio_pad_id
        hook = thinker.model.layers[-1].register_forward_pre_hook(lambda _m, a: rows.append(a[0][audio_mask]))
    hooks = [hook] if hook is not None else []
    n_layers = len(thinker.model.layers)
    pairs = [(l % n_layers, h) for l, h in pairs]  # layer indices from the first
    per_layer = {}  # layer index -> [(heads, slots, length) per example]
    if attention is not None:
        for li in sorted({l for l, _ in pairs}):
            heads = 1 + max(h for l, h in pairs if l == li)
            hooks.append(thinker.model.layers[li].self_attn.register_forward_hook(
                lambda m, a, kw, _out, li=li, heads=heads: per_layer.__setitem__(li, _slot_attention(
                    m, kw.get("hidden_states", a[0] if a else None), kw["position_embeddings"], inputs, heads)),
                with_kwargs=True))
    try:
        hidden = thinker.model(inputs_embeds=emb, attention_mask=attn, position_ids=pos, use_cache=False)[0]
    finally:
        for h in hooks:
            h.remove()
    if attention is not None:
        attention.extend(torch.stack([per_layer[l][i][h] for l, h in pairs])
                         for i in range(len(inputs)))
    return thinker.lm_head(hidden[slot_mask]), audio


def _slot_attention(attn_mod, hidden, position_embeddings, inputs: Sequence[AlignerInput], heads: int = 1) -> list:
    """The attention weights of heads 0..heads-1 at the slot rows of each example (``(heads, slots,
    length)`` each), as the official attention computes them (q/k norms, RoPE, causal softmax,
    scaling; query head h reads key head h // num_key_value_groups)."""
    import sys

    import torch

    rope = sys.modules[type(attn_mod).__module__].apply_rotary_pos_emb
    b, length, _ = hidden.shape
    d = attn_mod.head_dim
    kv = torch.arange(heads) // attn_mod.num_key_value_groups
    q = attn_mod.q_norm(attn_mod.q_proj(hidden).view(b, length, -1, d)[:, :, :heads]).transpose(1, 2)
    k = attn_mod.k_norm(attn_mod.k_proj(hidden).view(b, length, -1, d)[:, :, :int(kv[-1]) + 1])
    k = k[:, :, kv].transpose(1, 2)
    q, k = rope(q, k, *position_embeddings)
    out = []
    for i, x in enumerate(inputs):
        slots = torch.from_numpy(x.slots)
        scores = (q[i][:, slots] @ k[i].transpose(1, 2)) * attn_mod.scaling
        scores = scores.masked_fill(torch.arange(length)[None, None, :] > slots[None, :, None], float("-inf"))
        out.append(torch.softmax(scores, dim=-1))
    return out


def attention_targets(x: AlignerInput, n_frames: int) -> np.ndarray:
    """(slots, length) bool: the audio rows of each slot's word (rows whose middle lies within the
    word's start - 40 ms .. end + 40 ms; the nearest row when none does); audio row r is at
    position 1 + r of the input."""
    t = audio_row_times_ms(n_frames)
    out = np.zeros((len(x.slots), x.ids.shape[0]), bool)
    for s in range(0, len(x.slots), 2):
        a, b = x.targets_ms[s], x.targets_ms[s + 1]
        hit = np.flatnonzero((t >= a - 40.0) & (t <= b + 40.0))
        if not len(hit):
            hit = [int(np.argmin(np.abs(t - (a + b) / 2.0)))]
        out[s:s + 2, 1 + np.asarray(hit)] = True
    return out


def audio_row_times_ms(n_frames: int) -> np.ndarray:
    """(tokens,) float32: the middle (ms) of the mel frames each encoder token of ``n_frames``
    frames covers: 13 tokens per 100-frame chunk, token k of a chunk frames 8k..8k+8 (the 13th
    4 frames), the ragged tail's tokens likewise."""
    out = []
    for c0 in range(0, int(n_frames), 100):
        f = min(100, int(n_frames) - c0)
        for k in range(n_audio_tokens(f)):
            a, b = 8 * k, min(8 * k + 8, f)
            out.append((c0 + (a + max(b, a + 1)) / 2.0) * 10.0)
    return np.asarray(out, np.float32)


# --------------------------------------------------------------------------- model


def model_dims(cfg: AlignerTrainConfig):
    """The ASR demo's widths (train_tiny.MODEL) with ``cfg.decoder_layers`` decoder layers (0: its 3)."""
    return replace(tt.MODEL, layers=cfg.decoder_layers) if cfg.decoder_layers else tt.MODEL


def aligner_config(tok, dims=tt.MODEL, classes: int = CLASSIFY_NUM) -> dict:
    """config.json content of the demo aligner: the official aligner's keys at the ASR demo's widths."""
    ids = {n: tok.token_id(n) for n in ("<|audio_pad|>", "<|audio_start|>", "<|audio_end|>", "user")}
    cfg = config_dict(dims, vocab_size=int(math.ceil(tok.vocab_size / 64) * 64), token_ids=ids)
    thinker = cfg["thinker_config"]
    thinker["model_type"] = ALIGNER_MODEL_TYPE
    thinker["classify_num"] = classes
    thinker["tie_word_embeddings"] = False
    thinker["text_config"]["tie_word_embeddings"] = False
    thinker["text_config"]["max_position_embeddings"] = ALIGNER_MAX_POSITIONS
    cfg["tie_word_embeddings"] = False
    cfg["timestamp_token_id"] = tok.token_id("<timestamp>")
    cfg["timestamp_segment_time"] = TIMESTAMP_SEGMENT_TIME
    cfg["support_languages"] = list(LANGUAGES)
    return cfg


def asr_bundle_weights(bundle_dir: str, cfg_dict: dict) -> dict:
    """The official parameter tensors of an ASR bundle's model, read back from its ONNX graphs
    (encoder ``merged_8s``, decoder fp32) and ``embed_tokens.npy``: {name: float32 array} for every
    parameter of the model but the head. ``cfg_dict``'s widths must be the bundle's."""
    import onnx
    from onnx import numpy_helper

    t = cfg_dict["thinker_config"]["text_config"]
    q_rows, kv_rows = t["num_attention_heads"] * t["head_dim"], t["num_key_value_heads"] * t["head_dim"]
    enc = {"ln1": "self_attn_layer_norm", "ln2": "final_layer_norm", "q": "self_attn.q_proj",
           "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.out_proj", "fc1": "fc1", "fc2": "fc2"}
    dec = {"in_norm": "input_layernorm", "post_norm": "post_attention_layernorm", "q_norm": "self_attn.q_norm",
           "k_norm": "self_attn.k_norm", "o": "self_attn.o_proj", "down": "mlp.down_proj"}
    out = {}
    def initializers(path):
        """(stem, kind, layer, part, fp32 array) of every initializer; ``weight_t`` transposed back."""
        for init in onnx.load(path).graph.initializer:
            a = numpy_helper.to_array(init).astype(np.float32)
            stem, _, kind = init.name.rpartition(".")
            if kind == "weight_t":
                kind, a = "weight", a.T
            layer, _, part = stem.partition(".")
            yield stem, kind, layer, part, a

    for stem, kind, layer, part, a in initializers(os.path.join(bundle_dir, "encoder", "merged_8s.onnx")):
        if layer[:1] == "l" and layer[1:].isdigit() and part in enc:
            out[f"thinker.audio_tower.layers.{layer[1:]}.{enc[part]}.{kind}"] = a
        elif stem in ("conv2d1", "conv2d2", "conv2d3", "conv_out", "ln_post", "proj1", "proj2"):
            out[f"thinker.audio_tower.{stem}.{kind}"] = a
    for stem, kind, layer, part, a in initializers(os.path.join(bundle_dir, "decoder", "decoder_fp32.onnx")):
        p = f"thinker.model.layers.{layer[1:]}."
        if stem == "final_norm":
            out["thinker.model.norm.weight"] = a
        elif part == "qkv":
            for n, rows in zip("qkv", np.split(a, [q_rows, q_rows + kv_rows])):
                out[p + f"self_attn.{n}_proj.weight"] = rows
        elif part == "gate_up":
            gate, up = np.split(a, 2)
            out[p + "mlp.gate_proj.weight"], out[p + "mlp.up_proj.weight"] = gate, up
        elif layer[:1] == "l" and layer[1:].isdigit() and part in dec:
            out[p + f"{dec[part]}.{kind}"] = a
    out["thinker.model.embed_tokens.weight"] = np.load(os.path.join(bundle_dir, "embed_tokens.npy")).astype(np.float32)
    return out


def init_from_asr(model, bundle_dir: str, cfg_dict: dict) -> None:
    """Every parameter of ``model`` but the head from the ASR demo bundle (same widths): its
    encoder already tells the speech sounds apart and its decoder reads the tokens."""
    import torch

    weights = asr_bundle_weights(bundle_dir, cfg_dict)
    head = os.path.join(bundle_dir, "aligner_head.npy")
    if os.path.isfile(head):  # an aligner bundle (this script's earlier run): its head too
        weights["thinker.lm_head.weight"] = np.load(head).astype(np.float32)
    state = model.state_dict()
    have = len(model.thinker.model.layers)
    given = 1 + max(int(k.split(".")[3]) for k in weights if k.startswith("thinker.model.layers."))
    if have > given:  # the bundle's layers on top, new identity layers below them
        shift = have - given
        weights = {(f"thinker.model.layers.{int(k.split('.')[3]) + shift}." + k.split(".", 4)[4]
                    if k.startswith("thinker.model.layers.") else k): a for k, a in weights.items()}
        with torch.no_grad():
            for layer in model.thinker.model.layers[:shift]:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
        new = {k: v for k, v in state.items() if k.startswith("thinker.model.layers.")
               and int(k.split(".")[3]) < shift}
        weights.update({k: v.numpy().copy() for k, v in new.items()})
        log.info("decoder: %d new identity layers below the bundle's %d", shift, given)
    missing = sorted(k for k in state if k not in weights and not k.startswith("thinker.lm_head."))
    extra = sorted(k for k in weights if k not in state)
    if missing or extra:
        raise RuntimeError(f"{bundle_dir} does not map onto the aligner: missing {missing[:5]}, unknown {extra[:5]}")
    with torch.no_grad():
        for k, a in weights.items():
            if tuple(state[k].shape) != a.shape:
                raise RuntimeError(f"{bundle_dir}: {k} is {a.shape}, the aligner's is {tuple(state[k].shape)}")
            state[k].copy_(torch.from_numpy(a))
    log.info("initialised %d tensors from %s", len(weights), bundle_dir)


def dev_shift(model, tok, dev_mel, dev_words: Sequence[ClipWords], limit: int = 120) -> dict:
    """Mean |argmax class x 80 ms - espeak time| (ms) over the slots of the first ``limit`` dev
    clips with words, per slot kind; the raw argmax, before the official repair."""
    import torch

    mel_all, off = dev_mel["mel"], dev_mel["offsets"]
    errs = {"start": [], "end": []}
    idx = [i for i, w in enumerate(dev_words) if w.words][:limit]
    with torch.no_grad():
        for i in idx:
            m = torch.from_numpy(mel_all[:, off[i]:off[i + 1]].astype(np.float32))
            cw = dev_words[i]
            x = build_input(tok, n_audio_tokens(m.shape[1]), cw.words, cw.starts, cw.ends)
            logits, _ = slot_logits(model, [m], [x], tok.endoftext, tok.audio_pad)
            pred = logits.argmax(-1).numpy() * TIMESTAMP_SEGMENT_TIME
            d = np.abs(pred - x.targets_ms)
            errs["start"] += d[0::2].tolist()
            errs["end"] += d[1::2].tolist()
    return {k: float(np.mean(v)) for k, v in errs.items()}


def train(work: str, data: str, tok_dir: str, cfg: AlignerTrainConfig, log_every: int = 50):
    """Phase 1 (cached in WORK/pretrain.pt) and phase 2 (resumed from WORK/snapshot.pt when it
    exists; its final weights in WORK/trained.pt). Returns (model, steps, seconds of phase 2)."""
    import torch
    import torch.nn.functional as F

    from qwen3asr.tokenizer import Tokenizer

    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    tok = Tokenizer.from_dir(tok_dir)
    cfg_dict = aligner_config(tok, model_dims(cfg))
    model = tt.build_model(cfg_dict, cfg.seed)
    tt.init_audio_stem(model, cfg.seed)
    if cfg.init_from:
        init_from_asr(model, cfg.init_from, cfg_dict)
    final = os.path.join(work, "trained.pt")
    if os.path.isfile(final):
        snap = torch.load(final, weights_only=False)
        model.load_state_dict(snap["model"])
        model.eval()
        log.info("training: %s exists (step %d)", final, snap["step"])
        return model, snap["step"], snap["seconds"]
    text_cfg = cfg_dict["thinker_config"]["text_config"]
    att_pairs = attention_pairs(cfg.attention_heads, cfg.attention_layers, cfg.attention_at)
    if not all(-text_cfg["num_hidden_layers"] <= l < text_cfg["num_hidden_layers"]
               and 0 <= h < text_cfg["num_attention_heads"] for l, h in att_pairs):
        raise ValueError(f"the attention loss on (layer, head) {att_pairs}: the decoder has "
                         f"{text_cfg['num_hidden_layers']} layers of {text_cfg['num_attention_heads']} heads")
    n_params = sum(p.numel() for p in model.parameters())
    hidden = cfg_dict["thinker_config"]["text_config"]["hidden_size"]
    vocab_rows = cfg_dict["thinker_config"]["text_config"]["vocab_size"]
    log.info("model: %d parameters; vocab rows %d; %d classes", n_params, vocab_rows, CLASSIFY_NUM)

    rows = tt.read_manifest(os.path.join(data, "train"))
    feats = tt.make_features(work, data, "train")
    mel_all, off = feats["mel"], feats["offsets"]
    words = make_words(work, data, "train", cfg.n_train, cfg.seed, tok_dir)
    dev_mel = tt.make_features(work, data, "dev")
    dev_words = make_words(work, data, "dev", cfg.n_dev, cfg.seed, tok_dir)
    paused_dev = None
    first_paused = len(words)  # the paused examples follow the make_dataset clips
    if cfg.paused > 0:
        pf, pw = make_paused(work, "train", cfg.paused, cfg.seed, tok_dir)
        mel_all = np.concatenate([mel_all, pf["mel"]], axis=1)
        off = np.concatenate([off, off[-1] + pf["offsets"][1:]])
        words = list(words) + list(pw)
        if cfg.paused_long > 0:
            lf, lw = make_paused(work, "train", cfg.paused_long, cfg.seed, tok_dir, first=cfg.paused,
                                 min_seconds=cfg.paused_long_seconds, jobs=min(2, cfg.threads))
            mel_all = np.concatenate([mel_all, lf["mel"]], axis=1)
            off = np.concatenate([off, off[-1] + lf["offsets"][1:]])
            words = words + list(lw)
            log.info("training set: %d more paused examples of at least %.0f s (%.0f s of audio)", len(lw),
                     cfg.paused_long_seconds, lf["offsets"][-1] / 100.0)
        paused_dev = make_paused(work, "dev", cfg.paused_dev, cfg.seed, tok_dir)
        log.info("training set: %d clips + %d paused examples", len(rows), len(pw))
    frames = [int(off[i + 1] - off[i]) for i in range(len(words))]
    frame_head = torch.nn.Linear(hidden, vocab_rows + 1)
    pos_head = torch.nn.Linear(hidden, CLASSIFY_NUM)  # the position loss's probe (training only)
    with torch.no_grad():  # zero: it first learns to read the rows, then starts to shape them
        pos_head.weight.zero_()
        pos_head.bias.zero_()

    # Phase 1: the encoder alone on the frame loss (train_tiny's, on its Sample objects).
    pre = os.path.join(work, "pretrain.pt")
    if os.path.isfile(pre):
        snap = torch.load(pre, weights_only=False)
        model.thinker.audio_tower.load_state_dict(snap["tower"])
        frame_head.load_state_dict(snap["head"])
        log.info("phase 1: %s exists", pre)
    elif cfg.pretrain_minutes > 0:
        samples = [tt.Sample(i, frames[i], r["text"], r["language"], tuple(tok.encode(r["text"])) if r["text"] else ())
                   for i, r in enumerate(rows)]
        tcfg = replace(tt.TrainConfig(), seed=cfg.seed, pretrain_minutes=cfg.pretrain_minutes, long_share=0.0,
                       concat_share=cfg.concat_share, threads=cfg.threads)
        spans = [list(w.spans) for w in words]
        tt.pretrain_encoder(work, model, frame_head, samples, mel_all, off, spans, tcfg, tok)
        torch.save({"tower": model.thinker.audio_tower.state_dict(), "head": frame_head.state_dict()}, pre)

    # Phase 2: the whole model.
    named = list(model.named_parameters()) + [("frame_head." + n, q) for n, q in frame_head.named_parameters()]
    if cfg.position_weight > 0:
        named += [("pos_head." + n, q) for n, q in pos_head.named_parameters()]
    opt = torch.optim.AdamW(tt._param_groups(named, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8)
    snap_path = os.path.join(work, "snapshot.pt")
    step, epoch, elapsed0 = 0, 0, 0.0
    if os.path.isfile(snap_path):
        snap = torch.load(snap_path, weights_only=False)
        model.load_state_dict(snap["model"])
        frame_head.load_state_dict(snap["frame_head"])
        if "pos_head" in snap:
            pos_head.load_state_dict(snap["pos_head"])
        opt.load_state_dict(snap["opt"])
        step, epoch, elapsed0 = snap["step"], snap["epoch"], snap["seconds"]
        log.info("phase 2: resuming from %s (step %d, %.0f s)", snap_path, step, elapsed0)
    t0 = time.time()

    def elapsed() -> float:
        return elapsed0 + time.time() - t0

    def progress() -> float:
        return min(1.0, max(step / cfg.steps, elapsed() / (60.0 * cfg.minutes) if cfg.minutes > 0 else 0.0))

    def save(path: str, **extra) -> None:
        torch.save({"step": step, "epoch": epoch, "seconds": elapsed(), "model": model.state_dict(),
                    "config": cfg_dict, **extra}, path + ".tmp")
        os.replace(path + ".tmp", path)

    rng = random.Random(cfg.seed * 1000 + epoch)
    gen = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
    bcfg = tt.TrainConfig(batch_frames=cfg.batch_frames, max_batch=cfg.max_batch, warmup=cfg.warmup,
                          min_lr_ratio=cfg.min_lr_ratio, spec_freq_masks=cfg.spec_freq_masks,
                          spec_time_masks=cfg.spec_time_masks)  # what the shared batching, LR and masks read
    has_words = [bool(w.words) for w in words]
    if step == 0 and paused_dev is not None:  # where a continued model starts
        model.eval()
        for name, (dm, dw) in (("dev", (dev_mel, dev_words)), ("paused dev", paused_dev)):
            shift = dev_shift(model, tok, dm, dw)
            log.info("step 0: %s mean shift start %.1f ms, end %.1f ms (raw argmax)", name, shift["start"], shift["end"])
    sums = {"ce": 0.0, "slots": 0, "frame": 0.0, "batches": 0, "err": 0.0, "pos": 0.0, "pos_err": 0.0, "rows": 0, "att": 0.0,
            "att_on": 0.0, "att_on0": 0.0}
    model.train()
    done = progress() >= 1.0
    while not done:
        epoch += 1
        epoch_examples = compose(frames, has_words, cfg, rng)
        if cfg.window_share > 0:
            epoch_examples += window_crops(epoch_examples, words, first_paused, cfg, rng)
        for batch in tt.make_batches(epoch_examples, bcfg, rng):
            done = progress() >= 1.0
            if done:
                break
            mels = [tt.spec_augment(torch.from_numpy(example_mel(mel_all, off, ex)), bcfg, gen) for ex in batch]
            inputs, spans = [], []
            for ex, m in zip(batch, mels):
                w, s, e, sp = example_words(words, off, ex)
                inputs.append(build_input(tok, n_audio_tokens(m.shape[1]), w, s, e))
                spans.append(sp)
            lr = tt._cosine(step, progress(), cfg.lr, bcfg)
            for g in opt.param_groups:
                g["lr"] = lr
            rows = [] if cfg.position_weight > 0 else None
            att = [] if cfg.attention_weight > 0 else None
            logits, audio = slot_logits(model, mels, inputs, tok.endoftext, tok.audio_pad, rows, att, att_pairs)
            t_ms = np.concatenate([x.targets_ms for x in inputs])
            target = soft_targets(t_ms, CLASSIFY_NUM, cfg.target_sigma_ms)
            ce = -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()
            aux = tt.frame_loss(frame_head, audio, mels, spans, frame_head.out_features - 1)[0]
            loss = ce + cfg.frame_weight * aux
            if rows is not None:
                row_ms = np.concatenate([audio_row_times_ms(m.shape[1]) for m in mels])
                pos_logits = pos_head(F.rms_norm(rows[0], (hidden,)))  # the residual stream's scale varies
                pos = -(soft_targets(row_ms, CLASSIFY_NUM, cfg.target_sigma_ms)
                        * F.log_softmax(pos_logits, dim=-1)).sum(-1).mean()
                loss = loss + cfg.position_weight * pos
                with torch.no_grad():
                    sums["pos"] += pos.item() * len(row_ms)
                    sums["pos_err"] += float((pos_logits.argmax(-1).float() * TIMESTAMP_SEGMENT_TIME
                                              - torch.from_numpy(row_ms)).abs().sum())
                    sums["rows"] += len(row_ms)
            if att is not None:  # on: (pairs, slots of the batch); [0] the first pair (default: last layer, head 0)
                on = torch.cat([(a[..., :x.ids.shape[0]] * torch.from_numpy(attention_targets(x, m.shape[1]))).sum(-1)
                                for a, x, m in zip(att, inputs, mels)], dim=1)
                att_loss = -torch.log(on + 1e-6).mean()
                loss = loss + cfg.attention_weight * att_loss
                sums["att"] += att_loss.item()
                sums["att_on"] += float(on.detach().mean())
                sums["att_on0"] += float(on[0].detach().mean())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([q for _, q in named], cfg.clip_norm)
            opt.step()
            step += 1
            with torch.no_grad():
                err = (logits.argmax(-1).float() * TIMESTAMP_SEGMENT_TIME - torch.from_numpy(t_ms)).abs().sum()
            sums["ce"] += ce.item() * len(t_ms)
            sums["slots"] += len(t_ms)
            sums["err"] += float(err)
            sums["frame"] += aux.item()
            sums["batches"] += 1
            if step % log_every == 0:
                log.info("step %d epoch %d progress %.3f slot loss %.4f train shift %.1f ms frame %.3f lr %.2e  %.0f s",
                         step, epoch, progress(), sums["ce"] / sums["slots"], sums["err"] / sums["slots"],
                         sums["frame"] / sums["batches"], lr, elapsed())
                if sums["rows"]:
                    log.info("step %d position loss %.4f probe shift %.1f ms", step, sums["pos"] / sums["rows"],
                             sums["pos_err"] / sums["rows"])
                if cfg.attention_weight > 0:
                    log.info("step %d attention loss %.4f weight on the word's rows %.3f", step,
                             sums["att"] / sums["batches"], sums["att_on"] / sums["batches"])
                    if len(att_pairs) > 1:
                        log.info("step %d layer %d head %d: weight on the word's rows %.3f", step, *att_pairs[0],
                                 sums["att_on0"] / sums["batches"])
                sums = {k: 0 * v for k, v in sums.items()}
            if step % cfg.eval_every == 0:
                model.eval()
                shift = dev_shift(model, tok, dev_mel, dev_words)
                log.info("step %d: dev mean shift start %.1f ms, end %.1f ms (raw argmax, single clips)", step,
                         shift["start"], shift["end"])
                if paused_dev is not None:
                    shift = dev_shift(model, tok, paused_dev[0], paused_dev[1])
                    log.info("step %d: paused dev mean shift start %.1f ms, end %.1f ms (raw argmax)", step,
                             shift["start"], shift["end"])
                model.train()
                save(snap_path, frame_head=frame_head.state_dict(), pos_head=pos_head.state_dict(), opt=opt.state_dict())
    model.eval()
    shift = dev_shift(model, tok, dev_mel, dev_words, limit=len(dev_words))
    log.info("phase 2 done: %d steps, %d epochs, %.0f s; dev mean shift start %.1f ms, end %.1f ms", step, epoch,
             elapsed(), shift["start"], shift["end"])
    if paused_dev is not None:
        shift = dev_shift(model, tok, paused_dev[0], paused_dev[1], limit=len(paused_dev[1]))
        log.info("paused dev mean shift start %.1f ms, end %.1f ms", shift["start"], shift["end"])
    save(final)
    return model, step, elapsed()


def save_checkpoint(model, tok_dir: str, out: str, info: dict) -> str:
    """The official aligner layout: config.json (thinker model_type put back to the aligner's),
    model.safetensors, tokenizer files, preprocessor/generation configs."""
    from qwen3asr.tokenizer import Tokenizer

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    model.save_pretrained(out, safe_serialization=True)
    tok = Tokenizer.from_dir(tok_dir)
    write_side_files(out, "float32", {"qwen3asr_demo_aligner": info}, tok.eos_ids, tok.endoftext, max_new_tokens=256)
    restore_aligner_type(out)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "chat_template.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(out, name))
    log.info("checkpoint: %s", out)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    d = AlignerTrainConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "aligner"), help="work directory (not committed)")
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "default-aligner"), help="bundle directory to write")
    ap.add_argument("--n-train", type=int, default=d.n_train, help="training clips generated")
    ap.add_argument("--n-dev", type=int, default=d.n_dev, help="dev clips generated (training-time checks)")
    ap.add_argument("--n-test", type=int, default=d.n_test, help="test clips generated (evaluate_aligner.py)")
    ap.add_argument("--init-from", default=d.init_from,
                    help="ASR bundle of the same widths to start from (every weight but the head); '' = from scratch")
    ap.add_argument("--pretrain-minutes", type=float, default=d.pretrain_minutes,
                    help="phase 1: the audio encoder alone on the frame loss; 0 = skip")
    ap.add_argument("--minutes", type=float, default=d.minutes, help="phase 2 (whole model) time budget")
    ap.add_argument("--steps", type=int, default=d.steps, help="maximum phase-2 steps")
    ap.add_argument("--concat-share", type=float, default=d.concat_share,
                    help="share of clips joined 2-4 at a time into multi-utterance examples")
    ap.add_argument("--long-share", type=float, default=d.long_share,
                    help="chance per example of a long one (6-24 clips, up to 60 s)")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch intra-op threads")
    ap.add_argument("--paused", type=int, default=d.paused,
                    help="extra paused-speech training examples (paused_speech.py); 0 = none")
    ap.add_argument("--paused-long", type=int, default=d.paused_long,
                    help="more paused-speech training examples of at least --paused-long-seconds (the plan's "
                         "examples after the first --paused ones); 0 = none")
    ap.add_argument("--paused-long-seconds", type=float, default=d.paused_long_seconds,
                    help="shortest --paused-long example (s)")
    ap.add_argument("--lr", type=float, default=d.lr, help="peak learning rate")
    ap.add_argument("--warmup", type=int, default=d.warmup, help="warm-up steps")
    ap.add_argument("--decoder-layers", type=int, default=d.decoder_layers,
                    help="decoder layers (0 = the ASR demo's 3); more than --init-from's: new identity layers below")
    ap.add_argument("--position-weight", type=float, default=d.position_weight,
                    help="weight of the training-only loss on the audio rows' own time class (0 = none)")
    ap.add_argument("--attention-weight", type=float, default=d.attention_weight,
                    help="weight of the training-only loss on the last layer's head 0 attending to each slot's word")
    ap.add_argument("--attention-heads", type=int, default=d.attention_heads,
                    help="the attention loss on heads 0..K-1 of each layer it covers (1 = head 0)")
    ap.add_argument("--attention-layers", type=int, default=d.attention_layers,
                    help="the attention loss on the last L decoder layers (1 = the last one)")
    ap.add_argument("--attention-at", default="",
                    help="the attention loss on these LAYER:HEAD pairs instead (layer -1 the last), e.g. "
                         "--attention-at=-1:0,-2:1 (with '=': the value starts with '-'); the first is logged on "
                         "its own")
    ap.add_argument("--window-share", type=float, default=d.window_share,
                    help="chance per paused example and epoch of one more example: a window of it cut in the "
                         "middle of two pauses, as the word spans align one (0 = none)")
    ap.add_argument("--window-pieces", type=int, default=d.window_pieces,
                    help="most pieces between pauses in such a window")
    ap.add_argument("--window-shift", type=float, default=d.window_shift,
                    help="chance that a window's text starts one word off: the word before it first (placed at "
                         "its start) or without its first word")
    ap.add_argument("--eval-every", type=int, default=d.eval_every, help="steps between dev checks and snapshots")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--from-snapshot", action="store_true",
                    help="skip training: write the checkpoint and bundle from WORK/snapshot.pt (the last periodic "
                         "snapshot of a run)")
    ap.add_argument("--no-export", action="store_true", help="stop after writing the checkpoint")
    args = ap.parse_args(argv)
    for name in ("pretrain_minutes", "minutes", "concat_share", "long_share", "paused", "paused_long",
                 "paused_long_seconds", "lr", "warmup",
                 "decoder_layers", "position_weight", "attention_weight", "window_share", "window_shift"):
        if not getattr(args, name) >= 0:
            ap.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.attention_heads < 1 or args.attention_layers < 1:
        ap.error("--attention-heads and --attention-layers must be >= 1")
    try:
        attention_at = tuple(tuple(int(v) for v in p.split(":")) for p in args.attention_at.split(",")
                             if p.strip()) or None
        bad = attention_at is not None and any(len(p) != 2 for p in attention_at)
    except ValueError:
        bad = True
    if bad:
        ap.error(f"--attention-at {args.attention_at!r}: give LAYER:HEAD pairs, e.g. -1:0,-2:1")
    if args.init_from and not os.path.isfile(os.path.join(args.init_from, "model.json")):
        ap.error(f"--init-from {args.init_from}: not a bundle directory (no model.json); give the ASR demo's "
                 f"(models/default) or '' to train from scratch")
    if args.concat_share > 1 or args.long_share > 1 or args.window_share > 1 or args.window_shift > 1:
        ap.error("--concat-share, --long-share, --window-share and --window-shift are shares between 0 and 1")
    if args.window_pieces < 1:
        ap.error("--window-pieces must be >= 1")
    os.makedirs(args.work, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S",
                        handlers=[logging.StreamHandler(), logging.FileHandler(os.path.join(args.work, "train.log"))])
    cfg = replace(d, seed=args.seed, init_from=args.init_from, n_train=args.n_train, n_dev=args.n_dev,
                  n_test=args.n_test, pretrain_minutes=args.pretrain_minutes, minutes=args.minutes, steps=args.steps, concat_share=args.concat_share,
                  long_share=args.long_share, threads=args.threads,
                  paused=args.paused, paused_long=args.paused_long,
                  paused_long_seconds=args.paused_long_seconds, lr=args.lr, warmup=args.warmup, eval_every=args.eval_every,
                  decoder_layers=args.decoder_layers, position_weight=args.position_weight,
                  attention_weight=args.attention_weight, attention_heads=args.attention_heads,
                  attention_layers=args.attention_layers, attention_at=attention_at,
                  window_share=args.window_share, window_pieces=args.window_pieces, window_shift=args.window_shift)
    t0 = time.time()
    data = tt.make_data(args.work, tt.TrainConfig(seed=cfg.seed, n_train=cfg.n_train, n_dev=cfg.n_dev,
                                                  n_test=cfg.n_test))
    tok_dir = make_aligner_tokenizer(args.work)
    if args.from_snapshot:
        import torch

        snap = torch.load(os.path.join(args.work, "snapshot.pt"), weights_only=False)
        model = tt.build_model(snap["config"], cfg.seed)
        model.load_state_dict(snap["model"])
        model.eval()
        steps, seconds = snap["step"], snap["seconds"]
        log.info("from snapshot.pt (step %d)", steps)
    else:
        model, steps, seconds = train(args.work, data, tok_dir, cfg)
    settings = asdict(cfg)
    if cfg.init_from:  # no machine's path in the checkpoint
        settings["init_from"] = os.path.relpath(cfg.init_from, ROOT).replace(os.sep, "/")
    info = {"train_config": settings, "dims": asdict(model_dims(cfg)), "classify_num": CLASSIFY_NUM,
            "steps_done": steps, "train_seconds": round(seconds)}
    ckpt = save_checkpoint(model, tok_dir, os.path.join(args.work, "checkpoint"), info)
    if not args.no_export:
        from .export_onnx import DEFAULT_DURATIONS, export

        if os.path.isdir(args.out):
            shutil.rmtree(args.out)
        export(ckpt, args.out, durations=DEFAULT_DURATIONS, forms=("merged", "split"),
               decoder_dtypes=("fp32", "int8"))
    log.info("all done in %.0f s", time.time() - t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
