"""The forced aligner (qwen3asr.aligner.ForcedAligner) against the official Qwen3-ForcedAligner:
the exported aligner bundle, the time-class logits at every slot, and the word items, on
random-weight official checkpoints of three shapes (odd widths and few heads included)."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest

pytest.importorskip("torch", reason="the random aligner checkpoints are built with the official code (torch)")

import bundles  # noqa: E402
from qwen3asr import BundleError, Qwen3ASREngine  # noqa: E402
from qwen3asr.aligner import AlignmentError, ForcedAligner  # noqa: E402
from qwen3asr.audio import prepare_audio  # noqa: E402
from qwen3asr.backends import BackendOptions  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EN = os.path.join(ROOT, "audio", "en_1.wav")
ZH = os.path.join(ROOT, "audio", "zh_1.wav")
TEXTS = (("open the back door, please! It's 2026.", "English"), ("把客厅的灯打开 ok", "Chinese"),
         ("학생입니다 지금", "Korean"), ("Bonjour, l'été", "French"))


@pytest.fixture(scope="module")
def official():
    from qwen3asr_tools.official_ref import official_align, official_aligner

    cache = {}

    def run(preset, audio, text, language):
        ck, _ = bundles.aligner_bundle(preset)
        if ck not in cache:
            cache[ck] = official_aligner(ck)
        return official_align(cache[ck], prepare_audio(audio), text, language)

    return run


def _metrics(ours, ref):
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min()), float((a.argmax(1) == b.argmax(1)).mean())


@pytest.mark.parametrize("preset", ["fa-tiny-a", "fa-tiny-b", "fa-tiny-odd"])
@pytest.mark.parametrize("form", ["merged", "split"])
def test_fp32_slot_logits_and_words_equal_the_official_aligner(official, preset, form):
    _, bundle = bundles.aligner_bundle(preset)
    with ForcedAligner(bundle, backend="onnx", options=BackendOptions(encoder_form=form, decoder_dtype="fp32")) as al:
        for (text, lang), audio in zip(TEXTS, (EN, ZH, EN, ZH)):
            ref = official(preset, audio, text, lang)
            layout, logits = al.slot_logits(audio, text, lang)
            assert logits.shape == ref.slot_logits.shape == (2 * len(layout.words), al.classes)
            cos, agree = _metrics(logits, ref.slot_logits)
            assert cos >= 0.99999 and agree == 1.0, (preset, form, lang, cos, agree)
            assert np.abs(logits - ref.slot_logits).max() < 1e-4
            words = al.align(audio, text, lang)
            end = math.floor(prepare_audio(audio).shape[0] / 16) / 1000  # ours are clipped to the clip (whole ms)
            clipped = [(t, min(a, end), min(b, end)) for t, a, b in ref.items]
            assert [(w.word, w.start, w.end) for w in words] == clipped


def test_a_perturbed_weight_fails_the_comparison(official, tmp_path):
    """The comparison would catch a real bug: one layer's norm weight 5 % off moves the logits."""
    _, bundle = bundles.aligner_bundle("fa-tiny-a", decoders=("fp32",))
    dst = tmp_path / "b"
    shutil.copytree(bundle, dst)
    import onnx
    from onnx import numpy_helper

    path = dst / "decoder" / "decoder_fp32.onnx"
    model = onnx.load(str(path))
    for init in model.graph.initializer:
        if "norm" in init.name:
            w = numpy_helper.to_array(init) * np.float32(1.05)
            init.CopyFrom(numpy_helper.from_array(w.astype(np.float32), init.name))
            break
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="decoder_fp32.onnx.data.perturbed")
    text, lang = TEXTS[0]
    ref = official("fa-tiny-a", EN, text, lang)
    with ForcedAligner(str(dst), backend="onnx", options=BackendOptions(decoder_dtype="fp32")) as al:
        _, logits = al.slot_logits(EN, text, lang)
    assert np.abs(logits - ref.slot_logits).max() > 1e-3


@pytest.mark.parametrize("dtype, min_cos", [("int8", 0.999), ("int4", 0.95)])
def test_quantised_scorers_stay_close(official, dtype, min_cos):
    """Weight-only int8/int4 decoders of the tiny widths (docs/aligner.md has the figures)."""
    _, bundle = bundles.aligner_bundle("fa-tiny-b")
    with ForcedAligner(bundle, backend="onnx", options=BackendOptions(decoder_dtype=dtype)) as al:
        for (text, lang), audio in zip(TEXTS[:2], (EN, ZH)):
            _, logits = al.slot_logits(audio, text, lang)
            cos, _ = _metrics(logits, official("fa-tiny-b", audio, text, lang).slot_logits)
            assert cos >= min_cos, (dtype, lang, cos)


def test_the_aligner_bundle_says_what_it_is():
    ck, bundle = bundles.aligner_bundle()
    man = json.load(open(os.path.join(bundle, "model.json")))
    cfg = json.load(open(os.path.join(ck, "config.json")))
    assert man["kind"] == "aligner"
    assert man["aligner"]["classify_num"] == cfg["thinker_config"]["classify_num"]
    assert man["aligner"]["timestamp_token_id"] == 151705 == man["special_tokens"]["<timestamp>"]
    assert man["aligner"]["timestamp_segment_ms"] == 80.0
    assert man["aligner"]["languages"] == cfg["support_languages"]
    head = np.load(os.path.join(bundle, man["aligner"]["head"]["file"]))
    thinker = cfg["thinker_config"]
    assert list(head.shape) == [thinker["classify_num"], thinker["text_config"]["hidden_size"]]


def test_an_asr_bundle_is_not_an_aligner_and_the_other_way_round(bundle_dir):
    _, aligner = bundles.aligner_bundle()
    with pytest.raises(BundleError, match="is a speech recognition model, not a forced aligner.*give it as the model"):
        ForcedAligner(bundle_dir, backend="onnx")
    with pytest.raises(BundleError, match="is a forced aligner .*not a speech recognition model.*as the aligner"):
        Qwen3ASREngine(aligner, backend="onnx")


def test_bad_alignment_requests_get_clear_errors():
    _, bundle = bundles.aligner_bundle()
    with ForcedAligner(bundle, backend="onnx") as al:
        with pytest.raises(AlignmentError, match="covers .*English.*not Swedish"):
            al.align(EN, "hej", "Swedish")
        with pytest.raises(AlignmentError, match="need the language"):
            al.align(EN, "open", None)
        with pytest.raises(TypeError, match="text must be str"):
            al.align(EN, b"open", "English")
        with pytest.raises(ValueError, match="offset must be a finite number"):
            al.align(EN, "open", "English", offset=float("nan"))
        assert al.align(EN, " ,!? ", "English") == ()  # no word units: nothing to time
        long = np.zeros(int(16000 * (al.max_seconds + 1)), np.float32)
        with pytest.raises(ValueError, match="over the aligner's 60 s per pass"):
            al.align(long, "open", "English")
        words = al.align(EN, "open the door", "en", offset=12.5)
        assert [w.word for w in words] == ["open", "the", "door"]
        assert all(12.5 <= w.start <= w.end for w in words)
    with pytest.raises(RuntimeError, match="closed"):
        al.align(EN, "open", "English")
