"""Every pipeline stage against the official implementation (seeded random weights).

mel: official WhisperFeatureExtractor; encoder: the official audio tower (with its window
mask, see scripts/compare_logits.py); injected embeddings: the official thinker's
inputs_embeds; logits: teacher-forced through our KV cache vs the official forward.
Two checkpoints of different widths, head counts and layer counts (tiny-a stored bf16 as
the real ones, tiny-b fp32), exported by the real export script, and the committed trained
model (models/default) against the official model given its weights
(qwen3asr_tools.bundle_checkpoint): trained attention is peaky where random weights attend
almost uniformly, so mask, window and position errors show on it.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # the official torch model in every test

torch = pytest.importorskip("torch", reason="the official reference needs torch (the dev extra: pip install -e '.[dev]')")
if importlib.util.find_spec("qwen_asr") is None:
    pytest.skip("the official code is missing: pip install --no-deps qwen-asr==0.0.6", allow_module_level=True)

import bundles  # noqa: E402
from qwen3asr_tools.official_ref import load_official_model, official_features  # noqa: E402
from qwen3asr import Qwen3ASREngine  # noqa: E402
from qwen3asr.audio import prepare_audio  # noqa: E402
from qwen3asr.encoder import tokens_for_frames  # noqa: E402
from qwen3asr.mel import log_mel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_CLIP = os.path.join(ROOT, "audio", "long_mixed.wav")
DEFAULT_MODEL = os.path.join(ROOT, "models", "default")  # the committed trained model
# lengths in seconds: shorter than one chunk, exactly 1 s, ragged, 8 s window, past it, 20 s
LENGTHS = (0.37, 1.0, 1.37, 8.0, 8.5, 20.0)


@pytest.fixture(scope="module")
def speech():
    """77 s of real (espeak-ng) speech in English and Mandarin, 16 kHz."""
    return prepare_audio(LONG_CLIP)


def clip(speech, seconds, offset=2.0):
    start = int(offset * 16000)
    return speech[start:start + int(round(seconds * 16000))]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


TRAINED = "default-trained"


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory):
    """The official model holding the committed trained model's weights (qwen3asr_tools.bundle_checkpoint)."""
    from qwen3asr_tools.bundle_checkpoint import checkpoint_from_bundle

    return checkpoint_from_bundle(DEFAULT_MODEL, str(tmp_path_factory.mktemp("default-checkpoint")))


@pytest.fixture(scope="module", params=list(bundles.PRESETS) + [TRAINED],
                ids=[p for p, _ in bundles.PRESETS] + [TRAINED])
def model(request):
    """(checkpoint, bundle, official model): the random-weight presets, and the trained default
    model, whose peaky attention exposes mask, window and position errors that random weights
    (attending almost uniformly) hide."""
    if request.param == TRAINED:
        ck, bd = request.getfixturevalue("trained_checkpoint"), DEFAULT_MODEL
    else:
        preset, dtype = request.param
        ck, bd = bundles.bundle(preset, dtype)
    official = load_official_model(ck, dtype=torch.float32)
    return ck, bd, official


def windowed_tower(official):
    from qwen3asr_tools import compare_logits

    compare_logits.window_official_encoder(official)
    return official.thinker.audio_tower


# ----------------------------------------------------------------------------- mel
@pytest.mark.parametrize("seconds", LENGTHS)
def test_mel_matches_official(speech, seconds):
    x = clip(speech, seconds)
    ref = official_features(None, x)
    ours = log_mel(x)
    assert ours.shape == ref.shape == (128, len(x) // 160)
    assert np.abs(ours - ref).max() <= 1e-4


def test_mel_bands_are_the_filterbank(speech):
    """log_mel_power sums each triangular filter over its few bins (mel_bands) instead of a BLAS
    matrix product, which woke numpy's BLAS threads: the same filters, and sums equal to the
    matrix product's to rounding (the float32 features compared bitwise on audio/ and random
    clips when it changed: identical)."""
    from qwen3asr import mel as melmod

    columns, weights = melmod.mel_bands(128)
    rebuilt = np.zeros((128, melmod.N_FREQ))
    np.add.at(rebuilt, (np.arange(128)[:, None], columns), weights)
    assert np.array_equal(rebuilt, melmod.mel_filters(128))
    x = clip(speech, 3.0).astype(np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(x, 200, mode="reflect"), 400)[::160][:len(x) // 160]
    spec = np.fft.rfft(frames * melmod._hann(400), axis=-1)
    product = melmod.mel_filters(128) @ (spec.real**2 + spec.imag**2).T
    np.testing.assert_allclose(melmod.log_mel_power(x), np.log10(np.maximum(product, 1e-10)), rtol=0, atol=1e-12)


def test_mel_odd_lengths_and_global_clamp(speech):
    # the official extractor's reflect padding needs > 200 samples; ours also takes 160..200
    assert log_mel(speech[40000:40160]).shape == (128, 1)
    for n in (201, 319, 399, 401, 16001, 21937):
        x = speech[40000:40000 + n]
        ref = official_features(None, x)
        ours = log_mel(x)
        assert ours.shape == ref.shape
        assert np.abs(ours - ref).max() <= 1e-4
    # the clamp uses the clip-global maximum: a loud burst lifts the floor of the whole clip
    x = clip(speech, 2.0).copy()
    quiet = log_mel(x)
    x[-800:] = 0.99 * np.sign(np.sin(np.arange(800)))
    loud = log_mel(x)
    assert loud.min() > quiet.min() + 0.1
    assert np.abs(loud - official_features(None, x)).max() <= 1e-4


# ----------------------------------------------------------------------------- encoder
def _official_encoder(tower, mel):
    with torch.no_grad():
        out = tower(torch.from_numpy(mel), feature_lens=torch.tensor([mel.shape[1]]))
    return out.last_hidden_state.numpy()


@pytest.mark.parametrize("form", ["merged", "split"])
def test_encoder_matches_official(model, speech, form):
    ck, bd, official = model
    engine = Qwen3ASREngine(bd, backend="onnx", encoder_form=form, decoder_dtype="fp32")
    tower = windowed_tower(official)
    from qwen3asr.encoder import AudioEncoder

    # one encoder per single variant (sharing the engine's sessions), and the engine's own (all variants)
    single = {v.n_chunks: AudioEncoder(engine.encoder.runner, [v], engine.encoder.window_tokens, 128, form)
              for v in engine.encoder.variants}
    for seconds in LENGTHS:
        x = clip(speech, seconds)
        mel = log_mel(x)
        ref = _official_encoder(tower, mel)
        assert ref.shape[0] == tokens_for_frames(mel.shape[1])
        fitting = [single[s] for s in sorted(single) if s * 100 >= mel.shape[1]] or [engine.encoder]  # else chained
        for enc in fitting:
            ours = enc.encode(mel)
            assert ours.shape == ref.shape, (seconds, enc.variants)
            cos = cosines(ours, ref)
            assert cos.min() >= 0.9999, (seconds, enc.variants, cos.min())


def test_trained_model_check_sees_a_small_weight_error(trained_checkpoint, speech):
    """On the trained model the encoder comparison fails for a small error in one stem conv:
    noise of 5 % of the weights' standard deviation on the official side gives a worst cosine of
    about 0.9995 (unperturbed: 0.9999999). An int8 stem that kept 0.9999993 on the random
    checkpoints fell to 0.9973 on this model (docs/benchmarks.md)."""
    tower = windowed_tower(load_official_model(trained_checkpoint, dtype=torch.float32))
    engine = Qwen3ASREngine(DEFAULT_MODEL, backend="onnx", decoder_dtype="fp32")
    mel = log_mel(clip(speech, 3.3))
    ours = engine.encode(mel)
    assert cosines(ours, _official_encoder(tower, mel)).min() >= 0.99999
    w = tower.conv2d2.weight.data
    w += 0.05 * w.std() * torch.from_numpy(np.random.default_rng(0).standard_normal(tuple(w.shape)).astype(np.float32))
    assert cosines(ours, _official_encoder(tower, mel)).min() < 0.9999


def test_checkpoint_from_bundle_says_what_it_needs(tmp_path):
    import json
    import shutil

    from qwen3asr_tools.bundle_checkpoint import checkpoint_from_bundle, main

    bd = str(tmp_path / "bundle")
    shutil.copytree(DEFAULT_MODEL, bd)
    with open(os.path.join(bd, "model.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    manifest["decoder"]["variants"] = [v for v in manifest["decoder"]["variants"] if v["dtype"] != "fp32"]
    with open(os.path.join(bd, "model.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    with pytest.raises(ValueError, match="no fp32 decoder"):
        checkpoint_from_bundle(bd, str(tmp_path / "ckpt"))
    assert main([bd, str(tmp_path / "ckpt")]) == 2


def test_encoder_short_audio_uses_unpadded_chunk(model, speech):
    """Below one chunk the official encoder runs the conv stem unpadded; the conv masks make the
    fixed-size graph do the same (without them the last tokens drift)."""
    ck, bd, official = model
    engine = Qwen3ASREngine(bd, backend="onnx", encoder_sizes=[2], decoder_dtype="fp32")
    mel = log_mel(clip(speech, 0.45))
    ref = _official_encoder(official.thinker.audio_tower, mel)
    ours = engine.encode(mel)
    assert cosines(ours, ref).min() >= 0.9999
    # the masks matter: the same graph with all-ones masks does not match at the last token
    from qwen3asr import encoder as enc

    orig = enc.conv_masks
    try:
        enc.conv_masks = lambda n, c: orig(100, c)
        bad = engine.encode(mel)
    finally:
        enc.conv_masks = orig
    err_ours = np.abs(ours[-1] - ref[-1]).max()
    err_bad = np.abs(bad[-1] - ref[-1]).max()
    assert err_bad > 100 * err_ours and err_bad > 1e-6, (err_ours, err_bad)


def test_official_cpu_attention_equals_windowed_up_to_8s(model, speech):
    """For <= 8 s the official CPU path (full attention) equals the windowed one; past 8 s it does not,
    which is why the reference gets the official window mask (documented in compare_logits.py)."""
    ck, bd, _ = model
    plain = load_official_model(ck, dtype=torch.float32).thinker.audio_tower
    windowed = windowed_tower(load_official_model(ck, dtype=torch.float32))
    short = log_mel(clip(speech, 8.0))
    err_short = np.abs(_official_encoder(plain, short) - _official_encoder(windowed, short)).max()
    long = log_mel(clip(speech, 9.0))
    err_long = np.abs(_official_encoder(plain, long) - _official_encoder(windowed, long)).max()
    # random weights attend almost uniformly, so the gap is small, but it is far above rounding
    assert err_short <= 1e-7 and err_long > 1e-6 and err_long > 20 * err_short, (err_short, err_long)


# ----------------------------------------------------------------------------- injection
def test_injected_embeddings_match_official(model, speech):
    ck, bd, official = model
    engine = Qwen3ASREngine(bd, backend="onnx", decoder_dtype="fp32")
    x = clip(speech, 3.3)
    mel = log_mel(x)
    prompt = engine.prompt(tokens_for_frames(mel.shape[1]), context="kitchen, 客厅")
    ours = engine.embed_prompt(prompt, engine.encode(mel))
    captured = {}

    def grab(module, args, kwargs):
        captured["embeds"] = kwargs["inputs_embeds"].detach().numpy()[0]

    hook = official.thinker.model.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            official.thinker(input_ids=torch.tensor(prompt.ids)[None], input_features=torch.from_numpy(mel)[None],
                             feature_attention_mask=torch.ones(1, mel.shape[1], dtype=torch.long))
    finally:
        hook.remove()
    ref = captured["embeds"]
    assert ref.shape == ours.shape
    text_rows = np.ones(len(prompt), bool)
    text_rows[prompt.audio_slice] = False
    assert np.array_equal(ours[text_rows], ref[text_rows])  # host embedding table is exact
    assert cosines(ours[prompt.audio_slice], ref[prompt.audio_slice]).min() >= 0.9999


# ----------------------------------------------------------------------------- logits
def _compare(ck, bd, audio, **kw):
    from qwen3asr_tools import compare_logits

    return compare_logits.compare(ck, bd, audio, **kw)


@pytest.mark.parametrize("teacher", ["greedy", "sample"])
def test_fp32_logits_teacher_forced(model, speech, teacher):
    ck, bd, _ = model
    rep = _compare(ck, bd, clip(speech, 9.5), max_new_tokens=32, decoder_dtype="fp32", ignore_eos=True,
                   teacher_mode=teacher, seed=3)
    s = rep["summary"]
    assert s["steps"] >= 30
    assert s["min_cosine"] >= 0.99999, s
    assert s["argmax_agreement"] == 1.0, s
    if teacher == "sample":
        assert len(set(rep["teacher_tokens"])) > 20  # varied tokens, not one repeated


def test_int8_logits_teacher_forced(model, speech, record_property):
    ck, bd, _ = model
    s = _compare(ck, bd, clip(speech, 4.0), max_new_tokens=40, decoder_dtype="int8", ignore_eos=True)["summary"]
    record_property("int8_min_cosine", s["min_cosine"])
    assert s["steps"] >= 30
    assert s["argmax_agreement"] >= 0.98, s
    assert s["min_cosine"] >= 0.999, s


def test_greedy_generation_equals_official(model, speech):
    """Our free-running greedy decode gives the official token sequence."""
    ck, bd, _ = model
    rep = _compare(ck, bd, clip(speech, 2.5), max_new_tokens=24, decoder_dtype="fp32", ignore_eos=True)
    engine = Qwen3ASREngine(bd, backend="onnx", decoder_dtype="fp32")
    from qwen3asr.decoding import DecodingOptions

    gen, _ = engine.start(clip(speech, 2.5), options=DecodingOptions(max_new_tokens=24))
    eos = set(engine.tokenizer.eos_ids)
    gen.run()
    teacher = [t for t in rep["teacher_tokens"]]
    n = len(gen.tokens)
    assert n > 0 and gen.tokens == teacher[:n]
    # an early stop is right only where the official logits also pick end-of-sequence
    # (the teacher itself never ends: its end-of-sequence tokens were suppressed)
    assert n == 24 or (gen.finish_reason == "eos" and rep["steps"][n]["argmax_ref"] in eos)
