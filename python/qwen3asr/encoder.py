"""Audio encoder orchestration: log-mel frames -> audio embeddings, on fixed-size graphs.

The official encoder cuts the mel into chunks of 100 frames (1 s), runs a conv stem per
chunk (13 tokens per full chunk), and attends inside windows of 104 tokens (8 s). The
exported graphs have fixed sizes (``n_chunks`` chunks), so the host:

- picks the smallest variant that holds the audio, zero-pads the mel, and trims the
  output to the real token count;
- supplies the conv masks that make a short single chunk (< 100 frames) behave as the
  official unpadded run, and the block-diagonal attention bias of the 8 s windows with
  padding keys masked;
- chains variants at 8 s window boundaries for audio longer than the largest variant, which
  is exact because windows never attend to each other.

Backends implement :class:`EncoderRunner` (ONNX Runtime here, RKNN on the board).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Optional, Protocol, Sequence

import numpy as np

logger = logging.getLogger(__name__)

CHUNK_FRAMES = 100  # mel frames per conv chunk (1 s)
TOKENS_PER_CHUNK = 13  # encoder tokens of a full chunk (about 77 ms each)
MASK_VALUE = -1.0e4  # additive bias of masked keys (exact zero weight in fp32 and fp16)


def conv_out(n: int) -> int:
    """Length after one conv of the stem (kernel 3, stride 2, padding 1): ceil(n / 2)."""
    return (n + 1) // 2


def tokens_for_frames(n_frames: int) -> int:
    """Encoder tokens for ``n_frames`` mel frames: 13 per full chunk + the ragged tail's."""
    full, tail = divmod(int(n_frames), CHUNK_FRAMES)
    return TOKENS_PER_CHUNK * full + (conv_out(conv_out(conv_out(tail))) if tail else 0)


@dataclasses.dataclass(frozen=True)
class EncoderVariant:
    """One fixed-size encoder graph of the bundle."""

    form: str  # "merged" or "split" (split = per-chunk front end + this back end)
    n_chunks: int  # 100-frame chunks the graph holds (its duration in seconds)
    path: str  # file of the graph (merged graph or split back end)

    @property
    def seconds(self) -> float:
        return self.n_chunks * CHUNK_FRAMES / 100.0

    @property
    def frames(self) -> int:
        return self.n_chunks * CHUNK_FRAMES

    @property
    def tokens(self) -> int:
        return self.n_chunks * TOKENS_PER_CHUNK


class EncoderRunner(Protocol):
    """Backend seam: runs the bundle's fixed-size graphs."""

    def run_merged(self, variant: EncoderVariant, mel: np.ndarray, conv_mask1: np.ndarray,
                   conv_mask2: np.ndarray, attn_bias: np.ndarray) -> np.ndarray:
        """mel (1, n_mels, frames) -> embeds (1, tokens, output_dim) float32."""

    def run_frontend(self, mel_chunk: np.ndarray, conv_mask1: np.ndarray, conv_mask2: np.ndarray) -> np.ndarray:
        """mel_chunk (1, n_mels, 100) -> hidden (1, 13, d_model) float32."""

    def run_backend(self, variant: EncoderVariant, hidden: np.ndarray, attn_bias: np.ndarray) -> np.ndarray:
        """hidden (1, tokens, d_model) -> embeds (1, tokens, output_dim) float32."""

    def load(self, variant: EncoderVariant) -> None:
        """Make ``variant``'s graphs ready to run (a runner that makes them on first use makes them
        now; one that loads every graph at start only checks that ``variant`` is among them)."""

    def close(self) -> None:
        """Free the loaded graphs (safe to call twice)."""


def conv_masks(n_frames: int, n_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """Masks on the first two conv outputs, ``(n_chunks, 1, 1, 50)`` and ``(n_chunks, 1, 1, 25)``.

    All ones except for audio shorter than one chunk, where the official encoder runs the
    chunk unpadded: frames past the real length must then look like the convs' zero padding.
    """
    t1, t2 = conv_out(CHUNK_FRAMES), conv_out(conv_out(CHUNK_FRAMES))
    m1 = np.ones((n_chunks, 1, 1, t1), np.float32)
    m2 = np.ones((n_chunks, 1, 1, t2), np.float32)
    if n_frames < CHUNK_FRAMES:
        m1[0, ..., conv_out(n_frames):] = 0.0
        m2[0, ..., conv_out(conv_out(n_frames)):] = 0.0
    return m1, m2


def attention_bias(n_valid: int, n_slots: int, window: int) -> np.ndarray:
    """Block-diagonal bias ``(1, 1, n_slots, n_slots)``: 0 where a query may attend, -1e4 elsewhere.

    Tokens attend inside windows of ``window`` tokens; keys at or past ``n_valid`` are padding.
    """
    i = np.arange(n_slots)
    ok = (i[None, :] < n_valid) & ((i[:, None] // window) == (i[None, :] // window))
    return np.where(ok, 0.0, MASK_VALUE).astype(np.float32)[None, None]


class StemMemo:
    """Front-end outputs of whole 100-frame chunks (split form), keyed by the exact bytes of the
    chunk's log-mel: a chunk computed ahead (qwen3asr.streaming.ahead, while a piece is spoken) is
    reused by a later encode only when its input is byte-identical, so the result is the encode's
    own. At most ``limit`` chunks, the oldest dropped first."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self._kept: collections.OrderedDict = collections.OrderedDict()

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        return sum(len(k) + v.nbytes for k, v in self._kept.items())

    def get(self, key: bytes) -> Optional[np.ndarray]:
        return self._kept.get(key)

    def discard(self, key: bytes) -> None:
        self._kept.pop(key, None)

    def put(self, key: bytes, hidden: np.ndarray) -> None:
        self._kept[key] = hidden
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)


class AudioEncoder:
    """Runs fixed-size encoder variants on log-mel features of any length."""

    def __init__(self, runner: EncoderRunner, variants: Sequence[EncoderVariant], window_tokens: int,
                 n_mels: int, form: str = "merged"):
        if form not in ("merged", "split"):
            raise ValueError(f"encoder form must be 'merged' or 'split', got {form!r}")
        self.variants = sorted((v for v in variants if v.form == form), key=lambda v: v.n_chunks)
        if not self.variants:
            have = sorted({v.form for v in variants})
            raise ValueError(f"the bundle has no {form!r} encoder variants (it has: {', '.join(have) or 'none'})")
        self.runner = runner
        self.form = form
        self.window_tokens = int(window_tokens)
        self.window_frames = self.window_tokens // TOKENS_PER_CHUNK * CHUNK_FRAMES
        self.n_mels = n_mels
        chainable = [v for v in self.variants if v.frames % self.window_frames == 0]
        self._chain = chainable[-1] if chainable else self.variants[-1]
        self._chain_exact = bool(chainable)
        self._warned = False
        self.calls = 0
        self.seconds_encoded = 0.0

    def close(self) -> None:
        """Free the runner's graphs (safe to call twice)."""
        self.runner.close()

    def pick(self, n_frames: int) -> EncoderVariant:
        """Smallest variant holding ``n_frames`` (the largest if none does)."""
        for v in self.variants:
            if v.frames >= n_frames:
                return v
        return self.variants[-1]

    def variants_for(self, n_frames: int) -> list[EncoderVariant]:
        """The variants ``encode`` runs for ``n_frames`` frames of log-mel (the chained one first)."""
        longest = self.variants[-1].frames
        if n_frames <= longest:
            return [self.pick(n_frames)]
        chained = -(-(n_frames - longest) // self._chain.frames)  # the pieces encode's loop cuts
        last = self.pick(n_frames - chained * self._chain.frames)
        return [self._chain] if last == self._chain else [self._chain, last]

    def preload(self, seconds: float) -> list[EncoderVariant]:
        """Load the graphs ``encode`` needs for ``seconds`` of audio now instead of on first use
        (the engine does it while the decoder loads: Qwen3ASREngine's ``preload_seconds``).
        Returns those variants."""
        from .mel import SAMPLE_RATE, n_frames

        variants = self.variants_for(max(1, n_frames(int(round(float(seconds) * SAMPLE_RATE)))))
        for v in variants:
            self.runner.load(v)
        return variants

    def stem(self, mel_chunk: np.ndarray) -> np.ndarray:
        """The front end's output (1, 13, d_model) float32 for ``mel_chunk`` (n_mels, 100) float32,
        a whole chunk of a clip of at least one chunk (split form only): what ``encode`` reuses
        from a StemMemo under ``mel_chunk.tobytes()``."""
        if self.form != "split":
            raise ValueError("conv stems are computed ahead only by a split encoder")
        if mel_chunk.shape != (self.n_mels, CHUNK_FRAMES) or mel_chunk.dtype != np.float32:
            raise ValueError(f"a stem needs one whole chunk ({self.n_mels}, {CHUNK_FRAMES}) float32, "
                             f"got {mel_chunk.shape} {mel_chunk.dtype}")
        m1, m2 = conv_masks(CHUNK_FRAMES, 1)
        self.calls += 1
        return np.asarray(self.runner.run_frontend(np.ascontiguousarray(mel_chunk)[None], m1, m2), np.float32)

    def encode(self, mel: np.ndarray, stems: Optional[StemMemo] = None) -> np.ndarray:
        """``mel`` (n_mels, T) float32 -> embeddings (tokens_for_frames(T), output_dim) float32.
        ``stems``: front-end outputs computed ahead (split form), reused for whole chunks whose
        log-mel is byte-identical (``stem``)."""
        if mel.ndim != 2 or mel.shape[0] != self.n_mels:
            raise ValueError(f"mel must be ({self.n_mels}, frames), got {mel.shape}")
        total = mel.shape[1]
        pieces = []
        start = 0
        if total > self.variants[-1].frames and not self._chain_exact and not self._warned:
            self._warned = True
            logger.warning(
                "no encoder variant is a multiple of the %d-frame attention window; audio longer than %.0f s "
                "is chained at %.0f s, which cuts attention windows (not bit-exact with the official model)",
                self.window_frames, self.variants[-1].seconds, self._chain.seconds)
        while total - start > self.variants[-1].frames:
            pieces.append(self._run(mel[:, start:start + self._chain.frames], self._chain, stems=stems))
            start += self._chain.frames
        rest = mel[:, start:]
        pieces.append(self._run(rest, self.pick(rest.shape[1]), total, stems))
        out = np.concatenate(pieces, axis=0)
        if not np.all(np.isfinite(out)):
            raise FloatingPointError(
                "the audio encoder produced inf/nan (fp16 overflow on the NPU?); check the model conversion")
        return out

    def _run(self, mel: np.ndarray, v: EncoderVariant, clip_frames: int | None = None,
             stems: Optional[StemMemo] = None) -> np.ndarray:
        """One graph call on ``mel``, a piece of a clip of ``clip_frames`` frames (default: the piece
        is the whole clip). The conv masks follow the official batch: only a clip shorter than one
        chunk runs its chunk unpadded; the partial last chunk of a longer clip, chained piece or
        not, is zero-padded to a whole chunk like every other chunk of that clip."""
        n = mel.shape[1]
        n_tok = tokens_for_frames(n)
        padded = np.zeros((1, self.n_mels, v.frames), np.float32)
        padded[0, :, :n] = mel
        m1, m2 = conv_masks(n if clip_frames is None else clip_frames, v.n_chunks)
        bias = attention_bias(n_tok, v.tokens, self.window_tokens)
        if self.form == "merged":
            out = self.runner.run_merged(v, padded, m1, m2, bias)
            self.calls += 1
        else:
            n_real_chunks = -(-n // CHUNK_FRAMES)
            parts = []
            for c in range(n_real_chunks):
                sl = slice(c * CHUNK_FRAMES, (c + 1) * CHUNK_FRAMES)
                # a whole chunk (all its frames real, so its masks are all ones) may have its stem kept
                whole = stems is not None and (c + 1) * CHUNK_FRAMES <= n
                kept = stems.get(padded[:, :, sl].tobytes()) if whole else None
                if kept is None:
                    kept = self.runner.run_frontend(padded[:, :, sl], m1[c:c + 1], m2[c:c + 1])
                    self.calls += 1
                parts.append(kept)
            hidden = np.concatenate(parts, axis=1)
            d = hidden.shape[2]
            full = np.zeros((1, v.tokens, d), np.float32)
            full[:, :hidden.shape[1]] = hidden
            out = self.runner.run_backend(v, full, bias)
            self.calls += 1
        self.seconds_encoded += v.seconds
        return np.asarray(out, dtype=np.float32)[0, :n_tok]
