"""Syllables counted from the frame levels (qwen3asr.aligner.syllables): humps of tone bursts
made to the rule, and the pieces of held-out paused Mandarin (espeak-ng, one character a syllable)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

from qwen3asr.aligner import syllables
from qwen3asr.aligner.refine import FRAME_S, Levels, pieces_at_pauses
from qwen3asr.streaming.pause import frame_db

SR = 16000


def humps(levels_db, seconds_each=0.15):
    """(n,) float32: a 220 Hz tone whose level steps through ``levels_db`` (dBFS), each for
    ``seconds_each``, over noise at -70 dBFS."""
    rng = np.random.default_rng(0)
    n = int(seconds_each * SR)
    gain = np.repeat([10 ** (d / 20) for d in levels_db], n)
    t = np.arange(gain.size)
    x = gain * np.sin(2 * np.pi * 220 * t / SR) + rng.standard_normal(gain.size) * 10 ** (-70 / 20)
    return x.astype(np.float32)


def count(x, speech=None):
    db = frame_db(x)
    return syllables.count(db, np.ones(db.size, bool) if speech is None else speech)


def test_a_hump_is_a_rise_and_a_fall_of_rise_db():
    assert (syllables.RISE_DB, syllables.SMOOTH_FRAMES, syllables.MIN_APART_FRAMES) == (8.0, 5, 8)
    assert count(humps([-60, -12, -60, -12, -60, -12, -60])) == 3  # three syllables said apart
    assert count(humps([-60, -12, -24, -12, -24, -12, -24, -12, -60])) == 4  # dips of 12 dB between them
    assert count(humps([-60, -12, -16, -12, -16, -12, -60])) == 1  # dips of 4 dB: one stretch of voice
    assert count(humps([-60, -12, -12, -12, -60])) == 1
    assert count(humps([-60, -12, -60, -12, -60], seconds_each=0.03)) == 1  # tops 60 ms apart: one
    assert count(humps([-60] * 4)) == 0
    assert count(np.zeros(0, np.float32)) == 0
    x = humps([-60, -12, -60, -12, -60])
    db = frame_db(x)
    assert syllables.count(db, np.zeros(db.size, bool)) == 0  # tops that are no speech frame


@pytest.mark.parametrize("index, expect", [(108, [2, 2, 1, 1, 2, 1, 0, 0]), (3, [3, 1, 1, 1, 0, 1, 1])])
def test_the_pieces_of_paused_mandarin_count_their_characters(index, expect):
    """Held-out paused Mandarin inputs (paused_speech, test split; rendered in a fresh interpreter,
    as libespeak-ng keeps state between syntheses): each piece at pauses counts as many syllables
    as it holds characters (by the middles of their reference times)."""
    from qwen3asr_tools import child_env, paused_speech

    code = ("import pickle, sys; from qwen3asr_tools import paused_speech; "
            f"pickle.dump(paused_speech.make_example('test', {index}), sys.stdout.buffer)")
    ex = pickle.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=300,
                                     env=child_env()).stdout)
    assert ex.language == "Chinese"
    _, starts, ends = paused_speech.aligner_units(ex)
    levels = Levels.of(ex.audio, 0.0)
    db = frame_db(ex.audio)
    pieces = pieces_at_pauses(levels)
    middles = (np.asarray(starts) + np.asarray(ends)) / 2
    true = [int(((a * FRAME_S <= middles) & (middles < b * FRAME_S)).sum()) for a, b in pieces]
    assert true == expect
    assert [syllables.count(db[a:b], levels.loud[a:b]) for a, b in pieces] == true


def test_a_piece_counts_only_where_the_smaller_humps_agree_and_its_tops_are_loud():
    """per_piece: tops more than NUCLEUS_DB under the segment's loud end (noise in a pause) are no
    syllables; a piece whose humps of AGREE_DB outnumber those of RISE_DB (dips of 5-8 dB:
    syllables run together) is not counted (None)."""
    assert (syllables.NUCLEUS_DB, syllables.AGREE_DB) == (25.0, 5.0)
    x = np.concatenate([humps([-60, -12, -60, -12, -60]),  # two loud syllables
                        humps([-60, -45, -60, -45, -60]),  # two humps 33 dB under them
                        humps([-60, -12, -18, -12, -18, -12, -60])])  # three run together (6 dB dips)
    db = frame_db(x)
    n = humps([-60] * 5).size // 160
    pieces = [(0, n), (n, 2 * n), (2 * n, db.size)]
    assert syllables.per_piece(db, np.ones(db.size, bool), pieces) == [2, 0, None]
    assert syllables.count(db[2 * n:], np.ones(db.size - 2 * n, bool)) == 1
    assert syllables.count(db[2 * n:], np.ones(db.size - 2 * n, bool), syllables.AGREE_DB) == 3


def test_english_syllables_are_guessed_from_the_spelling():
    """spelled: runs of vowels, less a silent final e, -es or -ed (dictionary syllables)."""
    said = {"gate": 1, "the": 1, "a": 1, "five": 1, "please": 1, "eggs": 1, "lights": 1, "noon": 1,
            "curtains": 2, "quarter": 2, "onions": 2, "minutes": 2, "degrees": 2, "boxes": 2, "switches": 2,
            "started": 2, "table": 2, "twenty": 2, "percent": 2, "timer": 2, "kitchen": 2, "timed": 1,
            "balcony": 3, "eleven": 3, "tomatoes": 3, "oranges": 3, "Don't": 1, "OFF,": 1}
    assert {w: syllables.spelled(w) for w in said} == said
    assert syllables.spelled("") == 1 == syllables.spelled("42")  # at least one
    assert syllables.SPELLED == {"English"}
