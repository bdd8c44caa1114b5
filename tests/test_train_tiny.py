"""scripts/train_tiny.py: the training examples (prompt, answer and loss positions)."""

import os
import random

import pytest

torch = pytest.importorskip("torch")
import train_tiny  # noqa: E402
from qwen3asr.tokenizer import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_dir(os.path.join(ROOT, "models", "default"))


def _sample(tok, text, language="English", frames=250):
    return train_tiny.Sample(0, frames, text, language, tuple(tok.encode(text)))


def _decode(tok, ids):
    return tok.decode([int(i) for i in ids], skip_special_tokens=False)


def test_plain_example_learns_header_text_and_end(tok):
    cfg = train_tiny.TrainConfig(forced_language=0.0, context_share=0.0, prefix_share=0.0)
    collate = train_tiny.Collator(tok, cfg, ["x"])
    s = _sample(tok, "open the back door")
    input_ids, attn, labels = collate([s], random.Random(0))
    row, lab = input_ids[0], labels[0]
    n = int(attn[0].sum())
    assert _decode(tok, row[:n]).endswith("<|im_start|>assistant\nlanguage English<asr_text>open the back door<|im_end|>")
    target = lab[lab != -100]
    assert _decode(tok, target) == "language English<asr_text>open the back door<|im_end|>"
    # position j predicts token j + 1
    pos = (lab != -100).nonzero().flatten()
    assert (row[pos + 1] == lab[pos]).all()


def test_prefix_example_puts_part_of_the_transcript_in_the_prompt(tok):
    cfg = train_tiny.TrainConfig(forced_language=0.0, context_share=0.0, prefix_share=1.0)
    collate = train_tiny.Collator(tok, cfg, ["x"])
    s = _sample(tok, "open the back door")
    seen = set()
    for seed in range(20):
        input_ids, attn, labels = collate([s], random.Random(seed))
        row, lab = input_ids[0], labels[0]
        n = int(attn[0].sum())
        whole = _decode(tok, row[:n])
        assert whole.endswith("assistant\nlanguage English<asr_text>open the back door<|im_end|>")
        target = _decode(tok, lab[lab != -100])
        assert target.endswith("<|im_end|>") and "language" not in target  # the header is given
        given = whole[:len(whole) - len(target)]
        assert given.endswith(tuple("open the back door"[:i] for i in range(1, 18)))  # 1..len-1 tokens given
        pos = (lab != -100).nonzero().flatten()
        assert (row[pos + 1] == lab[pos]).all()
        seen.add(target)
    assert len(seen) > 1  # the cut point varies


def test_no_speech_and_one_token_texts_are_never_cut(tok):
    cfg = train_tiny.TrainConfig(forced_language=0.0, context_share=0.0, prefix_share=1.0)
    collate = train_tiny.Collator(tok, cfg, ["x"])
    none = _sample(tok, "", language="None")
    _, _, labels = collate([none], random.Random(0))
    assert _decode(tok, labels[0][labels[0] != -100]) == "language None<asr_text><|im_end|>"
    one = _sample(tok, "三", language="Chinese")
    assert len(one.text_ids) == 1
    _, _, labels = collate([one], random.Random(0))
    assert _decode(tok, labels[0][labels[0] != -100]) == "language Chinese<asr_text>三<|im_end|>"
