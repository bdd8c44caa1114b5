"""scripts/train_tiny.py: the training examples (prompt, answer and loss positions)."""

import os
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from qwen3asr_tools import train_tiny  # noqa: E402
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


# ----------------------------------------------------------------- multi-utterance examples

def _pool(tok, n=400):
    texts = [("turn on the light", "English"), ("关掉客厅的灯", "Chinese"), ("", "None"), ("three four", "English")]
    return [train_tiny.Sample(i, 200 + 37 * (i % 11), texts[i % 4][0], texts[i % 4][1],
                              tuple(tok.encode(texts[i % 4][0]))) for i in range(n)]


def test_compose_uses_every_clip_once_and_joins_the_share_asked(tok):
    samples = _pool(tok)
    cfg = train_tiny.TrainConfig(concat_share=0.3, concat_max_frames=3000, long_share=0.0)
    out = train_tiny.compose(samples, cfg, random.Random(3), tok)
    clips = [i for s in out for i in s.clips]
    assert sorted(clips) == list(range(len(samples)))
    joined = [s for s in out if s.parts]
    share = sum(len(s.parts) for s in joined) / len(samples)
    assert 0.2 < share < 0.4, share
    assert all(2 <= len(s.parts) <= 4 and s.frames <= 3000 for s in joined)
    assert all(s.frames == sum(samples[i].frames for i in s.parts) for s in joined)
    # The frame cap: no joined example longer, every clip still used once.
    capped = train_tiny.compose(samples, train_tiny.TrainConfig(concat_share=1.0, concat_max_frames=700,
                                                                long_share=0.0), random.Random(3), tok)
    assert sorted(i for s in capped for i in s.clips) == list(range(len(samples)))
    assert all(s.frames <= 700 for s in capped if s.parts) and any(s.parts for s in capped)
    assert any(not s.parts for s in capped)  # with share 1 only the cap leaves a clip alone
    with pytest.raises(ValueError, match="concat_share must be between 0 and 1"):
        train_tiny.compose(samples, train_tiny.TrainConfig(concat_share=1.5), random.Random(3), tok)
    # Off means off.
    none = train_tiny.compose(samples, train_tiny.TrainConfig(concat_share=0.0, long_share=0.0), random.Random(3),
                              tok)
    assert none == samples


def test_long_examples_join_8_to_40_clips_up_to_their_own_cap(tok):
    samples = _pool(tok, 2000)
    cfg = train_tiny.TrainConfig(concat_share=0.3, concat_max_frames=700, long_share=0.05, long_max_frames=8000)
    out = train_tiny.compose(samples, cfg, random.Random(4), tok)
    assert sorted(i for s in out for i in s.clips) == list(range(len(samples)))
    long = [s for s in out if len(s.parts) > 4]
    assert long and all(s.frames <= 8000 and len(s.parts) <= 40 for s in long)
    assert max(s.frames for s in long) > 3000  # beyond the short examples' cap
    assert all(s.frames <= 700 for s in out if 2 <= len(s.parts) <= 4)
    assert all(s.text_ids == tuple(tok.encode(s.text)) for s in long)
    # The default chance puts about 5 % of the clips into long examples.
    default = train_tiny.compose(samples, train_tiny.TrainConfig(), random.Random(4), tok)
    share = sum(len(s.parts) for s in default if len(s.parts) > 4) / len(samples)
    assert 0.01 < share < 0.15, share


def test_joined_example_reads_its_parts_in_order_under_the_first_speech_language(tok):
    samples = _pool(tok)
    out = train_tiny.compose(samples, train_tiny.TrainConfig(concat_share=1.0), random.Random(5), tok)
    seen = set()
    for s in (s for s in out if s.parts):
        parts = [samples[i] for i in s.parts]
        speech = [p for p in parts if p.language != "None"]
        assert s.language == (speech[0].language if speech else "None")
        assert s.text.replace(" ", "") == "".join(p.text for p in parts).replace(" ", "")
        assert s.text_ids == tuple(tok.encode(s.text))
        seen.add(tuple(p.language for p in parts))
        # Spaces only between two English words, none next to Chinese.
        assert "  " not in s.text and " 关" not in s.text and "灯 " not in s.text
        if [p.language for p in parts][:2] == ["English", "English"]:
            assert s.text.startswith(parts[0].text + " " + parts[1].text)
    assert any("Chinese" in langs and "English" in langs for langs in seen)


def test_joined_mel_is_the_mel_of_the_joined_audio(tok):
    """Log-mels of two real clips joined by sample_mel equal the log-mel of the joined
    waveform, but for the STFT frames that straddle the joint."""
    from qwen3asr.audio import prepare_audio
    from qwen3asr.mel import log_mel

    a = prepare_audio(os.path.join(ROOT, "audio", "en_1.wav"))
    b = 0.05 * prepare_audio(os.path.join(ROOT, "audio", "zh_1.wav"))  # much quieter: clamps differ
    b = b[:len(b) // 160 * 160]
    a = a[:len(a) // 160 * 160]
    ma, mb = log_mel(a, 128), log_mel(b, 128)
    feats = np.concatenate([ma, mb], axis=1).astype(np.float16)
    off = np.array([0, ma.shape[1], ma.shape[1] + mb.shape[1]])
    s = train_tiny.Sample(0, int(off[-1]), "x", "English", (), (0, 1))
    got = train_tiny.sample_mel(feats, off, s)
    want = log_mel(np.concatenate([a, b]), 128)
    n = min(got.shape[1], want.shape[1])
    keep = np.r_[0:ma.shape[1] - 2, ma.shape[1] + 2:n]
    assert np.abs(got[:, keep] - want[:, keep]).max() < 0.01
    # Without the second clamp the quiet clip keeps values below the joined floor.
    plain = feats.astype(np.float32)
    assert np.abs(plain[:, keep] - want[:, keep]).max() > 0.1
    # A single clip is its own slice.
    one = train_tiny.sample_mel(feats, off, train_tiny.Sample(1, int(off[2] - off[1]), "x", "Chinese", ()))
    assert np.array_equal(one, feats[:, off[1]:off[2]].astype(np.float32))


def test_joined_frame_targets_are_shifted_by_the_earlier_parts():
    spans = [[(5, 0.2, 0.5)], [], [(7, 0.1, 0.3), (8, 0.3, 0.6)]]
    off = np.array([0, 150, 250, 400])
    s = train_tiny.Sample(0, 400, "x", "English", (), (0, 1, 2))
    got = train_tiny.sample_spans(spans, off, s)
    assert [t for t, _, _ in got] == [5, 7, 8]
    assert np.allclose([(a, b) for _, a, b in got], [(0.2, 0.5), (2.6, 2.8), (2.8, 3.1)])
    assert train_tiny.sample_spans(spans, off, train_tiny.Sample(2, 150, "x", "English", ())) == spans[2]


def _crop_pool(tok):
    """Three clips of 3 s with aligned tokens: English, no speech, Chinese."""
    en, zh = tok.encode("turn on the light"), tok.encode("关掉客厅的灯")
    spans = [[(t, 0.5 + 0.5 * k, 1.0 + 0.5 * k) for k, t in enumerate(en)], [],
             [(t, 0.4 + 2.0 * k / len(zh), 0.4 + 2.0 * (k + 1) / len(zh)) for k, t in enumerate(zh)]]
    off = np.array([0, 300, 600, 900])
    texts = [("turn on the light", "English"), ("", "None"), ("关掉客厅的灯", "Chinese")]
    samples = [train_tiny.Sample(i, 300, t, lang, tuple(tok.encode(t))) for i, (t, lang) in enumerate(texts)]
    return samples, spans, off


def _expected_window(tok, spans, off, parts, a, b):
    from qwen3asr.text import join_text

    text, language, t = "", "None", 0.0
    for i in parts:
        ids = [tid for tid, x, y in spans[i] if a <= 100 * t + 100 * (x + y) / 2 < b]
        t += (off[i + 1] - off[i]) / 100.0
        piece = tok.decode(ids).strip() if ids else ""
        if piece and not text:
            language = ["English", "None", "Chinese"][i]
        text = join_text(text, piece)
    return text, language


def test_crop_keeps_the_tokens_whose_middle_is_in_the_window(tok):
    samples, spans, off = _crop_pool(tok)
    joined = train_tiny.Sample(0, 900, "", "English", (1,), (0, 1, 2))  # text unused by the crop
    cfg = train_tiny.TrainConfig(crop_share=1.0, crop_min_frames=100)
    seen_cut, seen_lang = False, set()
    for seed in range(60):
        out = train_tiny.crop_examples([joined, samples[0], samples[1]], cfg, random.Random(seed), tok, spans, off,
                                       samples)
        w, single, silent = out
        assert silent is samples[1]  # no speech: never cut
        a, b = w.crop
        assert 100 <= b - a == w.frames and 0 <= a and b <= 900 and w.parts == (0, 1, 2)
        text, language = _expected_window(tok, spans, off, (0, 1, 2), a, b)
        assert (w.text, w.language) == (text, language)
        assert w.text_ids == (tuple(tok.encode(text)) if text else ())
        seen_lang.add(w.language)
        seen_cut |= bool(w.text) and w.text not in ("turn on the light", "关掉客厅的灯", "turn on the light关掉客厅的灯")
        assert single.crop and single.text == _expected_window(tok, spans, off, (0,), *single.crop)[0]
        # The mel and frame targets are the window's.
        feats = np.random.default_rng(seed).normal(size=(128, 900)).astype(np.float16)
        full = train_tiny.sample_mel(feats, off, joined)
        assert np.array_equal(train_tiny.sample_mel(feats, off, w), full[:, a:b])
        got = train_tiny.sample_spans(spans, off, w)
        assert [t for t, _, _ in got] == [t for t, x, y in train_tiny.sample_spans(spans, off, joined)
                                          if a <= 100 * (x + y) / 2 < b]
        assert all(0 <= x <= y <= w.frames / 100 + 1e-9 for _, x, y in got)
    assert seen_cut and {"English", "Chinese", "None"} <= seen_lang
    # Off means off; the share asked is the share cut.
    assert train_tiny.crop_examples(samples, train_tiny.TrainConfig(crop_share=0.0), random.Random(0), tok, spans,
                                    off, samples) == samples
    many = [samples[0]] * 1000
    cut = train_tiny.crop_examples(many, train_tiny.TrainConfig(crop_share=0.25), random.Random(1), tok, spans, off,
                                   samples)
    assert 0.2 < sum(bool(s.crop) for s in cut) / 1000 < 0.3


def test_phase_settings():
    cfg = train_tiny.TrainConfig()
    p3, p4 = train_tiny.phase_config(cfg, 3), train_tiny.phase_config(cfg, 4)
    assert p3.prefix_share == p4.prefix_share == cfg.finetune_prefix_share > 0
    assert (p3.minutes, p3.lr, p3.long_share) == (cfg.finetune_minutes, cfg.finetune_lr, cfg.long_share)
    assert (p4.minutes, p4.lr, p4.long_share) == (cfg.long_phase_minutes, cfg.long_phase_lr, cfg.long_phase_share)
    assert p4.long_share > 5 * cfg.long_share and p3.frame_weight == p4.frame_weight == 0.0
