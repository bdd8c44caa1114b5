"""A bundle's token table (``token_table.npz``): the tokenizer's answers stored, for a load without BPE.

``write_token_table`` (called by the exporter) builds the full pipeline of a tokenizer directory
(qwen3asr.bpe) and stores, as it gives them: every vocabulary id's bytes, the added tokens, the
vocabulary size, the ids of each of the given texts (the exporter passes the fixed prompt texts)
and the SHA-256 of the tokenizer files. The same files and texts give the same bytes.

``TokenTable.read`` loads it in about 10 ms (against 0.3-0.5 s and 65 MB for the pipeline of the
real vocabulary) when those files are unchanged, and returns None, with a warning, when the table
is unreadable or was written for other files. A loaded table decodes any id, and gives the
vocabulary size and the longest token, exactly as the pipeline does; ``encode`` answers the texts it
holds and returns None for any other (the caller then asks the pipeline).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import zipfile
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .bpe import BPE, TokenizerError, added_token_bytes

logger = logging.getLogger(__name__)

TOKEN_TABLE = "token_table.npz"
TOKEN_TABLE_FORMAT = 1
# The files a table is checked against: those of them present in the directory, by SHA-256.
_TABLE_SOURCES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json")


def _source_digests(path: str) -> Dict[str, str]:
    """SHA-256 of the tokenizer files present in ``path`` (what a token table is checked against)."""
    from .bundle import sha256_file

    return {name: sha256_file(os.path.join(path, name)) for name in _TABLE_SOURCES
            if os.path.isfile(os.path.join(path, name))}


class TokenTable:
    """The token table of one tokenizer directory, loaded. Build with ``TokenTable.read(path)``."""

    def __init__(self, offsets, blob: bytes, added: Dict[int, Tuple[str, bool]],
                 encoded: Dict[str, Tuple[int, ...]], vocab_size: int):
        """offsets: (n_ids + 1,) int64, the bytes of id i are blob[offsets[i]:offsets[i + 1]] (b"" for
        added ids); added: id -> (content, special); encoded: text -> its ids; vocab_size: the ids the
        tokenizer knows (vocabulary + added tokens)."""
        self._offsets = offsets
        self._blob = blob
        self.added = dict(added)
        self._encoded = dict(encoded)
        self.vocab_size = int(vocab_size)

    @classmethod
    def read(cls, path: str) -> Optional["TokenTable"]:
        """The token table of directory ``path``, or None when there is none, it is unreadable, or
        the tokenizer files changed since it was written (then the full tokenizer is built, as
        without a table)."""
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
        logger.debug("tokenizer from %s's token table (%d ids)", path, vocab_size)
        return cls(offsets, blob, added, encoded, vocab_size)

    def encode(self, text: str) -> Optional[List[int]]:
        """The ids of ``text`` when the table holds it, else None."""
        ids = self._encoded.get(text)
        return None if ids is None else list(ids)

    def token_bytes(self, token_id: int, skip_special_tokens: bool = True) -> bytes:
        """UTF-8 bytes that ``token_id`` contributes to decoded text (b"" for a skipped special and
        for ids beyond the tokenizer: the padding rows of the embedding)."""
        token_id = int(token_id)
        added = added_token_bytes(self.added, token_id, skip_special_tokens)
        if added is not None:
            return added
        if 0 <= token_id < len(self._offsets) - 1:
            return self._blob[self._offsets[token_id]:self._offsets[token_id + 1]]
        return b""

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (bytes that are not valid UTF-8 become U+FFFD)."""
        return b"".join(self.token_bytes(i, skip_special_tokens) for i in ids).decode("utf-8", "replace")

    @functools.cached_property
    def longest_piece(self) -> int:
        """Most bytes one vocabulary entry (added tokens aside) stands for."""
        offsets = self._offsets
        return int((offsets[1:] - offsets[:-1]).max()) if len(offsets) > 1 else 1


def write_token_table(path: str, texts: Sequence[str] = ()) -> str:
    """Write ``token_table.npz`` into the tokenizer directory ``path`` and return its path.

    Built with the full tokenizer from the directory's files: the bytes of every vocabulary id, the
    added tokens, the vocabulary size, the ids of each of ``texts`` (what ``encode`` then answers
    without building the pipeline: the exporter passes the fixed prompt texts) and the SHA-256 of
    the files, which ``TokenTable.read`` checks before it uses the table.
    """
    import numpy as np

    path = os.fspath(path)
    bpe = BPE.from_dir(path)
    n = max(bpe.base_vocab().values(), default=-1) + 1
    try:  # the added tokens keep their own entries (token_bytes answers them before the table)
        pieces = [b"" if i in bpe.added else bpe.token_bytes(i) for i in range(n)]
    except KeyError as exc:
        raise TokenizerError(f"{path}: a token has the character {exc} outside byte-level BPE's alphabet; "
                             "no token table for it") from exc
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in pieces])
    meta = {"format": TOKEN_TABLE_FORMAT, "sources": _source_digests(path),
            "added": [[i, c, sp] for i, (c, sp) in sorted(bpe.added.items())],
            "vocab_size": bpe.vocab_size,
            "encoded": {t: bpe.encode(t) for t in texts}}
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
