import json
import os
import random
import shutil

import pytest

from fixtures import tokenizer_dir
from qwen3asr.bpe import tokenizer_json
from qwen3asr.languages import SUPPORTED_LANGUAGES
from qwen3asr.prompt import build_prompt, fixed_prompt_texts
from qwen3asr.token_table import TOKEN_TABLE, write_token_table
from qwen3asr.tokenizer import IncrementalDecoder, Tokenizer, TokenizerError


@pytest.fixture(scope="module")
def tdir():
    return tokenizer_dir()


@pytest.fixture(scope="module")
def table_dir(tdir, tmp_path_factory):
    """The tokenizer files with the token table a bundle carries (the fixed prompt texts)."""
    d = tmp_path_factory.mktemp("table")
    for name in os.listdir(tdir):
        shutil.copy(os.path.join(tdir, name), d / name)
    write_token_table(str(d), fixed_prompt_texts())
    return str(d)


@pytest.fixture(scope="module", params=["files", "table"])
def tok(request, tdir, table_dir):
    """Every test below runs on the tokenizer built from the files and on one loaded from a token
    table (which builds the `tokenizers` pipeline only for texts the table does not hold)."""
    t = Tokenizer.from_dir(tdir if request.param == "files" else table_dir)
    assert (t._pipeline is None) == (request.param == "table")
    return t


@pytest.fixture(scope="module")
def hf(tdir):
    transformers = pytest.importorskip("transformers", reason="transformers is the reference tokenizer")
    t = transformers.AutoTokenizer.from_pretrained(tdir)
    assert type(t).__name__ == "Qwen2TokenizerFast"
    return t


# ----------------------------------------------------------------- known ids


@pytest.mark.parametrize(
    "text, ids",
    [
        ("language English", [11528, 6364]),
        ("system", [8948]),
        ("user", [872]),
        ("assistant", [77091]),
        ("\n", [198]),
        ("language Chinese", [11528, 8453]),
        ("<asr_text>", [151704]),
        ("<|im_start|>system\n", [151644, 8948, 198]),
    ],
)
def test_known_ids(tok, text, ids):
    assert tok.encode(text) == ids


def test_special_ids_resolved_by_name(tok):
    assert (tok.endoftext, tok.im_start, tok.im_end) == (151643, 151644, 151645)
    assert (tok.audio_start, tok.audio_end, tok.audio_pad) == (151669, 151670, 151676)
    assert tok.asr_text == 151704
    assert tok.eos_ids == (151645, 151643)
    assert tok.vocab_size == 151705
    assert tok.token_id("Ċ") == 198


def test_token_id_unknown_name(tok):
    with pytest.raises(TokenizerError, match=r"'<\|no_such_token\|>' is not in the tokenizer"):
        tok.token_id("<|no_such_token|>")


def test_asr_text_is_not_special(tok, tdir):
    with open(os.path.join(tdir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    assert cfg["added_tokens_decoder"]["151704"] == {
        "content": "<asr_text>",
        "lstrip": False,
        "normalized": False,
        "rstrip": False,
        "single_word": False,
        "special": False,
    }
    assert cfg["added_tokens_decoder"]["151676"]["special"] is True
    assert not tok.is_special(151704)
    assert tok.is_special(151645)
    # Decoding with special tokens skipped keeps <asr_text>, drops <|im_end|>.
    ids = tok.encode("language English<asr_text>Hello.<|im_end|>")
    assert ids[-1] == 151645
    assert tok.decode(ids) == "language English<asr_text>Hello."
    assert tok.decode(ids, skip_special_tokens=False) == "language English<asr_text>Hello.<|im_end|>"


# ----------------------------------------------------------------- round trips

ROUND_TRIP = [
    "甚至出现交易几乎停滞的情况。",
    "And so, my fellow Americans, ask not what your country can do for you.",
    "今天的meeting改到3点, OK?  Let's go!",
    "emoji 😀👍🏽 👩‍💻 and flags 🇨🇳🇺🇸",
    "Ελληνικά, русский, עברית, العربية, हिन्दी, ภาษาไทย, 한국어, 日本語のテキスト",
    "tabs\tand\nnewlines\r\n  and   spaces  ",
    "𠀀𪚥 rare CJK extension characters",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_nfc_normalisation(tok):
    # "e" + combining acute is normalised to "é" before tokenisation.
    assert tok.encode("cafe\u0301") == tok.encode("café")
    assert tok.decode(tok.encode("cafe\u0301")) == "café"


def test_ids_beyond_tokenizer_decode_to_nothing(tok):
    # The embedding has 151936 rows; ids 151705.. are padding rows with no token.
    assert tok.decode([9707, 151800, 151935]) == tok.decode([9707])


# ----------------------------------------------------------------- versus Qwen2TokenizerFast


def _varied_strings(n=300):
    rng = random.Random(1234)
    pieces = [
        "hello", " world", "Hello", "HELLO", "I'm", " it's", "we'LL", "don't", "123", "4567890", "3.14",
        " ", "  ", "\n", "\n\n", "\r\n", "\t", " \n ", "你好", "世界", "，", "。", "甚至", "😀", "👩‍💻",
        "é", "e\u0301", "ß", "Ω", "ﬁ", "<|im_start|>", "<|im_end|>", "<asr_text>", "<|audio_pad|>",
        "<|audio_start|>", "<think>", "<|endoftext|>", "language", " English", "<|im_start", "|>",
        "$", "#@!", "...", "---", "http://x.y/z?a=1", "  leading", "trailing  ", "ÄÖÜ", "русский",
        "日本語", "한국어", "ไทย", "\u200b", "\u00a0", "a" * 30, "ab" * 25,
    ]
    out = []
    for _ in range(n):
        out.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))))
    return out


def test_encode_matches_qwen2_tokenizer_fast(tok, hf):
    mismatches = []
    for s in _varied_strings():
        ours = tok.encode(s)
        ref = hf(s)["input_ids"]
        if ours != ref:
            mismatches.append((s, ours, ref))
    assert mismatches == []


def test_decode_matches_qwen2_tokenizer_fast(tok, hf):
    rng = random.Random(99)
    for s in _varied_strings(100):
        ids = tok.encode(s)
        for skip in (True, False):
            assert tok.decode(ids, skip) == hf.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)
    # Arbitrary id sequences, including ones that cut multi-byte characters.
    for _ in range(50):
        ids = [rng.randrange(0, 151705) for _ in range(rng.randint(1, 12))]
        assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


# ----------------------------------------------------------------- incremental decoding


def _stream(dec: IncrementalDecoder, ids):
    pieces = [dec.push(i) for i in ids]
    pieces.append(dec.flush())
    return pieces


def test_incremental_decoder_chinese(tok):
    text = "甚至出现交易几乎停滞的情况。𠀀𪚥龘靐齉爩，这是一个测试😀👩‍💻。"
    ids = tok.encode("language Chinese<asr_text>" + text + "<|im_end|>")
    dec = tok.incremental_decoder()
    pieces = _stream(dec, ids)
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == tok.decode(ids) == "language Chinese<asr_text>" + text
    # The rare characters are split over several byte tokens: some pushes return "".
    assert any(p == "" for p in pieces[:-1])


def test_incremental_decoder_holds_partial_character(tok):
    b2 = [tok.token_id(c) for c in ("ä", "¸", "Ń")]  # bytes E4 B8 AD = "中"
    dec = tok.incremental_decoder()
    assert dec.push(b2[0]) == ""
    assert dec.pending
    assert dec.push(b2[1]) == ""
    assert dec.push(b2[2]) == "中"
    assert not dec.pending
    assert dec.flush() == ""


def test_incremental_decoder_invalid_bytes_match_decode(tok):
    # A lone continuation byte can never complete: it becomes U+FFFD, as in decode().
    lone = tok.token_id("¸")  # byte B8
    ids = [9707, lone, 9707]
    pieces = _stream(tok.incremental_decoder(), ids)
    assert "".join(pieces) == tok.decode(ids) == "Hello\ufffdHello"
    # A dangling lead byte at the end is flushed as U+FFFD.
    ids = [9707, tok.token_id("ä")]
    pieces = _stream(tok.incremental_decoder(), ids)
    assert pieces[-2:] == ["", "\ufffd"]
    assert "".join(pieces) == tok.decode(ids)


def test_incremental_decoder_keeps_specials_when_asked(tok):
    ids = tok.encode("hi<|im_end|>")
    assert "".join(_stream(tok.incremental_decoder(skip_special_tokens=False), ids)) == "hi<|im_end|>"
    assert "".join(_stream(tok.incremental_decoder(), ids)) == "hi"


# ----------------------------------------------------------------- loading


def _slow_files(tdir):
    """vocab, merges and added tokens of a tokenizer directory's slow files."""
    with open(os.path.join(tdir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(tdir, "merges.txt"), encoding="utf-8") as f:
        merges = [tuple(line.rstrip("\n").split(" ")) for line in f if line.strip() and not line.startswith("#version")]
    with open(os.path.join(tdir, "tokenizer_config.json"), encoding="utf-8") as f:
        added = [dict(v, id=int(k)) for k, v in json.load(f)["added_tokens_decoder"].items()]
    return vocab, merges, added


def test_tokenizer_json_is_used_when_present(tok, tdir, tmp_path):
    vocab, merges, added = _slow_files(tdir)
    with open(tmp_path / "tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab, merges, added), f)
    t2 = Tokenizer.from_dir(str(tmp_path))
    s = "<|im_start|>system\n今天 weather's fine 😀<|im_end|>"
    assert t2.encode(s) == tok.encode(s)
    assert t2.asr_text == 151704 and not t2.is_special(151704)


def test_missing_directory(tmp_path):
    with pytest.raises(TokenizerError, match="tokenizer directory not found"):
        Tokenizer.from_dir(str(tmp_path / "nope"))


def test_missing_files(tdir, tmp_path):
    shutil.copy(os.path.join(tdir, "vocab.json"), tmp_path / "vocab.json")
    with pytest.raises(TokenizerError, match="lacks merges.txt, tokenizer_config.json"):
        Tokenizer.from_dir(str(tmp_path))


def test_corrupt_vocab(tdir, tmp_path):
    for name in ("merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(tdir, name), tmp_path / name)
    (tmp_path / "vocab.json").write_text('{"a": 0,', encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"cannot read .*vocab\.json"):
        Tokenizer.from_dir(str(tmp_path))


def test_corrupt_merges(tdir, tmp_path):
    for name in ("vocab.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tdir, name), tmp_path / name)
    (tmp_path / "merges.txt").write_text("#version: 0.2\nĠ t\nthree parts here\n", encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"merges\.txt:3: a merge is two tokens"):
        Tokenizer.from_dir(str(tmp_path))


def test_config_without_added_tokens(tdir, tmp_path):
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(tdir, name), tmp_path / name)
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 10}', encoding="utf-8")
    with pytest.raises(TokenizerError, match="has no added_tokens_decoder"):
        Tokenizer.from_dir(str(tmp_path))


def test_added_token_id_mismatch(tdir, tmp_path):
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(tdir, name), tmp_path / name)
    cfg = {"added_tokens_decoder": {"151700": {"content": "<|im_end|>", "special": True}}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"'<\|im_end\|>' should have id 151700, the tokenizer gives 151643"):
        Tokenizer.from_dir(str(tmp_path))


def test_files_read_by_tokenizers_give_the_json_route_tokenizer(tok, tdir):
    """The slow files are parsed by `tokenizers` itself (qwen3asr.bpe._from_files, what
    from_dir uses for them); the tokenizer it builds serialises exactly as the one built from
    tokenizer_json(), the pipeline of transformers' Qwen2TokenizerFast."""
    from tokenizers import Tokenizer as Backend

    from qwen3asr.bpe import _from_files

    vocab, merges, added = _slow_files(tdir)
    reference = json.loads(Backend.from_str(json.dumps(tokenizer_json(vocab, merges, added))).to_str())
    fast = _from_files(tdir)  # None would mean from_dir fell back to the JSON route
    assert fast is not None
    assert json.loads(fast[0].to_str()) == reference
    assert json.loads(tok._bpe.backend.to_str()) == reference



# ----------------------------------------------------------------- token table


def _random_ids(rng, n):
    """Id runs as a decoder makes them and worse: byte tokens that cut characters, added tokens
    (special or not), ids past the tokenizer (embedding padding rows)."""
    out = []
    for _ in range(n):
        r = rng.random()
        out.append(rng.randrange(0, 256) if r < 0.4 else rng.randrange(151643, 151936) if r < 0.6
                   else rng.randrange(0, 151643))
    return out


def test_table_answers_prompts_and_decoding_without_bpe(tdir, table_dir):
    files, table = Tokenizer.from_dir(tdir), Tokenizer.from_dir(table_dir)
    for compact in (False, True):
        for lang in (None,) + SUPPORTED_LANGUAGES:
            if compact and lang:
                continue
            a, b = build_prompt(files, 39, language=lang, compact=compact), build_prompt(table, 39, language=lang,
                                                                                         compact=compact)
            assert a.ids.tolist() == b.ids.tolist() and a.audio_start == b.audio_start
    rng = random.Random(7)
    for _ in range(400):
        ids = _random_ids(rng, rng.randint(0, 16))
        for skip in (True, False):
            assert table.decode(ids, skip) == files.decode(ids, skip)
            dec = table.incremental_decoder(skip)
            assert "".join([dec.push(i) for i in ids] + [dec.flush()]) == files.decode(ids, skip)
    assert (table.vocab_size, table.max_token_bytes, table.eos_ids, table.added_tokens) == \
        (files.vocab_size, files.max_token_bytes, files.eos_ids, files.added_tokens)
    assert [table.is_special(i) for i in range(151640, 151710)] == [files.is_special(i) for i in range(151640, 151710)]
    assert table._pipeline is None  # nothing above built the pipeline
    # Any other text builds it, once, and gets the same ids.
    assert table.encode("hello 世界<asr_text>") == files.encode("hello 世界<asr_text>")
    assert table._pipeline is not None and table.token_id("Ċ") == 198


def test_table_pipeline_is_built_once_under_threads(table_dir, monkeypatch):
    import threading

    from qwen3asr.bpe import BPE

    built = []
    real = BPE.from_dir.__func__

    def counting(cls, path):
        built.append(path)
        return real(cls, path)

    monkeypatch.setattr(BPE, "from_dir", classmethod(counting))
    t = Tokenizer.from_dir(table_dir)
    assert built == []
    results, go = [], threading.Barrier(4)

    def work():
        go.wait()
        results.append(t.encode("one two three"))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert built == [table_dir] and len(results) == 4 and all(r == results[0] for r in results)


def test_stale_or_corrupt_table_is_not_used(table_dir, tmp_path, caplog):
    for name in os.listdir(table_dir):
        shutil.copy(os.path.join(table_dir, name), tmp_path / name)
    # another merges file: the table's digests no longer match, the files decide
    merges = (tmp_path / "merges.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "merges.txt").write_text("".join(merges[:-1]), encoding="utf-8")
    with caplog.at_level("WARNING", logger="qwen3asr.token_table"):
        t = Tokenizer.from_dir(str(tmp_path))
    assert t._pipeline is not None and "was written for other tokenizer files" in caplog.text
    caplog.clear()
    (tmp_path / TOKEN_TABLE).write_bytes(b"PK\x03\x04 not a zip")
    with caplog.at_level("WARNING", logger="qwen3asr.token_table"):
        t = Tokenizer.from_dir(str(tmp_path))
    assert t._pipeline is not None and "is unreadable" in caplog.text
    assert t.encode("<|im_start|>system\n") == [151644, 8948, 198]


def test_table_is_reproducible(table_dir, tmp_path):
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(table_dir, name), tmp_path / name)
    write_token_table(str(tmp_path), fixed_prompt_texts())
    assert (tmp_path / TOKEN_TABLE).read_bytes() == open(os.path.join(table_dir, TOKEN_TABLE), "rb").read()


@pytest.mark.parametrize("bundle, texts", [("default", True), ("default-aligner", False)])
def test_bundled_models_carry_their_current_table(bundle, texts, tmp_path):
    """models/default and models/default-aligner hold the table the exporter writes today."""
    src = os.path.join(os.path.dirname(__file__), "..", "models", bundle)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), tmp_path / name)
    write_token_table(str(tmp_path), fixed_prompt_texts() if texts else [])
    assert (tmp_path / TOKEN_TABLE).read_bytes() == open(os.path.join(src, TOKEN_TABLE), "rb").read()
    assert Tokenizer.from_dir(src)._pipeline is None
