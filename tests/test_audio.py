"""Audio input: formats, channels, rates, normalisation, and every error message."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from qwen3asr.audio import AudioError, PcmConverter, PcmFormat, PcmFormatError, prepare_audio

SR = 16000


def tone(seconds=1.0, sr=SR, freq=440.0, amp=0.5):
    t = np.arange(int(seconds * sr)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.mark.parametrize("subtype,fmt,ext", [("PCM_16", "WAV", "wav"), ("PCM_24", "WAV", "wav"),
                                             ("PCM_32", "WAV", "wav"), ("FLOAT", "WAV", "wav"),
                                             ("PCM_U8", "WAV", "wav"), ("PCM_16", "FLAC", "flac"),
                                             ("VORBIS", "OGG", "ogg")])
def test_file_formats_read_to_16k_float(tmp_path, subtype, fmt, ext):
    x = tone()
    path = tmp_path / f"a.{ext}"
    sf.write(path, x, SR, subtype=subtype, format=fmt)
    y = prepare_audio(str(path))
    assert y.dtype == np.float32 and y.ndim == 1 and len(y) == len(x)
    tol = 0.05 if subtype in ("VORBIS", "PCM_U8") else 1e-3
    if subtype == "VORBIS":  # lossy: the waveform is close, not equal
        assert np.corrcoef(x, y)[0, 1] > 0.99
    else:
        assert np.abs(y - x).max() < tol


def test_other_rates_are_resampled_band_limited(tmp_path):
    for sr in (8000, 22050, 44100, 48000):
        path = tmp_path / f"r{sr}.wav"
        sf.write(path, tone(1.0, sr, 1000.0), sr)
        y = prepare_audio(str(path))
        assert abs(len(y) - SR) <= 1
        spec = np.abs(np.fft.rfft(y[2000:14000]))
        peak_hz = np.argmax(spec) * SR / 12000
        assert abs(peak_hz - 1000) < 5
    # content above 8 kHz is removed, not aliased into the band
    sr = 44100
    path = tmp_path / "hf.wav"
    sf.write(path, tone(1.0, sr, 15000.0), sr)
    y = prepare_audio(str(path))
    assert np.sqrt(np.mean(y[2000:-2000] ** 2)) < 1e-3


def test_channels_averaged(tmp_path):
    left, right = tone(freq=300), tone(freq=500, amp=0.2)
    path = tmp_path / "st.wav"
    sf.write(path, np.stack([left, right], axis=1), SR, subtype="FLOAT")
    y = prepare_audio(str(path))
    assert np.allclose(y, (left + right) / 2, atol=1e-6)
    six = np.stack([left] * 6, axis=1)
    assert np.allclose(prepare_audio(six), left, atol=1e-6)
    assert np.allclose(prepare_audio(six.T.copy()), left, atol=1e-6)  # (channels, n) too


def test_peak_normalisation_as_official():
    x = tone(amp=0.5)
    assert np.allclose(prepare_audio(x), x)  # peak <= 1: untouched
    y = prepare_audio(x * 4)  # peak 2 -> divided by the peak
    assert np.isclose(np.abs(y).max(), 1.0) and np.allclose(y, x / 0.5 * 1.0, atol=1e-6)


def test_integer_arrays():
    x = tone(amp=0.25)
    i16 = np.round(x * 32767).astype(np.int16)
    assert np.abs(prepare_audio(i16) - x).max() < 1e-4
    u8 = np.round(x * 127 + 128).astype(np.uint8)
    assert np.abs(prepare_audio(u8) - x).max() < 0.01


def test_array_with_rate_is_resampled():
    y = prepare_audio(tone(1.0, 48000), sample_rate=48000)
    assert abs(len(y) - SR) <= 1


@pytest.mark.parametrize("make,msg", [
    (lambda p: None, "not found"),
    (lambda p: p.write_bytes(b""), r"empty \(0 bytes\)"),
    (lambda p: p.write_text("this is a text file, not audio\n" * 20), "cannot decode"),
    (lambda p: p.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt "), "cannot decode"),
])
def test_bad_files(tmp_path, make, msg):
    path = tmp_path / "bad.wav"
    make(path)
    with pytest.raises(AudioError, match=msg):
        prepare_audio(str(path))


def test_directory_is_not_audio(tmp_path):
    with pytest.raises(AudioError, match="directory"):
        prepare_audio(str(tmp_path))


def test_file_without_samples(tmp_path):
    path = tmp_path / "zero.wav"
    sf.write(path, np.zeros(0, np.float32), SR)
    with pytest.raises(AudioError, match="no samples"):
        prepare_audio(str(path))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite(bad):
    x = tone()
    x[100] = bad
    with pytest.raises(AudioError, match="NaN or infinite"):
        prepare_audio(x)


def test_too_short():
    with pytest.raises(AudioError, match="too short"):
        prepare_audio(np.zeros(100, np.float32))
    assert prepare_audio(np.zeros(160, np.float32)).shape == (160,)


def test_bad_array_types():
    with pytest.raises(AudioError, match="file path or a numpy array"):
        prepare_audio([0.0] * 1000)
    with pytest.raises(AudioError, match="not PCM"):
        prepare_audio(np.zeros(1000, dtype=np.complex64))
    with pytest.raises(AudioError, match="1-D .* or 2-D"):
        prepare_audio(np.zeros((2, 2, 1000), np.float32))
    with pytest.raises(AudioError, match="sample rate must be positive"):
        prepare_audio(tone(), sample_rate=0)


# ---------------------------------------------------------------------------- streamed chunks
@pytest.mark.parametrize("pcm, rate, message", [
    (np.zeros(1600, np.float32), 44100, r"^VAD needs 16000 Hz audio, got 44100 Hz; resample first "
                                        r"\(qwen3asr\.audio\.resample or soxr\.resample\(pcm, 44100, 16000\)\)$"),
    ([0.0] * 10, SR, r"^VAD needs a numpy float32 array, got list$"),
    (np.zeros(10, np.int16), SR, r"^VAD needs float32 samples in \[-1, 1\], got dtype int16; convert int16 with "
                                 r"pcm\.astype\(np\.float32\) / 32768 and float64 with pcm\.astype\(np\.float32\)$"),
    (np.zeros((10, 2), np.float32), SR, r"^VAD needs mono audio of shape \(samples,\), got shape \(10, 2\); "
                                        r"mix channels first, e\.g\. pcm\.mean\(axis=1\)$"),
    (np.array([0.0, np.inf], np.float32), SR, r"^VAD got NaN or infinite samples$"),
])
def test_chunk_check_messages(pcm, rate, message):
    from qwen3asr.audio import PcmChecker, check_pcm

    with pytest.raises(AudioError, match=message):
        check_pcm(pcm, rate, where="VAD")
    with pytest.raises(AudioError, match=message):
        PcmChecker("VAD")(pcm, rate)


def test_chunk_check_shapes_and_clipping(caplog):
    """(n, 1) is mono; values beyond [-1, 1] are clipped, with one warning per PcmChecker (one
    stream) and one per check_pcm call."""
    from qwen3asr.audio import PcmChecker, check_pcm

    x = np.array([[0.5], [-0.25]], np.float32)
    y = check_pcm(x)
    assert y.shape == (2,) and y.dtype == np.float32 and np.shares_memory(x, y)  # no copy when nothing changes
    check = PcmChecker()
    with caplog.at_level("WARNING", logger="qwen3asr.audio"):
        a = check(np.array([2.0, -0.5], np.float32))
        b = check(np.array([-3.0], np.float32))
        assert len(caplog.records) == 1 and "feed_audio: stream audio exceeds [-1, 1]" in caplog.text
        check_pcm(np.array([2.0], np.float32))
        check_pcm(np.array([2.0], np.float32))
        assert len(caplog.records) == 3
    assert a.tolist() == [1.0, -0.5] and b.tolist() == [-1.0] and a.dtype == np.float32 and check.clipped


# ---------------------------------------------------------------------------- raw PCM bytes
@pytest.mark.parametrize("width, encode", [
    (1, lambda v: (np.round(v * 128) + 128).astype(np.uint8).tobytes()),
    (2, lambda v: np.round(v * 32768).astype("<i2").tobytes()),
    (3, lambda v: b"".join(int(x).to_bytes(3, "little", signed=True) for x in np.round(v * 2 ** 23))),
    (4, lambda v: np.round(v * 2 ** 31).astype("<i4").tobytes()),
])
def test_pcm_widths_and_channel_mix(width, encode):
    left = np.array([0.5, -0.25, 0.0, -1.0], np.float64)
    right = np.array([0.0, 0.25, 0.5, -0.5], np.float64)
    data = encode(np.stack([left, right], axis=1).reshape(-1))
    conv = PcmConverter(PcmFormat(16000, width, 2))
    got = np.concatenate([conv.convert(data[:5]), conv.convert(data[5:])])  # split inside a frame
    np.testing.assert_allclose(got, (left + right) / 2, atol=1 / 128 if width == 1 else 1e-6)
    assert conv.flush().size == 0


def test_pcm_resampling_keeps_length_and_tone():
    t = np.arange(44100) / 44100
    tone = (0.5 * np.sin(2 * np.pi * 440 * t) * 32768).astype("<i2").tobytes()
    conv = PcmConverter(PcmFormat(44100, 2, 1))
    out = np.concatenate([conv.convert(tone[i:i + 8820]) for i in range(0, len(tone), 8820)] + [conv.flush()])
    assert out.shape[0] == 16000
    spectrum = np.abs(np.fft.rfft(out))
    assert np.argmax(spectrum) == 440  # 1 s at 16 kHz: bin k is k Hz


def test_pcm_float32_and_its_faults():
    """float32 (the live WebSocket's f32le, the microphone's blocks): decoded as is; a non-finite
    sample is refused before it reaches the resampler."""
    x = np.array([0.5, -1.0, 0.25], "<f4")
    conv = PcmConverter(PcmFormat(16000, 4, 1, "float"))
    assert conv.convert(x.tobytes()[:5]).tolist() == [0.5] and conv.convert(x.tobytes()[5:]).tolist() == [-1.0, 0.25]
    assert conv.frames_in == 3
    with pytest.raises(AudioError, match=r"^float32 samples must be finite$"):
        PcmConverter(PcmFormat(48000, 4, 1, "float")).convert(np.array([0.0, np.nan], "<f4").tobytes())


@pytest.mark.parametrize("args, message", [
    ((16000, 2.0, 1), r"^audio format needs integer rate, width and channels; got \{'rate': 16000, 'width': 2.0, "
                      r"'channels': 1\}$"),
    ((999, 5, 33), r"^unsupported audio format: rate must be 1000..384000 Hz \(got 999\); width must be one of "
                   r"1, 2, 3, 4 bytes \(got 5\); channels must be 1..32 \(got 33\)$"),
    ((16000, 2, 1, "float"), r"^unsupported audio format: width must be 4 bytes for float samples \(got 2\)$"),
    ((16000, 2, 1, "alaw"), r"^unsupported audio format: encoding must be one of int, float \(got 'alaw'\)$"),
])
def test_pcm_format_errors(args, message):
    with pytest.raises(PcmFormatError, match=message):
        PcmFormat(*args)


def test_old_pcm_module_path_still_works_with_a_warning(monkeypatch):
    import importlib
    import sys

    monkeypatch.delitem(sys.modules, "qwen3asr.server.pcm", raising=False)
    with pytest.warns(DeprecationWarning, match=r"qwen3asr\.server\.pcm is deprecated.*from qwen3asr\.audio"):
        old = importlib.import_module("qwen3asr.server.pcm")
    assert old.PcmConverter is PcmConverter and old.PcmFormat is PcmFormat and old.RATE_RANGE == (1000, 384000)
