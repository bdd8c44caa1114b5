"""The bundled demo aligner (models/default-aligner) and the script that trains it
(qwen3asr_tools.train_aligner).

The bundle is checked through the engine's public API on freshly synthesised speech: its
word times must be within 150 ms (mean) of the times libespeak-ng reports for the words it
spoke. Checked by hand once on the six clips of that test: a bundle of the same architecture
exported after 16 whole-model steps from scratch (an untrained model) is off by 1425 ms (English) and 1853 ms
(Mandarin) on average and fails it; the committed one by 51 ms (English) and 58 ms (Mandarin). The training
inputs are checked against the official aligner's own processor, and the training forward
against the official model's logits.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from qwen3asr import Qwen3ASREngine
from qwen3asr.aligner.words import align_words

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "models", "default")
ALIGNER = os.path.join(ROOT, "models", "default-aligner")
EN = os.path.join(ROOT, "audio", "en_1.wav")
MAX_MEAN_SHIFT_MS = 150.0  # the committed model's is several times smaller (docs/training.md)
TEXTS = (("open the back door, please! It's 7:30 o'clock.", "English"), ("把客厅的灯打开 ok 2026", "Chinese"),
         ("set a timer for twenty five minutes", "English"), ("九点一刻", "Chinese"))


@pytest.fixture(scope="module")
def engine(request):
    mp = pytest.MonkeyPatch()
    mp.delenv("QWEN3ASR_ALIGNER", raising=False)  # the bundled aligner, not one from the environment
    request.addfinalizer(mp.undo)
    with Qwen3ASREngine(DEFAULT, backend="onnx") as e:
        yield e


PAD_S = 0.3  # the demo clips' silence before and after the speech (audio/README.md)


@pytest.mark.parametrize("clip", ["en_1", "en_2", "en_3", "zh_1", "zh_2", "zh_3"])
def test_the_default_model_finds_the_bundled_aligner_and_times_its_words(engine, clip):
    """On the bundled demo clips (speech between 0.3 s of silence on each side): the transcript's
    words in order, the first starting within one 80 ms bin of the speech onset and the last
    ending within 2 bins of its end (an untrained bundle is off by well over a second: above).
    The committed model's last ends (ms, en_1..zh_3): +38 -76 -151 -42 -15 +5 (mean |.| 55); the
    model before the paused-speech run: -42 -76 -71 -42 -95 -75 (67); both start at +20."""
    assert os.path.samefile(engine.aligner_dir, ALIGNER)
    r = engine.transcribe(os.path.join(ROOT, "audio", f"{clip}.wav"), word_timestamps=True)
    assert [w.word for w in r.words] == align_words(r.text, r.language) and len(r.words) >= 3
    starts = [w.start for w in r.words]
    assert starts == sorted(starts)
    assert all(0.0 <= w.start <= w.end <= r.stats.audio_seconds for w in r.words)
    assert abs(r.words[0].start - PAD_S) <= 0.08, r.words
    assert abs(r.words[-1].end - (r.stats.audio_seconds - PAD_S)) <= 0.16, r.words


@pytest.mark.slow
@pytest.mark.skipif(not all(shutil.which(t) for t in ("espeak-ng", "sox")),
                    reason="espeak-ng and sox are not installed (apt-get install $(cat scripts/apt-packages.txt))")
def test_word_times_are_near_the_synthesisers_on_fresh_clips(engine, tmp_path):
    from qwen3asr_tools import make_dataset as md
    from qwen3asr_tools.train_aligner import clip_units

    # Held-out voices and speeds (the test plan), another seed than any committed run: clips no
    # model here was trained or scored on.
    specs = [s for s in md.plan_split("test", 40, seed=4242) if s.language != "None"]
    picked = [s for s in specs if s.language == "English"][:3] + [s for s in specs if s.language == "Chinese"][:3]
    md.make_noise_pool(str(tmp_path))
    shifts = {"English": [], "Chinese": []}
    for spec in picked:
        md.render_clip(spec, str(tmp_path), str(tmp_path))
        ref = clip_units(spec)
        got = engine.align(str(tmp_path / spec.name), spec.text, language=spec.language)
        assert [w.word for w in got] == list(ref.words)
        pred = np.array([(w.start, w.end) for w in got])
        want = np.array(list(zip(ref.starts, ref.ends)))
        shifts[spec.language] += (np.abs(pred - want) * 1000.0).ravel().tolist()
    for language, d in shifts.items():
        assert np.mean(d) < MAX_MEAN_SHIFT_MS, (language, np.mean(d))


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from qwen3asr_tools.train_aligner import make_aligner_tokenizer

    return make_aligner_tokenizer(str(tmp_path_factory.mktemp("aligner-tok")))


def test_the_aligner_tokenizer_adds_timestamp_after_the_asr_tokens(tok_dir):
    from qwen3asr.tokenizer import Tokenizer

    asr, al = Tokenizer.from_dir(DEFAULT), Tokenizer.from_dir(tok_dir)
    assert al.token_id("<timestamp>") == asr.vocab_size  # real: 151705, right after the ASR's 151704
    for text in ("open the back door", "把客厅的灯打开", "<|audio_start|><|audio_pad|><|audio_end|>"):
        assert al.encode(text) == asr.encode(text)


@pytest.mark.slow
def test_training_inputs_are_the_official_aligners(tok_dir):
    pytest.importorskip("transformers", reason="the official processor needs transformers")
    from qwen3asr.tokenizer import Tokenizer
    from qwen3asr_tools.official_ref import official_aligner_text, official_processor
    from qwen3asr_tools.train_aligner import build_input

    processor = official_processor(tok_dir)
    tok = Tokenizer.from_dir(tok_dir)
    ts = tok.token_id("<timestamp>")
    for (text, language), n_audio in zip(TEXTS, (13, 40, 7, 104)):
        words, input_text = official_aligner_text().processor.encode_timestamp(text, language)
        expanded = processor.replace_multimodal_special_tokens([input_text], iter([n_audio]))
        want = processor.tokenizer(expanded)["input_ids"][0]
        times = np.arange(len(words), dtype=np.float64)
        x = build_input(tok, n_audio, words, times, times + 0.5)
        assert x.ids.tolist() == list(want), text
        assert x.slots.tolist() == np.flatnonzero(x.ids == ts).tolist()
        assert x.targets_ms.tolist() == [v for t in times for v in (1000.0 * t, 1000.0 * t + 500.0)]


@pytest.mark.slow
def test_the_training_forward_is_the_official_aligners_and_the_checkpoint_reloads(tok_dir, tmp_path):
    torch = pytest.importorskip("torch", reason="the official model needs torch")
    from qwen3asr.audio import prepare_audio
    from qwen3asr.encoder import tokens_for_frames
    from qwen3asr.mel import log_mel
    from qwen3asr.tokenizer import Tokenizer
    from qwen3asr_tools import train_tiny as tt
    from qwen3asr_tools.make_random_checkpoint import _perturb
    from qwen3asr_tools.official_ref import official_align, official_aligner
    from qwen3asr_tools.train_aligner import CLASSIFY_NUM, aligner_config, build_input, save_checkpoint, slot_logits

    tok = Tokenizer.from_dir(tok_dir)
    model = tt.build_model(aligner_config(tok), seed=3)
    _perturb(model, 3)  # seeded weights away from the init, so that every part matters
    model.eval()
    ckpt = save_checkpoint(model, tok_dir, str(tmp_path / "ckpt"), {"test": True})
    ref = official_align(official_aligner(ckpt), prepare_audio(EN), "open the back door", "English")
    assert ref.slot_logits.shape == (8, CLASSIFY_NUM)  # reloaded as an aligner: the head has classify_num rows
    mel = torch.from_numpy(log_mel(prepare_audio(EN), 128))  # under 8 s: one encoder window either way
    words = align_words("open the back door", "English")
    x = build_input(tok, tokens_for_frames(mel.shape[1]), words, [0.0] * 4, [0.0] * 4)
    assert x.ids.tolist() == ref.input_ids.tolist()
    with torch.no_grad():
        ours = slot_logits(model, [mel], [x], tok.endoftext, tok.audio_pad)[0].numpy()
    np.testing.assert_allclose(ours, ref.slot_logits, atol=2e-4, rtol=0)


def test_the_evaluation_summary_names_a_stretched_time_axis():
    """evaluate_aligner's summary: the shift per slot, the signed bias and the time scale (the
    slope of predicted against reference times), per language and over all; an aligner that
    reads the audio token index (13 per second) as the 80 ms class shows a scale of 1.04."""
    from qwen3asr_tools.evaluate_aligner import Item, summarise

    ref = tuple((0.5 * k, 0.5 * k + 0.3) for k in range(8))
    stretched = tuple((a * 1.04, b * 1.04) for a, b in ref)
    late = tuple((a + 0.07, b + 0.04) for a, b in ref)
    zh, en, all_ = summarise([Item("English", ("a",), tuple("abcdefgh"), ref, stretched),
                              Item("Chinese", ("b",), tuple("abcdefgh"), ref, late)])
    assert (zh.language, en.language, all_.language) == ("Chinese", "English", "all")
    assert en.time_scale == pytest.approx(1.04) and zh.time_scale == pytest.approx(1.0, abs=0.005)
    assert (zh.start_ms, zh.end_ms, zh.mean_ms, zh.bias_ms) == (70.0, 40.0, 55.0, 55.0)
    assert zh.within_80ms == 1.0 and en.words == zh.words == 8 and all_.inputs == 2
    assert en.bias_ms == pytest.approx(1000 * 0.04 * np.mean([x for r in ref for x in r]), abs=0.1)


# Read one word at a time with pauses (as a new user tries it): gaps in seconds before each word after the first.
PAUSED = (("nine eight five two zero seven one", "English", "en-us+m3", 170, (0.35, 0.8, 0.15, 1.2, 0.5, 0.9)),
          ("三七零九二五八", "Chinese", "cmn-latn-pinyin+f2", 160, (0.5, 0.2, 1.1, 0.7, 0.3, 1.4)),
          ("turn off the kitchen light", "English", "en-gb+rob", 140, (0.6, 1.0, 0.25, 0.8)))
MAX_PAUSED_SHIFT_MS = 330.0  # mean over the three: 472 ms before the paused-speech run, 231 ms after (docs/training.md)


@pytest.mark.skipif(not shutil.which("espeak-ng"), reason="espeak-ng is not installed")
def test_word_times_follow_the_audio_when_words_are_read_one_at_a_time(engine):
    """Each word synthesised alone (libespeak-ng), placed after the given pause, 0.6 s of silence
    before the first and after the last: the aligner must find every word where it was put (an
    aligner that learnt the rhythm of whole sentences places the later words early)."""
    from qwen3asr.audio import prepare_audio
    from qwen3asr_tools import espeak_align, make_dataset as md

    shifts = {}
    for text, language, voice, speed, gaps in PAUSED:
        units = [w for _, w in espeak_align.label_words(text)]
        assert len(gaps) == len(units) - 1
        pieces, ref, t = [np.zeros(int(0.6 * md.SYNTH_RATE))], [], 0.6
        for k, word in enumerate(units):
            if k:
                pieces.append(np.zeros(int(round(gaps[k - 1] * md.SYNTH_RATE))))
                t += len(pieces[-1]) / md.SYNTH_RATE
            audio, _ = espeak_align.spoken(word, voice, speed, 50)
            pieces.append(audio / np.abs(audio).max() * 0.5)
            ref.append((t, t + len(audio) / md.SYNTH_RATE))
            t += len(audio) / md.SYNTH_RATE
        pieces.append(np.zeros(int(0.6 * md.SYNTH_RATE)))
        pcm = prepare_audio(np.concatenate(pieces).astype(np.float32), sample_rate=md.SYNTH_RATE)
        got = engine.align(pcm, text if language == "English" else "".join(units), language=language)
        assert [w.word for w in got] == align_words(text, language)
        shifts[text] = np.abs(np.array([(w.start, w.end) for w in got]) - np.array(ref)).mean() * 1000.0
    assert np.mean(list(shifts.values())) < MAX_PAUSED_SHIFT_MS, shifts


def test_audio_row_times_are_the_middles_of_the_frames_each_token_covers():
    """The position loss's targets: one time per encoder token (13 per 100-frame chunk, 80 ms
    each but the 13th, 40 ms), chunk after chunk, the ragged tail's tokens likewise."""
    from qwen3asr.encoder import tokens_for_frames
    from qwen3asr_tools.train_aligner import audio_row_times_ms

    for n in (1, 7, 8, 99, 100, 101, 250, 1234, 6000):
        assert len(audio_row_times_ms(n)) == tokens_for_frames(n), n
    t = audio_row_times_ms(230)
    assert t[:13].tolist() == [40.0 + 80.0 * k for k in range(12)] + [980.0]
    assert t[13:26].tolist() == (t[:13] + 1000.0).tolist()
    assert np.all(np.diff(t) > 0) and t[-1] < 2300.0


@pytest.mark.slow
def test_a_deeper_decoder_starts_as_the_bundle_it_grows_from(tok_dir):
    """--decoder-layers above the bundle's 3: the bundle's layers on top, the new ones below them
    start as the identity, so the slot logits at step 0 are the committed model's, and the audio
    rows' hidden at the last layer's input (the position loss) comes back with them."""
    torch = pytest.importorskip("torch", reason="the official model needs torch")
    from dataclasses import replace

    from qwen3asr.audio import prepare_audio
    from qwen3asr.encoder import tokens_for_frames
    from qwen3asr.mel import log_mel
    from qwen3asr.tokenizer import Tokenizer
    from qwen3asr_tools import train_tiny as tt
    from qwen3asr_tools.train_aligner import (AlignerTrainConfig, aligner_config, build_input, init_from_asr,
                                              model_dims, slot_logits)

    tok = Tokenizer.from_dir(tok_dir)
    mel = torch.from_numpy(log_mel(prepare_audio(EN), 128))
    words = align_words("open the back door", "English")
    x = build_input(tok, tokens_for_frames(mel.shape[1]), words, [0.0] * 4, [0.0] * 4)
    out = {}
    for layers in (0, 5):
        cfg = aligner_config(tok, model_dims(replace(AlignerTrainConfig(), decoder_layers=layers)))
        model = tt.build_model(cfg, seed=1)
        init_from_asr(model, ALIGNER, cfg)
        model.eval()
        rows = []
        with torch.no_grad():
            out[layers] = slot_logits(model, [mel], [x], tok.endoftext, tok.audio_pad, rows)[0]
        assert len(model.thinker.model.layers) == (layers or 3)
        assert rows[0].shape == (tokens_for_frames(mel.shape[1]), cfg["thinker_config"]["text_config"]["hidden_size"])
    torch.testing.assert_close(out[5], out[0], atol=1e-5, rtol=0)


def _eager_model_and_inputs(tok_dir, layers):
    """The training model initialised from the bundled aligner, with ``layers`` (negative indices)
    on the official eager attention and a hook keeping each one's last weights (``seen[layer]``),
    and a batch of two examples of en_1 (the second cut shorter: the batch is padded)."""
    import torch
    from qwen3asr.audio import prepare_audio
    from qwen3asr.encoder import tokens_for_frames
    from qwen3asr.mel import log_mel
    from qwen3asr.tokenizer import Tokenizer
    from qwen3asr_tools import train_tiny as tt
    from qwen3asr_tools.train_aligner import aligner_config, build_input, init_from_asr

    tok = Tokenizer.from_dir(tok_dir)
    cfg = aligner_config(tok)
    model = tt.build_model(cfg, seed=1)
    init_from_asr(model, ALIGNER, cfg)
    model.eval()
    seen = {}
    for i in layers:
        layer = model.thinker.model.layers[i].self_attn
        layer.config._attn_implementation = "eager"  # the official weights come back from the eager path
        layer.register_forward_hook(lambda m, a, kw, out, i=i: seen.__setitem__(i, out[1]), with_kwargs=True)
    mels = [torch.from_numpy(log_mel(prepare_audio(EN), 128))]
    mels.append(mels[0][:, :150])
    words = align_words("open the back door", "English")
    xs = [build_input(tok, tokens_for_frames(m.shape[1]), words, [0.1, 0.5, 0.7, 1.0], [0.4, 0.6, 0.9, 1.3])
          for m in mels]
    return tok, model, mels, xs, seen


@pytest.mark.slow
def test_the_attention_loss_reads_the_official_attention_of_the_last_layer(tok_dir):
    """The attention loss's weights (head 0 of the last layer at the slot rows) are the ones the
    official eager attention computes, and its targets are the audio rows of each slot's word."""
    torch = pytest.importorskip("torch", reason="the official model needs torch")
    from qwen3asr_tools.train_aligner import attention_targets, slot_logits

    tok, model, mels, xs, seen = _eager_model_and_inputs(tok_dir, (-1,))
    att = []
    with torch.no_grad():
        slot_logits(model, mels, xs, tok.endoftext, tok.audio_pad, None, att)
    for b, (x, a) in enumerate(zip(xs, att)):
        assert a.shape[:2] == (1, 8)  # the default: head 0 of the last layer alone
        torch.testing.assert_close(a[0], seen[-1][b, 0, torch.from_numpy(x.slots)], atol=1e-6, rtol=0)
    target = attention_targets(xs[1], 150)
    assert target.shape == (8, xs[1].ids.shape[0])
    # "open" 0.1-0.4 s: rows whose middle is within 60-440 ms, i.e. 1 + rows 1..5 (120..440 ms)
    assert np.flatnonzero(target[0]).tolist() == np.flatnonzero(target[1]).tolist() == [2, 3, 4, 5, 6]


@pytest.mark.slow
def test_the_attention_loss_on_more_heads_and_layers_reads_their_official_attention(tok_dir, monkeypatch, capsys,
                                                                                     tmp_path):
    """--attention-heads 4 --attention-layers 2: heads 0-3 of each of the last two layers, the last
    layer's first, each as the official eager attention computes it (the 4 query heads share 2 key
    heads); --attention-at -1:0,-2:1 the pairs it names, in its order. Training only: the exported
    model is the same."""
    torch = pytest.importorskip("torch", reason="the official model needs torch")
    from qwen3asr_tools import train_aligner
    from qwen3asr_tools.train_aligner import attention_pairs, main, slot_logits

    tok, model, mels, xs, seen = _eager_model_and_inputs(tok_dir, (-2, -1))
    att = []
    with torch.no_grad():
        slot_logits(model, mels, xs, tok.endoftext, tok.audio_pad, None, att, attention_pairs(4, 2))
    assert len(att) == 2
    for b, (x, a) in enumerate(zip(xs, att)):
        assert a.shape[:2] == (8, 8)
        slots = torch.from_numpy(x.slots)
        torch.testing.assert_close(a, torch.cat([seen[-1][b][:, slots], seen[-2][b][:, slots]]), atol=1e-6, rtol=0)
    att = []  # named (layer, head) pairs, in their order
    with torch.no_grad():
        slot_logits(model, mels, xs, tok.endoftext, tok.audio_pad, None, att, attention_pairs(at=((-1, 0), (-2, 1))))
    for b, (x, a) in enumerate(zip(xs, att)):
        slots = torch.from_numpy(x.slots)
        torch.testing.assert_close(a, torch.stack([seen[-1][b][0, slots], seen[-2][b][1, slots]]), atol=1e-6, rtol=0)
    def no_run(*_a, **_k):  # past the checks main would build the data: a check that let it through
        raise AssertionError("the arguments were accepted")

    monkeypatch.setattr(train_aligner.tt, "make_data", no_run)
    for bad in (["--attention-heads", "0"], ["--attention-at", "-1"], ["--attention-at", "x:1"]):
        with pytest.raises(SystemExit):
            main(["--work", str(tmp_path), *bad])
        assert "--attention-" in capsys.readouterr().err


@pytest.mark.skipif(not shutil.which("espeak-ng"), reason="espeak-ng is not installed")
def test_window_examples_are_paused_speech_cut_in_the_middle_of_its_pauses():
    """--window-share: a paused example's windows start and end in the middle of a pause (or at its
    edges), hold the words wholly inside with times from the window's start, and their log-mel is
    the cut audio's (what assigned_at_pauses gives the aligner), away from the cut's STFT edges,
    but for the quiet frames: they keep the whole example's clamp (the cached log-mel lost what lay
    below it), higher than the cut's own by at most the difference of their loudest frames."""
    import random
    from dataclasses import replace

    from qwen3asr.mel import log_mel
    from qwen3asr_tools import paused_speech
    from qwen3asr_tools.train_aligner import (AlignerTrainConfig, ClipWords, Example, example_mel, example_words,
                                              window_crops)

    ex = next(e for e in (paused_speech.make_example("test", i) for i in range(40))
              if e.kind != "isolated" and len(e.audio) < 20 * 16000)
    units, starts, ends = paused_speech.aligner_units(ex)
    mel = log_mel(ex.audio, 128).astype(np.float32)
    words = [ClipWords(tuple(units), tuple(starts), tuple(ends), ())]
    off = np.array([0, mel.shape[1]])
    whole = Example((0,), mel.shape[1])
    cfg = AlignerTrainConfig(window_share=1.0, window_pieces=3)
    pauses = [(e, s) for e, s in zip(ends, starts[1:]) if s - e >= cfg.window_pause_s]
    assert pauses, "the example has no pause to cut at"
    rng = random.Random(1)
    crops = [c for _ in range(30) for c in window_crops([whole], words, 0, cfg, rng)]
    assert crops and all(c.crop is not None for c in crops)
    assert not window_crops([whole], words, 1, cfg, rng)  # not a paused example: no window
    assert not window_crops([Example((0, 0), 2 * whole.frames)], words, 0, cfg, rng)  # joined: none
    mids = {0, whole.frames} | {round(50.0 * (e + s)) for e, s in pauses}
    for c in crops:
        a, b = c.crop
        assert a in mids and b in mids and c.frames == b - a
        inside = [k for k in range(len(units)) if starts[k] >= a / 100.0 - 0.01 and ends[k] <= b / 100.0 + 0.01]
        pieces = sum(a < round(50.0 * (e + s)) < b for e, s in pauses) + 1
        assert 1 <= pieces <= 3 and inside
        w, s, e, _ = example_words(words, off, c)
        assert list(w) == [units[k] for k in inside]
        np.testing.assert_allclose(s, [starts[k] - a / 100.0 for k in inside], atol=1e-9)
        np.testing.assert_allclose(e, [ends[k] - a / 100.0 for k in inside], atol=1e-9)
        got = example_mel(mel, off, c)
        cut = log_mel(ex.audio[a * 160:b * 160], 128)
        assert got.shape == (128, b - a) and cut.shape[1] >= b - a
        inner = slice(2, b - a - 2)
        floor = mel.min()  # the whole example's clamp (its maximum - 2): a cut of a quieter part clamps lower
        want = np.maximum(cut[:, inner], floor)
        assert np.abs(got[:, inner] - want).max() < 1e-3, (a, b)
        assert np.abs(got[:, inner] - cut[:, inner]).max() <= mel.max() - cut.max() + 1e-3
    # the last word of an example may end a millisecond past its last whole mel frame: kept
    short = [ClipWords(("a", "b"), (0.2, 2.0), (0.5, 3.004), ())]
    ends_late = {c.crop: example_words(short, np.array([0, 300]), c)[0]
                 for c in window_crops([Example((0,), 300)] * 20, short, 0, cfg, random.Random(2))}
    assert ends_late == {(125, 300): ["b"], (0, 125): ["a"]}
    # --window-shift: the text one word off at the start, the audio the window's
    shifted = [c for c in window_crops([whole] * 200, words, 0, replace(cfg, window_shift=1.0), random.Random(3))]
    assert {-1, 1} <= {c.shift for c in shifted}
    for c in shifted:
        a, b = c.crop
        inside = [k for k in range(len(units)) if starts[k] >= a / 100.0 - 0.01 and ends[k] <= b / 100.0 + 0.01]
        w, s, e, _ = example_words(words, off, c)
        if c.shift == 0:  # no word before the window, or one word in it: its text as it is
            assert inside[0] == 0 or len(inside) == 1
        elif c.shift < 0:  # the word before the window first, at its start
            assert inside[0] > 0 and list(w) == [units[inside[0] - 1]] + [units[k] for k in inside]
            assert s[0] == e[0] == 0.0
            np.testing.assert_allclose(s[1:], [starts[k] - a / 100.0 for k in inside], atol=1e-9)
        else:  # its first word left out, the others where they sound
            assert len(inside) > 1 and list(w) == [units[k] for k in inside[1:]]
            np.testing.assert_allclose(s, [starts[k] - a / 100.0 for k in inside[1:]], atol=1e-9)
    assert all(c.shift == 0 for c in crops)  # none without the option



def test_the_window_options_are_checked_before_any_work(monkeypatch, capsys, tmp_path):
    """--window-share and --window-shift are shares, --window-pieces a count of at least one; a bad
    one stops train_aligner with a message naming it before it builds any data."""
    from qwen3asr_tools import train_aligner

    def no_run(*_a, **_k):
        raise AssertionError("the arguments were accepted")

    monkeypatch.setattr(train_aligner.tt, "make_data", no_run)
    for bad in (["--window-share", "1.5"], ["--window-shift", "-0.1"], ["--window-shift", "2"],
                ["--window-pieces", "0"]):
        with pytest.raises(SystemExit):
            train_aligner.main(["--work", str(tmp_path), *bad])
        assert bad[0] in capsys.readouterr().err
