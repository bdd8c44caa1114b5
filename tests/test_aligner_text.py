"""The aligner's text rules, input layout and repair against the official code (qwen-asr 0.0.6).

Word units and the repair are compared with the official ``Qwen3ForceAlignProcessor`` (compiled
from its source by ``official_ref.official_aligner_text``) on thousands of random inputs; the
token ids with the official processor's tokenizer; the whole chain with the official
``Qwen3ForcedAligner.align()`` on random-weight aligner checkpoints.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import sys

import numpy as np
import pytest

from qwen3asr.aligner.timing import SEGMENT_TIME_MS, Span, _kept_subsequence, repair, slot_milliseconds, word_spans
from qwen3asr.aligner.words import (
    ALIGNER_LANGUAGES,
    IDEOGRAPH_RANGES,
    TIMESTAMP,
    OptionalDependencyError,
    align_words,
    aligner_text,
    encode_words,
    korean_word_list,
    slot_text,
)
from qwen3asr.errors import Qwen3ASRError
from qwen3asr.languages import SUPPORTED_LANGUAGES, LanguageError
from qwen3asr.tokenizer import Tokenizer, TokenizerError

N_REPAIR = 6000  # random slot-time sequences
N_SPANS = 2000  # random class sequences through word_spans
N_WORDS = 6000  # random texts through the whitespace path
N_KOREAN = 3000
N_JAPANESE = 400
N_IDS = 1500  # random texts through the tokenizer

KOREAN_DICT_SHA256 = "cc157a9ab78f92bf11ed98a69b285768d6627cf5cd57a581e6c06693effce37d"
AUDIO_START, AUDIO_END, AUDIO_PAD, TIMESTAMP_ID = 151669, 151670, 151676, 151705
AUDIO_BLOCK = "<|audio_start|><|audio_pad|><|audio_end|>"  # the official input text before the words
SPACE_LANGUAGES = [n for n in SUPPORTED_LANGUAGES if n not in ("Japanese", "Korean")]


@pytest.fixture(scope="module")
def official():
    from qwen3asr_tools.official_ref import official_aligner_text

    try:
        return official_aligner_text().processor
    except RuntimeError as exc:
        pytest.skip(f"the official qwen-asr source is not installed: {exc}")


def _has(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


# ------------------------------------------------------------------ random inputs

def _ideograph_edges():
    """Each official ideograph range's ends and middle, and the code points just outside."""
    codes = []
    for lo, hi in IDEOGRAPH_RANGES:
        codes += [lo, hi, (lo + hi) // 2, lo - 1, hi + 1]
    # letters and numbers near the ideographs that are not among them: Extension F and G, the
    # Compatibility Supplement, 〇 (Nl), 々 (Lm), a Hangzhou numeral (Nl), Yi, radicals (So)
    codes += [0x2CEB0, 0x2EBE0, 0x30000, 0x2F800, 0x3007, 0x3005, 0x3021, 0xA000, 0x2E80, 0x2F00]
    return [chr(c) for c in codes]


IDEOGRAPH_EDGES = _ideograph_edges()
ATOMS = [
    "Hello", "world", "It's", "don't", "don’t", "rock'n'roll", "'90s", "state-of-the-art", "e-mail", "U.S.A.",
    "3.14", "1,000", "50%", "C++", "#tag", "@user", "https://x.y/z?a=1", "iPhone", "McDonald", "O'Neil",
    "naïve", "nai\u0308ve", "café", "cafe\u0301", "Straße", "ǅemal", "ʰ", "ʼ", "Ⅻ", "²", "½", "①", "٣٤", "३",
    "Ａｂｃ", "１２３", "ｶﾀｶﾅ", "<timestamp>", "<|audio_pad|>", "<asr_text>", "Привет", "мир", "Γειά", "สวัสดี",
    "नमस्ते", "مرحبا", "שלום", "你好", "世界", "こんにちは", "カタカナ", "안녕하세요", "😀", "👍🏽", "👨‍👩‍👧",
    "🇯🇵", "❤️", "™", "©", "°C", "$5", "€", "¥100", "…", "—", "–", "‐", "−", "'", "’", "‘", "＇", '"', "«»",
    "「", "」", "。", "、", "，", "！", "？", "(", ")", "[", "]", "/", "\\", "_", "*", "&", "a", "I", "x",
]
# what str.split() splits on, and look-alikes it does not (ZWSP, BOM, MVS, ZWJ)
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\x0b", "\x0c", "\u3000", "\u00a0", "\u2003", "\u2028", "\u2029",
              "\x85", "\x1c", "\x1f", "\u200b", "\ufeff", "\u180e", "\u200d"]
_BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0x97F),
           (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2150, 0x218F), (0x2460, 0x24FF),
           (0x3000, 0x30FF), (0x3400, 0x4DFF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFB4F),
           (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6FF), (0x2A700, 0x2CEBF),
           (0x2F800, 0x2FA1F), (0x30000, 0x3134F), (0xE0000, 0xE007F)]


def _random_char(rng: random.Random, surrogates: bool) -> str:
    r = rng.random()
    if r < 0.25:
        return rng.choice(IDEOGRAPH_EDGES)
    if surrogates and r < 0.27:
        return chr(rng.randint(0xD800, 0xDFFF))
    lo, hi = rng.choice(_BLOCKS)
    return chr(rng.randint(lo, hi))


def random_text(rng: random.Random, surrogates: bool = False, atoms=ATOMS) -> str:
    parts = []
    for _ in range(rng.randint(0, 12)):
        r = rng.random()
        if r < 0.45:
            parts.append(rng.choice(atoms))
        elif r < 0.8:
            parts.append("".join(_random_char(rng, surrogates) for _ in range(rng.randint(1, 6))))
        else:
            parts.append(rng.choice(WHITESPACE))
        if rng.random() < 0.5:
            parts.append(rng.choice(WHITESPACE))
    return "".join(parts)


@functools.lru_cache(maxsize=1)
def _korean_entries():
    return sorted(korean_word_list()[0])


def random_korean(rng: random.Random) -> str:
    entries = _korean_entries()
    endings = ["은", "는", "이", "가", "을", "를", "에서", "으로", "하다", "합니다", "입니다", "요", "했다"]
    pieces = []
    for _ in range(rng.randint(0, 8)):
        r = rng.random()
        if r < 0.5:
            piece = rng.choice(entries) + (rng.choice(endings) if rng.random() < 0.7 else "")
        elif r < 0.75:
            piece = "".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(rng.randint(1, 6)))
        else:
            piece = random_text(rng)
        if rng.random() < 0.3:
            piece += rng.choice([".", ",", "!", "?", "…", "'", "’", "~"])
        pieces.append(piece)
    return "".join(p + rng.choice([" ", " ", " ", "\n", "\u3000", ""]) for p in pieces)


def random_japanese(rng: random.Random) -> str:
    kana = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)]
    kanji = "日本語東京行来見食話書読今年時間会社学生先生大小上下中国人手気出入"
    atoms = ["です", "ます", "でした", "ました", "これは", "テスト", "。", "、", "「", "」", "！", "？", "ｶﾀｶﾅ",
             "ＡＢＣ", "１２３", "2026年", "Hello", "iPhone", "😀", " ", "\u3000", "\n", "ー", "々", "〇"]
    out = []
    for _ in range(rng.randint(0, 15)):
        r = rng.random()
        if r < 0.35:
            out.append("".join(rng.choice(kana) for _ in range(rng.randint(1, 4))))
        elif r < 0.6:
            out.append("".join(rng.choice(kanji) for _ in range(rng.randint(1, 3))))
        elif r < 0.9:
            out.append(rng.choice(atoms))
        else:
            out.append(random_text(rng))
    return "".join(out)


# ------------------------------------------------------------------ word units

def test_the_aligner_stages_use_numpy_and_the_stdlib_only():
    """No torch, transformers or official code at run time; nagisa is the one optional import."""
    import ast

    allowed = set(sys.stdlib_module_names) | {"numpy", "nagisa", "qwen3asr", ""}
    pkg = os.path.join(os.path.dirname(sys.modules["qwen3asr"].__file__), "aligner")
    offenders = []
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    mods = [node.module]
                else:
                    continue
                offenders += [f"{name}:{node.lineno} {m}" for m in mods if m.split(".")[0] not in allowed]
    assert offenders == []


@pytest.mark.parametrize("text, language, expected", [
    ("Hello, world! It's 2026 打开灯.", "English", ["Hello", "world", "It's", "2026", "打", "开", "灯"]),
    ("state-of-the-art don’t e\u0301te", "en", ["stateoftheart", "dont", "ete"]),
    ("Hello世界ok 〇々", "Chinese", ["Hello", "世", "界", "ok", "〇々"]),
    ("  \t\n", "French", []),
    ("!!! — …", "German", []),
])
def test_word_units_examples(text, language, expected):
    assert align_words(text, language) == expected


def test_whitespace_words_equal_the_official_on_random_texts(official):
    rng = random.Random(24)
    mismatches = []
    for n in range(N_WORDS):
        text = random_text(rng, surrogates=True)
        language = rng.choice(SPACE_LANGUAGES)
        want, want_text = official.encode_timestamp(text, language)
        got = align_words(text, language)
        if got != want or AUDIO_BLOCK + slot_text(got) != want_text:
            mismatches.append((text, language, got, want))
    assert mismatches == []


def test_every_ideograph_range_and_its_neighbours(official):
    """Each official range's ends are one word each; the code points just outside stay in runs."""
    for lo, hi in IDEOGRAPH_RANGES:
        for code in (lo, hi, lo - 1, hi + 1):
            text = f"a{chr(code)}{chr(code)}b"
            assert align_words(text, "Chinese") == official.encode_timestamp(text, "Chinese")[0]
    assert align_words("a\u4e00\u4e00b", "zh") == ["a", "\u4e00", "\u4e00", "b"]
    assert align_words("a\U0002ceb0\U0002ceb0b", "zh") == ["a\U0002ceb0\U0002ceb0b"]  # Extension F


def test_korean_word_list_is_the_official_file(official):
    from qwen3asr_tools.official_ref import official_aligner_text

    ours = os.path.join(os.path.dirname(sys.modules["qwen3asr"].__file__), "data", "korean_dict_jieba.dict")
    theirs = os.path.join(os.path.dirname(official_aligner_text().path), "assets", "korean_dict_jieba.dict")
    with open(ours, "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == KOREAN_DICT_SHA256
    with open(theirs, "rb") as f:
        assert f.read() == data
    entries, longest = korean_word_list()
    assert entries == frozenset(official.ko_score) and longest == max(map(len, official.ko_score))


def test_korean_words_equal_the_official_on_random_texts(official):
    pytest.importorskip("soynlp", reason="the official Korean word units need soynlp (dev extra)")
    rng = random.Random(82)
    mismatches = []
    for _ in range(N_KOREAN):
        text = random_korean(rng)
        want, want_text = official.encode_timestamp(text, "Korean")
        got = align_words(text, "ko")
        if got != want or AUDIO_BLOCK + slot_text(got) != want_text:
            mismatches.append((text, got, want))
    assert mismatches == []


def test_korean_needs_no_extra_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "soynlp", None)
    monkeypatch.setitem(sys.modules, "soynlp.tokenizer", None)
    # 학생 is the longest entry that starts 학생입니다; no entry starts 콯콯콯: whole
    assert align_words("저는 학생입니다. 콯콯콯!", "Korean") == ["저는", "학생", "입니다", "콯콯콯"]


def test_japanese_words_equal_the_official_on_random_texts(official):
    pytest.importorskip("nagisa", reason="Japanese word units need nagisa (the ja and dev extras)")
    rng = random.Random(81)
    mismatches = []
    for _ in range(N_JAPANESE):
        text = random_japanese(rng)
        want, _ = official.encode_timestamp(text, "Japanese")
        got = align_words(text, "ja")
        if got != want:
            mismatches.append((text, got, want))
    assert mismatches == []
    assert align_words("東京タワーに行きました。", "Japanese") == ["東京", "タワー", "に", "行き", "まし", "た"]


def test_japanese_without_nagisa_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "nagisa", None)
    with pytest.raises(OptionalDependencyError, match=r"pip install 'qwen3asr-rk\[ja\]'") as info:
        align_words("東京", "Japanese")
    assert isinstance(info.value, ImportError) and isinstance(info.value, Qwen3ASRError)


@pytest.mark.parametrize("language", [None, "", "  "])
def test_the_language_is_required(language):
    with pytest.raises(LanguageError, match="the aligner needs the language"):
        align_words("hello", language)


def test_unknown_language_lists_the_accepted_ones():
    with pytest.raises(LanguageError, match=r"unsupported language 'Klingon'; accepted: Chinese \(zh\)"):
        align_words("hello", "klingon")


def test_text_must_be_str():
    with pytest.raises(TypeError, match="text must be str, got bytes"):
        align_words(b"hello", "English")


def test_aligner_languages_are_the_real_configs():
    assert ALIGNER_LANGUAGES == ("Chinese", "Cantonese", "English", "German", "Spanish", "French", "Italian",
                                 "Portuguese", "Russian", "Korean", "Japanese")
    assert set(ALIGNER_LANGUAGES) <= set(SUPPORTED_LANGUAGES)


# ------------------------------------------------------------------ the repair

def _other_choice(values):
    """The repair with the LATEST predecessor and the LAST chain end instead of the official
    earliest ones: where it differs, the subsequence choice matters."""
    n = len(values)
    dp, parent = [1] * n, [-1] * n
    for i in range(n):
        for j in range(i):
            if values[j] <= values[i] and dp[j] + 1 >= dp[i]:
                dp[i], parent[i] = dp[j] + 1, j
    i = max(range(n), key=lambda k: (dp[k], k))
    kept = set()
    while i != -1:
        kept.add(i)
        i = parent[i]
    return kept


def _random_sequence(rng: random.Random):
    n = rng.choice([1, 2, 3, 4, 5, 8, 12, 20, 40, 64]) if rng.random() < 0.97 else rng.randint(100, 300)
    kind = rng.randrange(7)
    if kind == 0:  # small alphabet: ties and plateaus
        return [rng.randint(0, rng.choice([1, 2, 3, 5])) for _ in range(n)]
    if kind == 1:  # what the aligner gives: rising bins x 80 with outliers
        t, out = 0, []
        for _ in range(n):
            t += rng.choice([0, 0, 1, 1, 2, 3])
            out.append((rng.randint(0, 200) if rng.random() < 0.2 else t) * 80)
        return out
    if kind == 2:  # bursts of outliers (runs of 3 and more)
        out, t = [], 0
        while len(out) < n:
            t += rng.randint(0, 5)
            if rng.random() < 0.25:
                out += [rng.randint(0, 400) for _ in range(rng.randint(1, 6))]
            else:
                out.append(t)
        return out[:n]
    if kind == 3:
        return [rng.randint(0, 4999) * 80 for _ in range(n)]
    if kind == 4:
        v = rng.randint(0, 100)
        return [v] * n
    if kind == 5:
        return sorted((rng.randint(0, 50) for _ in range(n)), reverse=rng.random() < 0.5)
    return [rng.randint(-5, 5) + 0.5 * rng.randint(0, 3) for _ in range(n)]  # negatives, fractions


def _runs(values):
    """(length, has left neighbour, has right neighbour) of each run off the kept subsequence."""
    kept, out, i, n = _kept_subsequence([float(v) for v in values]), [], 0, len(values)
    while i < n:
        if kept[i]:
            i += 1
            continue
        j = i
        while j < n and not kept[j]:
            j += 1
        out.append((j - i, i > 0, j < n))
        i = j
    return out


def test_repair_equals_the_official_on_random_sequences(official):
    rng = random.Random(7)
    mismatches, choice_matters = [], 0
    branches = dict.fromkeys(["1 both", "2 both", "short left edge", "short right edge", "long both",
                              "long left edge", "long right edge"], 0)
    for _ in range(N_REPAIR):
        values = _random_sequence(rng)
        want = official.fix_timestamp(np.asarray(values, dtype=np.float64))
        got = repair(values)
        if got != want:
            mismatches.append((values, got, want))
        kept = {i for i, k in enumerate(_kept_subsequence([float(v) for v in values])) if k}
        choice_matters += kept != _other_choice(values)
        for length, left, right in _runs(values):
            size = "long" if length > 2 else "short"
            if left and right:
                branches["long both" if size == "long" else f"{length} both"] += 1
            else:
                branches[f"{size} {'right' if left else 'left'} edge"] += 1
    assert mismatches == []
    assert choice_matters > N_REPAIR // 10  # many inputs have several longest subsequences
    assert min(branches.values()) > 50, branches


@pytest.mark.parametrize("values, expected", [
    ([0, 80, 4000, 160, 240], [0, 80, 80, 160, 240]),  # one outlier, tie between neighbours: the left
    ([0, 80, 4000, 4000, 240, 320, 400], [0, 80, 80, 240, 240, 320, 400]),  # two: each takes the nearer
    # two longest chains (0 80 4000 4000 and 0 80 240 320): the one that ends first is kept
    ([0, 80, 4000, 4000, 240, 320], [0, 80, 4000, 4000, 4000, 4000]),
    ([0, 80, 9000, 8000, 7000, 400, 480], [0, 80, 160, 240, 320, 400, 480]),  # three: interpolated
    ([0, 100, 900, 800, 700, 200, 300], [0, 100, 125, 150, 175, 200, 300]),
    ([0, 100, 900, 800, 700, 201, 301], [0, 100, 125, 150, 175, 201, 301]),  # 125.25 150.5 175.75 truncated
    ([0, 100, 900, 800, 700, 200], [0, 100, 900, 900, 900, 900]),  # right edge copies its neighbour
    ([5000, 5000, 5000, 0, 80, 160, 240], [0, 0, 0, 0, 80, 160, 240]),  # left edge copies its neighbour
    ([7], [7]),
])
def test_repair_examples(official, values, expected):
    assert repair(values) == expected == official.fix_timestamp(np.asarray(values, dtype=np.float32))


def test_repair_of_nothing_is_nothing(official):
    assert repair([]) == []
    with pytest.raises(ValueError):  # the official max() of an empty list; align() never gets there
        official.fix_timestamp(np.zeros(0, dtype=np.float32))


def test_repair_is_not_quadratic():
    rng = random.Random(3)
    values = [rng.randint(0, 5000) * 80 for _ in range(200_000)]
    out = repair(values)
    assert len(out) == len(values) and all(a <= b for a, b in zip(out, out[1:]))


# ------------------------------------------------------------------ spans

def test_word_spans_equal_the_official_chain_on_random_classes(official):
    rng = random.Random(11)
    mismatches = []
    for _ in range(N_SPANS):
        n_words = rng.randint(1, 30)
        t, classes = 0, []
        for _ in range(2 * n_words):
            t += rng.choice([0, 1, 2, 4])
            classes.append(rng.randint(0, 4999) if rng.random() < 0.15 else min(t, 4999))
        ms = np.asarray(classes, dtype=np.int64).astype(np.float32) * np.float32(80.0)
        want = [(round(it["start_time"] / 1000.0, 3), round(it["end_time"] / 1000.0, 3))
                for it in official.parse_timestamp([f"w{i}" for i in range(n_words)], ms)]
        got = [(s.start, s.end) for s in word_spans(classes, n_words)]
        if got != want:
            mismatches.append((classes, got, want))
    assert mismatches == []


@pytest.mark.parametrize("segment_time", [80, 80.3, 7.77, 12.5, 1000 / 12.5])
def test_slot_milliseconds_are_the_official_float32_product(segment_time):
    torch = pytest.importorskip("torch", reason="the official product is a torch op")
    classes = list(range(0, 5000, 7)) + [4999]
    want = (torch.tensor(classes, dtype=torch.int64) * float(segment_time)).numpy().tolist()
    assert slot_milliseconds(classes, segment_time) == want


def test_word_spans_shapes_and_errors():
    assert word_spans([3, 5], 0) == [] and word_spans([], 0) == []
    assert word_spans([1, 2, 2, 3], 2) == [Span(0.08, 0.16), Span(0.16, 0.24)]
    assert word_spans(np.array([12, 25]), 1, segment_time=SEGMENT_TIME_MS) == [Span(0.96, 2.0)]
    with pytest.raises(ValueError, match="2 words need 4 slot classes, got 3"):
        word_spans([1, 2, 3], 2)
    with pytest.raises(ValueError, match="classes must be a 1-D sequence of ints"):
        word_spans([1.5, 2.0], 1)
    with pytest.raises(ValueError, match="n_words must be >= 0"):
        word_spans([], -1)


# ------------------------------------------------------------------ token ids

@pytest.fixture(scope="module")
def aligner_ckpt():
    pytest.importorskip("torch", reason="random checkpoints are built with the official code (torch)")
    from fixtures import aligner_checkpoint

    return aligner_checkpoint("fa-tiny-a")


@pytest.fixture(scope="module")
def aligner_tok(aligner_ckpt):
    return Tokenizer.from_dir(aligner_ckpt)


@pytest.fixture(scope="module")
def processor(aligner_ckpt):
    from qwen3asr_tools.official_ref import official_processor

    return official_processor(aligner_ckpt)


def test_slot_layout(aligner_tok):
    t = encode_words(aligner_tok, ["Hello", "It's", "打"])
    ts = aligner_tok.token_id(TIMESTAMP)
    assert ts == TIMESTAMP_ID
    assert t.ids.tolist() == [9707, ts, ts, 2132, 594, ts, ts, 75437, ts, ts]
    assert t.slots.tolist() == [1, 2, 5, 6, 8, 9] and t.n_slots == 6 and t.words == ("Hello", "It's", "打")
    assert t.ids.dtype == np.int64 and not t.ids.flags.writeable and not t.slots.flags.writeable
    empty = encode_words(aligner_tok, [])
    assert empty.ids.tolist() == [ts, ts] and empty.slots.tolist() == [0, 1] and empty.words == ()
    assert aligner_text(aligner_tok, "Hello, world!", "en").words == ("Hello", "world")


def test_slot_layout_needs_an_aligner_tokenizer():
    from fixtures import tokenizer_dir

    with pytest.raises(TokenizerError, match="has no <timestamp> token: it is not a Qwen3-ForcedAligner tokenizer"):
        encode_words(Tokenizer.from_dir(tokenizer_dir()), ["Hello"])


def test_a_word_may_not_hold_a_slot(aligner_tok):
    with pytest.raises(ValueError, match="1 words should give 2 <timestamp> slots, got 3"):
        encode_words(aligner_tok, ["a<timestamp>b"])


def test_ids_equal_the_official_processor_on_random_texts(official, aligner_tok, processor):
    rng = random.Random(5)
    mismatches = []
    for n in range(N_IDS):
        if n % 10 == 9 and _has("soynlp"):
            text, language = random_korean(rng), "Korean"
        else:
            text, language = random_text(rng), rng.choice(SPACE_LANGUAGES)
        words, input_text = official.encode_timestamp(text, language)
        want = processor.tokenizer(input_text)["input_ids"]
        got = encode_words(aligner_tok, align_words(text, language))
        if [AUDIO_START, AUDIO_PAD, AUDIO_END] + got.ids.tolist() != want or list(got.words) != words:
            mismatches.append((text, got.ids.tolist(), want))
    assert mismatches == []


def test_ids_after_the_audio_block_with_real_audio(official, aligner_tok, processor):
    rng = np.random.default_rng(0)
    for seconds, text in [(0.7, "Hello, world!"), (2.3, "iPhone 打开灯 it's"), (1.0, "")]:
        wav = (rng.standard_normal(int(16000 * seconds)) * 0.1).astype(np.float32)
        _, input_text = official.encode_timestamp(text, "English")
        want = processor(text=[input_text], audio=[wav], return_tensors="np", padding=True)["input_ids"][0].tolist()
        n_audio = want.count(AUDIO_PAD)
        ours = encode_words(aligner_tok, align_words(text, "English")).ids.tolist()
        assert want == [AUDIO_START] + [AUDIO_PAD] * n_audio + [AUDIO_END] + ours


def test_the_official_local_directory_path_tokenizes_with_the_mistral_regex(aligner_ckpt, aligner_tok):
    """Qwen3ForcedAligner.from_pretrained(local_dir) passes fix_mistral_regex=True; transformers
    4.57.6 then swaps in a Mistral pre-tokenizer regex (config.json written by 4.57.6). Our ids are
    those of the Qwen2 regex (hub-name loading); words with a lower-to-upper case change differ."""
    from qwen3asr_tools.official_ref import official_modules
    from transformers import AutoProcessor

    official_modules()
    patched = AutoProcessor.from_pretrained(aligner_ckpt, fix_mistral_regex=True).tokenizer
    assert patched("iPhone")["input_ids"] == [72, 6939]
    assert encode_words(aligner_tok, ["iPhone"]).ids.tolist()[:-2] == [44740]
    assert patched("Hello")["input_ids"] == encode_words(aligner_tok, ["Hello"]).ids.tolist()[:-2]


# ------------------------------------------------------------------ the official aligner on random weights

def _read_config(ckpt):
    with open(os.path.join(ckpt, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def test_random_aligner_checkpoint_config(aligner_ckpt, processor):
    cfg = _read_config(aligner_ckpt)
    th = cfg["thinker_config"]
    assert th["model_type"] == "qwen3_forced_aligner" and th["classify_num"] == 50
    assert th["text_config"]["vocab_size"] == 152064 and th["text_config"]["tie_word_embeddings"] is False
    assert (cfg["timestamp_token_id"], cfg["timestamp_segment_time"]) == (151705, 80)
    assert cfg["support_languages"] == list(ALIGNER_LANGUAGES)
    assert processor.tokenizer.convert_tokens_to_ids("<timestamp>") == TIMESTAMP_ID


ALIGN_CASES = [
    ("Hello, world! It's 2026 打开灯. iPhone", "English"),
    ("我们今天去北京，好吗？", "Chinese"),
    ("저는 학생입니다.", "Korean"),
    ("東京タワーに行きました。", "Japanese"),
    ("", "English"),
]


@pytest.mark.parametrize("preset, classify_num", [("fa-tiny-a", 50), ("fa-tiny-odd", 37)])
def test_the_official_aligner_runs_on_a_random_checkpoint(preset, classify_num):
    pytest.importorskip("torch", reason="the official aligner needs torch")
    from fixtures import aligner_checkpoint
    from qwen3asr_tools.official_ref import official_align, official_aligner

    ckpt = aligner_checkpoint(preset)
    aligner = official_aligner(ckpt)
    tok = Tokenizer.from_dir(ckpt)
    rng = np.random.default_rng(1)
    for text, language in ALIGN_CASES:
        if language == "Japanese" and not _has("nagisa"):
            continue
        if language == "Korean" and not _has("soynlp"):
            continue
        wav = (rng.standard_normal(16000 * 2) * 0.1).astype(np.float32)
        got = official_align(aligner, wav, text, language)
        ours = encode_words(tok, align_words(text, language))
        assert [it[0] for it in got.items] == list(ours.words)
        n_audio = got.input_ids.tolist().count(AUDIO_PAD)
        assert got.input_ids.tolist() == [AUDIO_START] + [AUDIO_PAD] * n_audio + [AUDIO_END] + ours.ids.tolist()
        assert got.slot_logits.shape == (ours.n_slots, classify_num) and got.slot_logits.dtype == np.float32
        spans = word_spans(got.slot_logits.argmax(-1), len(ours.words))
        assert [(s.start, s.end) for s in spans] == [(it[1], it[2]) for it in got.items]
        times = [t for it in got.items for t in it[1:]]
        assert times == sorted(times)
        for t in times:  # a bin (multiple of 80 ms) or a value the repair interpolated between two
            assert round(t * 1000) % 80 == 0 or any(a < t < b for a, b in zip(times, times[1:]))


def test_fa_0_6b_has_the_real_aligner_shapes():
    torch = pytest.importorskip("torch", reason="the official classes need torch")
    from qwen3asr_tools.make_random_checkpoint import aligner_config_dict
    from qwen3asr_tools.official_ref import official_modules

    cfg = aligner_config_dict("fa-0.6b")
    th = cfg["thinker_config"]
    a, t = th["audio_config"], th["text_config"]
    assert (a["d_model"], a["encoder_layers"], a["encoder_attention_heads"], a["encoder_ffn_dim"], a["output_dim"],
            a["n_window"], a["n_window_infer"], a["downsample_hidden_size"]) == (1024, 24, 16, 4096, 1024, 50, 800, 480)
    assert (t["hidden_size"], t["num_hidden_layers"], t["num_attention_heads"], t["num_key_value_heads"],
            t["head_dim"], t["intermediate_size"], t["vocab_size"], t["max_position_embeddings"]) == (
        1024, 28, 16, 8, 128, 3072, 152064, 8192)
    assert t["rope_scaling"]["mrope_section"] == [24, 20, 20] and th["classify_num"] == 5000
    mods = official_modules()
    with torch.device("meta"):
        model = mods.Qwen3ASRForConditionalGeneration(mods.Qwen3ASRConfig(**cfg))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    thinker = model.thinker
    assert tuple(thinker.lm_head.weight.shape) == (5000, 1024)
    assert round(count(thinker.audio_tower) / 1e6, 1) == 316.4
    assert round(count(thinker.model) / 1e6, 1) == 596.2


def test_aligner_tokenizer_files_add_the_timestamp_token():
    from qwen3asr_tools.make_tokenizer_files import tokenizer_config

    asr, fa = tokenizer_config()["added_tokens_decoder"], tokenizer_config(aligner=True)["added_tokens_decoder"]
    assert "151705" not in asr
    assert (fa["151705"]["content"], fa["151705"]["special"]) == ("<timestamp>", False)
    assert (fa["151675"]["content"], fa["151675"]["special"]) == ("<non_speech>", False)
    assert [fa[str(i)]["content"] for i in (151677, 151703)] == ["<blank1>", "<blank27>"]
    assert all(fa[str(i)]["special"] for i in range(151677, 151704))
    assert {k: v for k, v in fa.items() if k not in asr} == {"151705": fa["151705"]}


def test_aligner_presets_and_their_errors(tmp_path):
    from fixtures import aligner_checkpoint
    from qwen3asr_tools.make_random_checkpoint import ALIGNER_PRESETS, aligner_config_dict, restore_aligner_type

    assert {p: a.classify_num for p, a in ALIGNER_PRESETS.items()} == {
        "fa-tiny-a": 50, "fa-tiny-b": 63, "fa-tiny-odd": 37, "fa-0.6b": 5000}
    with pytest.raises(ValueError, match="unknown aligner preset 'tiny-a'; accepted: fa-tiny-a, fa-tiny-b"):
        aligner_config_dict("tiny-a")
    with pytest.raises(ValueError, match="unknown aligner preset 'tiny-a'"):
        aligner_checkpoint("tiny-a")
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {"model_type": "qwen3_asr_thinker"}}))
    with pytest.raises(RuntimeError, match=r"dropped \['timestamp_token_id', 'timestamp_segment_time', "
                                           r"'thinker_config.classify_num'\]"):
        restore_aligner_type(str(tmp_path))
