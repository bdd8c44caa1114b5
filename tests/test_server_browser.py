"""The page at / in real headless Chromium (Debian's chromium driven by Playwright): its fake
microphone plays a bundled clip, the AudioWorklet resamples it to 16 kHz and streams it over
the WebSocket; the captions on the page equal the clip's transcript. A screenshot of each run
is saved in build/server-browser/ (and the test's tmp dir)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is needed (the dev extra: pip install -e '.[dev]')")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import AUDIO, ROOT, ServerProcess, expected  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason="Debian's chromium is not installed (scripts/install_system_deps.sh)")
SHOTS = os.path.join(ROOT, "build", "server-browser")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(log_path=str(tmp_path_factory.mktemp("browser") / "server.log")) as s:
        yield s


def _fake_mic_wav(tmp_path, name: str, rate: int, channels: int) -> str:
    """The clip as 16-bit PCM WAV at ``rate`` with ``channels`` (what Chromium's fake capture reads)."""
    import soundfile as sf
    import soxr

    x, sr = sf.read(os.path.join(AUDIO, name), dtype="float32")
    if rate != sr:
        x = soxr.resample(x, sr, rate)
    x = np.concatenate([x, np.zeros(int(0.5 * rate), np.float32)])  # a little silence after the speech
    if channels > 1:
        x = np.repeat(x[:, None], channels, axis=1)
    path = str(tmp_path / f"mic_{rate}_{channels}.wav")
    sf.write(path, x, rate, subtype="PCM_16")
    return path


def _run_page(server, wav: str, user_dir: str, shot: str, chunk: str = "2.0") -> tuple[str, list]:
    """Open the page, start the microphone, let the clip play, stop; returns (captions, tails seen)."""
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            user_dir, executable_path=CHROMIUM, headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
                  f"--use-file-for-fake-audio-capture={wav}%noloop"])
        try:
            page = ctx.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url + "/")
            page.fill("#chunk-size", chunk)
            page.click("#start")
            page.wait_for_function("document.getElementById('status').textContent === 'listening'", timeout=30000)
            # the clip plays in real time; the captions fill in as chunks are decoded
            page.wait_for_function("document.getElementById('committed').textContent.length + "
                                   "document.getElementById('tail').textContent.length > 0", timeout=30000)
            tails = []
            for _ in range(40):  # until the whole clip has played (the tail stops changing)
                tails.append((page.inner_text("#committed"), page.inner_text("#tail")))
                if len(tails) > 6 and len(set(tails[-6:])) == 1:
                    break
                page.wait_for_timeout(250)
            page.screenshot(path=shot.replace(".png", "_live.png"))
            page.click("#stop")
            page.wait_for_function("document.getElementById('status').textContent === 'done'", timeout=30000)
            page.screenshot(path=shot)
            colours = page.evaluate("[getComputedStyle(document.getElementById('committed')).color, "
                                    "getComputedStyle(document.getElementById('tail')).color]")
            assert colours[0] != colours[1]  # the tail is greyed
            assert not errors, errors
            return page.inner_text("#committed"), tails
        finally:
            ctx.close()


@pytest.mark.parametrize("name,rate,channels", [("en_1.wav", 16000, 1), ("en_3.wav", 44100, 2),
                                                ("zh_2.wav", 48000, 1)])
def test_live_captions_in_chromium(server, tmp_path, name, rate, channels):
    wav = _fake_mic_wav(tmp_path, name, rate, channels)
    os.makedirs(SHOTS, exist_ok=True)
    shot = str(tmp_path / f"{name[:-4]}.png")
    text, tails = _run_page(server, wav, str(tmp_path / "chromium-profile"), shot)
    for f in (shot, shot.replace(".png", "_live.png")):
        shutil.copy(f, SHOTS)
    assert os.path.getsize(shot) > 1000
    assert text == expected(name)
    assert any(t for _, t in tails), "the tail (greyed, unstable text) never showed"


def test_file_form(server, tmp_path):
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            page = ctx.new_page()
            page.goto(server.url + "/")
            page.set_input_files("#file", os.path.join(AUDIO, "zh_1.wav"))
            page.select_option("#response-format", "text")
            page.click("#submit")
            page.wait_for_function("document.getElementById('file-result').textContent === '六点半'", timeout=30000)
            page.check("#stream")
            page.select_option("#response-format", "json")
            page.set_input_files("#file", os.path.join(AUDIO, "en_2.wav"))
            page.click("#submit")
            want = expected("en_2.wav")
            page.wait_for_function(f"document.getElementById('file-result').textContent === {want!r}",
                                   timeout=30000)
            page.screenshot(path=str(tmp_path / "file_form.png"))
            os.makedirs(SHOTS, exist_ok=True)
            shutil.copy(str(tmp_path / "file_form.png"), SHOTS)
        finally:
            ctx.close()
