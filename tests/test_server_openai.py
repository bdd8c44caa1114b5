"""The OpenAI-compatible HTTP API with the official `openai` client against a real server
process on the bundled model: every response_format and stream=True give the engine's own
text for the bundled clips."""

from __future__ import annotations

import os

import pytest

openai = pytest.importorskip("openai", reason="the openai client is needed (pip install -e '.[dev]')")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import AUDIO, MODEL, ServerProcess, expected, multipart, post_raw  # noqa: E402

KEY = "test-key-123"
CLIPS = ("en_1.wav", "zh_1.wav")
# A context that changes what the bundled model reads in zh_2.wav ("把" -> "八"): a prompt that
# reached the model shows in the text (test_prompt_reaches_the_model checks that it still does).
BIAS = "switch off the bedroom radio. open the back door. please turn on the living room fan."
BIAS_CLIP = "zh_2.wav"


@pytest.fixture(scope="module")
def aligner():
    """The aligner the server and the reference use: a random-weight official one (the words are
    compared with the engine's own, not with the speech)."""
    bundles = pytest.importorskip("bundles")
    pytest.importorskip("torch", reason="the random aligner checkpoint is built with the official code (torch)")
    return bundles.aligner_bundle()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, aligner):
    log = str(tmp_path_factory.mktemp("server") / "server.log")
    with ServerProcess("--api-key", KEY, "--aligner", aligner, log_path=log) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference(aligner):
    """The engine's own results, in this process (what the server must reproduce)."""
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.audio import prepare_audio

    engine = Qwen3ASREngine(MODEL, backend="onnx", aligner=aligner)
    out = {}
    for name in CLIPS + ("long_mixed.wav", BIAS_CLIP):
        pcm = prepare_audio(os.path.join(AUDIO, name))
        out[name] = engine.transcribe(pcm)
        out[name, "words"] = engine.transcribe(pcm, word_timestamps=True)
    out["biased"] = engine.transcribe(prepare_audio(os.path.join(AUDIO, BIAS_CLIP)), context=BIAS)
    out["raw words"] = engine.transcribe(prepare_audio(os.path.join(AUDIO, "en_1.wav")), word_timestamps=True,
                                         word_spans="raw")
    engine.close()
    return out


def _open(name):
    return open(os.path.join(AUDIO, name), "rb")


def test_models_lists_the_served_model(client):
    ids = [m.id for m in client.models.list()]
    assert ids == ["qwen3-asr"]


@pytest.mark.parametrize("name", CLIPS)
def test_json_and_text_equal_the_engine(client, reference, name):
    with _open(name) as f:
        r = client.audio.transcriptions.create(model="qwen3-asr", file=f)
    assert r.text == reference[name].text == expected(name)
    with _open(name) as f:
        t = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="text")
    assert t.strip() == reference[name].text


@pytest.mark.parametrize("name", CLIPS)
def test_verbose_json(client, reference, name):
    ref = reference[name]
    with _open(name) as f:
        r = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="verbose_json")
    assert r.text == ref.text
    assert r.language == ref.language.lower()
    assert r.duration == pytest.approx(ref.stats.audio_seconds, abs=1e-3)
    assert [s.text for s in r.segments] == [s.text for s in ref.segments]
    assert [s.id for s in r.segments] == list(range(len(ref.segments)))
    assert all(s.tokens for s in r.segments)
    assert [s.model_extra["finish_reason"] for s in r.segments] == [s.finish_reason for s in ref.segments] \
        and all(s.finish_reason == "eos" for s in ref.segments)  # how each segment's decoder run ended


def test_segment_timestamps_and_auto_chunking_are_accepted(client, reference):
    with _open("en_1.wav") as f:
        r = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="verbose_json",
                                               timestamp_granularities=["segment"], chunking_strategy="auto")
    assert r.text == reference["en_1.wav"].text and len(r.segments) == 1


@pytest.mark.parametrize("name", CLIPS + ("long_mixed.wav",))
def test_word_timestamps_with_verbose_json(client, reference, name):
    with _open(name) as f:
        r = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="verbose_json",
                                               timestamp_granularities=["word", "segment"])
    ref = reference[name, "words"]
    assert ref.words, "the reference has words to compare"
    assert [(w.word, w.start, w.end) for w in r.words] == [(w.word, w.start, w.end) for w in ref.words]
    assert r.text == ref.text and [s.start for s in r.segments] == [round(s.start, 3) for s in ref.segments]


def test_word_spans_gives_the_raw_times_or_the_speech_fitted_ones(client, reference):
    """word_spans (a form field of ours, through the client's extra_body): "raw" gives the official
    aligner's times, "speech" the default; refused with another value or without word times."""
    for spans, key in (("raw", "raw words"), ("speech", ("en_1.wav", "words"))):
        with _open("en_1.wav") as f:
            r = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="verbose_json",
                                                   timestamp_granularities=["word"], extra_body={"word_spans": spans})
        assert [(w.word, w.start, w.end) for w in r.words] == [(w.word, w.start, w.end) for w in reference[key].words]
        # the random-weight aligner collapses on this clip: flagged in the segment, as in the engine's result
        assert (r.segments[0].model_extra or {}).get("words_flag") == reference[key].segments[0].words_flag
    assert reference["raw words"].words != reference["en_1.wav", "words"].words
    for extra in ({"word_spans": "snapped", "timestamp_granularities[]": "word"}, {"word_spans": "raw"}):
        with _open("en_1.wav") as f, pytest.raises(openai.BadRequestError) as exc:
            client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="verbose_json",
                                               extra_body=extra)
        assert exc.value.body["param"] == "word_spans"
        assert "accepted speech, raw, checked, with timestamp_granularities[]=word" in exc.value.body["message"]


def test_word_spans_checked_gives_the_engines_checked_words(client, aligner, tmp_path):
    """word_spans "checked" on three commands with pauses between them: the engine's own words
    with the ASR's check of the pieces (qwen3asr.aligner.checked)."""
    import numpy as np
    import soundfile as sf

    from qwen3asr import Qwen3ASREngine
    from qwen3asr.audio import prepare_audio

    z = np.zeros(8000, np.float32)
    a, b, c = (prepare_audio(os.path.join(AUDIO, n)) for n in ("zh_3.wav", "zh_1.wav", "zh_2.wav"))
    pcm = np.concatenate([a, z, b, z, c])
    path = tmp_path / "three.wav"
    sf.write(str(path), pcm, 16000, subtype="PCM_16")
    with Qwen3ASREngine(MODEL, backend="onnx", aligner=aligner) as engine:
        want = engine.transcribe(prepare_audio(str(path)), word_timestamps=True, word_spans="checked")
    with open(path, "rb") as f:
        r = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="verbose_json",
                                               timestamp_granularities=["word"], extra_body={"word_spans": "checked"})
    assert want.words and [(w.word, w.start, w.end) for w in r.words] == [(w.word, w.start, w.end) for w in want.words]


def test_words_need_verbose_json_as_openai_says(client):
    for fmt in ("json", "text", "srt"):
        with _open("en_1.wav") as f, pytest.raises(openai.BadRequestError) as exc:
            client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format=fmt,
                                               timestamp_granularities=["word"])
        assert exc.value.body["code"] == "invalid_response_format" and "verbose_json" in exc.value.body["message"]


def test_verbose_json_long_file_has_the_long_path_segments(client, reference):
    ref = reference["long_mixed.wav"]
    assert len(ref.segments) > 10  # the long-file path cut it
    with _open("long_mixed.wav") as f:
        r = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="verbose_json")
    assert r.text == ref.text
    assert [(round(s.start, 2), round(s.end, 2), s.text) for s in r.segments] == \
        [(round(s.start, 2), round(s.end, 2), s.text) for s in ref.segments]


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitles_as_the_cli_writes_them(client, reference, fmt):
    from qwen3asr.subtitles import to_srt, to_vtt

    for name in CLIPS + ("long_mixed.wav",):
        with _open(name) as f:
            body = client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format=fmt)
        want = (to_srt if fmt == "srt" else to_vtt)(reference[name].segments)
        assert body == want


@pytest.mark.parametrize("name", CLIPS + ("long_mixed.wav",))
def test_stream_deltas_then_done(client, reference, name):
    with _open(name) as f:
        events = list(client.audio.transcriptions.create(model="qwen3-asr", file=f, stream=True))
    types = [e.type for e in events]
    assert types[-1] == "transcript.text.done" and set(types[:-1]) == {"transcript.text.delta"}
    deltas = "".join(e.delta for e in events[:-1])
    assert events[-1].text == reference[name].text
    assert deltas == reference[name].text
    assert "<asr_text>" not in deltas and not deltas.startswith("language")
    if name == "long_mixed.wav":
        assert len(events) > 10  # one delta per committed piece, not one at the end


def test_language_code_or_name_and_prompt(client, reference):
    for lang in ("en", "English", "english"):
        with _open("en_1.wav") as f:
            r = client.audio.transcriptions.create(model="qwen3-asr", file=f, language=lang,
                                                   prompt="back door", temperature=0.0)
        assert r.text == expected("en_1.wav")


def test_prompt_reaches_the_model(client, reference):
    """The prompt is the engine's context: the server's text equals the engine's with that
    context, which differs from the text without it (else this test could not tell)."""
    assert reference["biased"].text != reference[BIAS_CLIP].text
    with _open(BIAS_CLIP) as f:
        r = client.audio.transcriptions.create(model="qwen3-asr", file=f, prompt=BIAS)
    assert r.text == reference["biased"].text
    with _open(BIAS_CLIP) as f:
        events = list(client.audio.transcriptions.create(model="qwen3-asr", file=f, prompt=BIAS, stream=True))
    assert events[-1].text == reference["biased"].text
    with _open(BIAS_CLIP) as f:  # and the next request without a prompt is not biased by it
        assert client.audio.transcriptions.create(model="qwen3-asr", file=f).text == reference[BIAS_CLIP].text


def test_sse_wire_format(server, reference):
    """stream=true on the wire (not through a client that might forgive it): text/event-stream,
    every event one "data: <json>" line and a blank line, the documented types, then
    "data: [DONE]" last."""
    import json

    with _open("en_1.wav") as f:
        body, ctype = multipart({"model": "qwen3-asr", "stream": "true"}, {"file": ("en_1.wav", f.read())})
    status, headers, text = post_raw(server.url, body, ctype, key=KEY)
    assert status == 200, text
    assert headers["content-type"].startswith("text/event-stream")
    assert text.endswith("\n\n")
    blocks = text[:-2].split("\n\n")
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), blocks
    assert blocks[-1] == "data: [DONE]"
    events = [json.loads(b[len("data: "):]) for b in blocks[:-1]]
    assert [e["type"] for e in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "transcript.text.done"
    assert events[-1]["text"] == "".join(e["delta"] for e in events[:-1]) == reference["en_1.wav"].text
    assert events[-1]["usage"] == {"type": "duration", "seconds": pytest.approx(
        reference["en_1.wav"].stats.audio_seconds, abs=1e-3)}


def test_wrong_or_missing_api_key_is_401(server):
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e, _open("en_1.wav") as f:
        bad.audio.transcriptions.create(model="qwen3-asr", file=f)
    assert e.value.status_code == 401
    assert e.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.url + "/v1/models", timeout=10)
    assert e.value.code == 401
    assert b'"missing_api_key"' in e.value.read()
    assert server.health()[0] == 200  # /health needs no key (load balancers)


def test_clients_that_name_another_model_are_served(client, reference):
    """Many OpenAI clients send a fixed model name; a single-model server answers them."""
    for name in ("whisper-1", "gpt-4o-transcribe"):
        with _open("en_1.wav") as f:
            assert client.audio.transcriptions.create(model=name, file=f).text == reference["en_1.wav"].text


def test_a_strict_server_refuses_another_model_name(tmp_path):
    with ServerProcess("--strict-model", log_path=str(tmp_path / "server.log")) as s:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)
        with pytest.raises(openai.BadRequestError) as e, _open("en_1.wav") as f:
            c.audio.transcriptions.create(model="whisper-1", file=f)
        assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
        with _open("en_1.wav") as f:
            assert c.audio.transcriptions.create(model="qwen3-asr", file=f).text == expected("en_1.wav")


def test_unknown_response_format_is_400(client):
    with pytest.raises(openai.BadRequestError) as e, _open("en_1.wav") as f:
        client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="xml")
    assert e.value.body["param"] == "response_format"
    assert "json, text, srt, vtt, verbose_json" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e, _open("en_1.wav") as f:
        client.audio.transcriptions.create(model="qwen3-asr", file=f, language="Klingon")
    assert e.value.body["param"] == "language" and "English (en)" in e.value.body["message"]


def test_a_request_transcribes_with_the_engines_options_and_its_own_fields():
    """transcribe_file hands the request's TranscribeOptions to the engine as they are: the
    engine's options with the request's language, prompt, temperature and word timestamps (the
    token budget and the chunking stay the engine's); the engine's errors become 400s."""
    import io

    from qwen3asr import TranscribeOptions
    from qwen3asr.aligner import AlignmentError
    from qwen3asr.server.errors import ApiError
    from qwen3asr.server.jobs import transcribe_file
    from qwen3asr.server.openai_api import TranscriptionRequest
    from qwen3asr.work import NO_WORK

    class Engine:
        options = TranscribeOptions(max_new_tokens=64, chunk_size=10.0, itn=True)
        error = None

        def transcribe(self, audio, options, **kw):
            self.call = (audio, options, kw)
            if self.error:
                raise self.error
            return "result"

    engine = Engine()
    req = TranscriptionRequest(file=io.BytesIO(), filename="a.wav", language="English", context=BIAS,
                               response_format="verbose_json", temperature=0.5, stream=False, words=True)
    options = req.options(engine.options)
    assert options == TranscribeOptions(language="English", context=BIAS, temperature=0.5, word_timestamps=True,
                                        max_new_tokens=64, chunk_size=10.0, itn=True)
    on_text = print
    assert transcribe_file(engine, "pcm", options, work=NO_WORK, on_text=on_text) == "result"
    assert engine.call == ("pcm", options, {"on_text": on_text, "work": NO_WORK})
    engine.error = AlignmentError("the aligner does not cover Klingon")
    with pytest.raises(ApiError, match="no word timestamps: the aligner does not cover Klingon") as e:
        transcribe_file(engine, "pcm", options, work=NO_WORK)
    assert (e.value.status, e.value.param) == (400, "timestamp_granularities[]")
