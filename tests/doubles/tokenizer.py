"""A tokenizer with given pieces, in place of qwen3asr.tokenizer.Tokenizer.

Contract checked: the part of the tokenizer qwen3asr_tools.espeak_align.token_spans relies on:
``encode(text)`` gives one id per piece and ``decode(ids)`` joins the pieces, with a word's
leading space inside its first token as in byte-level BPE.
"""

from __future__ import annotations


class CharTokenizer:
    """Tokens of 1-2 characters, with the leading space of a word inside the token (as BPE)."""

    def __init__(self, pieces):
        self.pieces = pieces

    def encode(self, text):
        assert "".join(self.pieces) == text
        return list(range(len(self.pieces)))

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)
