"""The aligner's word units and its input text after the audio block.

Word units are those of the official ``Qwen3ForceAlignProcessor.encode_timestamp``
(qwen-asr 0.0.6), and the item texts the official ``align()`` returns:

- Japanese: the words of the ``nagisa`` tagger (optional package: ``pip install
  'qwen3asr-rk[ja]'``). nagisa normalises what it returns (NFKC-like: half-width katakana
  become full-width, "ＡＢＣ" becomes "ABC") and gives every digit its own word.
- Korean: every whitespace piece is cut once, after its longest prefix of two or more
  characters that is an entry of the official Korean word list (data/korean_dict_jieba.dict);
  a piece with no such prefix stays whole ("학생입니다" -> "학생", "입니다"). This is soynlp's
  ``LTokenizer`` with the official scores (1.0 for every entry), written here so that Korean
  needs no extra package.
- Every other language, Chinese included: whitespace pieces (``str.split``).

Each word is then cleaned to letters (Unicode L*), numbers (N*) and the ASCII apostrophe,
so punctuation, symbols, emoji and combining marks are dropped ("state-of-the-art" ->
"stateoftheart", "don’t" -> "dont", decomposed "é" -> "e"); words that clean to nothing
are dropped. Outside Japanese and Korean, every CJK ideograph of the official ranges
(``IDEOGRAPH_RANGES``) becomes a word of its own and the characters between ideographs
stay together ("Hello世界ok" -> "Hello", "世", "界", "ok").

The aligner's input is ``<|audio_start|>`` audio ``<|audio_end|>`` followed by
``w1<timestamp><timestamp>w2<timestamp><timestamp>...wN<timestamp><timestamp>``: words
concatenated with no spaces, so each word is tokenized on its own and gets no leading-space
token ("Hello" -> 9707). An empty word list still has its two slots.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import FrozenSet, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import Qwen3ASRError
from ..languages import LanguageError, resolve_language
from ..tokenizer import Tokenizer, TokenizerError

logger = logging.getLogger(__name__)

# support_languages of the real Qwen3-ForcedAligner-0.6B config.json, in its order.
ALIGNER_LANGUAGES: Tuple[str, ...] = (
    "Chinese", "Cantonese", "English", "German", "Spanish", "French", "Italian", "Portuguese", "Russian",
    "Korean", "Japanese",
)

TIMESTAMP = "<timestamp>"  # the slot token (id 151705 in the real tokenizer, resolved by name)
SLOTS_PER_WORD = 2  # start, end

# Code points that are one word each outside Japanese and Korean (inclusive ranges, as in the
# official code: Unified Ideographs, Extensions A to E, Compatibility Ideographs). Extension F
# and later, and the Compatibility Supplement, are not among them.
IDEOGRAPH_RANGES: Tuple[Tuple[int, int], ...] = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
)
_IDEOGRAPH_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in IDEOGRAPH_RANGES)
# one ideograph, or a run of anything else
_IDEOGRAPH_OR_RUN = re.compile(f"[{_IDEOGRAPH_CLASS}]|[^{_IDEOGRAPH_CLASS}]+")

KOREAN_WORD_LIST = "korean_dict_jieba.dict"  # in qwen3asr/data/
_KOREAN_MIN_PREFIX = 2  # the shortest head a Korean piece may be cut after


class OptionalDependencyError(Qwen3ASRError, ImportError):
    """An optional package that this language needs is not installed; the message says which."""


def is_kept(ch: str) -> bool:
    """True for the characters a word keeps: letters (L*), numbers (N*) and "'" (U+0027)."""
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def clean_word(piece: str) -> str:
    """``piece`` without the characters ``is_kept`` rejects."""
    return "".join(ch for ch in piece if is_kept(ch))


def is_ideograph(ch: str) -> bool:
    """True for a CJK ideograph of the official ranges (one word on its own)."""
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in IDEOGRAPH_RANGES)


def _space_words(text: str) -> List[str]:
    words: List[str] = []
    for piece in text.split():
        kept = clean_word(piece)
        if kept:
            words.extend(_IDEOGRAPH_OR_RUN.findall(kept))
    return words


def _japanese_words(text: str) -> List[str]:
    try:
        import nagisa
    except ImportError as exc:
        raise OptionalDependencyError(
            "Japanese word units come from the nagisa tagger, which is not installed: "
            "pip install 'qwen3asr-rk[ja]'"
        ) from exc
    return [w for w in (clean_word(t) for t in nagisa.tagging(text).words) if w]


@functools.lru_cache(maxsize=1)
def korean_word_list() -> Tuple[FrozenSet[str], int]:
    """(entries, length of the longest entry) of the official Korean word list.

    An entry is the first whitespace-separated field of a non-blank line.
    """
    entries = set()
    path = importlib.resources.files("qwen3asr") / "data" / KOREAN_WORD_LIST
    with path.open("r", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if fields:
                entries.add(fields[0])
    logger.debug("Korean word list: %d entries", len(entries))
    return frozenset(entries), max(map(len, entries))


def split_korean_piece(piece: str) -> Tuple[str, ...]:
    """The one or two parts of a whitespace piece of Korean text (see the module docstring)."""
    entries, longest = korean_word_list()
    for cut in range(min(len(piece), longest), _KOREAN_MIN_PREFIX - 1, -1):
        if piece[:cut] in entries:
            return (piece[:cut], piece[cut:]) if cut < len(piece) else (piece,)
    return (piece,)


def _korean_words(text: str) -> List[str]:
    words: List[str] = []
    for piece in text.split():
        for part in split_korean_piece(piece):
            kept = clean_word(part)
            if kept:
                words.append(kept)
    return words


def align_words(text: str, language: str) -> List[str]:
    """The aligner's word units of ``text``, in order (the item texts of the official ``align()``).

    language: a name or BCP-47 code that ``qwen3asr.languages.resolve_language`` accepts
    ("Japanese", "ja", "korean"). Languages outside ``ALIGNER_LANGUAGES`` take the whitespace
    path, as in the official code; whether to align them at all is the caller's decision.
    Raises LanguageError for a missing or unknown language and OptionalDependencyError when
    Japanese is asked for without nagisa installed.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    name = resolve_language(language)
    if name is None:
        raise LanguageError("the aligner needs the language of the text; give a name such as 'English' or a code")
    if name == "Japanese":
        return _japanese_words(text)
    if name == "Korean":
        return _korean_words(text)
    return _space_words(text)


def slot_text(words: Sequence[str]) -> str:
    """The aligner's text after ``<|audio_end|>``: each word followed by two ``<timestamp>``."""
    slots = TIMESTAMP * SLOTS_PER_WORD
    return "".join(w + slots for w in words) if words else slots


@dataclass(frozen=True)
class AlignerText:
    """The aligner's input after the audio block, for one text."""

    words: Tuple[str, ...]  # word units, in order
    ids: np.ndarray  # (L,) int64, read-only: w1 <ts> <ts> w2 <ts> <ts> ... wN <ts> <ts>
    slots: np.ndarray  # (2 * max(N, 1),) int64, read-only: indices into ids of the <timestamp> tokens;
    #                    slot 2i holds word i's start, 2i + 1 its end (an empty text keeps its two slots)

    @property
    def n_slots(self) -> int:
        return int(self.slots.shape[0])


def encode_words(tokenizer: Tokenizer, words: Sequence[str]) -> AlignerText:
    """Token ids of ``slot_text(words)``, as the official processor tokenizes it.

    tokenizer: an aligner tokenizer (it must know ``<timestamp>``). Raises TokenizerError
    when it does not, and ValueError when a word holds a ``<timestamp>`` of its own.
    """
    words = tuple(words)
    try:
        ts = tokenizer.token_id(TIMESTAMP)
    except TokenizerError as exc:
        raise TokenizerError(
            f"this tokenizer has no {TIMESTAMP} token: it is not a Qwen3-ForcedAligner tokenizer ({exc})"
        ) from exc
    ids = np.array(tokenizer.encode(slot_text(words)), dtype=np.int64)
    slots = np.flatnonzero(ids == ts).astype(np.int64)
    expected = SLOTS_PER_WORD * max(len(words), 1)
    if slots.shape[0] != expected:
        raise ValueError(f"{len(words)} words should give {expected} {TIMESTAMP} slots, got {slots.shape[0]}; "
                         f"a word must not contain {TIMESTAMP!r}")
    ids.flags.writeable = False
    slots.flags.writeable = False
    return AlignerText(words=words, ids=ids, slots=slots)


def aligner_text(tokenizer: Tokenizer, text: str, language: Optional[str]) -> AlignerText:
    """``encode_words(tokenizer, align_words(text, language))``."""
    return encode_words(tokenizer, align_words(text, language))
