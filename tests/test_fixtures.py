import json
import os

import numpy as np
import pytest

import fixtures

torch = pytest.importorskip("torch", reason="random checkpoints are built with the official torch model")
pytest.importorskip("transformers", reason="random checkpoints need transformers")
pytest.importorskip("safetensors", reason="random checkpoints are safetensors files")

from qwen3asr_tools import official_ref  # noqa: E402
from qwen3asr_tools.make_random_checkpoint import PRESETS, config_dict  # noqa: E402

try:
    official_ref.official_modules()
except RuntimeError as exc:  # pragma: no cover - environment without qwen-asr
    pytest.skip(f"official qwen-asr code not importable: {exc}", allow_module_level=True)


def _read(ckpt, name):
    with open(os.path.join(ckpt, name), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("preset", ["tiny-a", "tiny-b"])
def test_checkpoint_layout_and_config(preset):
    ckpt = fixtures.checkpoint(preset)
    for name in ("config.json", "model.safetensors", "generation_config.json", "preprocessor_config.json",
                 "vocab.json", "merges.txt", "tokenizer_config.json", "chat_template.json"):
        assert os.path.isfile(os.path.join(ckpt, name)), name
    assert not os.path.exists(os.path.join(ckpt, "tokenizer.json"))  # as the real checkpoints
    cfg = _read(ckpt, "config.json")
    th = cfg["thinker_config"]
    a, t = th["audio_config"], th["text_config"]
    assert cfg["model_type"] == "qwen3_asr" and cfg["architectures"] == ["Qwen3ASRForConditionalGeneration"]
    assert (th["audio_token_id"], th["audio_start_token_id"]) == (151676, 151669)
    assert (a["n_window"], a["n_window_infer"], a["num_mel_bins"], a["max_source_positions"]) == (50, 800, 128, 1500)
    assert a["output_dim"] == t["hidden_size"]
    assert t["vocab_size"] == 151936 and t["rope_theta"] == 1e6 and t["rms_norm_eps"] == 1e-6
    assert t["tie_word_embeddings"] is True
    rs = t["rope_scaling"]
    assert rs["interleaved"] and rs["mrope_interleaved"] and sum(rs["mrope_section"]) == t["head_dim"] // 2
    assert len(cfg["support_languages"]) == 30
    pre = _read(ckpt, "preprocessor_config.json")
    assert (pre["feature_extractor_type"], pre["feature_size"], pre["sampling_rate"], pre["hop_length"],
            pre["n_fft"]) == ("WhisperFeatureExtractor", 128, 16000, 160, 400)
    gen = _read(ckpt, "generation_config.json")
    assert gen["eos_token_id"] == [151645, 151643] and gen["do_sample"] is False


def test_presets_differ():
    a, b = PRESETS["tiny-a"], PRESETS["tiny-b"]
    assert a.audio_d_model != b.audio_d_model and a.hidden != b.hidden
    assert a.audio_heads != b.audio_heads and a.heads != b.heads
    assert a.audio_layers != b.audio_layers and a.layers != b.layers
    assert a.heads // a.kv_heads != b.heads // b.kv_heads
    assert a.head_dim != b.head_dim


@pytest.mark.parametrize("preset, row", [
    ("0.6b", (896, 18, 14, 3584, 1024, 28, 16, 8, 128, 3072)),
    ("1.7b", (1024, 24, 16, 4096, 2048, 28, 16, 8, 128, 6144)),
])
def test_real_preset_shapes(preset, row):
    th = config_dict(preset)["thinker_config"]
    a, t = th["audio_config"], th["text_config"]
    got = (a["d_model"], a["encoder_layers"], a["encoder_attention_heads"], a["encoder_ffn_dim"], a["output_dim"],
           t["num_hidden_layers"], t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"],
           t["intermediate_size"])
    assert got == row
    assert a["downsample_hidden_size"] == 480 and t["rope_scaling"]["mrope_section"] == [24, 20, 20]


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset 'huge'; accepted: tiny-a, tiny-b, tiny-odd, 0.6b, 1.7b"):
        config_dict("huge")


def test_weights_are_perturbed():
    from safetensors import safe_open

    ckpt = fixtures.checkpoint("tiny-a")
    with safe_open(os.path.join(ckpt, "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        norms = [k for k in keys if k.endswith("weight") and ("norm" in k or "ln_post" in k)]
        biases = [k for k in keys if k.endswith("bias")]
        assert norms and biases
        for k in norms:
            w = f.get_tensor(k)
            assert not torch.allclose(w, torch.ones_like(w)), k
        for k in biases:
            b = f.get_tensor(k)
            assert float(b.abs().max()) > 0, k


@pytest.mark.parametrize("preset", ["tiny-a", "tiny-b"])
def test_official_model_forward(preset):
    ckpt = fixtures.checkpoint(preset)
    model = official_ref.load_official_model(ckpt)
    proc = official_ref.official_processor(ckpt)
    wav = (np.random.RandomState(1).randn(16000 * 3) * 0.1).astype(np.float32)
    text = official_ref.official_prompt_text(proc, "", "English")
    inputs = proc(text=[text], audio=[wav], return_tensors="pt", padding=True)
    n_audio = int((inputs["input_ids"] == 151676).sum())
    assert n_audio == 39  # 3 s -> 3 * 13 tokens
    with torch.no_grad():
        audio = model.thinker.get_audio_features(
            inputs["input_features"], feature_attention_mask=inputs["feature_attention_mask"]
        )
        out = model.thinker(**inputs)
    assert tuple(audio.shape) == (n_audio, PRESETS[preset].hidden)
    assert tuple(out.logits.shape) == (1, inputs["input_ids"].shape[1], 151936)
    assert torch.isfinite(out.logits).all()
    assert float(out.logits[0, -1].std()) > 0.01


def test_bfloat16_checkpoint_loads_as_rounded_float32():
    from safetensors import safe_open

    f32 = fixtures.checkpoint("tiny-a", dtype="float32")
    bf16 = fixtures.checkpoint("tiny-a", dtype="bfloat16")
    assert _read(bf16, "config.json")["dtype"] == "bfloat16"
    with safe_open(os.path.join(bf16, "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    m32 = official_ref.load_official_model(f32).state_dict()
    m16 = official_ref.load_official_model(bf16).state_dict()
    for k, v in m32.items():
        assert m16[k].dtype == torch.float32
        assert torch.equal(m16[k], v.to(torch.bfloat16).to(torch.float32)), k


def test_official_features_shape_and_values():
    ckpt = fixtures.checkpoint("tiny-a")
    wav = (np.sin(np.arange(16000 * 2 + 77) * 0.05) * 0.3).astype(np.float32)
    mel = official_ref.official_features(ckpt, wav)
    assert mel.dtype == np.float32 and mel.shape == (128, len(wav) // 160)
    proc = official_ref.official_processor(ckpt)
    ref = proc(text=["<|audio_pad|>"], audio=[wav], return_tensors="np")["input_features"][0]
    np.testing.assert_array_equal(mel, ref[:, : mel.shape[1]])
    # Without a checkpoint directory the same settings are used.
    np.testing.assert_array_equal(official_ref.official_features(None, wav), mel)
    with pytest.raises(ValueError, match=r"wav16k must be 1-D"):
        official_ref.official_features(None, np.zeros((2, 100), np.float32))


def test_cache_reuses_and_survives_a_race(tmp_path, monkeypatch):
    monkeypatch.setattr(fixtures, "CACHE", str(tmp_path))
    calls = []

    def build(d):
        calls.append(d)
        with open(os.path.join(d, "x"), "w") as f:
            f.write("mine")

    p = fixtures._cached_dir("k", build)
    assert p == str(tmp_path / "k") and open(os.path.join(p, "x")).read() == "mine"
    assert fixtures._cached_dir("k", build) == p and len(calls) == 1

    def racing_build(d):
        # Another process finishes first and moves its copy in.
        other = tmp_path / "r"
        other.mkdir()
        (other / "x").write_text("theirs")
        (other / fixtures._COMPLETE).write_text("r\n")
        with open(os.path.join(d, "x"), "w") as f:
            f.write("mine")

    p = fixtures._cached_dir("r", racing_build)
    assert open(os.path.join(p, "x")).read() == "theirs"
    assert sorted(os.listdir(tmp_path)) == ["k", "r"]  # no temporary directory left


def test_config_for_a_model_with_its_own_tokenizer():
    """train_tiny's bundled model: a Preset, its vocabulary rows and its token ids."""
    from qwen3asr_tools.make_random_checkpoint import Preset
    from qwen3asr.languages import SUPPORTED_LANGUAGES

    dims = Preset(160, 3, 4, 512, 32, 160, 3, 4, 2, 32, 480, (6, 5, 5))
    ids = {"<|audio_pad|>": 2033, "<|audio_start|>": 2026, "<|audio_end|>": 2027, "user": 300}
    cfg = config_dict(dims, vocab_size=2112, token_ids=ids)
    th = cfg["thinker_config"]
    assert (th["audio_token_id"], th["audio_start_token_id"], th["audio_end_token_id"], th["user_token_id"]) \
        == (2033, 2026, 2027, 300)
    assert th["text_config"]["vocab_size"] == 2112 and th["text_config"]["head_dim"] == 32
    assert cfg["support_languages"] == list(SUPPORTED_LANGUAGES)
    real = config_dict("tiny-a")["thinker_config"]
    assert (real["audio_token_id"], real["user_token_id"], real["text_config"]["vocab_size"]) == (151676, 872, 151936)
    with pytest.raises(ValueError, match=r"token_ids lacks \['user'\]"):
        config_dict(dims, token_ids={k: v for k, v in ids.items() if k != "user"})
    with pytest.raises(ValueError, match=r"model: mrope_section \(6, 5, 4\) must sum to head_dim/2 = 16"):
        config_dict(Preset(160, 3, 4, 512, 32, 160, 3, 4, 2, 32, 480, (6, 5, 4)))


def test_train_tiny_regenerated_data_drops_what_was_made_from_the_old(tmp_path, monkeypatch):
    from qwen3asr_tools import train_tiny

    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "dataset.json").write_text(json.dumps({"seed": 1, "counts": {"train": 5, "dev": 1, "test": 1}}))
    (work / "tokenizer").mkdir()
    (work / "tokenizer" / "vocab.json").write_text("{}")
    for name in ("features_train.npz", "features_dev.npz", "snapshot.pt", "keep.txt"):
        (work / name).write_text("old")
    calls = []
    monkeypatch.setattr(train_tiny.subprocess, "run", lambda cmd, check, env: calls.append((cmd, env)))
    cfg = train_tiny.TrainConfig(seed=2, n_train=5, n_dev=1, n_test=1)
    assert train_tiny.make_data(str(work), cfg) == str(work / "data")
    assert len(calls) == 1
    cmd, env = calls[0]
    assert cmd[1:3] == ["-m", "qwen3asr_tools.make_dataset"] and cmd[cmd.index("--seed") + 1] == "2"
    # The child runs this checkout's make_dataset (tests/test_tools.py runs one for real).
    assert env["PYTHONPATH"].split(os.pathsep)[0] == fixtures.PYTHON
    assert sorted(os.listdir(work)) == ["data", "keep.txt"]
    # Same settings: nothing is regenerated or removed.
    (work / "data" / "dataset.json").write_text(json.dumps({"seed": 2, "counts": {"train": 5, "dev": 1, "test": 1}}))
    (work / "features_train.npz").write_text("new")
    assert train_tiny.make_data(str(work), cfg) == str(work / "data")
    assert len(calls) == 1 and (work / "features_train.npz").read_text() == "new"
