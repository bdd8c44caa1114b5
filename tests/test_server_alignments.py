"""POST /v1/audio/alignments with a plain HTTP client (http.client) against real server
processes: the words equal engine.align on the same input; the limits and errors of the
transcription endpoint; 400s naming the problem without an aligner or for a language it lacks."""

from __future__ import annotations

import http.client
import json
import os
import shutil

import pytest

pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import AUDIO, MODEL, ServerProcess, multipart  # noqa: E402

KEY = "k-align"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("align") / "server.log")
    with ServerProcess("--api-key", KEY, "--max-upload-mb", "1", log_path=log) as s:
        yield s


@pytest.fixture(scope="module")
def engine(server_engine):
    return server_engine


def _post(url: str, fields: dict, files: dict, key=KEY, path="/v1/audio/alignments"):
    body, ctype = multipart(fields, files)
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": ctype}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    data = json.loads(r.read())
    conn.close()
    return r.status, data


def _wav(name: str) -> bytes:
    with open(os.path.join(AUDIO, name), "rb") as f:
        return f.read()


@pytest.mark.parametrize("name,text,language", [("en_1.wav", "open the back door", "en"),
                                                ("en_3.wav", "please turn on the living room fan", None),
                                                ("zh_2.wav", "把十二瓶牛奶加到购物清单", "Chinese")])
def test_words_equal_engine_align(server, engine, name, text, language):
    from qwen3asr.audio import prepare_audio

    fields = {"text": text, **({"language": language} if language else {})}
    status, body = _post(server.url, fields, {"file": (name, _wav(name))})
    assert status == 200, body
    want = [w.to_dict() for w in engine.align(prepare_audio(os.path.join(AUDIO, name)), text, language)]
    assert body["words"] == want and want
    assert body["text"] == text and body["language"] == ("Chinese" if name.startswith("zh") else "English")
    assert body["segments"] == [{"start": 0.0, "end": body["duration"], "text": text, "words": want}]


def test_word_spans_speech_raw_or_checked(server, engine, tmp_path):
    """word_spans: "speech" (the default) gives engine.align's spans, "raw" the official aligner's
    times, "checked" engine.align's with the ASR's check; on two commands with a second of
    silence between them speech and raw differ."""
    import numpy as np
    import soundfile as sf

    from qwen3asr.audio import prepare_audio

    a, b = prepare_audio(os.path.join(AUDIO, "en_1.wav")), prepare_audio(os.path.join(AUDIO, "en_3.wav"))
    pcm = np.concatenate([a, np.zeros(16000, np.float32), b])
    path = tmp_path / "paused.wav"
    sf.write(str(path), pcm, 16000, subtype="PCM_16")
    pcm = prepare_audio(str(path))
    text = "open the back door please turn on the living room fan"
    got = {}
    for spans in ("speech", "raw", "checked", None):
        fields = {"text": text, "language": "English", **({"word_spans": spans} if spans else {})}
        status, body = _post(server.url, fields, {"file": ("paused.wav", path.read_bytes())})
        assert status == 200, body
        got[spans] = body["words"]
    assert got[None] == got["speech"] == [w.to_dict() for w in engine.align(pcm, text, "English")]
    assert got["raw"] == [w.to_dict() for w in engine.aligner.align(pcm, text, "English")]
    assert got["raw"] == [w.to_dict() for w in engine.align(pcm, text, "English", word_spans="raw")]
    assert got["checked"] == [w.to_dict() for w in engine.align(pcm, text, "English", word_spans="checked")]
    assert got["speech"] != got["raw"]
    with pytest.raises(ValueError, match="word_spans must be one of 'speech', 'raw', 'checked'"):
        engine.align(pcm, text, "English", word_spans="tight")


def test_errors(server):
    wav = {"file": ("en_1.wav", _wav("en_1.wav"))}
    status, body = _post(server.url, {"text": "x"}, wav, key="wrong")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    status, body = _post(server.url, {}, wav)
    assert status == 400 and body["error"]["code"] == "missing_text" and body["error"]["param"] == "text"
    status, body = _post(server.url, {"text": "open"}, {})
    assert status == 400 and body["error"]["code"] == "missing_file"
    status, body = _post(server.url, {"text": "open", "language": "Klingon"}, wav)
    assert status == 400 and body["error"]["code"] == "invalid_language"
    status, body = _post(server.url, {"text": "open", "language": "French"}, wav)
    assert status == 400 and body["error"]["code"] == "unsupported_language"
    assert "Chinese, English" in body["error"]["message"] and "French" in body["error"]["message"]
    status, body = _post(server.url, {"text": "open", "prompt": "x"}, wav)
    assert status == 400 and body["error"]["code"] == "unknown_field"
    status, body = _post(server.url, {"text": "open", "word_spans": "tight"}, wav)
    assert status == 400 and body["error"]["code"] == "unsupported_value" and body["error"]["param"] == "word_spans"
    status, body = _post(server.url, {"text": "open"}, {"file": ("x.wav", b"not audio at all")})
    assert status == 400 and body["error"]["code"] == "invalid_audio"
    status, body = _post(server.url, {"text": "open"}, {"file": ("big.wav", b"\0" * (1024 * 1024 + 10))})
    assert status == 413 and body["error"]["code"] == "file_too_large"
    status, body = _post(server.url, {"text": "open"}, {"file": ("long.wav", _wav("long_mixed.wav"))})
    assert status == 413 and body["error"]["code"] == "file_too_large"  # over --max-upload-mb 1


def test_audio_longer_than_one_aligner_pass_is_aligned_piece_by_piece(server, engine, tmp_path):
    """65 s of English commands (the English speech of long_mixed.wav, 0.8 s apart, twice): the
    text is placed piece by piece (qwen3asr.aligner.long); the words are engine.align's, in order,
    inside the audio, and each command's first word starts near where it was put."""
    import json as jsonlib

    import numpy as np
    import soundfile as sf

    from qwen3asr.aligner.words import align_words

    x, sr = sf.read(os.path.join(AUDIO, "long_mixed.wav"), dtype="float32")
    with open(os.path.join(AUDIO, "transcripts.json"), encoding="utf-8") as f:
        clip = next(c for c in jsonlib.load(f)["clips"] if c["file"] == "long_mixed.wav")
    gap = np.zeros(int(0.8 * sr), np.float32)
    parts, texts, starts, t = [], [], [], 0.0
    while t < 62.0:
        for seg in clip["segments"]:
            if seg["language"] != "English":
                continue
            piece = x[int(seg["start"] * sr):int(seg["end"] * sr)]
            parts += [piece, gap]
            texts.append(seg["text"])
            starts.append(t)
            t += (len(piece) + len(gap)) / sr
    audio = np.concatenate(parts)
    path = tmp_path / "long.flac"
    sf.write(str(path), audio, sr, format="FLAC")
    text = " ".join(texts)
    status, body = _post(server.url, {"text": text, "language": "English"}, {"file": ("long.flac", path.read_bytes())})
    assert status == 200, body
    assert len(body["segments"]) >= 2 and body["duration"] > 60
    words = body["words"]
    assert [w["word"] for w in words] == align_words(text, "English")
    assert words == [w.to_dict() for w in engine.align(audio, text, "English")]
    assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))
    assert 0 <= words[0]["start"] and words[-1]["end"] <= body["duration"]
    k = 0
    for s, command in zip(starts, texts):  # each command's first word, near where it was put
        assert abs(words[k]["start"] - s) < 1.0, (command, words[k], s)
        k += len(align_words(command, "English"))
    for seg in body["segments"]:
        assert all(seg["start"] - 1e-3 <= w["start"] and w["end"] <= seg["end"] + 1e-3 for w in seg["words"])


def test_without_an_aligner_a_400_says_how_to_get_one(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)  # not the bundled path: no aligner is found for it
    with ServerProcess("--model", str(model), log_path=str(tmp_path / "server.log")) as s:
        status, body = _post(s.url, {"text": "open the back door"}, {"file": ("en_1.wav", _wav("en_1.wav"))}, key=None)
    assert status == 400 and body["error"]["code"] == "no_aligner" and "--aligner" in body["error"]["message"]
