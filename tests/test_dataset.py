"""Synthetic dataset: text labels and splits, rendered audio, and the committed demo clips."""

import json
import os
import random
import shutil

import numpy as np
import pytest
import soundfile as sf

from qwen3asr_tools import make_dataset as md, textgen

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUDIO_DIR = os.path.join(ROOT, "audio")
HAVE_TOOLS = all(shutil.which(t) for t in ("espeak-ng", "sox"))
needs_tools = pytest.mark.skipif(not HAVE_TOOLS, reason="espeak-ng and sox are not installed "
                                 "(apt-get install $(cat scripts/apt-packages.txt))")

# ---------------------------------------------------------------- textgen


@pytest.mark.parametrize("n, en, zh", [
    (0, "zero", "零"), (7, "seven", "七"), (10, "ten", "十"), (15, "fifteen", "十五"),
    (40, "forty", "四十"), (105, "one hundred five", "一百零五"), (110, "one hundred ten", "一百一十"),
    (200, "two hundred", "二百"), (1005, "one thousand five", "一千零五"),
    (2222, "two thousand two hundred twenty two", "两千二百二十二"),
    (10010, "ten thousand ten", "一万零一十"), (12000, "twelve thousand", "一万两千"),
    (100000, "one hundred thousand", "十万"), (20000000, "twenty million", "两千万"),
    (30405060, "thirty million four hundred five thousand sixty", "三千零四十万五千零六十"),
])
def test_numbers_are_written_as_spoken(n, en, zh):
    assert textgen.en_number(n) == en
    assert textgen.zh_number(n) == zh


def test_number_range_errors():
    with pytest.raises(ValueError, match="0 <= n < 1e8"):
        textgen.zh_number(10**8)
    with pytest.raises(ValueError, match="0 <= n < 1e9"):
        textgen.en_number(-1)


def test_pairs_have_the_same_numbers():
    rng = random.Random(5)
    seen = {kind: 0 for kind in textgen.KIND_WEIGHTS}
    for _ in range(400):
        kind = rng.choice(list(textgen.KIND_WEIGHTS))
        en, zh = textgen.sample_pair(rng, kind)
        seen[kind] += 1
        if kind == "digits":
            words = en.split()
            assert len(words) == len(zh) and 1 <= len(zh) <= textgen.MAX_DIGITS
            assert [textgen._EN_ONES.index(w) for w in words] == ["零一二三四五六七八九".index(c) for c in zh]
    assert min(seen.values()) > 50
    assert textgen.sample_pair(random.Random(0), "time") == textgen.sample_pair(random.Random(0), "time")
    with pytest.raises(ValueError, match="unknown text kind 'poem'"):
        textgen.sample_pair(rng, "poem")


def test_command_examples_from_the_brief():
    rng = random.Random(0)
    pairs = {textgen.sample_pair(rng, "command") for _ in range(20000)}
    assert ("turn on the kitchen light", "打开厨房的灯") in pairs
    assert ("set a timer for ten minutes", "设置一个十分钟的定时器") in pairs
    assert len({en for en, _ in pairs}) > 2000  # device x action x place combinations


def test_label_charsets():
    rng = random.Random(1)
    used = {"English": set(), "Chinese": set()}
    for _ in range(20000):
        en, zh = textgen.sample_pair(rng, rng.choice(list(textgen.KIND_WEIGHTS)))
        textgen.check_label(en, "English")
        textgen.check_label(zh, "Chinese")
        used["English"] |= set(en)
        used["Chinese"] |= set(zh)
    # The recorded Chinese set is exactly what the generator uses (no stale characters).
    assert used["Chinese"] == textgen.CHINESE_CHARSET
    assert used["English"] <= textgen.ENGLISH_CHARSET == set("abcdefghijklmnopqrstuvwxyz ")
    assert len(textgen.CHINESE_CHARSET) < 250


def test_check_label_rejects_bad_labels():
    with pytest.raises(ValueError, match=r"outside the label set: \['T', '7'\]|outside the label set: \['7', 'T'\]"):
        textgen.check_label("Turn on 7", "English")
    with pytest.raises(ValueError, match="outside the label set"):
        textgen.check_label("打开厨房的灯。", "Chinese")
    with pytest.raises(ValueError, match="stray spaces"):
        textgen.check_label("turn  on", "English")
    with pytest.raises(ValueError, match="unknown language 'French'"):
        textgen.check_label("bonjour", "French")


def test_splits_are_disjoint_by_text_and_test_is_big_enough():
    for language in textgen.LANGUAGES:
        texts = {s: [u.text for u in textgen.sample_texts(s, language, n, seed=0)]
                 for s, n in (("train", 3000), ("dev", 200), ("test", 200))}
        assert len(set(texts["test"])) == 200 and len(set(texts["dev"])) == 200
        assert not set(texts["train"]) & set(texts["test"])
        assert not set(texts["train"]) & set(texts["dev"])
        assert not set(texts["dev"]) & set(texts["test"])
        for split, ts in texts.items():
            assert {textgen.split_of(t) for t in ts} == {split}
    # Another seed's training texts never reach this seed's test texts either.
    other = {u.text for u in textgen.sample_texts("train", "English", 3000, seed=9, unique=False)}
    assert not other & {u.text for u in textgen.sample_texts("test", "English", 200, seed=0)}


def test_sample_texts_is_seeded():
    a = textgen.sample_texts("test", "Chinese", 30, seed=3)
    assert a == textgen.sample_texts("test", "Chinese", 30, seed=3)
    assert a[:10] == textgen.sample_texts("test", "Chinese", 10, seed=3)
    assert a != textgen.sample_texts("test", "Chinese", 30, seed=4)
    with pytest.raises(ValueError, match="unknown split 'val'"):
        textgen.sample_texts("val", "English", 1, seed=0)


# ---------------------------------------------------------------- plans (no audio)


def test_plan_holds_out_test_voices_and_speeds():
    plans = {s: md.plan_split(s, 300, seed=0) for s in textgen.SPLITS}
    for split, specs in plans.items():
        speech = [c for c in specs if c.language != "None"]
        variants = {c.voice.partition("+")[2] for c in speech}
        speeds = [c.speed for c in speech]
        if split == "test":
            assert variants <= set(md.TEST_VARIANTS) and len(variants) >= 5
            assert all(150 <= s <= 180 for s in speeds)
        else:
            assert variants <= set(md.TRAIN_VARIANTS) and not variants & set(md.TEST_VARIANTS)
            assert not any(150 <= s <= 180 for s in speeds) and min(speeds) >= 120 and max(speeds) <= 220
        assert {c.voice.partition("+")[0] for c in speech if c.language == "Chinese"} == {md.ZH_VOICE}
        nonspeech = [c for c in specs if c.language == "None"]
        assert 5 <= len(nonspeech) <= 50
        assert all(c.text == "" and c.voice == "none" and c.kind in ("noise", "silence") for c in nonspeech)
        assert all(md.SNR_RANGE_DB[0] <= c.snr_db <= md.SNR_RANGE_DB[1] for c in speech if c.noise != "none")
    assert plans["test"] == md.plan_split("test", 300, seed=0)


# ---------------------------------------------------------------- rendered audio

COUNTS = {"train": 12, "dev": 10, "test": 10}


def _read_manifest(split_dir):
    with open(os.path.join(split_dir, "manifest.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    if not HAVE_TOOLS:
        pytest.skip("espeak-ng and sox are not installed (apt-get install $(cat scripts/apt-packages.txt))")
    a, b = tmp_path_factory.mktemp("run_a"), tmp_path_factory.mktemp("run_b")
    md.make_dataset(str(a), COUNTS, seed=7, jobs=2)
    md.make_dataset(str(b), COUNTS, seed=7, jobs=1)
    return a, b


@needs_tools
def test_same_seed_gives_identical_files(two_runs):
    a, b = two_runs
    for split in COUNTS:
        rows_a, rows_b = _read_manifest(a / split), _read_manifest(b / split)
        assert rows_a == rows_b and len(rows_a) == COUNTS[split]
        for row in rows_a:
            assert (a / split / row["audio"]).read_bytes() == (b / split / row["audio"]).read_bytes()
    assert json.loads((a / "dataset.json").read_text()) == json.loads((b / "dataset.json").read_text())


@needs_tools
def test_manifest_rows_match_audio(two_runs):
    a, _ = two_runs
    texts = {}
    for split in COUNTS:
        for row in _read_manifest(a / split):
            info = sf.info(str(a / split / row["audio"]))
            assert info.samplerate == row["sample_rate"] and info.channels == row["channels"]
            assert row["duration"] == pytest.approx(info.frames / info.samplerate, abs=1e-3)
            x, _ = sf.read(str(a / split / row["audio"]), dtype="float32")
            assert np.isfinite(x).all() and np.abs(x).max() < 1.0
            if row["language"] == "None":
                assert row["text"] == "" and row["voice"] == "none" and row["speed"] is None
                assert 1.0 <= row["duration"] <= 6.01
            else:
                textgen.check_label(row["text"], row["language"])
                assert 0.3 < row["duration"] < 15.0
                assert np.abs(x).max() > 10 ** (md.PEAK_DBFS[0] / 20) * 0.5  # not silent
                texts.setdefault(split, set()).add(row["text"])
    assert not texts["train"] & texts["test"] and not texts["dev"] & texts["test"]
    assert not texts["train"] & texts["dev"]


@needs_tools
def test_noise_and_silence_clips(tmp_path):
    md.make_noise_pool(str(tmp_path))
    for kind, level in (("noise", -30.0), ("silence", -70.0)):
        spec = md.ClipSpec(name=f"{kind}.wav", text="", language="None", kind=kind, voice="none",
                           speed=None, pitch=None, noise="pink", snr_db=None, level_dbfs=level,
                           noise_offset=0.3, pad_before=0.0, pad_after=0.0, nonspeech_seconds=2.0,
                           peak_dbfs=-6.0, via_rate=None, sample_rate=16000, channels=1)
        row = md.render_clip(spec, str(tmp_path), str(tmp_path))
        assert (row["text"], row["language"], row["duration"]) == ("", "None", 2.0)
        x, sr = sf.read(str(tmp_path / spec.name))
        rms_db = 10 * np.log10(np.mean(x**2))
        assert sr == 16000 and rms_db == pytest.approx(level, abs=1.5)


@needs_tools
def test_unknown_voice_is_a_clear_error(tmp_path):
    md.check_all_voices()
    # espeak-ng itself would silently speak these with its default voice.
    with pytest.raises(ValueError, match="espeak-ng has no voice 'no-such-voice'"):
        md.synthesize("hello", "no-such-voice", 160, 50, str(tmp_path))
    with pytest.raises(ValueError, match="no voice variant 'm99'"):
        md.synthesize("hello", "en-us+m99", 160, 50, str(tmp_path))
    assert len(md.synthesize("hello", "en-us+m3", 160, 50, str(tmp_path))) > 0.2 * md.SYNTH_RATE


# ---------------------------------------------------------------- committed demo clips


def _transcripts():
    with open(os.path.join(AUDIO_DIR, "transcripts.json"), encoding="utf-8") as f:
        return json.load(f)


def test_transcripts_match_demo_audio():
    clips = _transcripts()["clips"]
    names = {c["file"] for c in clips}
    on_disk = {f for f in os.listdir(AUDIO_DIR) if f.endswith(".wav")}
    assert names == on_disk
    languages = [c["language"] for c in clips]
    assert languages.count("English") == 3 and languages.count("Chinese") == 3
    assert languages.count("None") == 1 and languages.count("Mixed") == 1
    total = sum(os.path.getsize(os.path.join(AUDIO_DIR, f)) for f in os.listdir(AUDIO_DIR))
    assert total < 4_000_000
    for clip in clips:
        info = sf.info(os.path.join(AUDIO_DIR, clip["file"]))
        assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "PCM_16")
        assert clip["duration"] == pytest.approx(info.frames / 16000, abs=1e-3)
        segs = clip["segments"]
        if clip["language"] == "None":
            assert clip["text"] == "" and segs == []
            continue
        assert clip["text"] == " ".join(s["text"] for s in segs)
        for s in segs:
            textgen.check_label(s["text"], s["language"])
            assert textgen.split_of(s["text"]) == "test"
            assert 0 <= s["start"] < s["end"] <= clip["duration"]
        if clip["language"] != "Mixed":
            assert len(segs) == 1 and segs[0]["language"] == clip["language"]
            assert clip["voice"].partition("+")[2] in md.TEST_VARIANTS


def test_long_demo_clip_layout():
    long_clip = next(c for c in _transcripts()["clips"] if c["language"] == "Mixed")
    segs = long_clip["segments"]
    assert 60.0 <= long_clip["duration"] <= 90.0
    assert {s["language"] for s in segs} == {"English", "Chinese"}
    pauses = [b["start"] - a["end"] for a, b in zip(segs, segs[1:])]
    assert all(0.49 <= p <= 3.01 for p in pauses)
    assert max(pauses) - min(pauses) > 1.0  # varying pause lengths
    x, sr = sf.read(os.path.join(AUDIO_DIR, long_clip["file"]))
    # Speech is much louder than the pauses between segments.
    first, second = segs[0], segs[1]
    speech = x[int(first["start"] * sr):int(first["end"] * sr)]
    pause = x[int(first["end"] * sr) + 800:int(second["start"] * sr) - 800]
    assert np.sqrt(np.mean(speech**2)) > 10 * np.sqrt(np.mean(pause**2))


@needs_tools
def test_demo_clips_regenerate_identically(tmp_path):
    committed = _transcripts()
    if committed["espeak_ng"] != md._version(["espeak-ng", "--version"]):
        pytest.skip(f"demo clips were made with espeak-ng {committed['espeak_ng']}; "
                    "another version speaks differently")
    regenerated = md.make_demo_clips(str(tmp_path))
    assert regenerated == committed
    for clip in committed["clips"]:
        with open(os.path.join(AUDIO_DIR, clip["file"]), "rb") as f:
            assert (tmp_path / clip["file"]).read_bytes() == f.read()
