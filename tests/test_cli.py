"""python/transcribe.py as a user runs it: output formats and one-line errors with non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # every test runs the CLI in a subprocess
import soundfile as sf

import bundles

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "python", "transcribe.py")
CLIP = os.path.join(ROOT, "audio", "zh_1.wav")


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, CLI, *args], capture_output=True, text=True, timeout=300, env=e)


@pytest.fixture(scope="module")
def bundle_dir():
    pytest.importorskip("torch", reason="random checkpoints are built with the official code (torch)")
    return bundles.bundle("tiny-b", "float32")[1]


def test_json_output(bundle_dir):
    p = run("--audio", CLIP, "--model", bundle_dir, "--format", "json", "--max-new-tokens", "5", "--language", "zh")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert {"text", "language", "language_code", "truncated", "stats"} <= set(d)
    assert d["language"] == "Chinese" and d["language_code"] == "zh" and d["truncated"] is True
    assert d["stats"]["audio_seconds"] == pytest.approx(1.38, abs=0.01)
    assert "truncated" in p.stderr


def test_text_output_and_model_env(bundle_dir):
    p = run("--audio", CLIP, "--max-new-tokens", "3", "--backend", "onnx", "-v", env={"QWEN3ASR_MODEL": bundle_dir})
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1
    assert f"loaded {bundle_dir} " in p.stderr  # the model named by the environment, not models/default


def test_stream_flag(bundle_dir):
    p = run("--audio", CLIP, "--model", bundle_dir, "--max-new-tokens", "6", "--language", "en", "--stream")
    assert p.returncode == 0, p.stderr
    q = run("--audio", CLIP, "--model", bundle_dir, "--max-new-tokens", "6", "--language", "en")
    assert p.stdout.strip() == q.stdout.strip()


def _one_line_error(p, pattern):
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr
    import re

    assert re.search(pattern, lines[0]), lines[0]


def test_missing_audio(bundle_dir):
    _one_line_error(run("--audio", "/nonexistent/x.wav", "--model", bundle_dir), "audio file not found")


def test_not_audio(bundle_dir, tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("hello\n" * 100)
    _one_line_error(run("--audio", str(bad), "--model", bundle_dir), "cannot decode .* as audio")


def test_nan_audio(bundle_dir, tmp_path):
    x = np.zeros(16000, np.float32)
    x[5] = np.nan
    path = tmp_path / "nan.wav"
    sf.write(path, x, 16000, subtype="FLOAT")
    _one_line_error(run("--audio", str(path), "--model", bundle_dir), "NaN or infinite")


def test_missing_model(tmp_path):
    _one_line_error(run("--audio", CLIP, "--model", str(tmp_path / "none")), "model directory not found")


def test_bad_language(bundle_dir):
    _one_line_error(run("--audio", CLIP, "--model", bundle_dir, "--language", "Elvish"), "unsupported language")


def test_bad_budget(bundle_dir):
    _one_line_error(run("--audio", CLIP, "--model", bundle_dir, "--max-new-tokens", "0"), "max_new_tokens")


def test_rk_backend_off_board_is_explained(bundle_dir):
    p = run("--audio", CLIP, "--model", bundle_dir, "--backend", "rk")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: ")


def test_every_program_takes_the_engine_flags():
    """qwen3asr-transcribe, -mic, -serve and -wyoming share one engine flag table (cli.common):
    the board knobs and --spin-wait reach the engine from each of them."""
    from qwen3asr.cli import mic, transcribe
    from qwen3asr.cli.common import engine_from_args
    from qwen3asr.server import cli as serve_cli
    from qwen3asr.server import wyoming
    from server_proc import MODEL

    argv = ["--model", "m", "--threads", "3", "--spin-wait", "--soc", "rk3588", "--cpus", "4-7"]
    parsers = {"transcribe": transcribe.build_parser(), "mic": mic.build_parser(),
               "serve": serve_cli.build_parser(), "wyoming": wyoming.build_parser()}
    for name, ap in parsers.items():
        args, _ = ap.parse_known_args(argv + (["--audio", "x.wav"] if name == "transcribe" else []))
        assert (args.model, args.threads, args.spin_wait, args.soc, args.cpus) == ("m", 3, "on", "rk3588", "4-7"), name
        # without the flag: off, but "auto" for the one-shot program (its decoder spins on a quiet host)
        args, _ = ap.parse_known_args(["--audio", "x.wav"] if name == "transcribe" else [])
        assert args.spin_wait == ("auto" if name == "transcribe" else "off"), name
    args = parsers["serve"].parse_args(["--model", MODEL, "--backend", "onnx", "--threads", "1", "--spin-wait"])
    with engine_from_args(args) as e:  # the real engine the server would load
        assert e.decoder.kv.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "1"


def test_word_timestamps_in_json_and_subtitles():
    """--word-timestamps with --aligner: json words and vtt cues equal the engine's own."""
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.subtitles import to_srt, to_vtt, word_cues

    _, aligner = bundles.aligner_bundle()
    model = os.path.join(ROOT, "models", "default")
    clip = os.path.join(ROOT, "audio", "long_mixed.wav")
    with Qwen3ASREngine(model, backend="onnx", aligner=aligner) as engine:
        ref = engine.transcribe(clip, word_timestamps=True, duration=20)
    base = ("--audio", clip, "--model", model, "--aligner", aligner, "--backend", "onnx", "--duration", "20",
            "--word-timestamps")
    p = run(*base, "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["words"] == [w.to_dict() for w in ref.words] and len(d["words"]) > 10
    assert [s["words"] for s in d["segments"]] == [[w.to_dict() for w in s.words] for s in ref.segments]
    for fmt, write in (("vtt", lambda c: to_vtt(c, inline_words=True)), ("srt", to_srt)):
        p = run(*base, "--format", fmt)
        assert p.returncode == 0, p.stderr
        assert p.stdout == write(word_cues(ref.segments))
    with Qwen3ASREngine(model, backend="onnx", aligner=aligner) as engine:
        checked = engine.transcribe(clip, word_timestamps=True, duration=20, word_spans="checked")
    p = run(*base, "--format", "json", "--word-spans", "checked")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["words"] == [w.to_dict() for w in checked.words]
    p = run(*base, "--word-spans", "tight")
    assert p.returncode == 2 and "--word-spans: invalid choice: 'tight'" in p.stderr
    p = run("--audio", clip, "--model", model, "--backend", "onnx", "--aligner", aligner, "--word-timestamps",
            "--language", "Swedish", "--duration", "3")
    assert p.returncode == 2 and p.stderr.startswith("error: the forced aligner covers") and "Traceback" not in p.stderr


def test_the_cli_opens_the_file_first_and_preloads_its_length(bundle_dir, monkeypatch, capsys):
    """qwen3asr-transcribe reads the file before any model loads (a bad one fails fast) and tells
    the engine the seconds it selected with its options; the engine preloads the encoder graphs of
    that length when the plan would decode it in one pass (qwen3asr.plan.preload_seconds): none
    when chunks are asked for."""
    from qwen3asr.cli import transcribe as cli

    seen = []
    real = cli.engine_from_args

    def spy(args, preload_seconds=None, options=None):
        engine = real(args, preload_seconds=preload_seconds, options=options)
        seen.append(engine._backend_request[1].preload_seconds)  # what the engine preloaded
        return engine

    monkeypatch.setattr(cli, "engine_from_args", spy)
    base = ["--audio", CLIP, "--model", bundle_dir, "--backend", "onnx", "--max-new-tokens", "3"]
    assert cli.main(base) == 0
    assert cli.main(base + ["--start", "0.5", "--duration", "0.6"]) == 0
    assert cli.main(base + ["--vad"]) == 0
    assert seen == [pytest.approx(1.38, abs=0.01), pytest.approx(0.6), None]
    capsys.readouterr()
    assert cli.main(["--audio", os.path.join(ROOT, "README.md"), "--model", bundle_dir]) == 2
    assert cli.main(base + ["--start", "9"]) == 2
    assert len(seen) == 3  # neither reached the engine
    assert "past the end of the audio" in capsys.readouterr().err


def test_a_decoder_that_cannot_load_is_one_line_error(bundle_dir, tmp_path):
    """The one-shot CLI loads the decoder in a thread while the file is encoded (backends/pending.py):
    a decoder that ONNX Runtime cannot load is still a one-line error, now raised by the request."""
    import shutil

    broken = tmp_path / "model"
    shutil.copytree(bundle_dir, broken)
    for name in os.listdir(broken / "decoder"):
        if name.endswith(".onnx"):
            (broken / "decoder" / name).write_bytes(b"not an onnx model")
    _one_line_error(run("--audio", CLIP, "--model", str(broken), "--backend", "onnx"), "ONNX Runtime cannot load")
