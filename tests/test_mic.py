"""python/mic_stream.py as a user runs it, through a real audio device path:

WAV samples -> FIFO -> PulseAudio module-pipe-source -> ALSA "pulse" plugin -> PortAudio ->
sounddevice -> mic_stream.py. A private PulseAudio daemon (own socket, own runtime dir) is
started for the module; the samples are written in real time, as a microphone delivers them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import soundfile as sf


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIC = os.path.join(ROOT, "python", "mic_stream.py")
SR = 16000
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@pytest.fixture
def pulse(tmp_path_factory):
    """Environment of a private PulseAudio with a pipe source 'wavsrc' fed from a FIFO."""
    if shutil.which("pulseaudio") is None:
        pytest.skip("pulseaudio not installed (Debian: pulseaudio libasound2-plugins libportaudio2)")
    d = tmp_path_factory.mktemp("pulse")
    fifo = d / "mic.fifo"
    conf = d / "pa.conf"
    conf.write_text(f"load-module module-native-protocol-unix auth-anonymous=1 socket={d}/sock\n"
                    f"load-module module-pipe-source source_name=wavsrc file={fifo} format=s16le rate={SR} "
                    f"channels=1\nset-default-source wavsrc\n")
    env = dict(os.environ, HOME=str(d), XDG_RUNTIME_DIR=str(d), PULSE_RUNTIME_PATH=str(d / "run"),
               PULSE_SERVER=f"unix:{d}/sock")
    proc = subprocess.Popen(["pulseaudio", "-n", "-F", str(conf), "--daemonize=no", "--exit-idle-time=-1",
                             "--use-pid-file=no", "--disable-shm=yes"], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(d / "log.txt", "w"))
    for _ in range(50):
        if os.path.exists(fifo) and os.path.exists(f"{d}/sock"):
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.skip(f"PulseAudio did not start: {(d / 'log.txt').read_text()[-500:]}")
    yield env, fifo
    proc.terminate()
    proc.wait(timeout=10)


def _pcm16(path, seconds_of_silence):
    x, sr = sf.read(path, dtype="int16")
    assert sr == SR
    return np.concatenate([x, np.zeros(int(SR * seconds_of_silence), np.int16)])


def _start(args, env):
    p = subprocess.Popen([sys.executable, MIC, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = []
    ready = threading.Event()

    def read_err():
        for raw in p.stderr:
            lines.append(raw.decode())
            if "listening on" in lines[-1]:
                ready.set()
        ready.set()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    assert ready.wait(120), "mic_stream.py never started listening"
    p.err_reader = reader  # joined after the process ends, so its last stderr lines are in ``lines``
    return p, lines


def _finish(p) -> bytes:
    """stdout of ``p`` once it exits; stderr is read only by the reader thread of _start (a
    communicate() would race it for the last lines)."""
    out = p.stdout.read()
    p.wait(timeout=120)
    p.err_reader.join(30)
    return out


class Feeder(threading.Thread):
    """Writes ``samples`` into the FIFO in real time, then silence until stopped (a microphone
    never stops delivering; PulseAudio holds back the last partial fragment otherwise)."""

    def __init__(self, fifo, samples):
        super().__init__(daemon=True)
        self.fifo, self.samples, self.stop, self.done = fifo, samples, threading.Event(), threading.Event()

    def run(self):
        step = SR // 10
        silence = np.zeros(step, np.int16)
        with open(self.fifo, "wb") as f:
            t0 = time.monotonic()
            i = 0
            while not self.stop.is_set():
                block = self.samples[i:i + step] if i < len(self.samples) else silence
                if i >= len(self.samples):
                    self.done.set()
                try:
                    f.write(block.tobytes())
                    f.flush()
                except BrokenPipeError:
                    return
                i += step
                time.sleep(max(0.0, t0 + i / SR - time.monotonic()))


def _audio_seconds(err_lines):
    m = re.search(r"([\d.]+) s audio, ", "".join(err_lines))
    assert m, "".join(err_lines)
    return float(m.group(1))


def _final_line(stdout: bytes) -> str:
    text = stdout.decode()
    assert text.endswith("\n")
    return ANSI.sub("", text.rstrip("\n").split("\r")[-1])


def _reference(bundle_dir, samples, **kw):
    from qwen3asr import Qwen3ASREngine

    eng = Qwen3ASREngine(bundle_dir, backend="auto")
    s = eng.create_stream(**kw)
    s.feed_audio(samples.astype(np.float32) / 32768)
    return s.finish().text


def test_list_devices_shows_pulse(pulse):
    env, _ = pulse
    p = subprocess.run([sys.executable, MIC, "--list-devices"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert re.search(r"^\s+\d+\s+pulse\s+\(ALSA", p.stdout, re.M), p.stdout


def test_missing_device_is_explained(pulse):
    env, _ = pulse
    p = subprocess.run([sys.executable, MIC, "--device", "no-such-mic"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert "error: no capture device matches 'no-such-mic'; run with --list-devices" in p.stderr


def _captions(args, env, fifo, samples):
    """Run qwen3asr-mic with ``args`` while ``samples`` play into the fifo device; (stdout, stderr
    lines), the exit checked."""
    p, err = _start(args, env)
    feeder = Feeder(fifo, samples)
    feeder.start()
    out = _finish(p)
    feeder.stop.set()
    assert p.returncode == 0, "".join(err)
    return out, err


@pytest.mark.slow
def test_captions_from_device_until_max_seconds(pulse, bundle_dir):
    env, fifo = pulse
    samples = _pcm16(os.path.join(ROOT, "audio", "en_2.wav"), 1.624)  # 4.0 s in all
    args = ["--device", "pulse", "--model", bundle_dir, "--language", "English", "--chunk-size", "1.0",
            "--max-new-tokens", "3", "--max-seconds", "4", "--stats"]
    out, err = _captions(args, env, fifo, samples)
    final = _final_line(out)
    # the device delivered the WAV samples unchanged: same text as the session fed directly
    assert final == _reference(bundle_dir, samples, language="English", chunk_size=1.0, max_new_tokens=3,
                               rollback_tokens=2)
    assert out.count(b"\r\x1b[K") >= 2  # the line was redrawn in place
    assert re.search(r"4\.000 s audio, 4\.000 s encoded in 4 calls", "".join(err)), "".join(err)


@pytest.mark.slow
def test_ctrl_c_flushes_and_exits_zero(pulse, bundle_dir):
    env, fifo = pulse
    samples = _pcm16(os.path.join(ROOT, "audio", "en_3.wav"), 0.5)
    args = ["--device", "pulse", "--model", bundle_dir, "--language", "English", "--chunk-size", "2.0",
            "--max-new-tokens", "3", "--stats"]
    p, err = _start(args, env)
    feeder = Feeder(fifo, samples)
    feeder.start()
    assert feeder.done.wait(60)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    out = _finish(p)
    feeder.stop.set()
    assert p.returncode == 0, "".join(err)
    assert "Traceback" not in "".join(err) and "KeyboardInterrupt" not in "".join(err)
    final = _final_line(out)
    n = int(round(_audio_seconds(err) * SR))
    assert n >= len(samples)  # everything written before Ctrl-C was captured and flushed
    fed = np.concatenate([samples, np.zeros(n, np.int16)])[:n]
    assert final == _reference(bundle_dir, fed, language="English", chunk_size=2.0, max_new_tokens=3,
                               rollback_tokens=2)


def test_final_pass_is_off_by_default_and_a_flag():
    from qwen3asr.cli.mic import build_parser

    assert build_parser().parse_args([]).final_pass is False  # docs/streaming.md, "Each surface's default"
    assert build_parser().parse_args(["--final-pass"]).final_pass is True
    assert build_parser().parse_args(["--final-pass", "--no-final-pass"]).final_pass is False


def test_partial_every_is_off_by_default_and_checked(capsys):
    from qwen3asr.cli.mic import build_parser, main

    assert build_parser().parse_args([]).partial_every is None
    assert build_parser().parse_args(["--partial-every", "0.5"]).partial_every == 0.5
    assert main(["--partial-every", "0.01", "--list-devices"]) == 2  # refused before any device is opened
    assert "partial_every" in capsys.readouterr().err
    # each segment's first words are previewed by default; 0 turns it off
    assert build_parser().parse_args([]).first_words == 0.5
    assert build_parser().parse_args(["--first-words", "0"]).first_words == 0
    assert main(["--first-words", "0.1", "--list-devices"]) == 2
    assert "first_words" in capsys.readouterr().err


@pytest.mark.slow
def test_final_pass_replaces_the_streamed_text(pulse):
    """zh_2 at 1 s chunks on the bundled model: the streamed text is wrong, --final-pass prints
    the piece's one-pass text."""
    env, fifo = pulse
    samples = _pcm16(os.path.join(ROOT, "audio", "zh_2.wav"), 1.0)
    seconds = len(samples) / SR
    args = ["--device", "pulse", "--chunk-size", "1.0", "--final-pass", "--max-seconds", f"{seconds:.1f}", "--stats"]
    out, err = _captions(args, env, fifo, samples)
    model = os.path.join(ROOT, "models", "default")
    fed = samples[:int(round(_audio_seconds(err) * SR))]
    streamed = _reference(model, fed, chunk_size=1.0)
    assert _final_line(out) == _reference(model, fed, chunk_size=1.0, final_pass=True) == "把十二瓶牛奶加到购物清单"
    assert streamed != "把十二瓶牛奶加到购物清单"
