"""Transcript text helpers: streaming generated ids as text pieces, joining pieces.

Backend-independent: the pieces come from the tokenizer's incremental decoder, so every
backend's token ids give the same text.
"""

from __future__ import annotations

from typing import Callable


class TextStreamer:
    """Turns generated token ids into transcript text pieces for a callback.

    Only the transcription is emitted: the ``language X`` prefix and ``<asr_text>`` tag are
    held back (unless the answer starts inside the transcript: a forced language or the
    compact prompt), special tokens are skipped, and a multi-byte character is emitted only
    once complete. ``tokenizer`` needs ``incremental_decoder(skip_special_tokens=True)`` and
    ``asr_text`` (the tag's id).
    """

    def __init__(self, tokenizer, callback: Callable[[str], None], forced: bool):
        self._dec = tokenizer.incremental_decoder(skip_special_tokens=True)
        self._cb = callback
        self._asr_text_id = tokenizer.asr_text
        self._in_text = forced
        self._started = False

    def push(self, token_id: int) -> None:
        if token_id == self._asr_text_id and not self._in_text:
            self._in_text = True
            self._dec.flush()  # drop the buffered prefix
            return
        piece = self._dec.push(token_id)
        if self._in_text and piece:
            self._emit(piece)

    def finish(self) -> None:
        piece = self._dec.flush()
        if self._in_text and piece:
            self._emit(piece)

    def _emit(self, piece: str) -> None:
        if not self._started:
            piece = piece.lstrip()
            if not piece:
                return
            self._started = True
        self._cb(piece)


def join_text(a: str, b: str) -> str:
    """Join two transcript pieces: a space between two non-CJK word characters, else nothing."""
    a, b = a.rstrip(), b.lstrip()
    if not a or not b:
        return a + b
    if spaced(a[-1]) and spaced(b[0]):
        return a + " " + b
    return a + b


def spaced(ch: str) -> bool:
    """A character that wants a space between it and a neighbouring word: not CJK, not a space."""
    if ch.isspace():
        return False
    o = ord(ch)
    cjk = 0x2E80 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0x3000 <= o <= 0x303F or 0xFF00 <= o <= 0xFFEF
    return not cjk


__all__ = ["TextStreamer", "join_text", "spaced"]
