"""scripts/make_small_tokenizer.py: the tiny model's BPE, with Mandarin numerals kept whole."""

import random

import pytest

pytest.importorskip("tokenizers")
from qwen3asr.bpe import piece_bytes  # noqa: E402
from qwen3asr_tools import make_small_tokenizer, textgen  # noqa: E402
from qwen3asr.tokenizer import Tokenizer  # noqa: E402


def _texts():
    rng = random.Random(0)
    digits = "零一二三四五六七八九"
    out = ["".join(rng.choice(digits) for _ in range(rng.randint(1, 12))) for _ in range(600)]
    out += ["把客厅的温度设成二十一度", "三千五百二十", "下午两点半", "一百零五", "turn on the light"] * 40
    return out


def _multi_numeral_tokens(vocab):
    found = []
    for piece in vocab:
        text = piece_bytes(piece).decode("utf-8", errors="replace")
        if len(text) > 1 and any(c in textgen.ZH_NUMERALS for c in text):
            found.append(text)
    return found


def test_numerals_stay_single_tokens_when_isolated(tmp_path):
    texts = _texts()
    charset = set("".join(texts)) - set("turn on the light ")
    vocab, merges = make_small_tokenizer.train_bpe(texts, 600, charset)
    # Without isolation BPE learns digit pairs (the session-3 model's "零四", "八一").
    assert _multi_numeral_tokens(vocab)
    vocab, merges = make_small_tokenizer.train_bpe(texts, 600, charset, textgen.ZH_NUMERALS)
    assert _multi_numeral_tokens(vocab) == []
    assert sorted(vocab.values()) == list(range(len(vocab)))  # contiguous ids
    assert all(a in vocab and b in vocab and a + b in vocab for a, b in merges)
    # Written out, the runtime tokenizer encodes a numeral per token and keeps other merges.
    make_small_tokenizer.write_small_tokenizer(str(tmp_path), texts, 600, charset, textgen.ZH_NUMERALS)
    tok = Tokenizer.from_dir(str(tmp_path))
    for text in ("三三三六零零六四五六九", "三千五百二十"):
        assert [tok.decode([i]) for i in tok.encode(text)] == list(text)
    ids = tok.encode("把客厅的温度设成二十一度")
    assert tok.decode(ids) == "把客厅的温度设成二十一度" and len(ids) < 12
    assert tok.encode("<asr_text>") == [tok.token_id("<asr_text>")]
