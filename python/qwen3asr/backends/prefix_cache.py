"""Reuse of the prompt prefix's KV cache across decoder runs (a bounded LRU).

Every prompt starts with the same rows up to the first audio pad: the system turn with its
context, then ``<|im_start|>user\\n<|audio_start|>`` (``Prompt.audio_start`` ids). Their KV
cache depends on nothing else, so it is computed once per distinct prefix and copied into the
cache of every request, stream chunk and long-file chunk that starts with the same rows.

The key is the exact bytes of the prefix's embedded rows ``(n, hidden) float32``: a hit needs
byte equality of the whole prefix (a dict lookup compares the stored bytes after the hash), so
another context or a prefix one row longer or shorter can never hit.
Greedy logits with and without reuse are bitwise equal on ONNX Runtime's CPU kernels
(tests/test_prefix_cache.py; docs/benchmarks.md).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Any, Callable, Optional

import numpy as np

from .. import checks
from ..decoding import MAX_CONTEXT

logger = logging.getLogger(__name__)

MIB = 1 << 20
# The most KV memory the kept prefixes may take: one whole decoder context of the largest model
# (decoding.MAX_CONTEXT positions x 28 layers x 8 KV heads x 128 x K and V x float32 = 3.5 GiB),
# as much as a 4 GB board has. max_entries needs no bound of its own: max_bytes bounds the memory.
MAX_BYTES = MAX_CONTEXT * 28 * 8 * 128 * 2 * 4


@dataclasses.dataclass(frozen=True)
class PrefixCacheOptions:
    """How many prompt prefixes the ONNX decoder keeps. Defaults fit a board with 4 GB: with
    the 0.6B/1.7B decoders (28 layers x 8 KV heads x 128, float32) a position takes 224 KiB, the
    default empty-context prefix (9 positions) 2 MiB and one with a 186-token context (195
    positions) 43 MiB."""

    max_entries: int = 8  # distinct prefixes kept (0 = no reuse)
    max_bytes: int = 128 * MIB  # KV (and key) bytes of all kept prefixes together

    def __post_init__(self):
        problems = [p for p in (checks.integer("max_entries", self.max_entries, 0),
                                checks.integer("max_bytes", self.max_bytes, 0, MAX_BYTES)) if p]
        if problems:
            raise ValueError("invalid prefix cache options: " + "; ".join(problems))

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0 and self.max_bytes > 0


NO_PREFIX_CACHE = PrefixCacheOptions(max_entries=0)


@dataclasses.dataclass
class PrefixCacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    too_large: int = 0  # prefixes computed but not kept (over max_bytes alone)


class PrefixCache:
    """LRU of prefix KV caches keyed by the exact bytes of the prefix rows.

    ``get(rows, compute)`` returns ``(cache, hit)``: the kept cache of ``rows`` (n, hidden)
    float32 if present, else ``compute(rows)`` (kept if it fits). The returned cache is shared:
    callers must copy it before extending it. ``size_of(cache)`` gives its bytes.
    """

    def __init__(self, options: PrefixCacheOptions = PrefixCacheOptions(),
                 size_of: Callable[[Any], int] = lambda c: int(c.nbytes)):
        self.options = options
        self._size_of = size_of
        self._entries: "collections.OrderedDict[tuple, tuple[Any, int]]" = collections.OrderedDict()
        self.bytes = 0
        self.stats = PrefixCacheStats()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def get(self, rows: np.ndarray, compute: Callable[[np.ndarray], Any]) -> tuple[Any, bool]:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] < 1:
            raise ValueError(f"prefix rows must be (n >= 1, hidden) float32, got shape {rows.shape}")
        key = (rows.shape, rows.tobytes())
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return found[0], True
        self.stats.misses += 1
        cache = compute(rows)
        size = self._size_of(cache) + len(key[1])
        if not self.options.enabled:
            return cache, False
        if size > self.options.max_bytes:
            self.stats.too_large += 1
            logger.debug("prefix of %d rows (%d bytes) is over the prefix cache budget of %d bytes: not kept",
                         rows.shape[0], size, self.options.max_bytes)
            return cache, False
        while self._entries and (len(self._entries) >= self.options.max_entries
                                 or self.bytes + size > self.options.max_bytes):
            _, (_, old) = self._entries.popitem(last=False)
            self.bytes -= old
            self.stats.evictions += 1
        self._entries[key] = (cache, size)
        self.bytes += size
        return cache, False


def checked_prefix_len(prefix_len: Optional[int], n_rows: int) -> int:
    """``prefix_len`` as an int in [0, n_rows - 1] (0 for None): at least one row must follow the
    prefix, whose logits start the generation. ValueError otherwise."""
    if prefix_len is None:
        return 0
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, (int, np.integer)) or \
            not 0 <= int(prefix_len) < n_rows:
        raise ValueError(f"prefix_len must be an integer in [0, {n_rows - 1}] for a prompt of {n_rows} rows "
                         f"(got {prefix_len!r})")
    return int(prefix_len)


__all__ = ["NO_PREFIX_CACHE", "PrefixCache", "PrefixCacheOptions", "PrefixCacheStats", "checked_prefix_len"]
