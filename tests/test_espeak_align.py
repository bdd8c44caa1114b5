"""Word timings from libespeak-ng (scripts/espeak_align.py), the frame targets of training.

Checked against the audio itself: the library speaks the same samples as the espeak-ng
command line that make_dataset uses, and in a rendered clean clip the words start where
the energy says speech starts and end where it ends.
"""

import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from qwen3asr_tools import child_env, espeak_align as ea, make_dataset as md

from doubles.tokenizer import CharTokenizer

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("espeak-ng", "sox")),
                                reason="espeak-ng and sox are not installed (apt-get install $(cat scripts/apt-packages.txt))")


def _spec(text, language, voice, speed=160, pitch=50, pad_before=0.3):
    return md.ClipSpec(name="clip.wav", text=text, language=language, kind="command", voice=voice, speed=speed,
                       pitch=pitch, noise="none", snr_db=None, level_dbfs=None, noise_offset=0.0,
                       pad_before=pad_before, pad_after=0.3, nonspeech_seconds=0.0, peak_dbfs=-6.0,
                       via_rate=None, sample_rate=16000, channels=1)


_FRESH_SYNTH = """
import sys
import numpy as np
from qwen3asr_tools import espeak_align as ea
audio, events = ea._engine().synth("nine eight five nine zero zero", "en-gb-scotland+Andy", 120, 54)
np.save(sys.argv[1], audio)
print([e[0] for e in events if e[0] > 0])
"""


def test_library_speaks_the_command_lines_samples(tmp_path):
    """A fresh libespeak-ng (its own process: the library keeps some voice-quality settings of an
    earlier variant voice, see the next test) gives the command line's samples exactly."""
    out = str(tmp_path / "lib.npy")
    got = subprocess.run([sys.executable, "-c", _FRESH_SYNTH, out], check=True, capture_output=True, text=True,
                         timeout=60, env=child_env())
    path = str(tmp_path / "cli.wav")
    md._run(["espeak-ng", "-v", "en-gb-scotland+Andy", "-s", "120", "-p", "54", "-w", path,
             "nine eight five nine zero zero"])
    ref, rate = sf.read(path, dtype="int16")
    assert rate == md.SYNTH_RATE
    np.testing.assert_array_equal(np.load(out), ref)
    assert got.stdout.strip() == "[1, 6, 12, 17, 22, 27]"  # character positions of the 6 words


def test_word_events_do_not_depend_on_the_voice_spoken_before():
    """The word times (what espeak_align takes from the library; the audio comes from the command
    line) are the same after another variant voice: libespeak-ng keeps some of a variant's
    voice-quality settings (after en-029+Michael, en-gb-scotland+Andy's samples differ from a fresh
    process's), not its timing."""
    text, voice = "nine eight five nine zero zero", "en-gb-scotland+Andy"
    engine = ea._engine()
    first, events = engine.synth(text, voice, 120, 54)
    engine.synth("open the back door", "en-029+Michael", 160, 50)
    again, events_again = engine.synth(text, voice, 120, 54)
    assert events_again == events and len(again) == len(first)


def test_label_words():
    assert ea.label_words("turn on the  light") == [(0, "turn"), (5, "on"), (8, "the"), (13, "light")]
    assert ea.label_words("打开灯") == [(0, "打"), (1, "开"), (2, "灯")]


@pytest.mark.parametrize("text, language, voice", [
    ("switch on the hallway speaker", "English", "en-gb-x-gbclan+steph"),  # "on the" under one event
    ("four three seven five three", "English", "en-us"),
    ("六六八零三零三三", "Chinese", "cmn-latn-pinyin"),
])
def test_words_lie_where_the_rendered_clip_has_speech(tmp_path, text, language, voice):
    spec = _spec(text, language, voice)
    md.make_noise_pool(str(tmp_path))
    md.render_clip(spec, str(tmp_path), str(tmp_path))
    x, rate = sf.read(str(tmp_path / "clip.wav"))
    env = np.sqrt(np.convolve(x**2, np.ones(160) / 160, "same"))
    loud = np.flatnonzero(env > 0.05 * env.max()) / rate
    words = ea.clip_words(spec)
    assert [w.text for w in words] == [w for _, w in ea.label_words(text)]
    assert words[0].start == pytest.approx(spec.pad_before, abs=1e-6)
    assert abs(words[0].start - loud[0]) < 0.06 and abs(words[-1].end - loud[-1]) < 0.06
    for a, b in zip(words, words[1:]):
        assert a.start < a.end == pytest.approx(b.start)
    # every word holds some speech energy
    for w in words:
        seg = env[int(w.start * rate):int(w.end * rate)]
        assert seg.max() > 0.05 * env.max(), w


def test_token_spans_share_words_by_characters():
    words = [ea.Word("ab", 0, 1.0, 2.0), ea.Word("cd", 3, 2.0, 3.0)]
    tok = CharTokenizer(["a", "b", " cd"])
    assert ea.token_spans(tok, "ab cd", words) == [(0, 1.0, 1.5), (1, 1.5, 2.0), (2, 2.0, 3.0)]
    zh = [ea.Word("零", 0, 0.0, 0.2), ea.Word("四", 1, 0.2, 0.5), ea.Word("一", 2, 0.5, 0.6)]
    assert ea.token_spans(CharTokenizer(["零", "四一"]), "零四一", zh) == [(0, 0.0, 0.2), (1, 0.2, 0.6)]
    lossy = CharTokenizer(["ab", "cd"])  # drops the space
    lossy.encode = lambda text: [0, 1]
    with pytest.raises(ValueError, match="do not decode piece by piece"):
        ea.token_spans(lossy, "ab cd", words)


def test_frame_centres_follow_the_conv_stem():
    c = ea.frame_centres(28)
    assert c[0] == pytest.approx(0.04) and c[12] == pytest.approx(0.98)  # 13th token: mel frames 96-99
    assert c[13] == pytest.approx(1.04) and c[26] == pytest.approx(2.04)
    lab = ea.frame_labels([(7, 0.0, 0.5), (9, 1.0, 1.1)], 15, blank=99)
    assert lab.tolist() == [7] * 6 + [99] * 7 + [9, 99]
