"""Text tokenizer of Qwen3-ASR: a bundle's token table first, the Qwen2 BPE pipeline for the rest.

``Tokenizer.from_dir(path)`` loads a checkpoint or bundle directory. Its answers are those of
transformers' Qwen2TokenizerFast on the directory's files (tests/test_tokenizer.py): added-token
strings in a text encode to their ids (``"<|im_start|>"`` -> 151644), decoding with
``skip_special_tokens=True`` drops special tokens only (``<asr_text>`` is not special), and special
ids are always resolved by name from the loaded files, never hard-coded.

Two sources give them, each in its own module:

==================  ==========================================================================
``token_table``     the bundle's ``token_table.npz``: every token's bytes and the fixed prompt
                    texts' ids, checked against the files' SHA-256; loads in about 10 ms
``bpe``             the `tokenizers` pipeline (0.3-0.5 s and 65 MB for the real vocabulary)
==================  ==========================================================================

Every method asks the table first and the pipeline when the table has no answer. With a table,
the pipeline is built on the first ``encode`` of a text the table does not hold (context, the
aligner's words) or the first ``token_id`` of a vocabulary entry: a one-shot transcription without
context never builds it (docs/benchmarks.md "Lean profile"). Without a usable table, the pipeline
is built by ``from_dir``.
"""

from __future__ import annotations

import codecs
import functools
import logging
import os
import threading
from typing import Callable, Dict, Iterable, List, Optional, Tuple, TypeVar

from .bpe import BPE, TokenizerError
from .token_table import TOKEN_TABLE, TokenTable

logger = logging.getLogger(__name__)

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
AUDIO_START = "<|audio_start|>"
AUDIO_END = "<|audio_end|>"
AUDIO_PAD = "<|audio_pad|>"
ASR_TEXT = "<asr_text>"

__all__ = ["Tokenizer", "IncrementalDecoder", "TokenizerError", "IM_START", "IM_END", "ENDOFTEXT", "AUDIO_START",
           "AUDIO_END", "AUDIO_PAD", "ASR_TEXT"]

_T = TypeVar("_T")


def _or(answer: Optional[_T], pipeline: Callable[[], _T]) -> _T:
    """``answer`` (the table's) unless it is None, else what ``pipeline()`` gives."""
    return answer if answer is not None else pipeline()


class _NoTable:
    """Stands in for the token table of a directory without a usable one: it has no answer."""

    vocab_size = None
    longest_piece = None

    def encode(self, text: str) -> None:
        return None

    def decode(self, ids: List[int], skip_special_tokens: bool) -> None:
        return None

    def token_bytes(self, token_id: int, skip_special_tokens: bool) -> None:
        return None


_NO_TABLE = _NoTable()


class Tokenizer:
    """Qwen3-ASR text tokenizer. Build with ``Tokenizer.from_dir(checkpoint_dir)``.

    Safe to share between threads (the lazily built `tokenizers` pipeline is built once)."""

    def __init__(self, bpe: Optional[BPE] = None, *, table: Optional[TokenTable] = None,
                 path: Optional[str] = None):
        """bpe: the directory's pipeline, or None with ``table`` and ``path`` (the pipeline is then
        built from ``path`` on first need); table: the directory's token table, if any."""
        if bpe is None and (path is None or table is None):
            raise ValueError("a Tokenizer without its BPE pipeline needs the directory and its token table")
        self._pipeline = bpe
        self._table = table if table is not None else _NO_TABLE
        self._path = path
        self._lock = threading.Lock()
        self._added = dict(table.added if table is not None else bpe.added)
        self._special_ids = frozenset(i for i, (_, s) in self._added.items() if s)
        self._by_name = {content: i for i, (content, _) in self._added.items()}

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dir(cls, path: str) -> "Tokenizer":
        """Load from a checkpoint or bundle directory.

        Uses the directory's token table when it matches the tokenizer files (the module
        docstring), else tokenizer.json when present, else vocab.json + merges.txt +
        tokenizer_config.json (the layout of the real Qwen3-ASR checkpoints).
        Raises TokenizerError naming the missing or broken file.
        """
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise TokenizerError(f"tokenizer directory not found: {path}")
        table = TokenTable.read(path)
        if table is not None:
            return cls(table=table, path=path)
        return cls(BPE.from_dir(path))

    @property
    def _bpe(self) -> BPE:
        """The `tokenizers` pipeline, built from the directory on first use when a table stood in."""
        if self._pipeline is None:
            with self._lock:
                if self._pipeline is None:
                    bpe = BPE.from_dir(self._path)
                    if bpe.added != self._added:
                        raise TokenizerError(f"{self._path}: the added tokens of {TOKEN_TABLE} and of the "
                                             "tokenizer files differ; re-export the bundle")
                    logger.debug("tokenizer pipeline built from %s", self._path)
                    self._pipeline = bpe
        return self._pipeline

    # ------------------------------------------------------------------ API
    def encode(self, text: str) -> List[int]:
        """Token ids of ``text``; added-token strings in it become their ids."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        return _or(self._table.encode(text), lambda: self._bpe.encode(text))

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD)."""
        ids = [int(i) for i in ids]
        return _or(self._table.decode(ids, skip_special_tokens), lambda: self._bpe.decode(ids, skip_special_tokens))

    def token_id(self, name: str) -> int:
        """Id of one whole token (added token like "<|im_end|>" or a vocabulary entry)."""
        i = _or(self._by_name.get(name), lambda: self._bpe.token_id(name))
        if i is None:
            raise TokenizerError(f"token {name!r} is not in the tokenizer's vocabulary or added tokens")
        return i

    def token_bytes(self, token_id: int, skip_special_tokens: bool = True) -> bytes:
        """UTF-8 bytes that ``token_id`` contributes to decoded text (b"" for a skipped special and for
        ids beyond the tokenizer: the padding rows of the embedding)."""
        return _or(self._table.token_bytes(token_id, skip_special_tokens),
                   lambda: self._bpe.token_bytes(token_id, skip_special_tokens))

    def is_special(self, token_id: int) -> bool:
        return int(token_id) in self._special_ids

    @property
    def added_tokens(self) -> Dict[int, Tuple[str, bool]]:
        """id -> (content, special) for every added token."""
        return dict(self._added)

    @functools.cached_property
    def max_token_bytes(self) -> int:
        """Most UTF-8 bytes one token stands for (vocabulary entries and added tokens): a text of
        n bytes takes at least n / max_token_bytes tokens."""
        longest = _or(self._table.longest_piece, lambda: self._bpe.longest_piece)
        return max([longest] + [len(content.encode("utf-8")) for content, _ in self._added.values()])

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (BPE vocabulary + added tokens), e.g. 151705.

        The model's embedding may have more rows (151936).
        """
        return _or(self._table.vocab_size, lambda: self._bpe.vocab_size)

    @property
    def im_start(self) -> int:
        return self.token_id(IM_START)

    @property
    def im_end(self) -> int:
        return self.token_id(IM_END)

    @property
    def endoftext(self) -> int:
        return self.token_id(ENDOFTEXT)

    @property
    def audio_start(self) -> int:
        return self.token_id(AUDIO_START)

    @property
    def audio_end(self) -> int:
        return self.token_id(AUDIO_END)

    @property
    def audio_pad(self) -> int:
        return self.token_id(AUDIO_PAD)

    @property
    def asr_text(self) -> int:
        return self.token_id(ASR_TEXT)

    @property
    def eos_ids(self) -> Tuple[int, ...]:
        """Ids that end generation: (<|im_end|>, <|endoftext|>)."""
        return (self.im_end, self.endoftext)

    def incremental_decoder(self, skip_special_tokens: bool = True) -> "IncrementalDecoder":
        return IncrementalDecoder(self, skip_special_tokens)


class IncrementalDecoder:
    """Turns a stream of token ids into text pieces.

    ``push(id)`` returns only newly completed text: bytes of a multi-byte character
    split across tokens are held until the character is complete, so no U+FFFD is
    produced for a partial character. Bytes that can never form a character become
    U+FFFD as in ``Tokenizer.decode``. ``flush()`` returns what is left (a dangling
    partial character becomes U+FFFD). The concatenation of all pieces equals
    ``tokenizer.decode(all_ids, skip_special_tokens)``.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True):
        self._tokenizer = tokenizer
        self._skip = skip_special_tokens
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(self._tokenizer.token_bytes(token_id, self._skip), final=False)

    def flush(self) -> str:
        """Text of any held bytes; the decoder is reset and can be reused."""
        out = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return out

    @property
    def pending(self) -> bool:
        """True when bytes of an incomplete character are held."""
        return bool(self._utf8.getstate()[0])
