"""Text tokenizer: Qwen2 byte-level BPE on the `tokenizers` library (no transformers).

A Qwen3-ASR checkpoint ships the "slow" files (vocab.json, merges.txt,
tokenizer_config.json) and no tokenizer.json. ``Tokenizer.from_dir`` builds the same
`tokenizers` pipeline that transformers' Qwen2TokenizerFast builds from them: NFC
normalizer, the Qwen2 split regex, byte-level BPE without unknown token, and the added
tokens of ``added_tokens_decoder`` with their ``special`` flags. Encoding recognises
added-token strings in the text (``"<|im_start|>"`` -> 151644), as the official
tokenizer call does; decoding with ``skip_special_tokens=True`` drops special tokens
only (``<asr_text>`` is not special and stays in the text).

Special ids are always resolved by name from the loaded files, never hard-coded.

A bundle may also hold ``token_table.npz`` (``write_token_table``, written by the exporter): every
token's bytes, the added tokens and the ids of the fixed prompt texts, as the full tokenizer gave
them, with the SHA-256 of the files it was built from. When those files are unchanged,
``Tokenizer.from_dir`` loads only the table (milliseconds) and builds the `tokenizers` pipeline
(0.3-0.5 s and 65 MB for the real vocabulary) on the first ``encode`` of a text the table does not
hold: a one-shot transcription without context never builds it (docs/benchmarks.md "Lean profile").
"""

from __future__ import annotations

import codecs
import functools
import json
import logging
import os
import threading
import zipfile
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .errors import Qwen3ASRError

logger = logging.getLogger(__name__)

# Qwen2 pre-tokenizer regex (Qwen2, Qwen2.5, Qwen3).
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
AUDIO_START = "<|audio_start|>"
AUDIO_END = "<|audio_end|>"
AUDIO_PAD = "<|audio_pad|>"
ASR_TEXT = "<asr_text>"


TOKEN_TABLE = "token_table.npz"
TOKEN_TABLE_FORMAT = 1
# The files a table is checked against: those of them present in the directory, by SHA-256.
_TABLE_SOURCES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json")


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


def tokenizer_json(vocab: Dict[str, int], merges: Sequence[Tuple[str, str]], added: Sequence[dict]) -> dict:
    """The `tokenizers` JSON equal to what Qwen2TokenizerFast builds from the slow files.

    added: dicts with id, content, special (and optionally lstrip, rstrip, normalized,
    single_word), as in tokenizer_config.json's added_tokens_decoder.
    """
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": int(a["id"]),
                "content": a["content"],
                "single_word": bool(a.get("single_word", False)),
                "lstrip": bool(a.get("lstrip", False)),
                "rstrip": bool(a.get("rstrip", False)),
                "normalized": bool(a.get("normalized", False)),
                "special": bool(a.get("special", False)),
            }
            for a in sorted(added, key=lambda a: int(a["id"]))
        ],
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
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [list(m) for m in merges],
        },
    }


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
    "Lean profile"); the same pipeline as :func:`tokenizer_json`. None when the files are not
    plain (the added tokens do not follow the vocabulary id by id, or `tokenizers` refuses a file):
    the JSON route then says what is wrong."""
    from tokenizers import AddedToken, Regex
    from tokenizers import Tokenizer as _Backend
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

    added = _added_tokens(os.path.join(path, "tokenizer_config.json"))
    if added is None:
        return None
    try:
        bpe = models.BPE.from_file(os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt"),
                                   unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                                   fuse_unk=False, byte_fallback=False)
        backend = _Backend(bpe)
    except Exception:  # noqa: BLE001 - tokenizers raises its own Exception type; the JSON route explains
        return None
    first = backend.get_vocab_size(with_added_tokens=False)
    if [a["id"] for a in added] != list(range(first, first + len(added))):
        return None
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    backend.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    backend.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    backend.add_tokens([AddedToken(a["content"], single_word=bool(a.get("single_word", False)),
                                   lstrip=bool(a.get("lstrip", False)), rstrip=bool(a.get("rstrip", False)),
                                   normalized=bool(a.get("normalized", False)), special=bool(a.get("special", False)))
                        for a in added])
    return backend, {a["id"]: (a["content"], bool(a.get("special", False))) for a in added}


def _source_digests(path: str) -> Dict[str, str]:
    """SHA-256 of the tokenizer files present in ``path`` (what a token table is checked against)."""
    from .bundle import sha256_file

    return {name: sha256_file(os.path.join(path, name)) for name in _TABLE_SOURCES
            if os.path.isfile(os.path.join(path, name))}


def _read_table(path: str) -> Optional[dict]:
    """The token table of directory ``path`` as a dict (offsets, blob, added, vocab_size, encoded),
    or None when there is none, it is unreadable, or the tokenizer files changed since it was
    written (then the full tokenizer is built, as without a table)."""
    f = os.path.join(path, TOKEN_TABLE)
    if not os.path.isfile(f):
        return None
    import numpy as np

    try:
        with np.load(f, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            offsets = np.asarray(z["offsets"], dtype=np.int64)
            blob = z["blob"].tobytes()
        if meta.get("format") != TOKEN_TABLE_FORMAT:
            logger.warning("%s: format %r, not %d; building the tokenizer from its files", f, meta.get("format"),
                           TOKEN_TABLE_FORMAT)
            return None
        if meta.get("sources") != _source_digests(path):
            logger.warning("%s was written for other tokenizer files; building the tokenizer from the files "
                           "(re-export the bundle to refresh it)", f)
            return None
        added = {int(i): (str(c), bool(sp)) for i, c, sp in meta["added"]}
        encoded = {str(k): tuple(int(x) for x in v) for k, v in meta["encoded"].items()}
        vocab_size = int(meta["vocab_size"])
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(blob) \
                or bool((offsets[1:] < offsets[:-1]).any()):
            raise ValueError("offsets do not index the blob")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile) as exc:
        logger.warning("%s is unreadable (%s); building the tokenizer from its files", f, exc)
        return None
    return {"offsets": offsets, "blob": blob, "added": added, "encoded": encoded, "vocab_size": vocab_size}


def _load_backend(path: str):
    """(backend, added) from the files of directory ``path``: tokenizer.json when present, else
    vocab.json + merges.txt + tokenizer_config.json. Raises TokenizerError naming the file."""
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
        return _checked(backend, added, tj)

    needed = ["vocab.json", "merges.txt", "tokenizer_config.json"]
    missing = [n for n in needed if not os.path.isfile(os.path.join(path, n))]
    if missing:
        raise TokenizerError(
            f"{path} has no tokenizer.json and lacks {', '.join(missing)}; a Qwen3-ASR checkpoint "
            "directory holds vocab.json, merges.txt and tokenizer_config.json"
        )
    fast = _from_files(path)
    if fast is not None:
        return _checked(*fast, path)
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
    added = {a["id"]: (a["content"], bool(a.get("special", False))) for a in added_list}
    return _checked(backend, added, path)


def _checked(backend, added: Dict[int, Tuple[str, bool]], where: str):
    for i, (content, _) in added.items():
        got = backend.token_to_id(content)
        if got != i:
            raise TokenizerError(f"{where}: added token {content!r} should have id {i}, the tokenizer gives {got}")
    logger.debug("tokenizer from %s: %d ids, %d added", where, backend.get_vocab_size(True), len(added))
    return backend, added


class Tokenizer:
    """Qwen3-ASR text tokenizer. Build with ``Tokenizer.from_dir(checkpoint_dir)``.

    Safe to share between threads (the lazily built `tokenizers` pipeline is built once)."""

    def __init__(self, backend, added: Dict[int, Tuple[str, bool]], *, path: Optional[str] = None,
                 table: Optional[dict] = None):
        """backend: a ``tokenizers.Tokenizer``, or None with ``path`` and ``table`` (a token
        table of ``path``: the backend is built from ``path`` on first need); added: id ->
        (content, special)."""
        if backend is None and (path is None or table is None):
            raise ValueError("a Tokenizer without a backend needs the directory and its token table")
        self._backend = backend
        self._path = path
        self._table = table
        self._lock = threading.Lock()
        self._added = dict(added)
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
        table = _read_table(path)
        if table is not None:
            logger.debug("tokenizer from %s's token table (%d ids)", path, table["vocab_size"])
            return cls(None, table["added"], path=path, table=table)
        backend, added = _load_backend(path)
        return cls(backend, added)

    @property
    def _tok(self):
        """The `tokenizers` pipeline, built from the directory on first use when a table stood in."""
        if self._backend is None:
            with self._lock:
                if self._backend is None:
                    backend, added = _load_backend(self._path)
                    if added != self._added:
                        raise TokenizerError(f"{self._path}: the added tokens of {TOKEN_TABLE} and of the "
                                             "tokenizer files differ; re-export the bundle")
                    logger.debug("tokenizer pipeline built from %s", self._path)
                    self._backend = backend
        return self._backend

    # ------------------------------------------------------------------ API
    def encode(self, text: str) -> List[int]:
        """Token ids of ``text``; added-token strings in it become their ids."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects str, got {type(text).__name__}")
        if self._table is not None:
            ids = self._table["encoded"].get(text)
            if ids is not None:
                return list(ids)
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD)."""
        if self._table is not None:
            return b"".join(self.token_bytes(i, skip_special_tokens) for i in ids).decode("utf-8", "replace")
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_id(self, name: str) -> int:
        """Id of one whole token (added token like "<|im_end|>" or a vocabulary entry)."""
        if name in self._by_name:
            return self._by_name[name]
        i = self._tok.token_to_id(name)
        if i is None:
            raise TokenizerError(f"token {name!r} is not in the tokenizer's vocabulary or added tokens")
        return int(i)

    def token_bytes(self, token_id: int, skip_special_tokens: bool = True) -> bytes:
        """UTF-8 bytes that ``token_id`` contributes to decoded text (b"" for a skipped special)."""
        token_id = int(token_id)
        if token_id in self._added:
            content, special = self._added[token_id]
            return b"" if (special and skip_special_tokens) else content.encode("utf-8")
        if self._table is not None:
            offsets = self._table["offsets"]
            if 0 <= token_id < len(offsets) - 1:
                return self._table["blob"][offsets[token_id]:offsets[token_id + 1]]
            return b""
        s = self._tok.id_to_token(token_id)
        if s is None:
            return b""  # ids beyond the tokenizer (padding rows of the embedding) decode to nothing
        return bytes(_UNICODE_TO_BYTE[c] for c in s)

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
        if self._table is not None:
            offsets = self._table["offsets"]
            longest = int((offsets[1:] - offsets[:-1]).max()) if len(offsets) > 1 else 1
        else:
            vocab = self._tok.get_vocab(with_added_tokens=False)
            longest = max((len(t) for t in vocab), default=1)  # byte-level entries: one character per byte
        return max([longest] + [len(content.encode("utf-8")) for content, _ in self._added.values()])

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer knows (BPE vocabulary + added tokens), e.g. 151705.

        The model's embedding may have more rows (151936).
        """
        if self._table is not None:
            return self._table["vocab_size"]
        return int(self._tok.get_vocab_size(with_added_tokens=True))

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


def write_token_table(path: str, texts: Sequence[str] = ()) -> str:
    """Write ``token_table.npz`` into the tokenizer directory ``path`` and return its path.

    Built with the full tokenizer from the directory's files: the bytes of every vocabulary id, the
    added tokens, the vocabulary size, the ids of each of ``texts`` (what ``encode`` then answers
    without building the pipeline: the exporter passes the fixed prompt texts) and the SHA-256 of
    the files, which ``Tokenizer.from_dir`` checks before it uses the table.
    """
    import numpy as np

    path = os.fspath(path)
    backend, added = _load_backend(path)
    tok = Tokenizer(backend, added)
    n = max(backend.get_vocab(with_added_tokens=False).values(), default=-1) + 1
    try:  # the added tokens keep their own entries (token_bytes answers them before the table)
        pieces = [b"" if i in added else tok.token_bytes(i) for i in range(n)]
    except KeyError as exc:
        raise TokenizerError(f"{path}: a token has the character {exc} outside byte-level BPE's alphabet; "
                             "no token table for it") from exc
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in pieces])
    meta = {"format": TOKEN_TABLE_FORMAT, "sources": _source_digests(path),
            "added": [[i, c, sp] for i, (c, sp) in sorted(added.items())],
            "vocab_size": int(backend.get_vocab_size(with_added_tokens=True)),
            "encoded": {t: tok.encode(t) for t in texts}}
    out = os.path.join(path, TOKEN_TABLE)
    tmp = out + ".tmp"
    arrays = {"meta": np.array(json.dumps(meta, ensure_ascii=False)), "offsets": offsets,
              "blob": np.frombuffer(b"".join(pieces), dtype=np.uint8)}
    # np.savez's layout with a fixed date: the same files give the same bytes (a reproducible bundle)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            with zf.open(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), "w") as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)
    os.replace(tmp, out)
    return out
