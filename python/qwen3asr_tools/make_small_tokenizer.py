#!/usr/bin/env python3
"""Train a small Qwen2-style byte-level BPE for the bundled tiny Qwen3-ASR model.

The real Qwen vocabulary has 151936 rows: at the widths a CPU-trained model can afford,
its embedding table alone would outweigh the 25 MB budget of the committed bundle, and
almost all of its rows would never be trained. So the tiny model gets its own BPE,
trained on the training texts, in exactly the real checkpoint's formats:

- same pre-tokenizer (NFC + the Qwen2 split regex + byte-level alphabet, so any text,
  including languages never trained, still encodes);
- ``vocab.json`` + ``merges.txt`` (HF "slow" files, no tokenizer.json);
- ``tokenizer_config.json`` with the SAME added-token strings and special flags as the
  real checkpoint (``<|endoftext|>``, ``<|im_start|>``, ..., ``<|audio_pad|>``,
  ``<asr_text>``), in the same order, placed right after the base vocabulary
  (real id 151643 + k becomes ``base_size + k``);
- the official ``chat_template.json``.

Every character of the Mandarin label set is forced to be a single token, and the
strings of the prompt/answer format ("system", "user", "assistant", "language English",
...) are part of the training text so they get whole tokens.

Usage: python scripts/make_small_tokenizer.py --texts TEXTS.txt --out DIR [--vocab-size 2000]
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Dict, Iterable, List, Optional, Sequence

from qwen3asr.bpe import piece_bytes, pipeline  # the runtime's pipeline
from qwen3asr.languages import SUPPORTED_LANGUAGES

from .make_tokenizer_files import ADDED_TOKENS, FIRST_ADDED_ID, tokenizer_config, write_tokenizer_dir

logger = logging.getLogger(__name__)

DEFAULT_VOCAB_SIZE = 2000  # base BPE entries (256 byte symbols + merges), before added tokens
# Prompt and answer strings, repeated so their pieces are merged early.
FORMAT_TEXTS = (["system", "user", "assistant", "\n"]
                + [f"language {name}" for name in SUPPORTED_LANGUAGES] + ["language None"])
FORMAT_REPEAT = 200


def train_bpe(texts: Sequence[str], vocab_size: int, required_chars: Iterable[str] = (),
              isolated_chars: Iterable[str] = ()):
    """Train the byte-level BPE; returns (vocab {token: id}, merges [(a, b)]).

    required_chars: characters that must each end up as one token; raises RuntimeError
    naming them if the vocabulary is too small for that.
    isolated_chars: characters never merged with anything else (each stays a token of its
    own in every text): merges producing a longer token that holds one are dropped, with
    every merge built on a dropped token, and the ids renumbered. The vocabulary ends up
    smaller than ``vocab_size`` by the number dropped. Raises RuntimeError if a text still
    encodes such a character inside a longer token.
    """
    from tokenizers import pre_tokenizers, trainers

    tok = pipeline()  # the runtime's normalizer and pre-tokenizer, an empty BPE model
    required = sorted(set(required_chars))
    # Each required character is also given alone, often enough to be merged into one token.
    corpus: List[str] = list(texts) + FORMAT_TEXTS * FORMAT_REPEAT + [c for c in required for _ in range(50)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus, trainer=trainer)
    data = json.loads(tok.to_str())
    vocab: Dict[str, int] = data["model"]["vocab"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    not_single = [c for c in required if len(tok.encode(c).ids) != 1]
    if not_single:
        raise RuntimeError(f"{len(not_single)} required characters are not single tokens with vocab_size "
                           f"{vocab_size} (e.g. {''.join(not_single[:10])}); raise --vocab-size")
    isolated = sorted(set(isolated_chars))
    if isolated:
        vocab, merges = _isolate(vocab, merges, isolated)
        tok = pipeline(vocab, merges)
        for text in texts:
            pieces = [piece_bytes(t) for t in tok.encode(text).tokens]
            for c in isolated:
                if c in text and text.count(c) != pieces.count(c.encode("utf-8")):
                    raise RuntimeError(f"{c!r} is not a token of its own in the encoding of {text!r}")
    return vocab, merges


def _isolate(vocab: Dict[str, int], merges: List[tuple], isolated: Sequence[str]):
    """Drop the merges whose token holds an isolated character and more, and those built on a
    dropped token; renumber the vocabulary contiguously in the old order."""
    needles = [c.encode("utf-8") for c in isolated]
    dropped, kept = set(), []
    for a, b in merges:
        piece = a + b
        raw = piece_bytes(piece)
        if a in dropped or b in dropped or any(n in raw and raw != n for n in needles):
            dropped.add(piece)
        else:
            kept.append((a, b))
    order = sorted((i, p) for p, i in vocab.items() if p not in dropped)
    new_vocab = {p: k for k, (_, p) in enumerate(order)}
    logger.info("isolated %d characters: %d merges dropped", len(isolated), len(dropped))
    return new_vocab, kept


def small_tokenizer_config(base_size: int, aligner: bool = False) -> dict:
    """tokenizer_config.json of the real layout with the added tokens renumbered (``aligner``:
    the Qwen3-ForcedAligner's added tokens, ``<timestamp>`` included)."""
    cfg = tokenizer_config(aligner)
    shift = base_size - FIRST_ADDED_ID
    cfg["added_tokens_decoder"] = {str(int(k) + shift): v for k, v in cfg["added_tokens_decoder"].items()}
    return cfg


def write_small_tokenizer(out_dir: str, texts: Sequence[str], vocab_size: int = DEFAULT_VOCAB_SIZE,
                          required_chars: Iterable[str] = (), isolated_chars: Iterable[str] = ()) -> None:
    """Write vocab.json, merges.txt, tokenizer_config.json, chat_template.json into ``out_dir``."""
    vocab, merges = train_bpe(texts, vocab_size, required_chars, isolated_chars)
    base = len(vocab)
    if sorted(vocab.values()) != list(range(base)):
        raise RuntimeError("trained vocabulary ids are not contiguous")
    write_tokenizer_dir(out_dir, vocab, merges, small_tokenizer_config(base))
    logger.info("small BPE: %d base tokens, %d merges, %d added tokens (ids %d..%d) in %s",
                base, len(merges), len(ADDED_TOKENS), base, base + len(ADDED_TOKENS) - 1, out_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", required=True, help="UTF-8 file, one training text per line")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from . import textgen

    with open(args.texts, encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f if line.strip()]
    write_small_tokenizer(args.out, texts, args.vocab_size, textgen.CHINESE_CHARSET)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
