"""scripts/export_rkllm.py: the plain Qwen3ForCausalLM directory against the official thinker,
the calibration set against our engine, the rkllm-toolkit call contract (doubles.rkllm_toolkit)
and the error paths.

The logits test feeds both models the same input embeddings: the official thinker's own
(prompt embedded, audio from the OFFICIAL encoder spliced in, captured with a hook) and
compares the logits of every position.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pickle
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # the official torch model (thinker, encoder) in most tests

torch = pytest.importorskip("torch", reason="the official reference needs torch (the dev extra: pip install -e '.[dev]')")
if importlib.util.find_spec("qwen_asr") is None:
    pytest.skip("the official reference needs qwen-asr (pip install --no-deps qwen-asr==0.0.6)",
                allow_module_level=True)

import bundles  # noqa: E402
from qwen3asr_tools import export_rkllm  # noqa: E402
from qwen3asr_tools.official_ref import load_official_model, read_config  # noqa: E402
from qwen3asr import Qwen3ASREngine  # noqa: E402
from qwen3asr.audio import prepare_audio  # noqa: E402
from qwen3asr.encoder import tokens_for_frames  # noqa: E402
from doubles import rkllm_toolkit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AUDIO = [os.path.join(ROOT, "audio", n) for n in ("en_1.wav", "zh_1.wav")]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


@pytest.fixture(scope="module", params=bundles.PRESETS, ids=[p for p, _ in bundles.PRESETS])
def exported(request, tmp_path_factory):
    """(checkpoint, bundle copy, export dir) with (a) and (b) written by the script's main()."""
    import shutil

    preset, dtype = request.param
    ck, bd = bundles.bundle(preset, dtype)
    work = tmp_path_factory.mktemp(f"rkllm-{preset}")
    bundle_copy = str(work / "bundle")
    shutil.copytree(bd, bundle_copy)
    out = str(work / "out")
    rc = export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bundle_copy, "--calib-audio", *AUDIO,
                            "--calib-max-new-tokens", "4", "--skip-build"])
    assert rc == 0
    return ck, bundle_copy, out


# ----------------------------------------------------------------------- (a) the HF dir

def test_config_fields_match_official_text_config(exported):
    ck, _, out = exported
    cfg = json.load(open(os.path.join(out, "hf", "config.json")))
    text = read_config(ck)["thinker_config"]["text_config"]
    assert cfg["model_type"] == "qwen3" and cfg["architectures"] == ["Qwen3ForCausalLM"]
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
                "rope_theta", "tie_word_embeddings"):
        assert cfg[key] == text[key], key
    assert cfg["tie_word_embeddings"] is True
    assert cfg["rope_scaling"] is None  # default RoPE, no MRoPE sections
    assert cfg["attention_bias"] is False and cfg["use_sliding_window"] is False
    assert cfg["layer_types"] == ["full_attention"] * text["num_hidden_layers"]
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (151643, 151645)
    gen = json.load(open(os.path.join(out, "hf", "generation_config.json")))
    assert gen["eos_token_id"] == [151645, 151643]


def test_weights_renamed_and_bit_exact(exported):
    from qwen3asr_tools import checkpoint as ckpt

    ck, _, out = exported
    src = ckpt.open_weights(ck)
    dst = ckpt.SafeTensors([os.path.join(out, "hf", "model.safetensors")])
    want = {"model." + n[len("thinker.model."):]: n for n in src.names() if n.startswith("thinker.model.")}
    assert set(dst.names()) == set(want)  # no audio tower; lm_head only if the checkpoint stores one
    for name, orig in want.items():
        assert dst.dtype_of(name) == src.dtype_of(orig)
        assert np.array_equal(dst.raw(name), src.raw(orig)), name


def test_tokenizer_loads_and_encodes_like_the_checkpoint(exported):
    from transformers import AutoTokenizer

    _, _, out = exported
    tok = AutoTokenizer.from_pretrained(os.path.join(out, "hf"))
    assert tok.encode("language English") == [11528, 6364]
    assert tok.convert_tokens_to_ids(["<|im_end|>", "<|audio_pad|>"]) == [151645, 151676]
    assert "<|im_start|>" in tok.chat_template


def test_logits_equal_official_thinker(exported):
    """Plain Qwen3ForCausalLM on the official thinker's input embeddings gives its logits."""
    from transformers import AutoModelForCausalLM, Qwen3ForCausalLM

    ck, bd, out = exported
    official = load_official_model(ck, dtype=torch.float32)
    engine = Qwen3ASREngine(bd, backend="onnx", decoder_dtype="fp32")
    pcm = prepare_audio(AUDIO[0])[:int(2.6 * 16000)]
    mel = engine.features(pcm)
    prompt = engine.prompt(tokens_for_frames(mel.shape[1]), context="kitchen, 客厅")
    captured = {}

    def grab(module, args, kwargs):
        captured["embeds"] = kwargs["inputs_embeds"].detach().clone()

    hook = official.thinker.model.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            ref = official.thinker(input_ids=torch.tensor(prompt.ids)[None],
                                   input_features=torch.from_numpy(mel)[None],
                                   feature_attention_mask=torch.ones(1, mel.shape[1], dtype=torch.long)).logits
    finally:
        hook.remove()
    model = AutoModelForCausalLM.from_pretrained(os.path.join(out, "hf"), dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    assert isinstance(model, Qwen3ForCausalLM)
    with torch.no_grad():
        ours = model(inputs_embeds=captured["embeds"]).logits
    ref, ours = ref[0].numpy(), ours[0].numpy()
    assert ours.shape == ref.shape == (len(prompt), 151936)
    cos = cosines(ours, ref)
    assert cos.min() >= 0.99999, cos.min()
    assert np.array_equal(ours.argmax(-1), ref.argmax(-1))


# ------------------------------------------------------------------- (b) calibration

def _engine_embeds(bundle_dir: str, path: str) -> np.ndarray:
    engine = Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="fp32")
    pcm = prepare_audio(path)
    mel = engine.features(pcm)
    return engine.embed_prompt(engine.prompt(tokens_for_frames(mel.shape[1])), engine.encode(mel))


def _engine_targets(bundle_dir: str) -> list[str]:
    """The fp32 ONNX engine's raw output for AUDIO with the fixture's --calib-max-new-tokens 4."""
    engine = Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="fp32")
    return [engine.transcribe(path, max_new_tokens=4).raw_text for path in AUDIO]


def test_calibration_json_is_the_engines_spliced_embeddings(exported):
    ck, bd, out = exported
    hidden = read_config(ck)["thinker_config"]["text_config"]["hidden_size"]
    data = json.load(open(os.path.join(out, "calib", "inputs.json")))
    assert len(data) == len(AUDIO)
    targets = _engine_targets(bd)
    assert all(targets)
    for item, path, target in zip(data, AUDIO, targets):
        assert set(item) == {"input_embed", "target"}
        x = np.asarray(item["input_embed"], dtype=np.float32)
        want = _engine_embeds(bd, path)
        assert x.shape == (1, want.shape[0], hidden)
        assert np.array_equal(x[0], want)  # JSON round trip of float32 is exact
        assert item["target"] == target
    index = json.load(open(os.path.join(out, "calib", "llm_inputs.json")))
    assert [e["token_nums"] for e in index] == [len(d["input_embed"][0]) for d in data]
    assert [e["target"] for e in index] == targets
    with open(os.path.join(out, "calib", index[1]["sample"]), "rb") as f:
        sample = pickle.load(f)
    assert tuple(sample["inputs_embeds"].shape) == (1, index[1]["token_nums"], hidden)
    assert np.array_equal(sample["inputs_embeds"][0].numpy(), np.asarray(data[1]["input_embed"][0], np.float32))


# ------------------------------------------------------------------------ (c) build

@pytest.fixture
def fake_toolkit(monkeypatch):
    return rkllm_toolkit.install(monkeypatch)


@pytest.mark.parametrize("target,quant,cores,algo", [("rk3576", "w4a16_g128", 2, "grq"),
                                                     ("rk3588", "w8a8", 3, "normal")])
def test_build_calls_and_manifest(exported, fake_toolkit, target, quant, cores, algo):
    ck, bd, out = exported
    before = json.load(open(os.path.join(bd, "model.json")))
    dataset = os.path.join(out, "calib", "inputs.json")
    rc = export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--dataset", dataset,
                            "--target", target, "--max-context", "2048"])
    assert rc == 0
    rel = f"rk/decoder_{target}_{quant}.rkllm"
    assert [c[0] for c in fake_toolkit.calls] == ["load_huggingface", "build", "export_rkllm"]
    assert fake_toolkit.calls[0][1] == {"model": os.path.join(out, "hf"), "device": "cpu", "dtype": "float32"}
    assert fake_toolkit.calls[1][1] == {"do_quantization": True, "optimization_level": 1, "quantized_dtype": quant,
                                        "quantized_algorithm": algo, "target_platform": target,
                                        "num_npu_core": cores, "dataset": dataset, "max_context": 2048}
    assert fake_toolkit.calls[2][1] == os.path.join(bd, rel)
    man = json.load(open(os.path.join(bd, "model.json")))
    entry = man["rk"]["rkllm"][target]
    with open(os.path.join(bd, rel), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert entry == {"file": rel, "quant": quant, "sha256": digest, "max_context": 2048}
    assert man["files"][rel] == entry["sha256"]
    # everything else is kept
    for key in before:
        if key not in ("rk", "files"):
            assert man[key] == before[key], key
    assert all(man["files"][k] == v for k, v in before["files"].items())


def test_build_merges_with_other_rk_keys(exported, fake_toolkit):
    ck, bd, out = exported
    path = os.path.join(bd, "model.json")
    man = json.load(open(path))
    man.setdefault("rk", {})["rknn"] = {"rk3588": [{"file": "rk/enc.rknn"}]}
    json.dump(man, open(path, "w"))
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--target", "rk3588",
                              "--skip-build"]) == 0
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--target", "rk3588"]) == 0
    man = json.load(open(path))
    assert man["rk"]["rknn"] == {"rk3588": [{"file": "rk/enc.rknn"}]}
    assert man["rk"]["rkllm"]["rk3588"]["quant"] == "w8a8"


@pytest.mark.parametrize("step", ["load_huggingface", "build", "export_rkllm"])
def test_toolkit_failure_names_the_call(exported, fake_toolkit, capsys, step):
    ck, bd, out = exported
    fake_toolkit.codes[step] = -1
    rc = export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--target", "rk3576"])
    assert rc == 2
    assert f"rkllm-toolkit {step} failed with code -1" in capsys.readouterr().err


def test_w4a16_on_rk3588_refused(exported, capsys):
    ck, _, out = exported
    rc = export_rkllm.main(["--checkpoint", ck, "--out", out, "--target", "rk3588", "--quant", "w4a16_g128"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "w4a16 decoders run on RK3576 only" in err and "--quant w8a8" in err
    with pytest.raises(ValueError, match="RK3576 only"):
        export_rkllm.check_target("rk3588", "w4a16_g128")
    assert export_rkllm.check_target("rk3576", None) == "w4a16_g128"
    assert export_rkllm.check_target("rk3588", None) == "w8a8"


def test_toolkit_missing_says_where_to_get_it_and_keeps_a_and_b(exported, monkeypatch, capsys, tmp_path):
    ck, bd, _ = exported
    monkeypatch.setitem(sys.modules, "rkllm", None)  # import fails
    monkeypatch.setitem(sys.modules, "rkllm.api", None)
    out = str(tmp_path / "out")
    rc = export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--calib-audio", AUDIO[0],
                            "--calib-max-new-tokens", "2"])
    assert rc == 3
    err = capsys.readouterr().err
    assert "rkllm-toolkit is not installed" in err and "not on PyPI" in err
    assert "https://github.com/airockchip/rknn-llm" in err and "numpy<2" in err
    assert os.path.isfile(os.path.join(out, "hf", "model.safetensors"))
    assert os.path.isfile(os.path.join(out, "calib", "inputs.json"))


def test_input_errors(exported, capsys, tmp_path):
    ck, bd, _ = exported
    out = str(tmp_path / "o")
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--calib-audio", AUDIO[0]]) == 2
    assert "--calib-audio needs --bundle" in capsys.readouterr().err
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--max-context", "0"]) == 2
    assert "--max-context must be in 1..16384" in capsys.readouterr().err
    other_ck, _ = bundles.bundle(*[p for p in bundles.PRESETS if p[0] not in ck][0])
    assert export_rkllm.main(["--checkpoint", other_ck, "--out", out, "--bundle", bd, "--skip-build"]) == 2
    assert "exported from another checkpoint" in capsys.readouterr().err


# ------------------------------------------------------------- a forced-aligner checkpoint

TRANSCRIPTS = os.path.join(ROOT, "audio", "transcripts.json")


def _clip(path):
    """(text, language) of an audio/ clip from audio/transcripts.json."""
    clips = json.load(open(TRANSCRIPTS))["clips"]
    c = next(c for c in clips if c["file"] == os.path.basename(path))
    return c["text"], c["language"]


@pytest.fixture(scope="module")
def exported_aligner(tmp_path_factory):
    """(aligner checkpoint, bundle copy, export dir) with (a) and (b) written by the script's main()."""
    import shutil

    ck, bd = bundles.aligner_bundle("fa-tiny-b")
    work = tmp_path_factory.mktemp("rkllm-aligner")
    bundle_copy = str(work / "bundle")
    shutil.copytree(bd, bundle_copy)
    out = str(work / "out")
    rc = export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bundle_copy, "--calib-audio", *AUDIO,
                            "--calib-transcripts", TRANSCRIPTS, "--skip-build"])
    assert rc == 0
    return ck, bundle_copy, out


def test_aligner_hf_dir_ties_the_head_to_the_embeddings(exported_aligner):
    """The 5000-way time head is not the model's lm_head: the directory ties lm_head to the
    embeddings (a vocabulary-sized head the runtime can build, no extra weights)."""
    from qwen3asr_tools import checkpoint as ckpt

    ck, _, out = exported_aligner
    cfg = json.load(open(os.path.join(out, "hf", "config.json")))
    thinker = read_config(ck)["thinker_config"]
    assert thinker["model_type"] == "qwen3_forced_aligner" and thinker["text_config"]["tie_word_embeddings"] is False
    assert cfg["model_type"] == "qwen3" and cfg["tie_word_embeddings"] is True
    assert cfg["vocab_size"] == thinker["text_config"]["vocab_size"] == 152064
    src = ckpt.open_weights(ck)
    dst = ckpt.SafeTensors([os.path.join(out, "hf", "model.safetensors")])
    assert "thinker.lm_head.weight" in src and list(src.raw("thinker.lm_head.weight").shape) == [
        thinker["classify_num"], cfg["hidden_size"]]
    want = {"model." + n[len("thinker.model."):]: n for n in src.names() if n.startswith("thinker.model.")}
    assert set(dst.names()) == set(want)  # no lm_head.weight
    for name, orig in want.items():
        assert np.array_equal(dst.raw(name), src.raw(orig)), name


def test_aligner_hf_model_with_the_host_head_gives_the_aligners_slot_logits(exported_aligner):
    """The exported Qwen3ForCausalLM's states at the slot rows, through the host's final norm and
    aligner_head.npy (what RKLLMSlotScorer does with the board's hidden states), give the slot
    logits of the ONNX aligner (itself equal to the official one, tests/test_aligner.py). The
    scorer's norm check reads the model's real pre-norm states as pre and its output as post."""
    from transformers import AutoModelForCausalLM

    from qwen3asr.aligner import ForcedAligner
    from qwen3asr.backends import BackendOptions
    from qwen3asr.backends.rk import aligner as rk_aligner
    from qwen3asr.bundle import Bundle

    _, bd, out = exported_aligner
    model = AutoModelForCausalLM.from_pretrained(os.path.join(out, "hf"), dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    emb = model.get_input_embeddings().weight
    assert model.lm_head.weight.shape == emb.shape == (152064, model.config.hidden_size)
    assert torch.equal(model.lm_head.weight, emb)  # tied
    head, norm, eps = rk_aligner.load_head(Bundle.load(bd))
    seen = {}
    hook = model.model.norm.register_forward_hook(lambda m, a, o: seen.update(pre=a[0][0].numpy(), post=o[0].numpy()))
    try:
        with ForcedAligner(bd, backend="onnx", options=BackendOptions(decoder_dtype="fp32")) as al:
            for path in AUDIO:
                text, lang = _clip(path)
                inp = al.prepare(path, text, lang)
                _, want = al.slot_logits(path, text, lang)
                with torch.no_grad():
                    model(inputs_embeds=torch.from_numpy(inp.embeds)[None])
                pre, post = seen["pre"], seen["post"]
                assert rk_aligner.check_norm(pre, norm).found == "pre"
                assert rk_aligner.check_norm(post, norm).found == "post"
                for got in (post[inp.rows] @ head.T, rk_aligner.rms_norm(pre[inp.rows], norm, eps) @ head.T):
                    assert cosines(got, want).min() >= 0.99999
                    assert np.array_equal(got.argmax(-1), want.argmax(-1))
    finally:
        hook.remove()


def test_aligner_calibration_is_the_aligners_input(exported_aligner):
    """Each sample is the audio with its transcript laid out with the <timestamp> slots and
    embedded as the board does (ForcedAligner.prepare); the target is the transcript."""
    from qwen3asr.aligner import ForcedAligner
    from qwen3asr.bundle import EmbeddingTable, Bundle

    _, bd, out = exported_aligner
    data = json.load(open(os.path.join(out, "calib", "inputs.json")))
    assert len(data) == len(AUDIO)
    slot = EmbeddingTable(Bundle.load(bd)).row(151705)
    with ForcedAligner(bd, backend="onnx") as al:
        for item, path in zip(data, AUDIO):
            text, lang = _clip(path)
            inp = al.prepare(path, text, lang)
            x = np.asarray(item["input_embed"], dtype=np.float32)
            assert x.shape == (1,) + inp.embeds.shape
            assert np.array_equal(x[0], inp.embeds)
            assert item["target"] == text
            is_slot = (x[0] == slot).all(axis=1)
            assert np.array_equal(np.flatnonzero(is_slot), inp.rows) and inp.rows.size == 2 * len(inp.layout.words)
    index = json.load(open(os.path.join(out, "calib", "llm_inputs.json")))
    assert [e["token_nums"] for e in index] == [len(d["input_embed"][0]) for d in data]


def test_aligner_build_is_recorded_in_the_aligner_bundle(exported_aligner, fake_toolkit):
    from qwen3asr.bundle import Bundle
    from qwen3asr.backends.rk.backend import rkllm_entry

    ck, bd, out = exported_aligner
    before = json.load(open(os.path.join(bd, "model.json")))
    dataset = os.path.join(out, "calib", "inputs.json")
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--dataset", dataset,
                              "--target", "rk3588", "--max-context", "1024"]) == 0
    assert [c[0] for c in fake_toolkit.calls] == ["load_huggingface", "build", "export_rkllm"]
    assert fake_toolkit.calls[0][1]["model"] == os.path.join(out, "hf")
    assert fake_toolkit.calls[1][1]["dataset"] == dataset and fake_toolkit.calls[1][1]["quantized_dtype"] == "w8a8"
    b = Bundle.load(bd)
    assert b.kind == "aligner" and b.manifest["aligner"] == before["aligner"]
    entry = rkllm_entry(b, "rk3588")
    assert entry["file"] == "rk/decoder_rk3588_w8a8.rkllm" and entry["max_context"] == 1024
    assert fake_toolkit.calls[2][1] == os.path.join(bd, entry["file"])


def test_aligner_input_errors(exported_aligner, capsys, tmp_path):
    ck, bd, _ = exported_aligner
    out = str(tmp_path / "o")
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--calib-audio", AUDIO[0]]) == 2
    assert "calibration input is the audio and its transcript: give --calib-transcripts" in capsys.readouterr().err
    other = tmp_path / "t.json"
    other.write_text(json.dumps({"clips": [{"file": "en_2.wav", "text": "x", "language": "English"}]}))
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--calib-audio", AUDIO[0],
                              "--calib-transcripts", str(other)]) == 2
    assert "--calib-transcripts has no clip 'en_1.wav'" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", bd, "--calib-audio", AUDIO[0],
                              "--calib-transcripts", str(tmp_path / "bad.json")]) == 2
    assert "not a transcripts file like audio/transcripts.json" in capsys.readouterr().err
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--context", "kitchen", "--skip-build"]) == 2
    assert "--context is for ASR checkpoints" in capsys.readouterr().err
    asr_ck, asr_bd = bundles.bundle("tiny-a")
    assert export_rkllm.main(["--checkpoint", ck, "--out", out, "--bundle", asr_bd, "--skip-build"]) == 2
    assert "is a forced aligner but the bundle" in capsys.readouterr().err
    assert export_rkllm.main(["--checkpoint", asr_ck, "--out", out, "--bundle", asr_bd, "--calib-audio", AUDIO[0],
                              "--calib-transcripts", TRANSCRIPTS]) == 2
    assert "--calib-transcripts is for forced-aligner checkpoints" in capsys.readouterr().err
