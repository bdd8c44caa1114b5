import dataclasses
import math
import os
import random

import numpy as np
import pytest

from fixtures import checkpoint, tokenizer_dir
from qwen3asr.languages import (
    LANGUAGE_CODES,
    SUPPORTED_LANGUAGES,
    LanguageError,
    language_code,
    normalize_language_name,
    resolve_language,
)
from qwen3asr.prompt import build_prompt, fix_repetitions, parse_asr_output, parse_language_header, prompt_text
from qwen3asr.prompt import compact_savings
from qwen3asr.tokenizer import Tokenizer

PREFIX = [151644, 8948, 198, 151645, 198, 151644, 872, 198, 151669]
SUFFIX = [151670, 151645, 198, 151644, 77091, 198]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EN2 = os.path.join(ROOT, "audio", "en_2.wav")


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_dir(tokenizer_dir())


@pytest.fixture(scope="module")
def engine(default_engine):
    """The bundled default model (conftest's ``engine`` is a random-weight bundle)."""
    return default_engine


@pytest.fixture(scope="module")
def official():
    pytest.importorskip("torch", reason="the official processor needs torch")
    pytest.importorskip("transformers", reason="the official processor needs transformers")
    from qwen3asr_tools import official_ref

    try:
        official_ref.official_modules()
    except RuntimeError as exc:
        pytest.skip(f"official qwen-asr code not importable: {exc}")
    return official_ref


@pytest.fixture(scope="module")
def processor(official):
    return official.official_processor(checkpoint("tiny-a"))


# ----------------------------------------------------------------- prompt ids


def test_empty_context_prompt_ids(tok):
    p = build_prompt(tok, 5)
    assert p.ids.dtype == np.int64
    assert p.ids.tolist() == PREFIX + [151676] * 5 + SUFFIX
    assert p.audio_start == 9 and p.n_audio == 5 and p.language is None
    assert p.ids[p.audio_slice].tolist() == [151676] * 5
    assert len(p) == 9 + 5 + 6


def test_forced_language_suffix(tok):
    p = build_prompt(tok, 2, language="english")
    assert p.language == "English"
    assert p.ids.tolist() == PREFIX + [151676] * 2 + SUFFIX + [11528, 6364, 151704]
    assert build_prompt(tok, 2, language="en").ids.tolist() == p.ids.tolist()


def test_prompt_is_immutable(tok):
    p = build_prompt(tok, 3, context="hi")
    with pytest.raises(ValueError):
        p.ids[0] = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.n_audio = 4


@pytest.mark.parametrize("n", [0, -1, True, 2.5, "3"])
def test_bad_audio_count(tok, n):
    with pytest.raises(ValueError, match="n_audio_tokens must be a positive int"):
        build_prompt(tok, n)


def test_context_with_audio_pad_rejected(tok):
    with pytest.raises(ValueError, match=r"context must not contain '<\|audio_pad\|>'"):
        build_prompt(tok, 3, context="x<|audio_pad|>y")


def test_unknown_language_rejected(tok):
    with pytest.raises(LanguageError, match=r"unsupported language 'Klingon'; accepted: Chinese \(zh\), English \(en\)"):
        build_prompt(tok, 3, language="klingon")


CASES = [
    ("", None, 1),
    ("", None, 13),
    ("", None, 39),
    ("Hot words: Qwen3-ASR, RK3588, 瑞芯微.", None, 13),
    ("  leading spaces and\nnewlines\n", None, 39),
    ("", "English", 13),
    ("", "Chinese", 1),
    ("会议记录", "Cantonese", 39),
]


@pytest.mark.parametrize("context, language, n", CASES)
def test_prompt_matches_official_processor(tok, official, processor, context, language, n):
    ref = official.official_input_ids(processor, n, context=context, language=language)
    ours = build_prompt(tok, n, context=context, language=language)
    assert ours.ids.tolist() == ref
    # The string form too, and our tokenizer on it.
    assert prompt_text(context, language, n) == processor.replace_multimodal_special_tokens(
        [official.official_prompt_text(processor, context, language)], iter([n])
    )[0]
    assert tok.encode(prompt_text(context, language, n)) == ref


@pytest.mark.parametrize("seconds", [1.0, 2.37, 10.4])
def test_prompt_matches_processor_with_audio(tok, official, processor, seconds):
    wav = (np.random.RandomState(0).randn(int(seconds * 16000)) * 0.1).astype(np.float32)
    text = official.official_prompt_text(processor, "ctx", None)
    inputs = processor(text=[text], audio=[wav], return_tensors="np", padding=True)
    ids = inputs["input_ids"][0].tolist()
    n = ids.count(151676)
    t = int(inputs["feature_attention_mask"][0].sum())
    r = t % 100  # N(T) = 13*floor(T/100) + ceil(ceil(ceil(r/2)/2)/2)
    assert n == 13 * (t // 100) + math.ceil(math.ceil(math.ceil(r / 2) / 2) / 2)
    assert t == len(wav) // 160
    assert build_prompt(tok, n, context="ctx").ids.tolist() == ids


# ----------------------------------------------------------------- output parsing


@pytest.mark.parametrize(
    "raw, forced, expected",
    [
        ("language English<asr_text>Hello there.", None, ("English", "Hello there.")),
        ("language Chinese<asr_text>甚至出现交易几乎停滞的情况。", None, ("Chinese", "甚至出现交易几乎停滞的情况。")),
        ("language None<asr_text>", None, (None, "")),
        ("language None<asr_text> stray", None, (None, "stray")),
        ("  language english<asr_text>  spaced  ", None, ("English", "spaced")),
        ("language Chinese\nextra\n<asr_text>文本", None, ("Chinese", "文本")),
        ("no tag at all", None, (None, "no tag at all")),
        ("something<asr_text>text", None, (None, "text")),
        ("language <asr_text>text", None, (None, "text")),
        ("Hello there.", "English", ("English", "Hello there.")),
        ("Hello there.", "en", ("English", "Hello there.")),
        ("", None, (None, "")),
        (None, None, (None, "")),
        ("   ", "English", (None, "")),
        ("a<asr_text>b<asr_text>c", None, (None, "b<asr_text>c")),
    ],
)
def test_parse_asr_output(raw, forced, expected):
    assert parse_asr_output(raw, forced) == expected


def test_unsupported_language_in_output_is_unknown():
    # The model may write any word as its language; that must not raise (engine.result maps
    # the name to a code) but give an unknown language and keep the text.
    assert parse_asr_output("language Klingon<asr_text>nuqneH") == (None, "nuqneH")
    assert parse_language_header("language Klingon") is None
    assert parse_language_header("language cantonese") == "Cantonese"
    assert parse_language_header("language None") is None and parse_language_header("") is None


def test_parse_runaway_repetition():
    raw = "language Chinese<asr_text>好的" + "哈" * 200 + "谢谢" + "对不起" * 30
    assert parse_asr_output(raw) == ("Chinese", "好的哈谢谢对不起")
    # The output is stripped first, so the last "yes" lacks its space and stays.
    raw = "language English<asr_text>" + "yes " * 25
    assert parse_asr_output(raw) == ("English", "yes yes")


def test_parse_matches_official(official):
    u = official.official_text_utils()
    cases = [
        "language English<asr_text>Hello.",
        "language None<asr_text>",
        "language chinese\n<asr_text>你好",
        "plain",
        "language Chinese<asr_text>" + "啊" * 21,
        "language Chinese<asr_text>" + "啊" * 20 + "x" * 30,
        "",
        "language English<asr_text>" + "la " * 40 + "end",
    ]
    for raw in cases:
        lang, text = parse_asr_output(raw)
        ref_lang, ref_text = u.parse_asr_output(raw)
        assert (lang or "", text) == (ref_lang, ref_text), raw
        assert parse_asr_output(raw, "English")[1] == u.parse_asr_output(raw, user_language="English")[1]


def test_fix_repetitions_matches_official(official):
    u = official.official_text_utils()
    rng = random.Random(7)
    alphabet = ["a", "b", "哈", "。", " ", "ab", "xyz", "好的", "la "]
    for _ in range(400):
        s = "".join(
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) * rng.choice([1, 2, 19, 20, 21, 33])
            for _ in range(rng.randint(0, 5))
        )
        assert fix_repetitions(s) == u.detect_and_fix_repetitions(s), s


def test_fix_repetitions_threshold_edges():
    assert fix_repetitions("x" * 20) == "x" * 20  # not more than 20 and too short for the pattern scan
    assert fix_repetitions("x" * 21) == "x"
    assert fix_repetitions("ab" * 19 + "c" * 3) == "ab" * 19 + "ccc"
    assert fix_repetitions("ab" * 20) == "ab"
    assert fix_repetitions("pre" + "abc" * 20 + "post") == "preabcpost"


# ----------------------------------------------------------------- languages


def test_language_table():
    assert len(SUPPORTED_LANGUAGES) == 30
    assert len(set(LANGUAGE_CODES.values())) == 30
    assert SUPPORTED_LANGUAGES[:3] == ("Chinese", "English", "Cantonese")
    assert [language_code(n) for n in ("Chinese", "english", "CANTONESE", "Filipino", "Persian", "Macedonian")] == [
        "zh", "en", "yue", "fil", "fa", "mk",
    ]


def test_language_table_matches_official(official):
    assert list(SUPPORTED_LANGUAGES) == list(official.official_text_utils().SUPPORTED_LANGUAGES)


@pytest.mark.parametrize(
    "given, expected",
    [("English", "English"), ("cHINese", "Chinese"), ("  german ", "German"), ("yue", "Cantonese"),
     ("EN", "English"), (None, None), ("", None), ("  ", None)],
)
def test_resolve_language(given, expected):
    assert resolve_language(given) == expected


def test_normalize_language_name_errors():
    with pytest.raises(LanguageError, match="language is None"):
        normalize_language_name(None)
    with pytest.raises(LanguageError, match="language is empty"):
        normalize_language_name("  ")
    assert normalize_language_name("cHINese") == "Chinese"


def test_unsupported_language_lists_accepted():
    with pytest.raises(LanguageError) as err:
        resolve_language("Esperanto")
    msg = str(err.value)
    assert msg.startswith("unsupported language 'Esperanto'; accepted: ")
    assert "Macedonian (mk)" in msg and "Filipino (fil)" in msg
    with pytest.raises(ValueError):  # LanguageError is a ValueError
        language_code("zh-CN")


# ------------------------------------------------------------------ compact prompt

def test_compact_prompt_drops_the_system_turn_and_the_header(engine):
    tok = engine.tokenizer
    official = build_prompt(tok, 13)
    compact = build_prompt(tok, 13, compact=True)
    text = tok.decode(compact.ids.tolist(), skip_special_tokens=False)
    assert text.startswith("<|im_start|>user\n<|audio_start|>") and text.endswith("<|im_start|>assistant\n<asr_text>")
    assert "system" not in text
    saved = compact_savings(tok)
    assert len(official) - len(compact) == saved["system"] - 1
    assert saved["total"] == saved["system"] + saved["header"] and saved["header"] >= 2
    r_off = engine.transcribe(EN2)
    r_cmp = engine.transcribe(EN2, compact_prompt=True)
    assert r_cmp.stats.prefill_tokens == r_off.stats.prefill_tokens - (saved["system"] - 1)
    assert r_cmp.language is None and "language" not in r_cmp.raw_text
    assert engine.transcribe(EN2, compact_prompt=True, language="en").language == "English"
