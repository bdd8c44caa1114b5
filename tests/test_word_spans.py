"""Word spans fitted to the speech and the check for collapsed alignments (qwen3asr.aligner.refine).

Snapping is checked on tone bursts with exact silences; the collapse check and the re-alignment
on the demo aligner (models/default-aligner) with a stand-in slot scorer that returns chosen
classes (identical ones collapse); the whole chain on the demo model and aligner, and on ten
minutes of speech (item 4 of issue 35; the board path is in tests/test_rk_aligner.py).
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from long_audio import LONG_SECONDS, check_long, ten_minutes
from qwen3asr import Qwen3ASREngine, TranscribeOptions, prepare_audio
from qwen3asr.aligner import ForcedAligner
from qwen3asr.aligner.refine import Levels, assigned_at_pauses, collapse, pieces_at_pauses, refined, snap, unheard
from qwen3asr.aligner.segments import align_segments
from qwen3asr.aligner.shifted import BetweenBins
from qwen3asr.backends import BackendOptions
from qwen3asr.results import Segment, Word

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "models", "default")
ALIGNER = os.path.join(ROOT, "models", "default-aligner")
SR = 16000
BIN = 0.08


def bursts(spans, seconds, floor_db=-70.0, seed=0):
    """(n,) float32: a 220 Hz tone (-12 dBFS peak) in each (start, end) of ``spans`` seconds, noise
    at ``floor_db`` dBFS everywhere."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(int(seconds * SR)) * 10 ** (floor_db / 20)
    for a, b in spans:
        t = np.arange(int(a * SR), int(b * SR))
        x[t] += 0.25 * np.sin(2 * np.pi * 220 * t / SR)
    return x.astype(np.float32)


def words(*items):
    return tuple(Word(w, s, e) for w, s, e in items)


# ------------------------------------------------------------------ the option

def test_the_option_takes_speech_raw_or_checked():
    assert TranscribeOptions().word_spans == "speech"
    assert TranscribeOptions(word_spans="raw").word_spans == "raw"
    assert TranscribeOptions(word_spans="checked").word_spans == "checked"
    with pytest.raises(ValueError, match=r"word_spans must be one of speech, raw, checked \(got 'snapped'\)"):
        TranscribeOptions(word_spans="snapped")
    with pytest.raises(ValueError, match=r"word_spans must be one of speech, raw, checked \(got None\)"):
        TranscribeOptions(word_spans=None)


# ------------------------------------------------------------------ snapping

SPEECH = ((0.5, 1.0), (2.0, 2.6))  # two bursts, a second of silence between them


def test_an_end_in_the_pause_after_a_word_is_pulled_back_and_a_start_in_it_moved_forward():
    lv = Levels.of(bursts(SPEECH, 3.0), 0.0)
    assert lv.pauses() == [(0, 50), (100, 200), (260, 300)]  # frames: the silences, edges included
    got = snap(words(("one", 0.48, 1.52), ("two", 1.52, 2.6)), lv, BIN)
    assert got == words(("one", 0.48, 1.02), ("two", 1.98, 2.6))  # EDGE_S (20 ms) of the pause kept
    # an end that reaches through the pause by up to one bin, after a bin of speech, comes back too
    assert snap(words(("one", 0.48, 2.08), ("two", 2.08, 2.6)), lv, BIN)[0] == Word("one", 0.48, 1.02)
    # ... but not after less than a bin of speech (the word may be the speech after the pause; a
    # word before it in its piece, so that the start of a word alone is not drawn to the onset)
    x = ("x", 0.5, 0.9)
    assert snap(words(x, ("one", 0.95, 2.04)), lv, BIN) == words(x, ("one", 0.95, 2.04))
    # a start in speech a bin before a pause stays (a short word said before the pause)
    assert snap(words(x, ("a", 0.95, 1.4)), lv, BIN) == words(x, ("a", 0.95, 1.02))
    # spans inside speech, and a word wholly in the pause, are left alone
    assert snap(words(("one", 0.5, 0.9), ("x", 1.2, 1.6)), lv, BIN) == words(("one", 0.5, 0.9), ("x", 1.2, 1.6))


def test_times_move_by_the_segment_offset():
    lv = Levels.of(bursts(SPEECH, 3.0), 60.0)
    assert snap(words(("one", 60.48, 61.52), ("two", 61.52, 62.6)), lv, BIN) == \
        words(("one", 60.48, 61.02), ("two", 61.98, 62.6))


def test_the_last_word_of_a_piece_ends_where_its_speech_ends():
    """A piece's last word (pieces at pauses of SPLIT_PAUSE_S) that ends at most STRETCH_S before
    the piece's speech ends is drawn out to it (EDGE_S of the pause kept); one ending further
    before it, and a word with another after it in its piece, keep their ends."""
    from qwen3asr.aligner.refine import STRETCH_S

    assert STRETCH_S == 0.5
    lv = Levels.of(bursts(((0.5, 1.0), (1.5, 2.3), (2.8, 3.3), (3.8, 4.5)), 5.0), 0.0)
    got = snap(words(("one", 0.5, 0.85), ("two", 1.5, 1.6), ("three", 1.6, 1.7), ("four", 2.8, 2.9),
                     ("five", 3.8, 3.9), ("six", 3.9, 4.2)), lv, BIN)
    # "one" 0.15 s and "four" 0.4 s short: drawn out; "three" 0.6 s short: kept; "five" has a word after it
    assert got == words(("one", 0.5, 1.02), ("two", 1.5, 1.6), ("three", 1.6, 1.7), ("four", 2.8, 3.32),
                        ("five", 3.8, 3.9), ("six", 3.9, 4.52))


def test_a_gap_inside_a_piece_bounds_the_words_either_side_of_it():
    """Quiet runs of GAP_S or more inside a piece's speech (shorter than SPLIT_PAUSE_S: no cut)
    are matched in order to the boundaries between its words lying within GAP_REACH_S of them: the
    first word ends where the run starts; the next starts where it ends when it is a pause
    (MIN_PAUSE_S), else where it starts (a closure). A boundary with no run near stays where it
    is; a run takes one boundary only. A word alone in its piece starting at most ONSET_S after
    the piece's speech starts starts there; a first word among others keeps its start."""
    from qwen3asr.aligner.gaps import GAP_REACH_S, GAP_S, ONSET_S
    from qwen3asr.aligner.refine import MIN_PAUSE_S

    assert (GAP_S, GAP_REACH_S, ONSET_S, MIN_PAUSE_S) == (0.06, 0.08, 0.5, 0.12)
    # one piece: speech 0.5-0.8, a 130 ms pause, 0.93-1.15, an 80 ms quiet run, 1.23-1.8
    lv = Levels.of(bursts(((0.5, 0.8), (0.93, 1.15), (1.23, 1.8)), 2.4), 0.0)
    assert len(pieces_at_pauses(lv)) == 1
    # "one" ends 50 ms early and "two" starts there (the demo aligner's drift); the boundary of
    # "two" and "three" lies in the short run; "one" starts 60 ms late, and keeps it (not alone)
    got = snap(words(("one", 0.56, 0.75), ("two", 0.75, 1.2), ("three", 1.2, 1.8)), lv, BIN)
    assert got == words(("one", 0.56, 0.8), ("two", 0.93, 1.15), ("three", 1.15, 1.8))
    # a word alone in its piece starting at most ONSET_S after its speech starts there; further, not
    assert snap(words(("alone", 0.95, 1.8),), lv, BIN)[0].start == 0.5
    assert snap(words(("late", 1.05, 1.8),), lv, BIN)[0].start == 1.05
    # a boundary further than GAP_REACH_S from the run stays where the aligner put it
    far = snap(words(("one", 0.5, 0.7), ("two", 0.7, 1.8)), lv, BIN)
    assert far == words(("one", 0.5, 0.7), ("two", 0.7, 1.8))
    # two boundaries near one run: the nearer takes it, the other stays
    two = snap(words(("a", 0.5, 0.78), ("b", 0.78, 1.0), ("c", 1.0, 1.8)), lv, BIN)
    assert two == words(("a", 0.5, 0.8), ("b", 0.93, 1.0), ("c", 1.0, 1.8))
    # a run between two blips of noise (less than GAP_SPEECH_S of loud frames) is no gap
    from qwen3asr.aligner.gaps import GAP_SPEECH_S

    assert GAP_SPEECH_S == 0.05
    lv3 = Levels.of(bursts(((0.5, 0.8), (0.85, 0.87), (0.95, 0.97), (1.05, 1.6)), 2.0), 0.0)
    assert len(pieces_at_pauses(lv3)) == 1
    assert snap(words(("x", 0.3, 0.5), ("one", 0.5, 0.9), ("two", 0.9, 1.6)), lv3, BIN)[1:] == \
        words(("one", 0.5, 0.9), ("two", 0.9, 1.6))
    # a run shorter than GAP_S is no gap
    lv2 = Levels.of(bursts(((0.5, 0.8), (0.85, 1.5)), 2.0), 0.0)
    assert snap(words(("one", 0.5, 0.74), ("two", 0.74, 1.5)), lv2, BIN) == words(("one", 0.5, 0.74),
                                                                                  ("two", 0.74, 1.5))


def test_a_pause_in_the_noisier_part_of_a_joined_input_is_a_pause(monkeypatch):
    """Inputs joined from recordings with different noise: a frame is judged against the floor of
    the FLOOR_WINDOW_S around it where that is higher than the segment's floor, so the pauses of
    the noisier part (noise 38 dB under the loud end, within QUIET_BELOW_DB of it) are pauses and cut
    pieces there, as in the quiet part, from half a window after the join (nearer, the window
    still holds enough of the quiet part to set its floor)."""
    from qwen3asr.aligner.refine import FLOOR_WINDOW_S, QUIET_BELOW_DB

    assert (FLOOR_WINDOW_S, QUIET_BELOW_DB) == (4.0, 40.0)
    spans = [(0.5 + 0.7 * i, 0.9 + 0.7 * i) for i in range(13)]  # 0.4 s of tone, 0.3 s pauses
    quiet = bursts(spans, 9.6, floor_db=-90.0)
    noisy = bursts(spans, 9.6, floor_db=-50.0, seed=1)  # the tone's peak is -12 dBFS
    lv = Levels.of(np.concatenate([quiet, noisy]), 0.0)
    found = [a * 0.01 for a, _ in lv.pauses()]
    for part, first in ((0.0, 0), (9.6, 3)):  # the pauses from 2 s after the join on
        want = [part + 0.9 + 0.7 * i for i in range(first, 12)]
        assert all(any(abs(a - w) <= 0.03 for a in found) for w in want), (part, found)
    assert len(pieces_at_pauses(lv)) >= 13 + 10
    # the segment's floor alone (the window as long as the input): the noisier part has no pause
    import qwen3asr.aligner.refine as refine

    monkeypatch.setattr(refine, "FLOOR_WINDOW_S", 100.0)
    whole = [a * 0.01 for a, _ in Levels.of(np.concatenate([quiet, noisy]), 0.0).pauses()]
    assert not [a for a in whole if 9.6 < a < 19.0]


def test_in_chinese_a_boundary_moves_to_the_dip_between_two_syllables():
    """A language whose words are syllables (refine.CHARACTER_LANGUAGES): a boundary between two of
    a piece's words that no quiet run took moves to the dip of the level between two syllables
    lying within DIP_REACH_S of it, less DIP_LEAD_S; the word before ends and the next starts there.
    Each dip takes one boundary, in order; a boundary further from every dip stays; in English (or
    without ``syllabic``) none moves."""
    from qwen3asr.aligner.gaps import DIP_LEAD_S, DIP_REACH_S

    assert (DIP_REACH_S, DIP_LEAD_S) == (0.2, 0.02)
    sr, rng = SR, np.random.default_rng(0)
    steps = [-70, -12, -26, -12, -26, -12, -70]  # three syllables, 14 dB dips 0.3-0.45 and 0.6-0.75 s
    gain = np.repeat([10 ** (d / 20) for d in steps], int(0.15 * sr))
    t = np.arange(gain.size)
    x = (gain * np.sin(2 * np.pi * 220 * t / sr) + rng.standard_normal(gain.size) * 10 ** (-70 / 20))
    lv = Levels.of(x.astype(np.float32), 0.0)
    assert len(pieces_at_pauses(lv)) == 1 and not lv.pauses()[1:-1]  # no pause inside: the dips are speech
    late = words(("一", 0.15, 0.5), ("二", 0.5, 0.82), ("三", 0.82, 0.9))
    got = snap(late, lv, BIN, syllabic=True)
    for w, dip in zip(got, (0.3, 0.6)):  # the dips' lowest frames lie inside the quiet stretches
        assert dip - DIP_LEAD_S <= w.end <= dip + 0.15 - DIP_LEAD_S, got
    assert got[0].end == got[1].start and got[1].end == got[2].start
    assert snap(late, lv, BIN)[0].end == 0.5  # not syllabic: the boundary stays
    # a boundary more than DIP_REACH_S from every dip stays where it is
    far = words(("一", 0.15, 0.95), ("二", 0.95, 1.05))  # 0.27 s after the last dip
    assert snap(far, lv, BIN, syllabic=True) == snap(far, lv, BIN)


def test_only_a_language_of_characters_has_its_words_fitted_to_the_dips(demo_aligner, monkeypatch):
    """refined fits the dips between syllables (gaps.fitted's ``syllabic``) for a language of
    refine.CHARACTER_LANGUAGES, never for English, with either setting that snaps."""
    from qwen3asr.aligner import gaps

    seen = []
    fitted = gaps.fitted

    def recorded(words, levels, pieces, pause, syllabic=False):
        seen.append(syllabic)
        return fitted(words, levels, pieces, pause, syllabic)

    monkeypatch.setattr(gaps, "fitted", recorded)
    pcm = bursts(FOUR, 5.0)
    for language, text, want in (("Chinese", "一二三四", True), ("English", TEXT, False)):
        first = demo_aligner.align(pcm, text, language)
        seen.clear()
        refined(demo_aligner, pcm, 0.0, first, language, "speech")
        assert seen and set(seen) == {want}, (language, seen)


def test_a_zero_length_word_gets_one_bin_within_its_neighbours():
    lv = Levels.of(bursts(((0.0, 4.0),), 4.0), 0.0)  # all speech: nothing else moves
    # three commands joined into one upload: "off" 2.64-2.64 between two words that touch it
    got = snap(words(("lights", 2.0, 2.64), ("off", 2.64, 2.64), ("now", 2.64, 3.2)), lv, BIN)
    assert got == words(("lights", 2.0, 2.64), ("off", 2.64, 2.72), ("now", 2.72, 3.2))
    # free time after it first, then before it, then the previous word's share
    assert snap(words(("off", 2.64, 2.64), ("now", 3.0, 3.2)), lv, BIN)[0] == Word("off", 2.64, 2.72)
    assert snap(words(("a", 1.0, 1.5), ("off", 2.64, 2.64), ("now", 2.68, 2.7)), lv, BIN)[1] == \
        Word("off", 2.6, 2.68)
    assert snap(words(("lights", 2.0, 2.64), ("off", 2.64, 2.64), ("now", 2.64, 2.66)), lv, BIN)[:2] == \
        words(("lights", 2.0, 2.56), ("off", 2.56, 2.64))
    assert snap(words(("end", 3.96, 3.96),), lv, BIN) == words(("end", 3.92, 4.0))  # the audio's end bounds it


def test_speech_that_cannot_be_told_from_noise_is_not_snapped():
    lv = Levels.of(bursts(SPEECH, 3.0, floor_db=-20.0), 0.0)  # the floor 8 dB under the tone's level
    assert lv.loud is None and lv.pauses() == []
    w = words(("one", 0.48, 1.52), ("two", 1.52, 2.6))
    assert snap(w, lv, BIN) == w


def test_snapped_times_keep_their_order():
    rng = np.random.default_rng(3)
    # pauses, and gaps inside pieces (0.9-0.98, 3.0-3.1 s)
    lv = Levels.of(bursts(((0.3, 0.9), (0.98, 1.7), (2.5, 3.0), (3.1, 3.4), (4.0, 4.3)), 5.0), 0.0)
    for _ in range(2000):
        t = np.sort(np.round(rng.uniform(0, 5.0, 2 * int(rng.integers(1, 8))) / BIN) * BIN).round(3)
        got = snap(tuple(Word(f"w{i}", t[2 * i], t[2 * i + 1]) for i in range(len(t) // 2)), lv, BIN)
        flat = [x for w in got for x in (w.start, w.end)]
        assert flat == sorted(flat) and all(w.end > w.start for w in got) and 0 <= flat[0] and flat[-1] <= 5.0


# ------------------------------------------------------------------ the collapse check

def test_collapse_reasons():
    ok = words(("a", 0.4, 0.6), ("b", 0.6, 0.9), ("c", 1.0, 1.2))
    assert collapse(ok, 0.0, 2.0, BIN) == (None, 0)
    assert collapse(words(("a", 0.4, 0.4), ("b", 0.4, 0.4), ("c", 0.4, 0.9)), 0.0, 2.0, BIN) == ("same start", 3)
    assert collapse(words(("a", 0.0, 0.2), ("b", 0.0, 0.4), ("c", 1.0, 1.2)), 0.0, 2.0, BIN) == ("zero start", 1)
    assert collapse(words(("a", 0.4, 0.6), ("b", 1.93, 2.0), ("c", 1.95, 2.0)), 0.0, 2.0, BIN) == \
        ("end pile-up", 2)
    assert collapse(words(("a", 10.0, 10.2), ("b", 10.4, 10.6)), 10.0, 12.0, BIN) == (None, 0)  # the first may
    assert collapse(words(("a", 1.0, 1.1), ("b", 1.0, 1.2)), 0.0, 2.0, BIN) == (None, 0)  # two: a repair's copy


# ------------------------------------------------------------------ re-alignment with a stand-in scorer

class StandInScorer:
    """The SlotScorer seam answering chosen classes: ``classes(n_slots)`` -> one class per slot,
    certain of it (its logit 50 above every other: times between the bins fall on that bin)."""

    name = "stand-in"

    def __init__(self, max_positions, n_classes, classes):
        self.max_positions, self.n_classes, self.classes, self.calls = max_positions, n_classes, classes, []

    def score(self, embeds, rows):
        self.calls.append(len(rows))
        out = np.zeros((len(rows), self.n_classes), np.float32)
        out[np.arange(len(rows)), self.classes(len(rows))] = 50.0
        return out

    def close(self):
        pass


@pytest.fixture(scope="module")
def demo_aligner():
    with ForcedAligner(ALIGNER, backend="onnx", options=BackendOptions(threads=2)) as al:
        yield al


@pytest.fixture
def stand_in(demo_aligner, monkeypatch):
    def use(classes):
        s = StandInScorer(demo_aligner.scorer.max_positions, demo_aligner.classes, classes)
        monkeypatch.setattr(demo_aligner, "scorer", s)
        return s
    return use


FOUR = ((0.5, 1.1), (1.6, 2.2), (2.7, 3.3), (3.8, 4.4))  # four bursts, 0.5 s pauses
TEXT = "alpha beta gamma delta"
EIGHT = "one two three four five six seven eight"


def _segment(aligner, pcm, spans, offset=0.0, text=TEXT):
    seg = Segment(offset, offset + pcm.shape[0] / SR, text, "English")
    (out,) = align_segments(aligner, [seg], lambda s: (pcm, offset), spans=spans)
    return out


def test_words_are_shared_by_speech_only_when_their_times_leave_a_piece_with_speech_unheard():
    lv = Levels.of(bursts(FOUR, 5.0), 0.0)
    pieces = pieces_at_pauses(lv)
    assert len(pieces) == 4
    # two words in each burst, 0.1 s apart
    placed = words(*[(str(2 * p + k + 1), a + 0.1 * k, a + 0.1 * k + 0.1) for p, (a, _) in enumerate(FOUR)
                     for k in range(2)])
    assert not unheard(placed, lv, pieces)  # every burst's piece has its words: the times are kept
    # three words on one start inside a piece (a collapse) still leave every piece its words
    assert not unheard(placed[:2] + words(("3", 1.6, 1.6), ("4", 1.6, 1.6), ("5", 1.6, 1.6)) + placed[5:], lv, pieces)
    # all at the start: three bursts without a word
    assert unheard(words(*[(str(i), 0.5, 0.5) for i in range(8)]), lv, pieces)
    # the last burst without a word
    assert unheard(placed[:6], lv, pieces)
    # a piece of silence without a word is not unheard: the pause 1.15-1.55 s cut out as a piece
    silent = [(0, 115), (115, 155), (155, 500)]
    assert not unheard(placed, lv, silent)
    # speech that cannot be told from noise: any piece without a word counts
    flat = Levels(0.0, None, 5.0)
    assert unheard(placed[:2], flat, [(0, 250), (250, 500)]) and not unheard(placed, flat, [(0, 250), (250, 500)])


def test_identical_classes_are_flagged_and_logged_never_silent(demo_aligner, stand_in, caplog):
    scorer = stand_in(lambda n: np.zeros(n, int))  # every slot in bin 0: all words at the segment's start
    pcm = bursts(FOUR, 5.0)
    caplog.set_level(logging.INFO, logger="qwen3asr.aligner.refine")
    raw = _segment(demo_aligner, pcm, "raw", offset=30.0, text=EIGHT)
    assert [w.start for w in raw.words] == [30.0] * 8 and raw.words_flag == "collapsed: same start"
    assert scorer.calls == [16]  # raw: flagged, never aligned again
    assert "did not align (same start, 15 words); their times are unreliable" in caplog.text
    assert raw.to_dict()["words_flag"] == "collapsed: same start"
    caplog.clear()
    speech = _segment(demo_aligner, pcm, "speech", offset=30.0, text=EIGHT)
    # the first pass (16 slots); piece by piece from the left (assigned_at_pauses: every word's
    # middle is before the first cut, so the first piece takes all 8: 16 slots, as collapsed); then,
    # collapsed, at its 3 pauses (4 pieces; words shared by time: all in the first, as bad; by
    # speech, since the times left three pieces with speech and no word: two in each, each piece's
    # second word at its start: kept, fewer words caught), then in halves (shared by the new times:
    # 6 + 2 words, no better; not by speech: those times give each half words): the flag names
    # what is left
    assert speech.words_flag == "collapsed: zero start"
    assert scorer.calls[1:] == [16, 16, 16, 4, 4, 4, 4, 12, 4]
    assert "shared by speech: 4 words still caught" in caplog.text
    assert "did not align (zero start, 4 words), also in smaller pieces; their times are unreliable" in caplog.text
    # each piece's two words at its cut, a bin each (wholly in the pause: no speech to snap them to)
    assert [(w.start, w.end) for w in speech.words] == [
        (30.0, 30.08), (30.08, 30.16), (31.35, 31.43), (31.43, 31.51), (32.45, 32.53), (32.53, 32.61),
        (33.55, 33.63), (33.63, 33.71)]


def test_a_collapse_is_aligned_again_at_the_pauses(demo_aligner, stand_in, caplog):
    # more than one word collapses; one word alone gets bins 2 and 8 (160-640 ms into its piece)
    scorer = stand_in(lambda n: np.zeros(n, int) if n > 2 else np.array([2, 8])[:n])
    pcm = bursts(FOUR, 5.0)
    caplog.set_level(logging.INFO, logger="qwen3asr.aligner.refine")
    raw = _segment(demo_aligner, pcm, "raw")
    assert raw.words_flag == "collapsed: same start"
    caplog.clear()
    seg = _segment(demo_aligner, pcm, "speech")
    assert seg.words_flag is None and [w.word for w in seg.words] == TEXT.split()
    assert "aligned again in 4 pieces cut at its pauses, shared by speech: aligned" in caplog.text
    # each word in its own burst's piece (cut in the middle of the pauses: 0, 1.35, 2.45, 3.55 s),
    # 160-640 ms after the cut, its start then moved out of the pause to the burst's onset less EDGE_S;
    # ends 0.21 and 0.46 s before their burst's end drawn out to it (plus EDGE_S; STRETCH_S 0.5)
    assert [(w.start, w.end) for w in seg.words] == [(0.48, 1.12), (1.58, 2.22), (2.68, 3.32), (3.78, 4.42)]
    # raw; speech: the first pass, the first piece from the left (all 4 words' middles before its
    # end: 8 slots, as collapsed), then by time (no better), by speech
    assert scorer.calls == [8, 8, 8, 8, 2, 2, 2, 2]
    assert "did not align" not in caplog.text


def test_without_pauses_a_collapse_is_aligned_again_in_halves(demo_aligner, stand_in, caplog):
    scorer = stand_in(lambda n: np.zeros(n, int) if n > 4 else np.array([2, 4, 5, 8])[:n])
    pcm = bursts(((0.0, 4.0),), 4.0)  # speech throughout: no pause to cut at
    caplog.set_level(logging.INFO, logger="qwen3asr.aligner.refine")
    seg = _segment(demo_aligner, pcm, "speech")
    # no pauses (no contrast even): halves; by time all four words fall in the first (no better)
    assert seg.words_flag is None and scorer.calls == [8, 8, 4, 4]
    assert "aligned again in 2 pieces cut at halves, shared by time" not in caplog.text  # all at 0: one piece
    assert "aligned again in 2 pieces cut at halves, shared by speech: aligned" in caplog.text
    cut = seg.words[2].start - 0.16
    assert 4.0 / 3 <= cut <= 8.0 / 3  # the quietest frame of the middle third
    assert [(w.start, w.end) for w in seg.words] == [(0.16, 0.32), (0.4, 0.64)] + [
        (round(cut + 0.16, 3), round(cut + 0.32, 3)), (round(cut + 0.4, 3), round(cut + 0.64, 3))]


# ------------------------------------------------------------------ through the engine (demo model and aligner)

@pytest.fixture(scope="module")
def engine():
    mp = pytest.MonkeyPatch()
    mp.delenv("QWEN3ASR_ALIGNER", raising=False)
    with Qwen3ASREngine(DEFAULT, backend="onnx", threads=2) as e:
        yield e
    mp.undo()


def test_the_engine_gives_raw_or_speech_spans(engine):
    clip = os.path.join(ROOT, "audio", "en_2.wav")
    pcm = prepare_audio(clip)
    raw = engine.transcribe(clip, word_timestamps=True, word_spans="raw")
    assert raw.words == engine.aligner.align(pcm, raw.text, raw.language)  # the official times
    speech = engine.transcribe(clip, word_timestamps=True)
    between = BetweenBins(engine.aligner)  # "speech" reads every alignment's times between the bins
    first = between.align(pcm, raw.text, raw.language)
    assert first != raw.words and [w.word for w in first] == [w.word for w in raw.words]
    assert speech.words == refined(between, pcm, 0.0, first, raw.language, "speech")[0]
    assert speech.words_flag is None and "words_flag" not in speech.to_dict()["segments"][0]
    assert [w.word for w in speech.words] == [w.word for w in raw.words]


@pytest.mark.slow
@pytest.mark.parametrize("vad", [None, False], ids=["vad-segments", "30s-chunks"])
def test_ten_minutes_get_monotonic_words_with_no_pile_up(engine, vad):
    r = engine.transcribe(ten_minutes(), word_timestamps=True, vad=vad)
    assert r.stats.audio_seconds == LONG_SECONDS and len(r.words) >= 900
    check_long(r, engine.aligner.segment_ms / 1000)
    flagged = [s for s in r.segments if s.words_flag]
    # the demo aligner on 30 s chunks: 18 of 21 collapse in the raw times, 3 after re-alignment
    assert len(flagged) <= (0 if vad is None else 4), [(s.start, s.words_flag) for s in flagged]


# ------------------------------------------------------------------ the measurement (scripts/eval_word_spans.py)

def test_the_paused_set_moves_the_reference_with_the_pauses_it_puts_in():
    import random

    from qwen3asr_tools.eval_word_spans import Case, figures, in_silence, with_pauses

    ref = ((0.2, 0.5), (0.5, 0.8), (0.8, 1.1), (1.1, 1.4))
    pcm = bursts(((0.2, 1.4),), 1.6)
    case = Case("c", "English", "a b c d", pcm, ref, ((0.0, 0.2), (1.4, 1.6)))
    p = with_pauses(case, random.Random(0))
    (k,) = [i for i in range(1, 4) if p.ref[i][0] != ref[i][0]][:1]  # one cut in three boundaries
    gap = p.ref[k][0] - ref[k][0]
    assert 0.3 <= gap <= 1.5 and p.pcm.shape[0] == pcm.shape[0] + int(round(gap * SR))
    assert p.ref[:k] == ref[:k] and all(abs(p.ref[i][1] - ref[i][1] - gap) < 1e-9 for i in range(k, 4))
    assert p.silence[0] == (0.0, 0.2) and p.silence[1] == pytest.approx((ref[k][0], ref[k][0] + gap))
    assert p.silence[-1] == pytest.approx((1.4 + gap, 1.6 + gap))
    assert np.abs(p.pcm[int(ref[k][0] * SR) + 100:int((ref[k][0] + gap) * SR) - 100]).max() < 0.01  # the pad's floor
    assert in_silence(0.1, 0.3, p.silence) == pytest.approx(0.1)
    f = figures([(p, tuple(Word(w, s, e) for w, (s, e) in zip("abcd", p.ref)), None)])
    assert (f.words, f.start_ms, f.end_ms, f.silence_share, f.zero_length, f.flagged) == (4, 0.0, 0.0, 0.0, 0, 0)


def test_drift_restarts_at_every_pause(demo_aligner, stand_in):
    """An aligner that places its first word well and every later one earlier and earlier (what
    the demo aligner does on paused speech, docs/aligner.md): with "speech" the words are aligned
    again piece by piece from the left (assigned_at_pauses), each in its own burst; the raw times
    stay the official ones."""
    # word i from bin 7 + 11 i (0.56 s + 0.88 s each, 6 bins long) of whatever audio it is given;
    # the bursts start 1.1 s apart, so word i drifts 0.22 i s early
    scorer = stand_in(lambda n: np.array([b for i in range(n // 2) for b in (7 + 11 * i, 13 + 11 * i)]))
    pcm = bursts(FOUR, 5.0)
    raw = _segment(demo_aligner, pcm, "raw")
    assert [w.start for w in raw.words] == [0.56, 1.44, 2.32, 3.2]  # delta starts in gamma's burst
    seg = _segment(demo_aligner, pcm, "speech")
    assert seg.words_flag is None and [w.word for w in seg.words] == TEXT.split()
    for w, (a, b) in zip(seg.words, FOUR):
        assert a - 0.05 <= w.start < b and w.end <= b + 0.05, (w, (a, b))
    # the whole (8 slots), the first piece with its one word (2 slots); then from each cut (1.35,
    # 2.45, 3.55 s; the horizon, two pieces on, is the segment's end) the rest (6, 4, 2 slots)
    assert scorer.calls == [8, 8, 2, 6, 4, 2]


class _Placing:
    """A stand-in aligner whose words start 0.7 s into whatever audio it is given and 1.1 s apart,
    each 0.9 s long: a word's middle can lie past a cut that its start is before."""

    segment_ms = 80.0

    def __init__(self):
        self.calls = []

    def align(self, pcm, text, language, offset=0.0, between_bins=False):
        units = text.split()
        self.calls.append((round(offset, 2), len(units)))
        return tuple(Word(u, round(offset + 0.7 + 1.1 * j, 3), round(offset + 1.6 + 1.1 * j, 3))
                     for j, u in enumerate(units))


def test_a_piece_takes_the_word_that_starts_in_it():
    """assigned_at_pauses gives a piece the words whose middle is inside it, and, when none is, the
    first word if it starts inside it (else a piece whose words all run long is skipped and its
    words pile into the last), each ending by the piece's end (else the next piece's first word
    could start before it ends)."""

    pcm = bursts(FOUR, 5.0)
    al = _Placing()
    first = al.align(pcm, TEXT, "English")
    got = assigned_at_pauses(al, pcm, first, "English", Levels.of(pcm, 0.0))[0]
    cuts = (0.0, 1.35, 2.45, 3.55, 5.0)
    assert [w.word for w in got] == TEXT.split()
    for i, w in enumerate(got):  # each inside its piece: an end past the cut cut back to it
        assert cuts[i] <= w.start < w.end <= cuts[i + 1], (w, cuts[i:i + 2])
    # the whole; the first piece alone (alpha's middle 1.15 s); the rest from each cut, whose first
    # word starts 0.7 s in but ends past the next cut
    assert al.calls == [(0.0, 4), (0.0, 1), (1.35, 3), (2.45, 2), (3.55, 1)]


def test_the_ceiling_of_the_pieces_gives_each_piece_its_reference_words():
    """evaluate_aligner's "true-pieces" times: the input cut as the default cuts it, each word in
    the piece that holds the middle of its reference span (not where an alignment put it), each
    piece aligned alone with its words, then snapped to the speech."""
    from qwen3asr_tools.evaluate_aligner import aligned

    class Engine:
        aligner = _Placing()

    pcm = bursts(FOUR, 5.0)
    ref = ((0.5, 0.8), (0.8, 1.1), (1.6, 2.2), (2.7, 3.3))  # alpha and beta in the first burst, none in the last
    got = aligned(Engine, pcm, TEXT, "English", TEXT.split(), ref, "true-pieces")
    assert [w.word for w in got] == TEXT.split()
    # no whole alignment; the pieces from 0, 1.35 and 2.45 s alone, with two, one and one words
    assert Engine.aligner.calls == [(0.0, 2), (1.35, 1), (2.45, 1)]
    # the stand-in's words start 0.7 s into their piece and 1.1 s apart: gamma and delta start in
    # their own bursts (from the whole input they would start at 2.9 and 4.0 s); snapped, the first
    # word of each piece starting at most ONSET_S after its burst starts there: alpha at 0.5, beta
    # (0.7 + 1.1 s into the first piece's audio, its middle in the second piece) at 1.6
    assert [w.start for w in got] == [0.5, 1.6, 2.05, 3.15]


def test_the_evaluation_asks_the_engine_for_the_spans_it_compares():
    """evaluate_aligner's "speech" and "raw" times are the engine's public align with those spans."""
    from qwen3asr_tools.evaluate_aligner import aligned

    asked = []

    class Engine:
        @staticmethod
        def align(pcm, text, language=None, sample_rate=None, word_spans="speech"):
            asked.append((language, sample_rate, word_spans))
            return (Word("alpha", 0.5, 1.1),)

    for spans in ("speech", "raw"):
        assert aligned(Engine, bursts(FOUR, 5.0), "alpha", "English", ["alpha"], ((0.5, 1.1),), spans) == \
            [Word("alpha", 0.5, 1.1)]
    assert asked == [("English", 16000, "speech"), ("English", 16000, "raw")]


def test_each_later_alignment_stops_two_pieces_on(demo_aligner, stand_in):
    """With more pieces than the horizon (HORIZON_PIECES), an alignment from a cut runs to the end
    of the piece two on, with the words the whole alignment starts before that end; the drift
    still restarts at every pause and each word lands in its own burst."""
    from qwen3asr.aligner.refine import HORIZON_PIECES

    assert HORIZON_PIECES == 2
    six = FOUR + ((4.9, 5.5), (6.0, 6.6))  # cuts at 1.35, 2.45, 3.55, 4.65, 5.75 s
    text = "alpha beta gamma delta epsilon zeta"
    scorer = stand_in(lambda n: np.array([b for i in range(n // 2) for b in (7 + 11 * i, 13 + 11 * i)]))
    pcm = bursts(six, 7.2)
    seg = _segment(demo_aligner, pcm, "speech", text=text)
    assert seg.words_flag is None and [w.word for w in seg.words] == text.split()
    for w, (a, b) in zip(seg.words, six):
        assert a - 0.05 <= w.start < b and w.end <= b + 0.05, (w, (a, b))
    # the whole (12 slots), the first piece (2); from 1.35 s to 4.65 s the four words the whole
    # alignment started before 4.65 (8 slots, not the five left), from 2.45 s to 5.75 s four again,
    # then to the segment's end: the three, two and one left
    assert scorer.calls == [12, 2, 8, 8, 6, 4, 2]


def test_in_chinese_each_later_alignment_stops_three_pieces_on():
    """In a language whose units are characters (CHARACTER_LANGUAGES) the alignment from a cut runs
    to the end of the piece three on (HORIZON_PIECES_CHARACTERS), in others two on."""
    from qwen3asr.aligner.refine import CHARACTER_LANGUAGES, HORIZON_PIECES_CHARACTERS

    assert HORIZON_PIECES_CHARACTERS == 3 and CHARACTER_LANGUAGES == {"Chinese", "Cantonese"}
    six = FOUR + ((4.9, 5.5), (6.0, 6.6))  # cuts at 1.35, 2.45, 3.55, 4.65, 5.75 s
    pcm = bursts(six, 7.2)
    first = tuple(Word(u, a, b) for u, (a, b) in zip("一二三四五六", six))
    calls = {}
    for language in ("English", "Chinese"):
        al = _Placing()
        got = assigned_at_pauses(al, pcm, first, language, Levels.of(pcm, 0.0))[0]
        assert [w.word for w in got] == list("一二三四五六")
        calls[language] = al.calls
    # from 1.35 s: to 4.65 s (two on: the three words starting before it) or to 5.75 s (three on: four)
    assert calls["English"] == [(0.0, 1), (1.35, 3), (2.45, 3), (3.55, 3), (4.65, 2), (5.75, 1)]
    assert calls["Chinese"] == [(0.0, 1), (1.35, 4), (2.45, 4), (3.55, 3), (4.65, 2), (5.75, 1)]


def test_a_held_out_input_cut_at_its_shorter_pauses(engine, monkeypatch):
    """A held-out paused Mandarin input (paused_speech, test split, example 108: 6.2 s, 9 words;
    espeak-ng) with two utterances 0.18-0.25 s apart: cut at pauses of SPLIT_PAUSE_S (0.18 s) it
    has 8 pieces and its mean shift is 74.6 ms (when written); cut at 0.25 s (the setting before)
    3 pieces, the second 4.0 s holding both utterances, over which the demo aligner drifts: 119.5.
    Since the gaps inside a piece are matched to its words' boundaries (qwen3asr.aligner.gaps, session 29)
    the long piece's gaps of 0.18-0.25 s bound its words too: 55.3 against 63.2 ms."""
    from qwen3asr.aligner import refine
    from qwen3asr_tools import child_env, paused_speech

    assert refine.SPLIT_PAUSE_S == 0.18
    code = ("import pickle, sys; from qwen3asr_tools import paused_speech; "  # fresh: libespeak-ng keeps state
            "pickle.dump(paused_speech.make_example('test', 108), sys.stdout.buffer)")
    ex = pickle.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=300,
                                     env=child_env()).stdout)
    units, starts, ends = paused_speech.aligner_units(ex)
    ref = np.stack([starts, ends], axis=1)

    def shift_ms():
        got = engine.align(ex.audio, ex.text, ex.language)
        assert [w.word for w in got] == list(units)
        return float(np.abs(np.array([(w.start, w.end) for w in got]) - ref).mean() * 1000)

    assert len(pieces_at_pauses(Levels.of(ex.audio, 0.0))) == 8
    short = shift_ms()
    assert short < 65
    monkeypatch.setattr(refine, "SPLIT_PAUSE_S", 0.25)
    assert len(pieces_at_pauses(Levels.of(ex.audio, 0.0))) == 3
    assert shift_ms() > short + 5


def test_the_evaluation_renders_the_paused_set_of_its_split(monkeypatch):
    """evaluate_aligner --paused N takes paused_speech's set of --split (dev to choose settings on,
    test to report), with the seed."""
    from qwen3asr_tools import evaluate_aligner, paused_speech

    asked = []

    def make_set(split, n, seed=0, jobs=2, start=0):
        asked.append((split, n, seed))
        raise KeyboardInterrupt  # stop before an engine is made

    monkeypatch.setattr(paused_speech, "make_set", make_set)
    for split in ("dev", "test"):
        with pytest.raises(KeyboardInterrupt):
            evaluate_aligner.main(["--no-split", "--split", split, "--paused", "3", "--seed", "7"])
    assert asked == [("dev", 3, 7), ("test", 3, 7)]
