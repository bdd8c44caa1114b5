#!/usr/bin/env python3
"""Train the bundled tiny Qwen3-ASR (official architecture) on synthetic speech, end to end.

    python scripts/train_tiny.py --work build/tiny --out models/default

One command, fixed seeds. Stages (each skipped when its output already exists for the
same settings, so an interrupted run can be restarted):

1. data:      scripts/make_dataset.py -> WORK/data/{train,dev,test}/manifest.jsonl
2. tokenizer: scripts/make_small_tokenizer.py on the training texts -> WORK/tokenizer/
3. features:  official log-mel (qwen3asr.mel.log_mel) of every train/dev clip, once ->
              WORK/features_{split}.npz (float16, clips concatenated along time)
3b. alignment: word timings of every training clip from libespeak-ng (espeak_align.py) ->
              WORK/align_train.pkl: per clip, (token id, start s, end s) of its label tokens
4. training:  ``Qwen3ASRForConditionalGeneration`` from the official code at the small
              dimensions of ``MODEL``. Phase 1 (``--pretrain-minutes``): the audio encoder
              alone, with a frame-level cross-entropy through a training-only head (every
              audio token labelled with the label token spoken at its centre, or blank).
              Phase 2 (``--minutes``): the whole model, loss on the answer tokens
              (``language X<asr_text>text<|im_end|>``) plus the frame loss as an auxiliary.
              Phase 3 (``--finetune-minutes``): the whole model again, lower LR, half the
              examples with part of the transcript already in the assistant turn.
              In every phase a share of the clips (``--concat-share``) is joined 2-4 at a
              time into multi-utterance examples (``compose``).
5. checkpoint: ``save_pretrained`` + the official side files -> WORK/checkpoint/
6. export:    scripts/export_onnx.py -> OUT (the committed bundle)

See docs/training.md for the numbers of the committed run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Dict, List, Optional, Sequence

import numpy as np

from qwen3asr.encoder import CHUNK_FRAMES, TOKENS_PER_CHUNK
from qwen3asr.encoder import tokens_for_frames as n_audio_tokens  # (official formula)
from qwen3asr.mel import DYNAMIC_RANGE

from . import REPO_ROOT as ROOT, child_env
from .make_random_checkpoint import Preset, config_dict, write_side_files

log = logging.getLogger("train_tiny")

N_MELS = 128

@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of one run."""
    seed: int = 0
    n_train: int = 32000            # training clips generated
    n_dev: int = 300
    n_test: int = 500
    vocab_size: int = 2000          # base BPE entries before the added tokens
    # Mandarin numeral characters never merged into longer tokens: with "零四", "八一" ... as
    # tokens, digit strings lost or doubled repeated digits (session-3 model, docs/training.md).
    isolate_numerals: bool = True
    steps: int = 100000             # upper bound; the time budget below normally ends training
    minutes: float = 50.0           # phase 2 (whole model) time budget; 0 = none (schedule by steps only)
    batch_frames: int = 6000        # mel frames per batch (about 60 s of audio)
    max_batch: int = 32             # clips per batch
    lr: float = 1e-3
    min_lr_ratio: float = 0.05      # cosine decay to lr * this
    warmup: int = 200
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    forced_language: float = 0.1    # share of speech prompts with the language forced
    context_share: float = 0.1      # share of prompts with a (distracting) context text
    # Share of speech examples given as a streaming window continues them: the assistant
    # turn already holds the header and the first k text tokens (as StreamSession's prefix
    # after a rollback) and the loss is on the rest only. 0 in the committed run.
    prefix_share: float = 0.0
    # Share of training clips joined (2-4 at a time, up to concat_max_frames) into one
    # multi-utterance example, as a streaming window or a 30 s chunk of a long file holds
    # several utterances and pauses; all phases.
    concat_share: float = 0.3
    concat_max_frames: int = 3000
    # Chance that an example is a long one instead: 8-40 clips up to long_max_frames (about
    # 5 % of the clips end up in one), as a 60 s window of a long file (30 s chunks, memory 2)
    # or a whole 77 s recording decoded in one pass.
    long_share: float = 0.004
    long_max_frames: int = 8000
    # Share of speech examples cut to a random window [a, b) of their audio, as a streaming
    # window without VAD begins and ends anywhere inside utterances. The answer holds the
    # tokens whose aligned middle lies inside the window (phases 2 and 3; with prefix_share
    # the assistant turn starts with part of it, as a continued window does).
    crop_share: float = 0.25
    crop_min_frames: int = 150
    # Phase 3: the whole model again from phase 2's end, fresh optimizer, this LR and
    # prefix_share, answer loss only. 0 minutes = no phase 3.
    finetune_minutes: float = 20.0
    finetune_lr: float = 3e-4
    finetune_prefix_share: float = 0.5
    # Phase 4: the whole model again from phase 3's end with many long examples (chance
    # ``long_phase_share`` per example, about a third of the clips), cut windows and prefixes as
    # in phase 3: the first three phases leave long audio to 5 % of the clips, and the
    # session-4 model looped or skipped on a whole 77 s clip (71 % MER) and on 30 s chunks
    # with memory 2 (70 %). 0 minutes = no phase 4.
    long_phase_minutes: float = 40.0
    long_phase_share: float = 0.03
    long_phase_lr: float = 2e-4
    spec_freq_masks: int = 2        # SpecAugment: masks of up to 12 mel bins
    spec_time_masks: int = 2        # and of up to 5% of the frames
    frame_weight: float = 0.5       # auxiliary frame-level loss on the encoder output in phase 2
    pretrain_minutes: float = 30.0  # phase 1: encoder alone on the frame-level loss; 0 = skip
    pretrain_lr: float = 2e-3
    pretrain_batch_frames: int = 4000
    # Intra-op threads. Use 1 when other jobs share the machine: with helpers running (load
    # average 7) two threads ran a step 3-4x slower than one (docs/training.md).
    threads: int = 2


# What the bundle declares as the longest audio its model decodes well in one pass
# (model.json limits.one_pass_seconds; the CLI segments longer audio, with VAD when it can).
# Measured on the session-5 model over 5 long clips cut at pauses into pieces of at most L s:
# one-pass MER 7.1 % at 10 s, 13.4 % at 20 s, 18.5 % at 30 s, 27.7 % at 45 s, against 2.8 %
# for VAD segments (docs/training.md).
ONE_PASS_SECONDS = 10.0

# Small dimensions of the official architecture (see docs/training.md); text head_dim 32
# because ONNX Runtime's GroupQueryAttention needs a multiple of 16.
MODEL = Preset(audio_d_model=160, audio_layers=3, audio_heads=4, audio_ffn=512, downsample_hidden=32,
               hidden=160, layers=3, heads=4, kv_heads=2, head_dim=32, intermediate=480, mrope_section=(6, 5, 5))


# --------------------------------------------------------------------------- data


def read_manifest(split_dir: str) -> List[dict]:
    with open(os.path.join(split_dir, "manifest.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def make_data(work: str, cfg: TrainConfig) -> str:
    data = os.path.join(work, "data")
    meta = os.path.join(data, "dataset.json")
    if os.path.isfile(meta):
        with open(meta, encoding="utf-8") as f:
            m = json.load(f)
        if (m.get("seed"), m.get("counts")) == (cfg.seed, {"train": cfg.n_train, "dev": cfg.n_dev, "test": cfg.n_test}):
            log.info("data: %s exists", data)
            return data
        log.info("data: %s has other settings (%s); regenerating", data, m.get("counts"))
    # Everything derived from the data would otherwise be reused with the new labels.
    stale = [os.path.join(work, "tokenizer"), os.path.join(work, "snapshot.pt"), os.path.join(work, "align_train.pkl"),
             os.path.join(work, "encoder_snapshot.pt"), os.path.join(work, "snapshot_phase3.pt"),
             os.path.join(work, "snapshot_phase4.pt")] + \
        [os.path.join(work, f"features_{split}.npz") for split in ("train", "dev", "test")]
    for path in (p for p in stale if os.path.exists(p)):
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        log.info("data: removed %s (made from the old data)", path)
    cmd = [sys.executable, "-m", "qwen3asr_tools.make_dataset", "--out", data, "--n-train", str(cfg.n_train),
           "--n-dev", str(cfg.n_dev), "--n-test", str(cfg.n_test), "--seed", str(cfg.seed), "--jobs", "2"]
    log.info("data: %s", " ".join(cmd))
    subprocess.run(cmd, check=True, env=child_env())
    return data


def make_tokenizer(work: str, data: str, cfg: TrainConfig) -> str:
    from . import textgen
    from .make_small_tokenizer import write_small_tokenizer

    out = os.path.join(work, "tokenizer")
    settings = {"vocab_size": cfg.vocab_size, "isolate_numerals": cfg.isolate_numerals}
    marker = os.path.join(out, "train_tiny_settings.json")
    if os.path.isfile(os.path.join(out, "tokenizer_config.json")) and os.path.isfile(marker):
        with open(marker, encoding="utf-8") as f:
            if json.load(f) == settings:
                log.info("tokenizer: %s exists", out)
                return out
    texts = [r["text"] for r in read_manifest(os.path.join(data, "train")) if r["text"]]
    write_small_tokenizer(out, texts, cfg.vocab_size, textgen.CHINESE_CHARSET,
                          textgen.ZH_NUMERALS if cfg.isolate_numerals else ())
    with open(marker, "w", encoding="utf-8") as f:
        json.dump(settings, f)
    return out


def _mel_of(path: str) -> np.ndarray:
    from qwen3asr.audio import prepare_audio
    from qwen3asr.mel import log_mel

    return log_mel(prepare_audio(path), N_MELS).astype(np.float16)


def make_features(work: str, data: str, split: str) -> dict:
    """{"mel": (128, sum T) float16, "offsets": (n+1,) int64} for every clip of ``split``."""
    path = os.path.join(work, f"features_{split}.npz")
    if not os.path.isfile(path):
        from multiprocessing import Pool

        rows = read_manifest(os.path.join(data, split))
        files = [os.path.join(data, split, r["audio"]) for r in rows]
        t0 = time.time()
        with Pool(2) as pool:
            mels = pool.map(_mel_of, files, chunksize=64)
        offsets = np.cumsum([0] + [m.shape[1] for m in mels]).astype(np.int64)
        np.savez(path + ".tmp.npz", mel=np.concatenate(mels, axis=1), offsets=offsets)
        os.replace(path + ".tmp.npz", path)
        log.info("features: %s, %d clips, %d frames in %.0f s", split, len(mels), offsets[-1], time.time() - t0)
    with np.load(path) as z:
        return {"mel": z["mel"], "offsets": z["offsets"]}


def make_alignment(work: str, data: str, cfg: TrainConfig, tok_dir: str) -> list:
    """Per training clip, [(token id, start s, end s)] of its label tokens (empty for no speech)."""
    import pickle

    from . import espeak_align, make_dataset
    from qwen3asr.tokenizer import Tokenizer

    path = os.path.join(work, "align_train.pkl")
    rows = read_manifest(os.path.join(data, "train"))
    # The spans hold token ids: they belong to one tokenizer.
    with open(os.path.join(tok_dir, "merges.txt"), "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()
    if os.path.isfile(path):
        with open(path, "rb") as f:
            cached = pickle.load(f)
        if isinstance(cached, dict) and cached.get("tokenizer") == key and len(cached["spans"]) == len(rows):
            return cached["spans"]
    tok = Tokenizer.from_dir(tok_dir)
    specs = make_dataset.plan_split("train", cfg.n_train, cfg.seed)
    t0 = time.time()
    spans = []
    for spec, row in zip(specs, rows):
        if (spec.name, spec.text) != (row["audio"], row["text"]):
            raise RuntimeError(f"the training manifest does not match make_dataset's plan at {row['audio']}; "
                               f"delete {data} and run again")
        spans.append(espeak_align.token_spans(tok, spec.text, espeak_align.clip_words(spec)) if spec.text else [])
    with open(path + ".tmp", "wb") as f:
        pickle.dump({"tokenizer": key, "spans": spans}, f)
    os.replace(path + ".tmp", path)
    log.info("alignment: %d clips in %.0f s", len(spans), time.time() - t0)
    return spans


# --------------------------------------------------------------------------- model


def build_model(cfg_dict: dict, seed: int):
    import torch
    from .official_ref import official_modules

    mods = official_modules()
    torch.manual_seed(seed)
    model = mods.Qwen3ASRForConditionalGeneration(mods.Qwen3ASRConfig(**cfg_dict))
    model.to(torch.float32)
    return model


def init_audio_stem(model, seed: int) -> None:
    """Re-initialise the conv stem (conv2d1..3, conv_out) with He-normal weights.

    The official post_init draws every weight from N(0, 0.02). Through three 3x3 convs
    and conv_out that leaves the audio part of the encoder input about 1e-4 in size next
    to sinusoidal positions of about 0.5, so the model sees only positions and learns
    the text prior alone (measured: std 1.4e-4 vs 0.53; He init gives about 0.3).
    """
    import torch

    tower = model.thinker.audio_tower
    gen = torch.Generator().manual_seed(seed + 7)
    with torch.no_grad():
        for mod in (tower.conv2d1, tower.conv2d2, tower.conv2d3, tower.conv_out):
            w = mod.weight
            fan_in = w[0].numel()
            gain = 2.0 if mod is not tower.conv_out else 1.0  # GELU follows the convs
            w.copy_(torch.randn(w.shape, generator=gen) * math.sqrt(gain / fan_in))
            if mod.bias is not None:
                mod.bias.zero_()


def encode_audio(tower, mels: list):
    """Official audio tower on several clips at once: (sum N_i, hidden).

    Same steps as ``Qwen3ASRAudioEncoder.forward`` for each clip, with every 100-frame
    chunk of every clip in one conv batch and the block-diagonal attention of the official
    windows (one clip never sees another). ``forward`` itself passes no attention mask to
    its layers outside flash-attention, so it cannot run several clips together.
    """
    import torch
    import torch.nn.functional as F

    chunks, valid, win_lens = [], [], []
    window = TOKENS_PER_CHUNK * (tower.n_window_infer // CHUNK_FRAMES)
    for m in mels:
        t = m.shape[1]
        for s in range(0, t, CHUNK_FRAMES):
            c = m[:, s:s + CHUNK_FRAMES]
            valid.append(n_audio_tokens(c.shape[1]))
            if t >= CHUNK_FRAMES:  # the ragged tail of a longer clip is zero-padded; a short clip is not
                c = F.pad(c, (0, CHUNK_FRAMES - c.shape[1]))
            chunks.append(c)
        n = n_audio_tokens(t)
        win_lens += [window] * (n // window) + ([n % window] if n % window else [])
    # The conv stem runs on groups of equal width (zero padding after a short chunk would
    # change its last outputs); outputs are then padded to a common length.
    by_width: Dict[int, List[int]] = {}
    for i, c in enumerate(chunks):
        by_width.setdefault(c.shape[1], []).append(i)
    outs, order = [], []
    for idx in by_width.values():
        x = torch.stack([chunks[i] for i in idx]).unsqueeze(1)  # (n, 1, 128, width)
        x = F.gelu(tower.conv2d1(x))
        x = F.gelu(tower.conv2d2(x))
        x = F.gelu(tower.conv2d3(x))
        outs.append(x)
        order += idx
    t = max(o.shape[-1] for o in outs)
    x = torch.cat([F.pad(o, (0, t - o.shape[-1])) for o in outs])  # (chunks, C, F, t), grouped order
    x = x[torch.argsort(torch.tensor(order))]  # back to chunk order
    b, c, f, _ = x.shape
    x = tower.conv_out(x.permute(0, 3, 1, 2).reshape(b, t, c * f))
    x = x + tower.positional_embedding.positional_embedding[:t].unsqueeze(0).to(x.dtype)
    h = x[torch.arange(t).unsqueeze(0) < torch.tensor(valid).unsqueeze(1)]  # (tokens, d)
    # Attention windows as a padded batch (n_windows, longest, d) with a key-padding mask.
    lens = torch.tensor(win_lens)
    longest = int(lens.max())
    keep = torch.arange(longest).unsqueeze(0) < lens.unsqueeze(1)  # (W, longest)
    hp = h.new_zeros((len(win_lens), longest, h.shape[-1]))
    hp = hp.masked_scatter(keep.unsqueeze(-1), h)
    key_mask = keep[:, None, None, :]  # (W, 1, 1, longest), True = attend
    for layer in tower.layers:
        hp = _audio_layer(layer, hp, key_mask)
    h = hp[keep]
    h = tower.proj2(tower.act(tower.proj1(tower.ln_post(h))))
    return h


def _audio_layer(layer, h, key_mask):
    """One official audio encoder layer on padded windows (W, L, d); same arithmetic as
    Qwen3ASRAudioEncoderLayer.forward (pre-LN, scaled dot-product attention, GELU MLP)."""
    import torch.nn.functional as F

    att = layer.self_attn
    w, L, d = h.shape
    x = layer.self_attn_layer_norm(h)

    def heads(t):
        return t.view(w, L, att.num_heads, att.head_dim).transpose(1, 2)

    o = F.scaled_dot_product_attention(heads(att.q_proj(x)), heads(att.k_proj(x)), heads(att.v_proj(x)),
                                       attn_mask=key_mask, scale=att.scaling)
    h = h + att.out_proj(o.transpose(1, 2).reshape(w, L, d))
    x = layer.final_layer_norm(h)
    return h + layer.fc2(layer.activation_fn(layer.fc1(x)))


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    index: int          # clip index in the split
    frames: int         # mel frames
    text: str
    language: str       # "English", "Chinese", "None"
    text_ids: tuple     # token ids of ``text`` (empty for no speech), encoded once
    parts: tuple = ()   # clip indices of a multi-utterance example (then ``index`` is the first)
    crop: tuple = ()    # (first, end) frame of a window cut from the (joined) example

    @property
    def clips(self) -> tuple:
        return self.parts or (self.index,)


def compose(samples: List[Sample], cfg: TrainConfig, rng: random.Random, tok) -> List[Sample]:
    """One epoch's examples: a ``cfg.concat_share`` share of the clips joined 2-4 at a time
    (at most ``cfg.concat_max_frames`` frames) into multi-utterance examples, the rest alone.

    A joined example reads its parts' transcripts in order (joined as StreamSession joins
    text: a space between two non-CJK words) under the language of its first speech part
    (a window's header stays while its language changes); all no speech gives "None".
    Every clip appears exactly once per epoch.
    """
    from qwen3asr.text import join_text

    if not 0.0 <= cfg.concat_share <= 1.0:
        raise ValueError(f"concat_share must be between 0 and 1, got {cfg.concat_share}")
    if cfg.concat_share == 0 and cfg.long_share == 0:
        return list(samples)
    order = list(samples)
    rng.shuffle(order)
    out, i = [], 0
    while i < len(order):
        if rng.random() < cfg.long_share:
            k, cap = rng.randint(8, 40), cfg.long_max_frames
        # Start a joined example of k = 2-4 parts (mean 3) with probability q, so that a
        # share c = 3q / (3q + 1 - q) of the clips ends up in one: q = c / (3 - 2c).
        elif rng.random() >= cfg.concat_share / (3.0 - 2.0 * cfg.concat_share):
            out.append(order[i])
            i += 1
            continue
        else:
            k, cap = rng.randint(2, 4), cfg.concat_max_frames
        parts, frames = [order[i]], order[i].frames
        while len(parts) < k and i + len(parts) < len(order) and \
                frames + order[i + len(parts)].frames <= cap:
            parts.append(order[i + len(parts)])
            frames += parts[-1].frames
        i += len(parts)
        if len(parts) == 1:
            out.append(parts[0])
            continue
        text = ""
        for p in parts:
            text = join_text(text, p.text)
        language = next((p.language for p in parts if p.language != "None"), "None")
        out.append(Sample(parts[0].index, frames, text, language,
                          tuple(tok.encode(text)) if text else (), tuple(p.index for p in parts)))
    return out


def joined_mel(mel_all: np.ndarray, off: np.ndarray, clips: Sequence[int]) -> np.ndarray:
    """(128, frames) float32 log-mel of ``clips`` (indices into ``off``) joined along time and
    clamped again at the joined maximum - 8 (2 after scaling), as the whole audio would be: each
    clip was clamped at its own maximum (so one clip is returned as it is)."""
    if len(clips) == 1:
        return mel_all[:, off[clips[0]]:off[clips[0] + 1]].astype(np.float32)
    m = np.concatenate([mel_all[:, off[i]:off[i + 1]] for i in clips], axis=1).astype(np.float32)
    return np.maximum(m, m.max() - DYNAMIC_RANGE / 4.0)


def sample_mel(mel_all: np.ndarray, off: np.ndarray, s: Sample) -> np.ndarray:
    """(128, frames) float32 log-mel of a sample: its parts joined (``joined_mel``), then cropped."""
    m = joined_mel(mel_all, off, s.parts or (s.index,))
    return m[:, s.crop[0]:s.crop[1]] if s.crop else m


def sample_spans(spans: list, off: np.ndarray, s: Sample) -> list:
    """(token id, start s, end s) frame targets of a sample, parts shifted by their start.

    Each part keeps its own clip's tokens: where the joined answer tokenizes a later part's
    first word with a leading space (" three" vs "three"), the frame target is the form
    without it. The frame loss is auxiliary, so that small mismatch is left alone."""
    out, t = [], 0.0
    for i in s.clips:
        out += [(tid, a + t, b + t) for tid, a, b in spans[i]]
        t += (off[i + 1] - off[i]) / 100.0
    if s.crop:
        a0, b0 = s.crop[0] / 100.0, s.crop[1] / 100.0
        out = [(tid, max(a, a0) - a0, min(b, b0) - a0) for tid, a, b in out if a0 <= (a + b) / 2 < b0]
    return out


def crop_examples(examples: List[Sample], cfg: TrainConfig, rng: random.Random, tok, spans: list, off: np.ndarray,
                  clips: Sequence[Sample]) -> List[Sample]:
    """A ``cfg.crop_share`` share of the speech examples cut to a random window of at least
    ``cfg.crop_min_frames`` frames (uniform length, then uniform start).

    The window's answer: per part, the tokens whose aligned middle lies inside the window,
    decoded and stripped, the parts joined as in ``compose``; its language is that of the
    first part (``clips[i]``, the training clips) with text in the window ("None" if none
    has). A window that would cut a character's bytes apart keeps the whole example."""
    from qwen3asr.text import join_text

    if cfg.crop_share == 0:
        return examples
    out = []
    for s in examples:
        if not s.text_ids or s.frames <= cfg.crop_min_frames or rng.random() >= cfg.crop_share:
            out.append(s)
            continue
        length = rng.randint(cfg.crop_min_frames, s.frames)
        a = rng.randint(0, s.frames - length)
        a0, b0 = a / 100.0, (a + length) / 100.0
        text, language, t = "", "None", 0.0
        for i in s.clips:
            ids = [tid for tid, x, y in spans[i] if a0 <= t + (x + y) / 2 < b0]
            t += (off[i + 1] - off[i]) / 100.0
            piece = tok.decode(ids).strip() if ids else ""
            if "\ufffd" in piece:
                out.append(s)
                break
            if piece and not text:
                language = clips[i].language
            text = join_text(text, piece)
        else:
            out.append(Sample(s.index, length, text, language, tuple(tok.encode(text)) if text else (), s.parts,
                              (a, a + length)))
    return out


def make_batches(samples: List[Sample], cfg: TrainConfig, rng: random.Random) -> List[List[Sample]]:
    """Clips sorted by length (with a little noise) and cut into batches of <= batch_frames frames."""
    order = sorted(samples, key=lambda s: s.frames * (1.0 + 0.1 * rng.random()))
    batches, cur, longest = [], [], 0
    for s in order:
        longest2 = max(longest, s.frames)
        if cur and (longest2 * (len(cur) + 1) > cfg.batch_frames or len(cur) >= cfg.max_batch):
            batches.append(cur)
            cur, longest2 = [], s.frames
        cur.append(s)
        longest = longest2
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


class Collator:
    """Prompt + answer ids and loss targets for a batch."""

    def __init__(self, tokenizer, cfg: TrainConfig, context_pool: Sequence[str]):
        from qwen3asr.prompt import build_prompt

        self.tok = tokenizer
        self.cfg = cfg
        self.build_prompt = build_prompt
        self.context_pool = list(context_pool)
        # "language X<asr_text>" per language: <asr_text> is an added token, so the tokenizer
        # splits there and prefix ids + text ids equal the ids of the whole answer.
        self.prefix_ids: Dict[str, List[int]] = {}

    def answer_prefix(self, language: str) -> List[int]:
        if language not in self.prefix_ids:
            self.prefix_ids[language] = self.tok.encode(f"language {language}<asr_text>")
        return self.prefix_ids[language]

    def ids(self, s: Sample, rng: random.Random):
        """(prompt ids, answer ids): the loss is on the answer only."""
        n = n_audio_tokens(s.frames)
        context = rng.choice(self.context_pool) if rng.random() < self.cfg.context_share else ""
        forced = s.language if (s.language != "None" and rng.random() < self.cfg.forced_language) else None
        prompt = list(self.build_prompt(self.tok, n, context=context, language=forced).ids)
        header = [] if forced else self.answer_prefix(s.language)
        text = list(s.text_ids)
        if len(text) > 1 and rng.random() < self.cfg.prefix_share:
            k = rng.randint(1, len(text) - 1)
            return prompt + header + text[:k], text[k:] + [self.tok.im_end]
        return prompt, header + text + [self.tok.im_end]

    def __call__(self, batch: List[Sample], rng: random.Random):
        import torch

        seqs = [self.ids(s, rng) for s in batch]
        length = max(len(p) + len(a) for p, a in seqs)
        pad = self.tok.endoftext
        input_ids = torch.full((len(batch), length), pad, dtype=torch.long)
        labels = torch.full((len(batch), length), -100, dtype=torch.long)
        attn = torch.zeros((len(batch), length), dtype=torch.long)
        for i, (p, a) in enumerate(seqs):
            full = p + a
            input_ids[i, :len(full)] = torch.tensor(full)
            attn[i, :len(full)] = 1
            labels[i, len(p) - 1:len(full) - 1] = torch.tensor(a)  # position j predicts token j+1
        return input_ids, attn, labels


def spec_augment(mel, cfg: TrainConfig, gen):
    """Zero (the official padding value) up to 2 mel bands of <= 12 bins and 2 time spans of
    <= 5% (at most 40 frames)."""
    import torch

    mel = mel.clone()
    t = mel.shape[1]
    for _ in range(cfg.spec_freq_masks):
        w = int(torch.randint(0, 13, (1,), generator=gen))
        f0 = int(torch.randint(0, N_MELS - w + 1, (1,), generator=gen))
        mel[f0:f0 + w, :] = 0.0
    for _ in range(cfg.spec_time_masks):  # at most 0.4 s, so no mask hides a whole word of a long example
        w = int(torch.randint(0, min(max(1, t // 20), 40) + 1, (1,), generator=gen))
        t0 = int(torch.randint(0, t - w + 1, (1,), generator=gen))
        mel[:, t0:t0 + w] = 0.0
    return mel


def frame_loss(head, audio, mels, targets, blank: int):
    """Frame-level cross-entropy of ``head(audio)`` against per-clip frame targets
    (espeak_align.frame_labels); also returns (correct, total) on speech frames."""
    import torch
    import torch.nn.functional as F
    from .espeak_align import frame_labels

    y = torch.from_numpy(np.concatenate([frame_labels(t, n_audio_tokens(m.shape[1]), blank)
                                         for t, m in zip(targets, mels)]))
    logits = head(audio)
    speech = y != blank
    correct = int((logits[speech].argmax(-1) == y[speech]).sum())
    return F.cross_entropy(logits, y), correct, int(speech.sum())


def forward_loss(model, mels, input_ids, attn, labels, audio_token_id: int, frame_head=None, frame_targets=None):
    """(cross-entropy over the answer tokens, auxiliary frame loss or 0, number of answer tokens).

    frame_head: a training-only Linear(hidden, vocab + 1) on the audio encoder output (its
    last row is blank); it is not part of the saved model. frame_targets: per clip, the
    (token id, start s, end s) spans of its label (empty for no speech).
    """
    import torch
    import torch.nn.functional as F

    thinker = model.thinker
    emb = thinker.get_input_embeddings()(input_ids)
    audio = encode_audio(thinker.audio_tower, mels).to(emb.dtype)
    aux = torch.zeros(())
    if frame_head is not None:
        aux = frame_loss(frame_head, audio, mels, frame_targets, frame_head.out_features - 1)[0]
    mask = (input_ids == audio_token_id).unsqueeze(-1).expand_as(emb)
    emb = emb.masked_scatter(mask, audio)
    b, L = input_ids.shape
    pos = torch.arange(L).view(1, 1, L).expand(3, b, L)
    hidden = thinker.model(inputs_embeds=emb, attention_mask=attn, position_ids=pos, use_cache=False)[0]
    sel = labels != -100
    logits = thinker.lm_head(hidden[sel])
    return F.cross_entropy(logits, labels[sel]), aux, int(sel.sum())


# --------------------------------------------------------------------------- decoding (checks)


def greedy(model, tok, mel: np.ndarray, max_new: int = 40) -> str:
    """Greedy transcript of one clip with the official generate(); raw text incl. the language prefix."""
    import torch
    from qwen3asr.prompt import build_prompt

    prompt = build_prompt(tok, n_audio_tokens(mel.shape[1]))
    ids = torch.tensor(np.asarray(prompt.ids)).unsqueeze(0)
    feats = torch.from_numpy(mel.astype(np.float32)).unsqueeze(0)
    out = model.generate(input_ids=ids, input_features=feats,
                         feature_attention_mask=torch.ones((1, mel.shape[1]), dtype=torch.long),
                         attention_mask=torch.ones_like(ids), max_new_tokens=max_new, eos_token_id=list(tok.eos_ids),
                         pad_token_id=tok.endoftext, do_sample=False)
    seq = out.sequences[0, ids.shape[1]:].tolist()
    return tok.decode(seq, skip_special_tokens=True)


# --------------------------------------------------------------------------- training


def _param_groups(named, weight_decay: float):
    decay, no_decay = [], []
    for name, p in named:
        (no_decay if p.ndim < 2 or "norm" in name or "ln_" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _cosine(step: int, p: float, peak: float, cfg: TrainConfig) -> float:
    """Linear warm-up over the first cfg.warmup steps, then cosine decay over progress p."""
    warm = min(1.0, (step + 1) / cfg.warmup)
    return warm * peak * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def pretrain_encoder(work: str, model, head, samples, mel_all, off, spans, cfg: TrainConfig, tok,
                     log_every: int = 50):
    """Phase 1: the audio encoder and ``head`` alone on the frame-level loss for
    cfg.pretrain_minutes (about 4x more steps per minute than the whole model)."""
    import torch

    tower = model.thinker.audio_tower
    params = [("audio_tower." + n, p) for n, p in tower.named_parameters()] + \
        [("frame_head." + n, p) for n, p in head.named_parameters()]
    opt = torch.optim.AdamW(_param_groups(params, cfg.weight_decay), lr=cfg.pretrain_lr, betas=(0.9, 0.98), eps=1e-8)
    bcfg = replace(cfg, batch_frames=cfg.pretrain_batch_frames)
    rng = random.Random(cfg.seed + 1)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    budget = 60.0 * cfg.pretrain_minutes
    step, t0 = 0, time.time()
    loss_sum, correct, total = 0.0, 0, 0
    tower.train()
    while time.time() - t0 < budget:
        for batch in make_batches(compose(samples, cfg, rng, tok), bcfg, rng):
            p = (time.time() - t0) / budget
            if p >= 1.0:
                break
            for g in opt.param_groups:
                g["lr"] = _cosine(step, p, cfg.pretrain_lr, cfg)
            mels = [spec_augment(torch.from_numpy(sample_mel(mel_all, off, s)), cfg, gen) for s in batch]
            audio = encode_audio(tower, mels)
            loss, c, n = frame_loss(head, audio, mels, [sample_spans(spans, off, s) for s in batch],
                                    head.out_features - 1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_([q for _, q in params], cfg.clip_norm)
            opt.step()
            step += 1
            loss_sum, correct, total = loss_sum + loss.item(), correct + c, total + n
            if step % log_every == 0:
                log.info("encoder step %d progress %.3f frame loss %.3f speech-frame accuracy %.3f  %.0f s", step, p,
                         loss_sum / log_every, correct / max(1, total), time.time() - t0)
                loss_sum, correct, total = 0.0, 0, 0
            if step % 1000 == 0:
                torch.save({"step": step, "tower": tower.state_dict(), "head": head.state_dict()},
                           os.path.join(work, "encoder_snapshot.pt"))
    log.info("encoder pre-training done: %d steps, %.0f s", step, time.time() - t0)
    return step


def train(work: str, data: str, tok_dir: str, cfg: TrainConfig, dims: Preset, log_every: int = 50,
          init_state: Optional[dict] = None, snapshot: str = "snapshot.pt"):
    """Phase 1 (if cfg.pretrain_minutes) and the whole-model loop, from ``init_state`` (a
    state dict) when given (phase 3); periodic and final snapshots go to WORK/``snapshot``."""
    import torch
    from qwen3asr.tokenizer import Tokenizer

    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    tok = Tokenizer.from_dir(tok_dir)
    names = ["<|audio_pad|>", "<|audio_start|>", "<|audio_end|>", "user"]
    ids = {n: tok.token_id(n) for n in names}
    vocab_rows = int(math.ceil(tok.vocab_size / 64) * 64)
    if dims.head_dim % 16:
        raise ValueError(f"text head_dim {dims.head_dim}: the exported decoder uses ONNX Runtime's "
                         "GroupQueryAttention, which needs a multiple of 16")
    cfg_dict = config_dict(dims, vocab_size=vocab_rows, token_ids=ids)
    model = build_model(cfg_dict, cfg.seed)
    init_audio_stem(model, cfg.seed)
    if init_state is not None:
        model.load_state_dict(init_state)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model: %d parameters (%s); vocab rows %d (tokenizer %d)", n_params, dims, vocab_rows, tok.vocab_size)

    rows = read_manifest(os.path.join(data, "train"))
    feats = make_features(work, data, "train")
    mel_all, off = feats["mel"], feats["offsets"]
    samples = [Sample(i, int(off[i + 1] - off[i]), r["text"], r["language"], tuple(tok.encode(r["text"])))
               for i, r in enumerate(rows)]
    contexts = [r["text"] for r in rows if r["text"]][:2000]
    collate = Collator(tok, cfg, contexts)

    dev_rows = read_manifest(os.path.join(data, "dev"))
    dev = make_features(work, data, "dev")

    # Frame-level head on the encoder output (training only). With utterance-level losses
    # alone (answer cross-entropy, or CTC) the encoder stayed on the blank + prior plateau
    # for whole 15- and 40-minute runs; word timings from espeak-ng give it a direct target.
    spans = make_alignment(work, data, cfg, tok_dir)
    frame_head = torch.nn.Linear(dims.hidden, vocab_rows + 1)
    if cfg.pretrain_minutes > 0:
        pretrain_encoder(work, model, frame_head, samples, mel_all, off, spans, cfg, tok, log_every)
    if cfg.frame_weight == 0:
        frame_head = None  # no auxiliary loss: do not compute it
    named = list(model.named_parameters()) + \
        ([("frame_head." + n, q) for n, q in frame_head.named_parameters()] if frame_head is not None else [])
    opt = torch.optim.AdamW(_param_groups(named, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8)

    def progress(step: int) -> float:
        """Fraction of the run done: by steps, or by the time budget when that comes first."""
        p = step / cfg.steps
        if cfg.minutes > 0:
            p = max(p, (time.time() - t0) / (60.0 * cfg.minutes))
        return min(1.0, p)

    def lr_at(step: int) -> float:
        return _cosine(step, progress(step), cfg.lr, cfg)

    rng = random.Random(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, epoch, t0 = 0, 0, time.time()
    loss_sum, tok_sum, aux_sum, n_batches = 0.0, 0, 0.0, 0
    model.train()
    done = False
    while not done:
        epoch += 1
        examples = crop_examples(compose(samples, cfg, rng, tok), cfg, rng, tok, spans, off, samples)
        for batch in make_batches(examples, cfg, rng):
            done = progress(step) >= 1.0
            if done:
                break
            input_ids, attn, labels = collate(batch, rng)
            mels = [spec_augment(torch.from_numpy(sample_mel(mel_all, off, s)), cfg, gen) for s in batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            ce, aux, n_tok = forward_loss(model, mels, input_ids, attn, labels, ids["<|audio_pad|>"], frame_head,
                                          [sample_spans(spans, off, s) for s in batch])
            loss = ce + cfg.frame_weight * aux
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
            opt.step()
            step += 1
            loss_sum += ce.item() * n_tok
            aux_sum += aux.item()
            n_batches += 1
            tok_sum += n_tok
            if step % log_every == 0:
                log.info("step %d epoch %d progress %.3f loss %.4f frame %.3f lr %.2e  %.0f s", step, epoch,
                         progress(step), loss_sum / max(1, tok_sum), aux_sum / max(1, n_batches), lr_at(step - 1),
                         time.time() - t0)
                loss_sum, tok_sum, aux_sum, n_batches = 0.0, 0, 0.0, 0
            if step % 500 == 0 or step == 250:
                torch.save({"step": step, "model": model.state_dict(), "config": cfg_dict},
                           os.path.join(work, snapshot))
                model.eval()
                with torch.no_grad():
                    errs = 0
                    n_check = 10
                    for i in range(n_check):
                        j = (i * 7) % len(dev_rows)
                        r = dev_rows[j]
                        got = greedy(model, tok, dev["mel"][:, dev["offsets"][j]:dev["offsets"][j + 1]])
                        want = f"language {r['language']}<asr_text>{r['text']}"
                        errs += got != want
                        if i < 3:
                            log.info("  dev %r -> %r", want, got)
                    log.info("step %d: %d/%d dev clips exact", step, n_check - errs, n_check)
                model.train()
    model.eval()
    torch.save({"step": step, "model": model.state_dict(), "config": cfg_dict}, os.path.join(work, snapshot))
    log.info("training done: %d steps, %d epochs, %.0f s", step, epoch, time.time() - t0)
    return model, step, time.time() - t0


def phase_config(cfg: TrainConfig, phase: int) -> TrainConfig:
    """The settings of phase 3 (prefixes, answer loss only) or 4 (that plus many long examples),
    each from the previous phase's weights with a fresh optimizer."""
    ft = replace(cfg, minutes=cfg.finetune_minutes, lr=cfg.finetune_lr, prefix_share=cfg.finetune_prefix_share,
                 frame_weight=0.0, pretrain_minutes=0.0, steps=TrainConfig.steps)
    if phase == 3:
        return ft
    if phase == 4:
        return replace(ft, minutes=cfg.long_phase_minutes, lr=cfg.long_phase_lr, long_share=cfg.long_phase_share)
    raise ValueError(f"phase {phase}: only phases 3 and 4 derive their settings")


def save_checkpoint(model, tok_dir: str, out: str, info: dict) -> str:
    """Official layout: config.json, model.safetensors, tokenizer files, preprocessor/generation configs."""
    from qwen3asr.tokenizer import Tokenizer

    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    model.save_pretrained(out, safe_serialization=True)
    tok = Tokenizer.from_dir(tok_dir)
    write_side_files(out, "float32", {"qwen3asr_tiny": info}, tok.eos_ids, tok.endoftext, max_new_tokens=256)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "chat_template.json"):
        shutil.copy(os.path.join(tok_dir, name), os.path.join(out, name))
    log.info("checkpoint: %s", out)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "tiny"), help="work directory (not committed)")
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "default"), help="bundle directory to write")
    ap.add_argument("--steps", type=int, default=TrainConfig.steps, help="maximum optimizer steps")
    ap.add_argument("--minutes", type=float, default=TrainConfig.minutes,
                    help="phase 2 (whole model) time budget in minutes (LR schedule follows it); 0 = by --steps only")
    ap.add_argument("--pretrain-minutes", type=float, default=TrainConfig.pretrain_minutes,
                    help="phase 1 budget: the audio encoder alone on the frame-level loss; 0 = skip")
    ap.add_argument("--prefix-share", type=float, default=TrainConfig.prefix_share,
                    help="share of speech examples whose assistant turn starts with part of the transcript")
    ap.add_argument("--concat-share", type=float, default=TrainConfig.concat_share,
                    help="share of clips joined into multi-utterance examples (all phases); 0 = none")
    ap.add_argument("--crop-share", type=float, default=TrainConfig.crop_share,
                    help="share of speech examples cut to a random window (phases 2 and 3); 0 = none")
    ap.add_argument("--long-share", type=float, default=TrainConfig.long_share,
                    help="chance that an example joins 8-40 clips (up to 80 s); 0 = none")
    ap.add_argument("--finetune-minutes", type=float, default=TrainConfig.finetune_minutes,
                    help="phase 3 budget (0 = none): the whole model from phase 2's weights with prefix examples; "
                         "with --from-snapshot it starts from WORK/snapshot.pt")
    ap.add_argument("--long-phase-minutes", type=float, default=TrainConfig.long_phase_minutes,
                    help="phase 4 budget (0 = none): the whole model from phase 3's weights with many long examples")
    ap.add_argument("--phase4-only", action="store_true",
                    help="skip phases 1-3: run phase 4 from WORK/snapshot_phase3.pt (a finished phase 3)")
    ap.add_argument("--threads", type=int, default=TrainConfig.threads, help="torch intra-op threads")
    ap.add_argument("--n-train", type=int, default=TrainConfig.n_train)
    ap.add_argument("--seed", type=int, default=TrainConfig.seed)
    ap.add_argument("--no-export", action="store_true", help="stop after writing the checkpoint")
    ap.add_argument("--from-snapshot", action="store_true",
                    help="skip training: write the checkpoint (and bundle) from WORK/snapshot.pt, the last "
                         "periodic snapshot of an interrupted run")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    cfg = TrainConfig(seed=args.seed, steps=args.steps, minutes=args.minutes, n_train=args.n_train,
                      pretrain_minutes=args.pretrain_minutes, threads=args.threads,
                      prefix_share=args.prefix_share, finetune_minutes=args.finetune_minutes,
                      concat_share=args.concat_share, crop_share=args.crop_share, long_share=args.long_share,
                      long_phase_minutes=args.long_phase_minutes)
    t0 = time.time()
    os.makedirs(args.work, exist_ok=True)
    data = make_data(args.work, cfg)
    tok_dir = make_tokenizer(args.work, data, cfg)
    if args.from_snapshot or args.phase4_only:
        import torch

        name = "snapshot_phase3.pt" if args.phase4_only else "snapshot.pt"
        snap = torch.load(os.path.join(args.work, name), weights_only=False)
        model = build_model(snap["config"], cfg.seed)
        model.load_state_dict(snap["model"])
        model.eval()
        train_s, steps_done = float("nan"), snap["step"]
        log.info("starting from %s (step %d)", name, steps_done)
    else:
        model, steps_done, train_s = train(args.work, data, tok_dir, cfg, MODEL)
    if cfg.finetune_minutes > 0 and not args.phase4_only:
        log.info("phase 3: %.0f min from the phase-2 weights, LR %.1e, prefix share %.2f", cfg.finetune_minutes,
                 cfg.finetune_lr, cfg.finetune_prefix_share)
        model, steps3, train3 = train(args.work, data, tok_dir, phase_config(cfg, 3), MODEL,
                                      init_state=model.state_dict(), snapshot="snapshot_phase3.pt")
        steps_done, train_s = (steps_done, steps3), train_s + train3
    if cfg.long_phase_minutes > 0:
        log.info("phase 4: %.0f min from the phase-3 weights, LR %.1e, long share %.3f", cfg.long_phase_minutes,
                 cfg.long_phase_lr, cfg.long_phase_share)
        model, steps4, train4 = train(args.work, data, tok_dir, phase_config(cfg, 4), MODEL,
                                      init_state=model.state_dict(), snapshot="snapshot_phase4.pt")
        steps_done = (steps_done if isinstance(steps_done, tuple) else (steps_done,)) + (steps4,)
        train_s = train4 if math.isnan(train_s) else train_s + train4
    info = {"train_config": asdict(cfg), "dims": asdict(MODEL), "steps_done": steps_done,
            "train_seconds": None if math.isnan(train_s) else round(train_s)}
    ckpt = save_checkpoint(model, tok_dir, os.path.join(args.work, "checkpoint"), info)
    if not args.no_export:
        from .export_onnx import DEFAULT_DURATIONS, export

        if os.path.isdir(args.out):
            shutil.rmtree(args.out)
        export(ckpt, args.out, durations=DEFAULT_DURATIONS, forms=("merged", "split"), decoder_dtypes=("fp32", "int8"))
        from qwen3asr.bundle import update_manifest

        update_manifest(args.out, lambda m: m.setdefault("limits", {}).update(one_pass_seconds=ONE_PASS_SECONDS))
    log.info("all done in %.0f s (training %.0f s)", time.time() - t0, train_s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
