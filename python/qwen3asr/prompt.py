"""Prompt building and output parsing for Qwen3-ASR.

The prompt is the official one (system block always present, even with empty context)::

    <|im_start|>system\\n{context}<|im_end|>\\n<|im_start|>user\\n
    <|audio_start|>{<|audio_pad|> x N}<|audio_end|><|im_end|>\\n<|im_start|>assistant\\n

(without the line break after ``user\\n``). Forcing a language appends
``language {Name}<asr_text>`` so the model writes only the transcript.

The compact prompt (``compact=True``, the ``compact_suffix`` of the reference design,
docs/reference_design.md; off by default because it departs from the official template) drops the system turn and the
language header: ``<|im_start|>user\\n<|audio_start|>...<|audio_end|><|im_end|>\\n
<|im_start|>assistant\\n<asr_text>``; the model then writes only the transcript, with no
language detection. It saves ``compact_savings()`` prefill tokens per decoder run.

The model answers ``language Chinese<asr_text>...text...`` (or ``language None<asr_text>``
for no speech). ``parse_asr_output`` splits that the way the official package does,
after collapsing runaway repetitions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .languages import SUPPORTED_LANGUAGES, LanguageError, normalize_language_name, resolve_language, validate_language
from .tokenizer import ASR_TEXT, AUDIO_END, AUDIO_PAD, AUDIO_START, IM_END, IM_START, Tokenizer

logger = logging.getLogger(__name__)

REPEAT_THRESHOLD = 20  # a unit repeated more than this many times is runaway output
MAX_PATTERN_LEN = 20  # longest repeated pattern (characters) that is collapsed
_LANG_PREFIX = "language "


@dataclass(frozen=True)
class Prompt:
    """Token ids of one request's prompt."""

    ids: np.ndarray  # (L,) int64, read-only
    audio_start: int  # index in ids of the first <|audio_pad|>
    n_audio: int  # number of <|audio_pad|> tokens (= audio encoder output rows)
    language: Optional[str] = None  # forced language (canonical name) or None
    context: str = field(default="", repr=False)  # system text

    @property
    def audio_slice(self) -> slice:
        """Rows of the embedded prompt that the audio encoder output replaces."""
        return slice(self.audio_start, self.audio_start + self.n_audio)

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def prompt_text(context: str = "", language: Optional[str] = None, n_audio_tokens: int = 1) -> str:
    """The prompt as a string, with ``n_audio_tokens`` audio pads (language is used as given)."""
    text = (
        f"{IM_START}system\n{context}{IM_END}\n{IM_START}user\n"
        f"{AUDIO_START}{AUDIO_PAD * n_audio_tokens}{AUDIO_END}{IM_END}\n{IM_START}assistant\n"
    )
    if language:
        text += f"{_LANG_PREFIX}{language}{ASR_TEXT}"
    return text


def _prompt_parts(context: str, language: Optional[str], compact: bool) -> Tuple[str, str]:
    """The prompt's text before the audio pads (through ``<|audio_start|>``) and after them."""
    if compact:
        return f"{IM_START}user\n{AUDIO_START}", f"{AUDIO_END}{IM_END}\n{IM_START}assistant\n{ASR_TEXT}"
    tail = f"{AUDIO_END}{IM_END}\n{IM_START}assistant\n"
    if language:
        tail += f"{_LANG_PREFIX}{language}{ASR_TEXT}"
    return f"{IM_START}system\n{context}{IM_END}\n{IM_START}user\n{AUDIO_START}", tail


def fixed_prompt_texts() -> List[str]:
    """Every text ``build_prompt`` encodes when there is no context (both prompts, no language and
    each supported one): what a bundle's token table holds, so that such a prompt needs no BPE."""
    texts = list(_prompt_parts("", None, True))
    for lang in (None,) + SUPPORTED_LANGUAGES:
        texts += [t for t in _prompt_parts("", lang, False) if t not in texts]
    return texts


def build_prompt(
    tokenizer: Tokenizer, n_audio_tokens: int, context: str = "", language: Optional[str] = None,
    compact: bool = False,
) -> Prompt:
    """Token ids of the official prompt for ``n_audio_tokens`` audio rows.

    language: None/"" to let the model detect it, else a supported name (any case) or
    BCP-47 code; raises LanguageError (a ValueError) listing accepted names otherwise.
    context: free system text (hot words, domain); may be empty.
    compact: the compact prompt (module docstring): no system turn (context must be empty),
    the answer starting at ``<asr_text>``; ``language`` is then only reported, not prompted.
    """
    if isinstance(n_audio_tokens, bool) or not isinstance(n_audio_tokens, (int, np.integer)) or n_audio_tokens < 1:
        raise ValueError(f"n_audio_tokens must be a positive int, got {n_audio_tokens!r}")
    if context is None:
        context = ""
    if not isinstance(context, str):
        raise TypeError(f"context must be str, got {type(context).__name__}")
    lang = resolve_language(language)
    n = int(n_audio_tokens)
    # Added tokens split the text into independent segments, so encoding the part up to
    # <|audio_start|> and the part from <|audio_end|> separately gives the same ids as
    # encoding the whole string; the N pads need no tokenization.
    if compact and context:
        raise ValueError("the compact prompt has no system turn to carry context; drop one of them")
    head_text, tail_text = _prompt_parts(context, lang, compact)
    head = tokenizer.encode(head_text)
    tail = tokenizer.encode(tail_text)
    pad = tokenizer.audio_pad
    if pad in head:
        raise ValueError(f"context must not contain {AUDIO_PAD!r}: it would be taken for audio")
    ids = np.array(head + [pad] * n + tail, dtype=np.int64)
    ids.flags.writeable = False
    return Prompt(ids=ids, audio_start=len(head), n_audio=n, language=lang, context=context)


def answer_header(tokenizer: Tokenizer, language: Optional[str]) -> list:
    """The ids of ``language {Name}<asr_text>``, the header the model writes before the transcript
    when the language is not forced (the ids a forced language appends to the prompt); [] for
    None. A streamed transcript's draft starts with it (qwen3asr.streaming.final)."""
    if language is None:
        return []
    base = build_prompt(tokenizer, 1).ids
    full = build_prompt(tokenizer, 1, language=language).ids
    return [int(t) for t in full[len(base):]]


# --------------------------------------------------------------------------- output


def _collapse_char_runs(s: str, threshold: int) -> str:
    """Runs of one character longer than ``threshold`` become that character once."""
    out: List[str] = []
    i, n = 0, len(s)
    while i < n:
        j = i + 1
        while j < n and s[j] == s[i]:
            j += 1
        out.append(s[i] if j - i > threshold else s[i:j])
        i = j
    return "".join(out)


def _find_repeat(s: str, i: int, threshold: int, max_len: int) -> int:
    """Length k of the shortest pattern s[i:i+k] (k <= max_len) that occurs ``threshold``
    times in a row from i, or 0."""
    n = len(s)
    for k in range(1, max_len + 1):
        if i + k * threshold > n:
            return 0
        unit = s[i : i + k]
        if all(s[i + r * k : i + (r + 1) * k] == unit for r in range(1, threshold)):
            return k
    return 0


def _collapse_patterns(s: str, threshold: int, max_len: int) -> str:
    """The first pattern (scanning left to right) repeated ``threshold``+ times is kept
    once; scanning restarts after its last repetition. As the official code, a start
    position is only tried while at least 2*threshold characters remain."""
    out: List[str] = []
    while len(s) >= 2 * threshold:
        n = len(s)
        i, k = 0, 0
        while i <= n - 2 * threshold:
            k = _find_repeat(s, i, threshold, max_len)
            if k:
                break
            i += 1
        if not k:
            break
        end = i + threshold * k
        unit = s[i : i + k]
        while s[end : end + k] == unit:
            end += k
        out.append(s[: i + k])  # text before the pattern, and the pattern once
        s = s[end:]
    out.append(s)
    return "".join(out)


def fix_repetitions(text: str, threshold: int = REPEAT_THRESHOLD, max_len: int = MAX_PATTERN_LEN) -> str:
    """Collapse runaway repetition the way the official parser does: a character repeated
    more than ``threshold`` times, then a pattern of up to ``max_len`` characters repeated
    ``threshold`` or more times, are kept once."""
    return _collapse_patterns(_collapse_char_runs(text, threshold), threshold, max_len)


def compact_savings(tokenizer: Tokenizer, context: str = "", language: str = "English") -> dict:
    """Prefill tokens the compact prompt saves per decoder run against the official one:
    {"system": tokens of the system turn with ``context``, "header": of the ``language X<asr_text>``
    answer header (written by the model when detecting, or prompted when forced), "total"}."""
    official = len(build_prompt(tokenizer, 1, context=context))
    compact = len(build_prompt(tokenizer, 1, compact=True))
    header = len(tokenizer.encode(f"{_LANG_PREFIX}{resolve_language(language)}{ASR_TEXT}"))
    system = official - (compact - 1)  # the compact prompt carries <asr_text> itself
    return {"system": system, "header": header - 1, "total": system + header - 1}


def parse_asr_output(raw_text: Optional[str], forced_language: Optional[str] = None,
                     text_only: bool = False) -> Tuple[Optional[str], str]:
    """Split the model's decoded output into ``(language, text)``.

    raw_text: decoded with special tokens skipped (``<asr_text>`` is not special, so it
    stays). Returns language None when unknown: no ``<asr_text>`` tag, ``language None``
    (no speech; text is then normally ""), a name that is not a supported language, or an
    empty output. With ``forced_language``
    the whole output is the text and the language is the forced one (canonical name).
    Empty output gives (None, "") even when forced, as in the official parser.
    ``text_only`` (the compact prompt): the whole output is the text, the language the forced
    one or None.
    """
    if raw_text is None:
        return None, ""
    s = str(raw_text).strip()
    if not s:
        return None, ""
    s = fix_repetitions(s)
    forced = resolve_language(forced_language)
    if forced or text_only:
        return forced, s
    if ASR_TEXT not in s:
        return None, s.strip()
    meta, text = s.split(ASR_TEXT, 1)
    return parse_language_header(meta), text.strip()


def parse_language_header(meta: str) -> Optional[str]:
    """Canonical language name of the model's header (the text before ``<asr_text>``), e.g.
    "language english" -> "English"; None for ``language None``, no ``language X`` line, or a
    name that is not a supported language (logged: the model may write any word there)."""
    if "language none" in meta.lower():
        return None
    for line in meta.splitlines():
        line = line.strip()
        if line.lower().startswith(_LANG_PREFIX):
            value = line[len(_LANG_PREFIX) :].strip()
            if not value:
                return None
            try:
                return validate_language(normalize_language_name(value))
            except LanguageError:
                logger.debug("model wrote unsupported language %r; language unknown", value)
                return None
    return None
