"""The lean memory profile (issue 25): ``export --memory lean`` and ``memory="lean"``.

Export: int8 encoder weights against the official audio tower (cosine >= 0.999, the bar the
fp16 RKNN encoder meets), decoders stored apart at page-aligned offsets with the very graphs of
the default export (the same logits, bit for bit), end to end against the official model.
Runtime: the int4 decoder chosen by default, the KV cache grown in LEAN_CACHE_STEP steps, the
weights memory-mapped (file-backed in /proc/self/smaps of a fresh process), and the option
through the engine, the programs' flag and a server's flag.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import bundles
from qwen3asr import Qwen3ASREngine
from qwen3asr.audio import prepare_audio
from qwen3asr.backends import onnx as onnx_backend
from qwen3asr.mel import log_mel

pytestmark = pytest.mark.slow  # official torch models and fresh processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_CLIP = os.path.join(ROOT, "audio", "long_mixed.wav")
LENGTHS = (0.37, 1.0, 3.0, 8.5, 20.0)  # s: under one chunk, one chunk, ragged, past the 8 s window, chained
PRESETS = (("tiny-a", "bfloat16"), ("tiny-b", "float32"))


def _torch():
    torch = pytest.importorskip("torch", reason="random checkpoints and the reference need torch (the dev extra)")
    if importlib.util.find_spec("qwen_asr") is None:
        pytest.skip("the official code is missing: pip install --no-deps qwen-asr==0.0.6")
    return torch


@pytest.fixture(scope="module")
def speech():
    return prepare_audio(LONG_CLIP)


def clip(speech, seconds, offset=2.0):
    return speech[int(offset * 16000):int(offset * 16000) + int(round(seconds * 16000))]


@pytest.fixture(scope="module", params=PRESETS, ids=[p for p, _ in PRESETS])
def pair(request):
    """(checkpoint, default bundle, lean bundle) of one preset."""
    _torch()
    preset, dtype = request.param
    ck, default = bundles.bundle(preset, dtype)
    _, lean = bundles.bundle(preset, dtype, memory="lean")
    return ck, default, lean


def cosines(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


# ----------------------------------------------------------------------------- export
def test_lean_manifest_and_weights(pair):
    _, default, lean = pair
    with open(os.path.join(lean, "model.json")) as f:
        man = json.load(f)
    assert man["memory"] == "lean" and man["encoder"]["dtype"] == "int8"
    import onnx

    # every linear of every encoder graph is an 8-bit MatMulNBits: no MatMul reads a stored weight
    for v in man["encoder"]["variants"]:
        g = onnx.load(os.path.join(lean, v["file"]), load_external_data=False).graph
        stored = {t.name for t in g.initializer}
        assert not [n.name for n in g.node if n.op_type == "MatMul" and set(n.input) & stored], v["file"]
        nbits = [n for n in g.node if n.op_type == "MatMulNBits"]
        assert nbits and all(a.i == 8 for n in nbits for a in n.attribute if a.name == "bits"), v["file"]
    ratio = os.path.getsize(os.path.join(lean, "encoder", "weights.bin")) / \
        os.path.getsize(os.path.join(default, "encoder", "weights.bin"))
    assert ratio < 0.5, ratio  # tiny widths: page alignment of small tensors; 0.6B: 0.28
    for v in man["decoder"]["variants"]:  # every decoder's weights apart, each at a page-aligned offset
        model = onnx.load(os.path.join(lean, v["file"]), load_external_data=False)
        offsets = [int({e.key: e.value for e in t.external_data}["offset"]) for t in model.graph.initializer
                   if t.data_location == onnx.TensorProto.EXTERNAL]
        assert len(offsets) > 10 and all(o % 4096 == 0 for o in offsets), v["file"]
        assert os.path.isfile(os.path.join(lean, v["file"] + ".data"))


@pytest.mark.parametrize("form", ["merged", "split"])
def test_lean_encoder_matches_official(pair, speech, form):
    torch = _torch()
    from qwen3asr_tools import compare_logits
    from qwen3asr_tools.official_ref import load_official_model

    ck, _, lean = pair
    official = load_official_model(ck, dtype=torch.float32)
    compare_logits.window_official_encoder(official)
    engine = Qwen3ASREngine(lean, backend="onnx", encoder_form=form, memory="lean")
    for seconds in LENGTHS:
        mel = log_mel(clip(speech, seconds))
        with torch.no_grad():
            ref = official.thinker.audio_tower(torch.from_numpy(mel), feature_lens=torch.tensor([mel.shape[1]]))
        ref = ref.last_hidden_state.numpy()
        ours = engine.encode(mel)
        assert ours.shape == ref.shape
        assert cosines(ours, ref).min() >= 0.999, (seconds, cosines(ours, ref).min())


@pytest.mark.parametrize("dtype", ["fp32", "int8", "int4"])
def test_lean_decoder_is_the_default_graph(pair, dtype):
    """The decoder weights moved to an aligned file, nothing else: the logits of the same input
    are bit for bit those of the default bundle's decoder."""
    _, default, lean = pair
    out = []
    for bundle, memory in ((default, "default"), (lean, "lean")):
        engine = Qwen3ASREngine(bundle, backend="onnx", decoder_dtype=dtype, memory=memory)
        kv = engine.decoder.kv
        x = np.random.default_rng(0).standard_normal((9, engine.embeddings.hidden_size)).astype(np.float32)
        logits, cache = kv.forward(x, kv.new_cache(), np.arange(9))
        step, _ = kv.forward(engine.embeddings.row(100)[None], cache, np.array([0]))
        out.append((logits, step))
        engine.close()
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])


def test_lean_logits_teacher_forced(pair, speech):
    """End to end against the official model: int8 encoder and int8 decoder together, at the
    bar of the default bundle's int8 decoder (test_numerics.test_int8_logits_teacher_forced)."""
    _torch()
    from qwen3asr_tools import compare_logits

    ck, _, lean = pair
    s = compare_logits.compare(ck, lean, clip(speech, 4.0), max_new_tokens=40, decoder_dtype="int8",
                               ignore_eos=True)["summary"]
    assert s["steps"] >= 30
    assert s["argmax_agreement"] >= 0.98, s
    assert s["min_cosine"] >= 0.999, s


# ----------------------------------------------------------------------------- runtime
def test_lean_engine_takes_int4_and_grows_the_cache_in_small_steps(pair):
    _, _, lean = pair
    with Qwen3ASREngine(lean, backend="onnx", memory="lean") as e:
        assert e.decoder_dtype == "int4"
        kv = e.decoder.kv
        assert kv.cache_step == onnx_backend.LEAN_CACHE_STEP < onnx_backend.CACHE_STEP
        hidden = e.embeddings.hidden_size
        _, cache = kv.forward(np.zeros((30, hidden), np.float32), kv.new_cache(), np.array([29]))
        assert cache.capacity == onnx_backend.LEAN_CACHE_STEP
        _, cache = kv.forward(np.zeros((onnx_backend.LEAN_CACHE_STEP - 29, hidden), np.float32), cache, np.array([0]))
        assert (cache.length, cache.capacity) == (onnx_backend.LEAN_CACHE_STEP + 1, 2 * onnx_backend.LEAN_CACHE_STEP)
        kv.release_binding()
        e.encode(np.zeros((e.n_mels, 300), np.float32))  # the encoder's sessions keep no arena
        sessions = list(e.encoder.runner._sessions.values())
        assert sessions and not any(s.get_session_options().enable_cpu_mem_arena for s in sessions)
    with Qwen3ASREngine(lean, backend="onnx") as e:  # the default profile keeps its choice, steps and arena
        assert e.decoder_dtype == "int8" and e.decoder.kv.cache_step == onnx_backend.CACHE_STEP
        e.encode(np.zeros((e.n_mels, 300), np.float32))
        assert all(s.get_session_options().enable_cpu_mem_arena for s in e.encoder.runner._sessions.values())


MAPPED = """
import json, sys
from qwen3asr import Qwen3ASREngine
import numpy as np
e = Qwen3ASREngine(sys.argv[1], backend="onnx", memory="lean", threads=1)
e.encode(np.zeros((e.n_mels, 300), np.float32))
rss, name = {}, None
for line in open("/proc/self/smaps"):
    head = line.split()
    if head and "-" in head[0] and not head[0].endswith(":"):
        name = head[5] if len(head) > 5 else ""
    elif head and head[0] == "Rss:":
        rss[name] = rss.get(name, 0) + int(head[1])
print(json.dumps(rss))
"""


def test_lean_weights_are_memory_mapped(pair):
    """In a fresh process that loaded the lean engine and ran its encoder, the decoder's and the
    encoder's weight files are mappings of their own (ONNX Runtime maps page-aligned external
    data instead of copying it), whose pages were dropped once the sessions had prepacked them
    (backends.pages.drop_mapped_pages): at most a tenth of each file stays resident."""
    _, _, lean = pair
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-c", MAPPED, lean], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    rss = json.loads(p.stdout.splitlines()[-1])
    real = os.path.realpath(lean)
    for rel in ("decoder/decoder_int4.onnx.data", "encoder/weights.bin"):
        path = os.path.join(real, rel)
        assert path in rss, (rel, sorted(k for k in rss if k.startswith(real)))
        assert rss[path] * 1024 <= os.path.getsize(path) / 10, (rel, rss[path])


def test_memory_option_is_checked():
    from qwen3asr.backends import BackendOptions

    with pytest.raises(ValueError, match=r"memory must be one of 'default', 'lean' \(got 'small'\)"):
        BackendOptions(memory="small")


def test_every_program_takes_the_memory_flag():
    """--memory of qwen3asr-transcribe, -mic, -serve and -wyoming reaches the engine."""
    from qwen3asr.cli import mic, transcribe
    from qwen3asr.cli.common import backend_options_from_args, engine_from_args
    from qwen3asr.server import cli as serve_cli
    from qwen3asr.server import wyoming

    parsers = {"transcribe": transcribe.build_parser(), "mic": mic.build_parser(),
               "serve": serve_cli.build_parser(), "wyoming": wyoming.build_parser()}
    for name, ap in parsers.items():
        extra = ["--audio", "x.wav"] if name == "transcribe" else []
        args, _ = ap.parse_known_args(["--memory", "lean"] + extra)
        assert backend_options_from_args(args).memory == "lean", name
        args, _ = ap.parse_known_args(extra)
        assert backend_options_from_args(args).memory == "default", name
    args = parsers["serve"].parse_args(["--model", os.path.join(ROOT, "models", "default"), "--backend", "onnx",
                                        "--threads", "1", "--memory", "lean"])
    with engine_from_args(args) as e:  # the engine the server would load
        assert e.decoder.kv.cache_step == onnx_backend.LEAN_CACHE_STEP


def test_transcribe_cli_with_lean(pair):
    """The one-shot program with --memory lean on a lean bundle gives the text of the library."""
    _, _, lean = pair
    audio = os.path.join(ROOT, "audio", "en_1.wav")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "python", "transcribe.py"), "--audio", audio, "--model", lean,
                        "--backend", "onnx", "--memory", "lean", "--max-new-tokens", "8", "--format", "json"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    with Qwen3ASREngine(lean, backend="onnx", memory="lean") as e:
        assert json.loads(p.stdout)["text"] == e.transcribe(audio, max_new_tokens=8).text


def test_rknn_conversion_refuses_a_lean_bundle(pair, tmp_path):
    from qwen3asr.bundle import BundleError
    from qwen3asr_tools import onnx2rknn
    from qwen3asr_tools.bundle_checkpoint import checkpoint_from_bundle

    _, _, lean = pair
    with pytest.raises(BundleError, match="exported with --memory lean .* the RKNN conversion needs the fp32 encoder"):
        onnx2rknn.convert(lean, "rk3588", out_dir=str(tmp_path / "rknn"))
    with pytest.raises(BundleError, match="rebuilding the checkpoint needs the fp32 encoder"):
        checkpoint_from_bundle(lean, str(tmp_path / "ckpt"))
