"""The words of the pieces at pauses checked by the ASR model (``word_spans="checked"``,
qwen3asr.aligner.checked).

The programme over the boundaries is checked with stand-in readings whose likelihoods and
greedy readings are chosen; the reader with the demo ASR model (ONNX) against one prefill of
the prompt and the text; on the board path (tests/test_rk_drafts.py's C double of
librkllmrt.so) that each text is one GET_LOGITS run of exactly the prompt and the text's rows,
read as on the CPU, and that a runtime without per-row logits leaves the default's words with a
warning; the whole chain on espeak-ng speech from the held-out set, where the default gives a
piece a word too many and the check gives it back.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from qwen3asr import Qwen3ASREngine, TranscribeOptions, prepare_audio
from qwen3asr.aligner import checked, shifted, syllables
from qwen3asr.aligner.checked import (ANCHOR_PIECES, ANCHOR_WORDS, CHARACTER_COSTS, EMPTY_NATS, MOVE_NATS, SPACED_COSTS,
                                      WINDOW_WORDS, AsrReader, Reading, anchored_counts, checked_counts, edit_distance,
                                      letters, unit_starts)
from qwen3asr.aligner.refine import HOP, Levels, pieces_at_pauses
from qwen3asr.aligner.segments import align_segments
from qwen3asr.aligner.shifted import BetweenBins
from qwen3asr.aligner.words import align_words

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = os.path.join(ROOT, "models", "default")


def reading_of(true, exact=None, near=20.0):
    """A stand-in ``read``: piece p read as words [a, b) has log P 0 for its ``true`` range and
    ``near`` nats less per word of either end off; it is read exactly when ``exact(p, a, b)``
    (default: only its true range). Records the calls."""
    calls = []

    def read(p, a, b):
        calls.append((p, a, b))
        lo, hi = true[p]
        ok = exact(p, a, b) if exact else (a, b) == (lo, hi)
        return Reading(-near * (abs(a - lo) + abs(b - hi)), ok)

    read.calls = calls
    return read


def ranges(counts):
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds, bounds[1:])]


AUDIBLE = [True, True, True]


# ------------------------------------------------------------------ the programme

def heard_as(units, true):
    """A stand-in ``edits``: piece p's greedy reading is its ``true`` words of ``units``, each
    text's edits to it counted by the module's own edit_distance. Records the calls."""
    calls = []

    def edits(p, a, b):
        calls.append((p, a, b))
        lo, hi = true[p]
        return edit_distance("".join(units[a:b]), "".join(units[lo:hi]))

    edits.calls = calls
    return edits


def flat(p, a, b):
    """A stand-in ``read`` whose likelihoods prefer no text."""
    return Reading(0.0, True)


def no_edits(p, a, b):
    return 0


WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
         "eighteen nineteen twenty").split()
LETTERS = list("abcdefghijklmnopqrstuvwxyz")  # words of one character each, as Chinese's


def test_a_boundary_the_asr_reads_right_moves_there():
    true = ranges([3, 3, 3])
    edits = heard_as(WORDS, true)
    assert checked_counts([4, 2, 3], AUDIBLE, flat, edits) == [3, 3, 3]  # piece 0 had a word too many
    assert checked_counts([3, 1, 5], AUDIBLE, flat, edits) == [3, 3, 3]  # piece 1 a word too few ... by two
    assert checked_counts([3, 3, 3], AUDIBLE, flat, edits) == [3, 3, 3]
    # only boundaries within WINDOW_WORDS of the default's are read
    read, edits = reading_of(true), heard_as(WORDS, true)
    checked_counts([4, 2, 3], AUDIBLE, read, edits)
    for calls in (read.calls, edits.calls):
        assert {b for p, a, b in calls if p == 0} == set(range(4 - WINDOW_WORDS, 4 + WINDOW_WORDS + 1))
        assert {a for p, a, b in calls if p == 2} == set(range(6 - WINDOW_WORDS, 6 + WINDOW_WORDS + 1))
    # a boundary further off than WINDOW_WORDS cannot reach the truth
    assert checked_counts([6, 0, 3], AUDIBLE, flat, heard_as(WORDS, true)) == [4, 2, 3]


def test_a_run_of_wrong_boundaries_is_moved_as_one_and_paid_once():
    """Pieces of one-character words with Chinese's costs: a single boundary a word off costs its
    two pieces an edit each, less than a run's cost, and stays; three boundaries a word off in a
    row cost six edits, moved together for one run's cost (three moves paid one by one would
    cost more than they gain); the return to the default's boundary after a run is free (two
    boundaries a word off cost four edits: more than a run, less than a run and a paid return)."""
    run = CHARACTER_COSTS[1]
    assert 2 < run < 4 < 2 * run and 3 * run > 6
    true = ranges([3, 3, 3])
    assert checked_counts([4, 2, 3], AUDIBLE, flat, heard_as(LETTERS, true), CHARACTER_COSTS) == [4, 2, 3]
    true = ranges([3] * 5)
    assert checked_counts([3, 4, 3, 3, 2], [True] * 5, flat, heard_as(LETTERS, true), CHARACTER_COSTS) == [3] * 5
    # boundaries 2-3 a word late, 4 right again
    assert checked_counts([3, 4, 3, 2, 3], [True] * 5, flat, heard_as(LETTERS, true), CHARACTER_COSTS) == [3] * 5
    # a run whose shift changes pays the change: one word (a run's cost) then two (one more)
    true = ranges([3] * 6)
    assert checked_counts([4, 3, 4, 3, 3, 1], [True] * 6, flat, heard_as(WORDS, true), SPACED_COSTS) == [3] * 6


def test_a_move_must_gain_more_than_its_cost():
    """With no edits to tell, the likelihoods alone: moving one boundary a word gains 2 x near
    nats (both pieces beside it), weighed at the costs' nats each, against a run's cost; an
    audible piece emptied costs EMPTY_NATS more."""
    true = ranges([3, 3, 3])
    for costs in (SPACED_COSTS, CHARACTER_COSTS):
        nats, run = costs
        near = run / nats / 2
        assert checked_counts([4, 2, 3], AUDIBLE, reading_of(true, near=near - 1), no_edits, costs) == [4, 2, 3]
        assert checked_counts([4, 2, 3], AUDIBLE, reading_of(true, near=near + 1), no_edits, costs) == [3, 3, 3]
        near = (run / nats + EMPTY_NATS / 2) / 2  # gains more than the move, less than it and the emptying
        assert checked_counts([6, 1], [True, False], reading_of([(0, 7), (7, 7)], near=near), no_edits, costs) \
            == [7, 0]
        assert checked_counts([6, 1], [True, True], reading_of([(0, 7), (7, 7)], near=near), no_edits, costs) \
            == [6, 1]


def test_boundaries_stay_in_order_and_the_words_are_all_kept():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n_pieces = int(rng.integers(2, 6))
        counts = list(rng.integers(0, 4, n_pieces))
        true = ranges(list(rng.integers(0, 4, n_pieces - 1)) + [0])
        true[-1] = (true[-1][0], sum(counts))
        if true[-1][0] > sum(counts):
            continue
        got = checked_counts(counts, [True] * n_pieces, reading_of(true, near=float(rng.uniform(0, 60))),
                             lambda p, a, b: int(rng.integers(0, 6)))
        assert len(got) == n_pieces and min(got) >= 0 and sum(got) == sum(counts)
        bounds = np.cumsum(counts)[:-1]
        assert np.abs(np.cumsum(got)[:-1] - bounds).max(initial=0) <= WINDOW_WORDS
    assert checked_counts([5], [True], reading_of([(0, 5)]), no_edits) == [5]


def test_counted_syllables_weigh_the_characters_of_short_pieces():
    """In a language written in characters each word is a syllable: a piece whose audio counts at
    most SYLLABLES_UP_TO of them costs SYLLABLE_EDITS per word more or fewer; longer pieces (the
    count is less often right there) and no counts leave the costs as they were."""
    from qwen3asr.aligner.checked import SYLLABLE_EDITS, SYLLABLES_UP_TO

    assert (SYLLABLE_EDITS, SYLLABLES_UP_TO) == (3.0, 3)
    run = CHARACTER_COSTS[1]  # 3 edits: one piece's miscount pays it (a tie keeps the default), two more
    assert SYLLABLE_EDITS == run < 2 * SYLLABLE_EDITS
    # flat readings, no edits: only the counts tell
    assert checked_counts([2, 1, 3], AUDIBLE, flat, no_edits, CHARACTER_COSTS, [1, 2, 3]) == [1, 2, 3]
    assert checked_counts([2, 1, 3], AUDIBLE, flat, no_edits, CHARACTER_COSTS) == [2, 1, 3]
    # both pieces beside the boundary miscounted: 6 edits gained for a run of 3; but where the second
    # counts more than SYLLABLES_UP_TO only the first piece's miscount is weighed, 3 edits: a tie
    assert checked_counts([2, 2, 3], AUDIBLE, flat, no_edits, CHARACTER_COSTS, [1, 3, 3]) == [1, 3, 3]
    assert checked_counts([2, 4, 3], AUDIBLE, flat, no_edits, CHARACTER_COSTS, [1, 5, 3]) == [2, 4, 3]


def test_counted_syllables_weigh_the_spelled_syllables_of_words():
    """With ``unit_syllables`` (English: syllables.spelled of each word) a short piece's count is
    compared with its words' syllables, not their number."""
    words = [1, 2, 1, 3, 1]  # e.g. "turn", "off the"... as syllables per word
    # the default gave piece 0 two words (1 + 2 = 3 syllables) where its audio counts one, and piece 1
    # the rest (1 + 3 + 1 = 5, more than SYLLABLES_UP_TO: not weighed); no readings or edits tell
    assert checked_counts([2, 3], [True] * 2, flat, no_edits, SPACED_COSTS, [1, 5], words) == [1, 4]
    # counted as words (no unit_syllables) the first piece's two words would be one too many, not two:
    # 3 edits against a run of 4, so the default stays
    assert checked_counts([2, 3], [True] * 2, flat, no_edits, SPACED_COSTS, [1, 5]) == [2, 3]
    assert checked_counts([1, 4], [True] * 2, flat, no_edits, SPACED_COSTS, [1, 5], words) == [1, 4]
    with pytest.raises(ValueError, match="4 words' syllables for 5 words"):
        checked_counts([1, 4], [True] * 2, flat, no_edits, SPACED_COSTS, [1, 5], words[:4])


def test_texts_are_compared_by_their_letters():
    assert letters("Turn ON, the 2 lights!") == "turnonthe2lights"
    assert letters("关掉，走廊的 灯。") == "关掉走廊的灯"
    assert edit_distance("kitten", "sitting") == 3 == edit_distance("sitting", "kitten")
    assert edit_distance("", "abc") == 3 == edit_distance("abc", "")
    assert edit_distance("关掉走廊", "关走廊灯") == 2


def start_of(true, exact=None, near=20.0):
    """A stand-in ``start``: the audio after boundary p read as beginning with words [a, b) has
    log P 0 where a is its ``true`` boundary (true[p - 1]) and ``near`` nats less per word off;
    it is read exactly when ``exact(p, a, b)`` (default: only at the true boundary). Records the
    calls."""
    calls = []

    def start(p, a, b):
        calls.append((p, a, b))
        ok = exact(p, a, b) if exact else a == true[p - 1]
        return Reading(-near * abs(a - true[p - 1]), ok)

    start.calls = calls
    return start


def bounds_of(counts):
    return [int(x) for x in np.cumsum(counts)[:-1]]


def test_each_boundary_is_read_from_the_audio_after_it():
    true = bounds_of([3, 3, 3, 3])
    assert anchored_counts([4, 2, 3, 3], start_of(true)) == [3, 3, 3, 3]
    # a cascade (every boundary a word late, each piece handing a word on): each boundary is
    # decided from its own audio, not from the boundary before it
    assert anchored_counts([4, 3, 3, 2], start_of(true)) == [3, 3, 3, 3]
    assert anchored_counts([2, 3, 3, 4], start_of(true)) == [3, 3, 3, 3]
    assert anchored_counts([3, 3, 3, 3], start_of(true)) == [3, 3, 3, 3]
    # candidates: within WINDOW_WORDS of the default's, ANCHOR_WORDS words from each, none from past
    # the last word
    start = start_of(true)
    anchored_counts([4, 2, 3, 3], start)
    assert {a for p, a, b in start.calls if p == 1} == set(range(4 - WINDOW_WORDS, 4 + WINDOW_WORDS + 1))
    assert all(b == min(12, a + ANCHOR_WORDS) for p, a, b in start.calls)
    start = start_of([2])
    anchored_counts([3, 1], start)
    assert {a for p, a, b in start.calls} == set(range(3 - WINDOW_WORDS, 4))


def test_a_boundary_moves_only_to_a_start_read_exactly_and_worth_its_cost():
    true = bounds_of([3, 3, 3])
    # likelier but not read exactly: the default stands
    assert anchored_counts([4, 2, 3], start_of(true, lambda p, a, b: False)) == [4, 2, 3]
    # the default's start competes whatever its reading: read exactly, the likelier true start wins
    assert anchored_counts([4, 2, 3], start_of(true, lambda p, a, b: True)) == [3, 3, 3]
    # one word moved must gain more than MOVE_NATS
    assert anchored_counts([4, 2, 3], start_of(true, near=MOVE_NATS - 0.5)) == [4, 2, 3]
    assert anchored_counts([4, 2, 3], start_of(true, near=MOVE_NATS + 0.5)) == [3, 3, 3]
    # a default that gives a piece nothing (its boundary at the last word's end) is not a start
    assert anchored_counts([3, 0], start_of([2], near=1000.0)) == [2, 1]


def test_anchored_boundaries_stay_in_order_and_the_words_are_all_kept():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n_pieces = int(rng.integers(2, 6))
        counts = [int(x) for x in rng.integers(0, 4, n_pieces)]
        if not sum(counts):
            continue
        true = sorted(int(x) for x in rng.integers(0, sum(counts), n_pieces - 1))
        got = anchored_counts(counts, start_of(true, lambda p, a, b: bool(rng.integers(0, 2)),
                                                near=float(rng.uniform(0, 20))))
        assert len(got) == n_pieces and min(got) >= 0 and sum(got) == sum(counts)


def test_the_candidate_texts_are_spans_of_the_transcript():
    text = "Open the back-door, please. Turn ON the fan!"
    units = align_words(text, "English")
    starts = unit_starts(text, units)
    assert [text[s:s + 4] for s in starts[:3]] == ["Open", "the ", "back"]
    assert text[starts[3]:starts[5]].strip() == "please. Turn"
    zh = "打开客厅的灯，关闭空调。"
    starts = unit_starts(zh, align_words(zh, "Chinese"))
    assert zh[starts[5]:starts[7]] == "灯，关"
    assert unit_starts("café au lait", ["cafe", "au", "lait"]) is None  # normalised: the units are joined
    assert unit_starts("a b", ["a", "c"]) is None


# ------------------------------------------------------------------ the reader on the demo ASR model

@pytest.fixture(scope="module")
def engine():
    mp = pytest.MonkeyPatch()
    mp.delenv("QWEN3ASR_ALIGNER", raising=False)
    with Qwen3ASREngine(DEFAULT, backend="onnx", threads=2, decoder_dtype="fp32") as e:
        yield e
    mp.undo()


def test_the_reader_scores_texts_as_one_prefill_of_the_prompt_and_the_text(engine):
    pcm = prepare_audio(os.path.join(ROOT, "audio", "en_2.wav"))
    heard = engine.transcribe(pcm, language="English").text
    emb = engine.encode(engine.features(pcm))
    prompt = engine.embed_prompt(engine.prompt(emb.shape[0], language="English"), emb)
    logits_of = engine.decoder.text_logits(prompt)
    kv = engine.decoder.kv
    for text in (heard, " ".join(heard.split()[:-1]), "", heard):  # the cache is the prompt's again after each
        ids = engine.tokenizer.encode(text) if text else []
        x = np.concatenate([prompt, engine.embeddings(np.asarray(ids, np.int64))]) if ids else prompt
        want, _ = kv.forward(x.astype(np.float32), kv.new_cache(), np.arange(len(prompt) - 1, len(x)))
        kv.release_binding()
        got = logits_of(ids)
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-3 * np.abs(want).max()

    reader = AsrReader(engine)
    read = reader.piece(pcm, "English")
    shorter = " ".join(heard.split()[:-1])
    whole, cut, nothing = read(heard), read(shorter), read("")
    assert whole.exact and not cut.exact and not nothing.exact and whole.log_p > cut.log_p + MOVE_NATS
    assert reader.runs == 1  # the shorter texts begin the first one: read from its rows
    other = AsrReader(engine)
    alone = other.piece(pcm, "English")
    for text, got in ((shorter, cut), ("", nothing)):  # as if each were run on its own
        want = alone(text)
        assert want.exact == got.exact and abs(want.log_p - got.log_p) < 1e-3
    assert other.runs == 1  # "" begins every text
    read("please " + heard)
    assert reader.runs == 2
    # as a prefix: the text's own tokens, without the end of text after them
    runs = reader.runs
    whole_prefix, cut_prefix = read(heard, end=False), read(shorter, end=False)
    assert cut_prefix.exact and whole_prefix.exact  # the reading begins with both
    assert 0 <= whole_prefix.log_p - whole.log_p < 1.0  # the end is likely after the whole text
    assert cut_prefix.log_p - cut.log_p > MOVE_NATS  # ... and unlikely after the cut one
    assert not read("please", end=False).exact
    assert reader.runs == runs  # all read from the rows of earlier runs
    # its greedy reading: the one-pass transcript of the audio in its language, decoded once
    assert reader.decodes == 0
    assert read.heard(64) == heard and read.heard(64) == heard and reader.decodes == 1
    assert heard.startswith(read.heard(3)) and len(read.heard(3)) < len(heard)  # at most that many tokens


# ------------------------------------------------------------------ the whole chain

def test_the_option_needs_the_engine():
    assert TranscribeOptions(word_spans="checked").word_spans == "checked"
    with pytest.raises(ValueError, match="needs the ASR engine"):
        align_segments(object(), [], lambda s: None, spans="checked")


def three_commands(gap=0.5):
    """zh_3, zh_1 and zh_2 (bundled) with ``gap`` s of silence between them: the audio, its text,
    its words' commands (0, 1, 2) and the middles of the two silences."""
    names = ("zh_3", "zh_1", "zh_2")
    texts = ("关掉走廊的风扇", "六点半", "把十二瓶牛奶加到购物清单")
    clips = [prepare_audio(os.path.join(ROOT, "audio", f"{n}.wav")) for n in names]
    z = np.zeros(int(gap * 16000), np.float32)
    pcm = np.concatenate([clips[0], z, clips[1], z, clips[2]])
    cuts = np.cumsum([len(clips[0]) + len(z) / 2, len(clips[1]) + len(z)]) / 16000
    owner = np.repeat([0, 1, 2], [len(align_words(t, "Chinese")) for t in texts])
    return pcm, "".join(texts), owner, cuts


def commands_of(words, cuts):
    return np.searchsorted(cuts, [(w.start + w.end) / 2 for w in words])


def test_a_word_the_default_puts_in_the_wrong_command_is_given_back(engine):
    """Three Mandarin commands with half a second between them: the default's pieces give the
    second command's first word to the first (a cascade's start), the ASR's check gives it back;
    the same through the one-pass transcription."""
    pcm, text, owner, cuts = three_commands()
    speech = engine.align(pcm, text, "Chinese")
    checked = engine.align(pcm, text, "Chinese", word_spans="checked")
    assert [w.word for w in checked] == [w.word for w in speech]
    assert (commands_of(speech, cuts) != owner).sum() == 1
    assert (commands_of(checked, cuts) == owner).all()
    heard = engine.transcribe(pcm, language="Chinese", word_timestamps=True, word_spans="checked")
    assert heard.text == text and heard.words == tuple(checked)


def test_a_cascade_in_english_is_broken_where_it_starts(engine, monkeypatch):
    """A held-out paused English input (paused_speech, test split, example 74: 18 s, 35 words
    in 6 pieces; espeak-ng) where the default's pieces put three boundaries in a row a word
    late (a cascade): the check moves them back together, with the boundaries read from the
    audio after them (which move them first) and without; the windows read are the piece after
    each boundary and the next; a Chinese segment reads no windows."""
    from qwen3asr.aligner import refine
    from qwen3asr_tools import child_env, paused_speech

    # its pieces cut at pauses of 0.25 s, as when it was written: cut at 0.18 s (SPLIT_PAUSE_S since
    # session 24) every mode puts each of its words in the right piece, and there is no cascade
    monkeypatch.setattr(refine, "SPLIT_PAUSE_S", 0.25)
    # rendered in a fresh interpreter: libespeak-ng carries state from one synthesis to the next,
    # so in this process the example's audio would depend on the tests that ran before
    code = ("import pickle, sys; from qwen3asr_tools import paused_speech; "
            "pickle.dump(paused_speech.make_example('test', 74), sys.stdout.buffer)")
    ex = pickle.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=300,
                                     env=child_env()).stdout)
    words, starts, ends = paused_speech.aligner_units(ex)
    levels = Levels.of(ex.audio, 0.0)
    pieces = pieces_at_pauses(levels)
    cuts = [levels.time(a) for a, _ in pieces[1:]]
    owner = np.searchsorted(cuts, (np.asarray(starts) + np.asarray(ends)) / 2)

    def wrong(got):
        assert [w.word for w in got] == list(words)
        return int((np.searchsorted(cuts, [(w.start + w.end) / 2 for w in got]) != owner).sum())

    assert wrong(engine.align(ex.audio, ex.text, "English")) == 3  # "speech"
    assert wrong(engine.align(ex.audio, ex.text, "English", word_spans="checked")) == 0
    # the run (the pieces not aligned again in shifted passes at the end: the same words)
    monkeypatch.setattr(shifted, "CHECKED_PASSES", 1)
    anchored = checked.ANCHORED
    monkeypatch.setattr(checked, "ANCHORED", frozenset())
    moved = []
    counts_of = checked.checked_counts

    def recorded(counts, *args):
        moved.append((list(counts), counts_of(counts, *args)))
        return moved[-1][1]

    monkeypatch.setattr(checked, "checked_counts", recorded)
    assert wrong(engine.align(ex.audio, ex.text, "English", word_spans="checked")) == 0
    (before, after), = moved
    shifts = np.cumsum(after)[:-1] - np.cumsum(before)[:-1]
    assert shifts.tolist() == [0, 0, 0, -1, -1, -1]  # the run, moved as one (a piece more since the
    # floor of the FLOOR_WINDOW_S around each frame, session 31)
    monkeypatch.setattr(checked, "checked_counts", counts_of)
    monkeypatch.setattr(checked, "ANCHORED", anchored)
    read = []
    piece = AsrReader.piece
    monkeypatch.setattr(AsrReader, "piece", lambda self, pcm, *a: read.append(len(pcm)) or piece(self, pcm, *a))
    assert wrong(engine.align(ex.audio, ex.text, "English", word_spans="checked")) == 0
    windows = {min(len(ex.audio), pieces[min(p + ANCHOR_PIECES, len(pieces)) - 1][1] * HOP) - pieces[p][0] * HOP
               for p in range(1, len(pieces))}
    assert windows <= set(read)
    read.clear()
    pcm, text, _, _ = three_commands()
    engine.align(pcm, text, "Chinese", word_spans="checked")
    assert len(read) == len(pieces_at_pauses(Levels.of(pcm, 0.0)))  # its pieces alone


def test_a_digit_read_alone_is_counted_into_its_piece(engine, monkeypatch):
    """A held-out paused Mandarin input (paused_speech, test split, example 41: 6.5 s, 八一一一八四
    read a digit or two at a time, 5 pieces; espeak-ng) where the ASR's readings leave a piece a
    digit off and every piece after it follows: the syllables counted in each piece's audio (as
    many as its true words) put the digits back. In English the words weigh the syllables of
    their spelling."""
    from qwen3asr.aligner import refine
    from qwen3asr_tools import child_env, paused_speech

    # its levels judged against the input's floor alone, as when it was written: with the floor of
    # the FLOOR_WINDOW_S around each frame (session 31) the pauses in its noisier stretch cut more
    # pieces, and the readings alone give every piece its digits
    monkeypatch.setattr(refine, "FLOOR_WINDOW_S", 1000.0)
    code = ("import pickle, sys; from qwen3asr_tools import paused_speech; "
            "pickle.dump(paused_speech.make_example('test', 41), sys.stdout.buffer)")
    ex = pickle.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=300,
                                     env=child_env()).stdout)
    words, starts, ends = paused_speech.aligner_units(ex)
    ref = np.stack([starts, ends], axis=1)
    levels = Levels.of(ex.audio, 0.0)
    cuts = [levels.time(a) for a, _ in pieces_at_pauses(levels)[1:]]
    true = np.bincount(np.searchsorted(cuts, ref.mean(axis=1)), minlength=len(cuts) + 1).tolist()
    seen = []
    counts_of = checked.checked_counts

    def recorded(counts, audible, read, edits, costs, counted=None, unit_syllables=None):
        assert unit_syllables is None  # Chinese: a character is a syllable
        seen.append((counted, counts_of(counts, audible, read, edits, costs, counted, unit_syllables)))
        return seen[-1][1]

    monkeypatch.setattr(checked, "checked_counts", recorded)

    def shift_ms():
        got = engine.align(ex.audio, ex.text, "Chinese", word_spans="checked")
        assert [w.word for w in got] == list(words)
        return float(np.abs(np.array([(w.start, w.end) for w in got]) - ref).mean() * 1000)

    assert shift_ms() < 120  # 77 ms when written
    counted, given = seen[-1]
    assert given == true  # every piece given its words
    assert sum(abs(c - t) for c, t in zip(counted, true)) <= 1  # the syllables: 0, 1, 3, 2, 1 against 0, 1, 2, 2, 1
    monkeypatch.setattr(checked, "SYLLABLE_EDITS", 0.0)
    assert shift_ms() > 500  # 892 ms: a digit off from the second piece on
    assert seen[-1][1] != true
    monkeypatch.setattr(checked, "SYLLABLE_EDITS", 2.0)
    seen.clear()
    en = [prepare_audio(os.path.join(ROOT, "audio", f"en_{i}.wav")) for i in (1, 2)]
    pcm = np.concatenate([en[0], np.zeros(8000, np.float32), en[1]])
    texts = [c["text"] for c in json.load(open(os.path.join(ROOT, "audio", "transcripts.json")))["clips"]
             if c["file"] in ("en_1.wav", "en_2.wav")]
    units = []

    def english(counts, audible, read, edits, costs, counted=None, unit_syllables=None):
        units.append((counted, unit_syllables))
        return counts_of(counts, audible, read, edits, costs, counted, unit_syllables)

    monkeypatch.setattr(checked, "checked_counts", english)
    got = engine.align(pcm, " ".join(texts), "English", word_spans="checked")
    assert units and all(len(c) >= 2 for c, _ in units)  # the pieces' counted syllables
    assert units[-1][1] == [syllables.spelled(w.word) for w in got]  # English: words are not syllables


def test_pieces_read_as_the_default_gives_them_are_aligned_again_only_for_the_passes(engine, monkeypatch):
    """Where no boundary moves the words are the default's ("speech"): with one pass per piece
    exactly the same words and alignments; with CHECKED_PASSES each piece aligned again alone
    that many times, with its words, after the default's alignments."""
    n = shifted.CHECKED_PASSES
    assert n == 4
    pcm = np.concatenate([prepare_audio(os.path.join(ROOT, "audio", "en_1.wav")), np.zeros(8000, np.float32),
                          prepare_audio(os.path.join(ROOT, "audio", "en_3.wav"))])
    text = "open the back door please turn on the living room fan"
    calls = {}
    align = type(engine.aligner).align
    monkeypatch.setattr(type(engine.aligner), "align",
                        lambda self, *a, **kw: calls[spans].append(a[1]) or align(self, *a, **kw))
    got = {}
    for spans, passes in (("speech", n), ("checked", 1), ("checked", n)):
        monkeypatch.setattr(shifted, "CHECKED_PASSES", passes)
        calls[spans] = []
        got[spans, passes] = engine.align(pcm, text, "English", word_spans=spans)
        calls[spans, passes] = calls.pop(spans)
    assert got["checked", 1] == got["speech", n] and calls["checked", 1] == calls["speech", n]
    assert calls["speech", n] == [text, "open the back door", "please turn on the living room fan"]
    assert calls["checked", n] == calls["speech", n] + ["open the back door"] * n + \
        ["please turn on the living room fan"] * n
    assert got["checked", n] != got["speech", n]
    assert [w.word for w in got["checked", n]] == [w.word for w in got["speech", n]]


def test_a_stream_checks_the_pieces_of_its_segments(engine, monkeypatch):
    """A live stream with word_spans "checked": each committed segment's words are what the
    check gives that segment's audio and text (the engine's aligner and ASR model), and a
    segment with a pause inside it is read by the ASR (the three commands with their edges
    trimmed: 0.3 s pauses, which cut pieces but not the stream's segments)."""
    from qwen3asr.aligner.refine import refined

    clips = [prepare_audio(os.path.join(ROOT, "audio", f"{n}.wav"))[3200:-3200] for n in ("zh_3", "zh_1", "zh_2")]
    z = np.zeros(1600, np.float32)
    pcm = np.concatenate([clips[0], z, clips[1], z, clips[2]])
    read = []
    piece = AsrReader.piece
    monkeypatch.setattr(AsrReader, "piece", lambda self, *a: read.append(a) or piece(self, *a))
    s = engine.create_stream(language="Chinese", word_timestamps=True, word_spans="checked")
    for i in range(0, len(pcm), 3200):
        s.feed_audio(pcm[i:i + 3200])
    final = s.finish()
    assert final.words and read
    paused = 0
    for seg in final.segments:
        a, b = int(round(seg.start * 16000)), int(round(seg.end * 16000))
        paused += len(pieces_at_pauses(Levels.of(pcm[a:b], 0.0))) > 1
        between = BetweenBins(engine.aligner)
        first = between.align(pcm[a:b], seg.text, seg.language, offset=a / 16000)
        want = refined(between, pcm[a:b], a / 16000, first, seg.language, "checked", AsrReader(engine), seg.text)[0]
        assert seg.words == want
    assert paused


def test_the_aligner_bench_refuses_spans_it_does_not_know(capsys):
    from qwen3asr_tools.bench_aligner import main

    assert main(["--spans", "speech,tight"]) == 2
    assert "--spans takes speech, raw, checked (got 'speech,tight')" in capsys.readouterr().err
