"""Qwen2 byte-level BPE on the `tokenizers` library (no transformers): the full tokenizer pipeline.

A Qwen3-ASR checkpoint ships the "slow" files (vocab.json, merges.txt, tokenizer_config.json) and
no tokenizer.json. ``BPE.from_dir`` builds the `tokenizers` pipeline that transformers'
Qwen2TokenizerFast builds from them: NFC normalizer, the Qwen2 split regex, byte-level BPE without
unknown token, and the added tokens of ``added_tokens_decoder`` with their ``special`` flags. Encoding
recognises added-token strings in the text (``"<|im_start|>"`` -> 151644), as the official tokenizer
call does; decoding with ``skip_special_tokens=True`` drops special tokens only (``<asr_text>`` is not
special and stays in the text). A directory with a tokenizer.json is loaded from that file.

The pipeline is specified once, by :func:`tokenizer_json` (the tokenizer.json layout): the slow files
are parsed by `tokenizers` itself into the same pipeline (a third of the time and memory of the JSON
route), and the tiny model's BPE is trained in it (qwen3asr_tools.make_small_tokenizer). Building it
takes 0.3-0.5 s and 65 MB for the real vocabulary (docs/benchmarks.md "Lean profile"), which is why a
bundle's token table (qwen3asr.token_table) answers what it can without it.

Every loading error is a :class:`TokenizerError` naming the missing or broken file.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .errors import Qwen3ASRError

logger = logging.getLogger(__name__)

# Qwen2 pre-tokenizer regex (Qwen2, Qwen2.5, Qwen3).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The pipeline around the BPE model, as Qwen2TokenizerFast builds it (tokenizer.json's entries).
_PIPELINE = {
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    },
    "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
}
# The BPE model's settings, also the keyword arguments of models.BPE (tokenizers >= 0.15).
_BPE_OPTIONS = {"dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
                "fuse_unk": False, "byte_fallback": False}
# An added token's flags, each False unless tokenizer_config.json says otherwise.
_ADDED_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


class TokenizerError(Qwen3ASRError, RuntimeError):
    """A tokenizer directory that is missing, incomplete or corrupt, or an unknown token."""


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


_UNICODE_TO_BYTE = {c: b for b, c in bytes_to_unicode().items()}


def piece_bytes(piece: str) -> bytes:
    """The bytes a vocabulary entry (byte-level alphabet, e.g. "Ġhello") stands for. Raises KeyError
    for a character outside the alphabet."""
    return bytes(_UNICODE_TO_BYTE[c] for c in piece)


def added_token_bytes(added: Dict[int, Tuple[str, bool]], token_id: int, skip_special_tokens: bool) -> Optional[bytes]:
    """UTF-8 bytes the added token ``token_id`` contributes to decoded text (b"" for a skipped special),
    None when ``token_id`` is not an added token. added: id -> (content, special)."""
    if token_id not in added:
        return None
    content, special = added[token_id]
    return b"" if (special and skip_special_tokens) else content.encode("utf-8")


def _added_flags(a: dict) -> dict:
    return {flag: bool(a.get(flag, False)) for flag in _ADDED_FLAGS}


def tokenizer_json(vocab: Dict[str, int], merges: Sequence[Tuple[str, str]], added: Sequence[dict]) -> dict:
    """The `tokenizers` JSON equal to what Qwen2TokenizerFast builds from the slow files.

    added: dicts with id, content, special (and optionally lstrip, rstrip, normalized,
    single_word), as in tokenizer_config.json's added_tokens_decoder.
    """
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": int(a["id"]), "content": a["content"], **_added_flags(a)}
                         for a in sorted(added, key=lambda a: int(a["id"]))],
        **copy.deepcopy(_PIPELINE),
        "model": {"type": "BPE", **_BPE_OPTIONS, "ignore_merges": False,
                  "vocab": vocab, "merges": [list(m) for m in merges]},
    }


def pipeline(vocab: Optional[Dict[str, int]] = None, merges: Sequence[Tuple[str, str]] = ()):
    """A ``tokenizers.Tokenizer`` with the pipeline of :func:`tokenizer_json` and no added tokens;
    without ``vocab``, an empty BPE model: to train a vocabulary in, or to give a model parsed from
    files."""
    from tokenizers import Tokenizer as _Backend

    return _Backend.from_str(json.dumps(tokenizer_json(vocab or {}, merges, [])))


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"cannot read {path}: {exc}") from exc


def _read_merges(path: str) -> List[Tuple[str, str]]:
    merges: List[Tuple[str, str]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if not line or (n == 1 and line.startswith("#version")):
                    continue
                parts = line.split(" ")
                if len(parts) != 2:
                    raise TokenizerError(f"{path}:{n}: a merge is two tokens separated by one space, got {line!r}")
                merges.append((parts[0], parts[1]))
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"cannot read {path}: {exc}") from exc
    return merges


def _added_tokens(cfg_path: str) -> list[dict] | None:
    """The added tokens of tokenizer_config.json (dicts with id, content, special, ...), or None
    when the file has no added_tokens_decoder or a malformed one."""
    cfg = _read_json(cfg_path)
    decoder = cfg.get("added_tokens_decoder") if isinstance(cfg, dict) else None
    if not isinstance(decoder, dict) or not decoder:
        return None
    try:
        return sorted((dict(v, id=int(k)) for k, v in decoder.items()), key=lambda a: a["id"])
    except (ValueError, TypeError):
        return None


def _from_files(path: str):
    """(backend, added) built by `tokenizers` straight from vocab.json and merges.txt (the files
    are parsed in Rust: a third of the time and memory of the JSON route, docs/benchmarks.md
    "Lean profile") into :func:`pipeline`. None when the files are not plain (the added tokens do
    not follow the vocabulary id by id, or `tokenizers` refuses a file): the JSON route then says
    what is wrong."""
    from tokenizers import AddedToken, models

    added = _added_tokens(os.path.join(path, "tokenizer_config.json"))
    if added is None:
        return None
    try:
        backend = pipeline()
        backend.model = models.BPE.from_file(os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt"),
                                             **_BPE_OPTIONS)
    except Exception:  # noqa: BLE001 - tokenizers raises its own Exception type; the JSON route explains
        return None
    first = backend.get_vocab_size(with_added_tokens=False)
    if [a["id"] for a in added] != list(range(first, first + len(added))):
        return None
    backend.add_tokens([AddedToken(a["content"], **_added_flags(a)) for a in added])
    return backend, {a["id"]: (a["content"], bool(a.get("special", False))) for a in added}


def _from_json_route(path: str):
    """(backend, added) from the slow files read in Python and given to `tokenizers` as
    :func:`tokenizer_json`; raises TokenizerError saying what is wrong with them."""
    from tokenizers import Tokenizer as _Backend

    vocab = _read_json(os.path.join(path, "vocab.json"))
    if not isinstance(vocab, dict) or not vocab:
        raise TokenizerError(f"{os.path.join(path, 'vocab.json')}: expected a non-empty token -> id object")
    merges = _read_merges(os.path.join(path, "merges.txt"))
    cfg = _read_json(os.path.join(path, "tokenizer_config.json"))
    decoder = cfg.get("added_tokens_decoder")
    if not isinstance(decoder, dict) or not decoder:
        raise TokenizerError(
            f"{os.path.join(path, 'tokenizer_config.json')} has no added_tokens_decoder; "
            "the special tokens (<|im_start|>, <|audio_pad|>, ...) cannot be resolved"
        )
    try:
        added_list = [dict(v, id=int(k)) for k, v in decoder.items()]
        backend = _Backend.from_str(json.dumps(tokenizer_json(vocab, merges, added_list)))
    except (ValueError, TypeError, KeyError) as exc:
        raise TokenizerError(f"invalid tokenizer files in {path}: {exc}") from exc
    except Exception as exc:  # tokenizers raises its own Exception type
        raise TokenizerError(f"cannot build the tokenizer from {path}: {exc}") from exc
    return backend, {a["id"]: (a["content"], bool(a.get("special", False))) for a in added_list}


class BPE:
    """The `tokenizers` pipeline of one tokenizer directory and its added tokens. Build with
    ``BPE.from_dir(path)``. Token ids are ints; text is str; bytes are UTF-8."""

    def __init__(self, backend, added: Dict[int, Tuple[str, bool]]):
        """backend: a ``tokenizers.Tokenizer``; added: id -> (content, special)."""
        self.backend = backend
        self.added = dict(added)

    @classmethod
    def from_dir(cls, path: str) -> "BPE":
        """The pipeline of directory ``path``: tokenizer.json when present, else vocab.json +
        merges.txt + tokenizer_config.json. Raises TokenizerError naming the file."""
        try:
            from tokenizers import Tokenizer as _Backend
        except ImportError as exc:  # pragma: no cover - a runtime dependency
            raise TokenizerError("the 'tokenizers' package is needed: pip install tokenizers") from exc

        tj = os.path.join(path, "tokenizer.json")
        if os.path.isfile(tj):
            try:
                backend = _Backend.from_file(tj)
            except Exception as exc:  # tokenizers raises its own Exception type
                raise TokenizerError(f"cannot load {tj}: {exc}") from exc
            added = {int(i): (a.content, bool(a.special)) for i, a in backend.get_added_tokens_decoder().items()}
            return cls._checked(backend, added, tj)

        needed = ["vocab.json", "merges.txt", "tokenizer_config.json"]
        missing = [n for n in needed if not os.path.isfile(os.path.join(path, n))]
        if missing:
            raise TokenizerError(
                f"{path} has no tokenizer.json and lacks {', '.join(missing)}; a Qwen3-ASR checkpoint "
                "directory holds vocab.json, merges.txt and tokenizer_config.json"
            )
        return cls._checked(*(_from_files(path) or _from_json_route(path)), path)

    @classmethod
    def _checked(cls, backend, added: Dict[int, Tuple[str, bool]], where: str) -> "BPE":
        for i, (content, _) in added.items():
            got = backend.token_to_id(content)
            if got != i:
                raise TokenizerError(f"{where}: added token {content!r} should have id {i}, the tokenizer gives {got}")
        logger.debug("tokenizer from %s: %d ids, %d added", where, backend.get_vocab_size(True), len(added))
        return cls(backend, added)

    def encode(self, text: str) -> List[int]:
        """Token ids of ``text``; added-token strings in it become their ids."""
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD)."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_id(self, name: str) -> Optional[int]:
        """Id of one whole token (an added token or a vocabulary entry), None when unknown."""
        i = self.backend.token_to_id(name)
        return None if i is None else int(i)

    def token_bytes(self, token_id: int, skip_special_tokens: bool = True) -> bytes:
        """UTF-8 bytes that ``token_id`` contributes to decoded text (b"" for a skipped special and
        for ids beyond the tokenizer: the padding rows of the embedding). Raises KeyError for a
        vocabulary entry outside byte-level BPE's alphabet."""
        token_id = int(token_id)
        added = added_token_bytes(self.added, token_id, skip_special_tokens)
        if added is not None:
            return added
        s = self.backend.id_to_token(token_id)
        return b"" if s is None else piece_bytes(s)

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (BPE vocabulary + added tokens)."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def base_vocab(self) -> Dict[str, int]:
        """The BPE vocabulary without the added tokens: entry (byte-level alphabet) -> id."""
        return self.backend.get_vocab(with_added_tokens=False)

    @property
    def longest_piece(self) -> int:
        """Most bytes one vocabulary entry (added tokens aside) stands for."""
        return max((len(t) for t in self.base_vocab()), default=1)  # byte-level entries: one character per byte
