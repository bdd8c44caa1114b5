"""Subtitles from words (qwen3asr.subtitles): each word's piece of the transcript, cues cut at
word boundaries by the subtitle rules, SubRip and WebVTT with inline word times."""

from __future__ import annotations

import pytest

from qwen3asr.results import Segment, Word
from qwen3asr.subtitles import Cue, to_srt, to_vtt, word_cues, word_pieces

TEXT = "Hello, world! It's state-of-the-art. 打开灯。"
UNITS = ["Hello", "world", "It's", "stateoftheart", "打", "开", "灯"]


def _words(units, step=0.5, length=0.4, start=0.0):
    return tuple(Word(u, round(start + i * step, 3), round(start + i * step + length, 3)) for i, u in enumerate(units))


def test_each_word_gets_its_own_piece_of_the_transcript():
    pieces = word_pieces(TEXT, _words(UNITS))
    assert pieces == ["Hello, ", "world! ", "It's ", "state-of-the-art. ", "打", "开", "灯。"]
    assert "".join(pieces) == TEXT
    assert word_pieces("  leading, text", _words(["leading", "text"]))[0] == "  leading, "


@pytest.mark.parametrize("text", ["completely different", "Hello world"])
def test_a_text_that_does_not_spell_the_words_falls_back_to_the_units(text):
    words = _words(UNITS[:3])
    assert word_pieces(text, words) == ["Hello ", "world ", "It's"]


def test_cues_follow_the_line_duration_and_pause_rules():
    seg = Segment(0.0, 10.0, TEXT, "English", _words(UNITS))
    one = word_cues([seg])
    assert len(one) == 1 and one[0].text == TEXT and (one[0].start, one[0].end) == (0.0, 3.4)
    narrow = word_cues([seg], max_line=12, max_lines=1)
    assert [c.text for c in narrow] == ["Hello,", "world! It's", "state-of-the-art.", "打开灯。"]
    assert all(c.start == c.words[0].start and c.end == c.words[-1].end for c in narrow)
    short = word_cues([seg], max_duration=1.0)
    assert all(c.end - c.start <= 1.0 for c in short) and len(short) == 4
    gap = Segment(0.0, 10.0, "one two", "English", (Word("one", 0.0, 0.5), Word("two", 2.0, 2.5)))
    assert [c.text for c in word_cues([gap])] == ["one", "two"]  # a 1.5 s pause starts a new cue


def test_cues_never_cross_a_segment_and_wordless_segments_stay_whole():
    a = Segment(0.0, 1.0, "open the", "English", _words(["open", "the"]))
    b = Segment(1.0, 2.0, "door", "English", _words(["door"], start=1.0))
    c = Segment(2.0, 3.0, "hej då", "Swedish")  # a language the aligner does not cover: no words
    cues = word_cues([a, b, c])
    assert [(x.text, x.start, x.end) for x in cues] == [("open the", 0.0, 0.9), ("door", 1.0, 1.4),
                                                        ("hej då", 2.0, 3.0)]


def test_srt_and_vtt_from_cues():
    cues = word_cues([Segment(0.0, 10.0, TEXT, "English", _words(UNITS))])
    srt = to_srt(cues)
    assert srt == f"1\n00:00:00,000 --> 00:00:03,400\n{TEXT}\n"
    vtt = to_vtt(cues, inline_words=True)
    assert vtt == ("WEBVTT\n\n00:00:00.000 --> 00:00:03.400\nHello, <00:00:00.500>world! <00:00:01.000>It's "
                   "<00:00:01.500>state-of-the-art. <00:00:02.000>打<00:00:02.500>开<00:00:03.000>灯。\n")
    assert to_vtt(cues) == f"WEBVTT\n\n00:00:00.000 --> 00:00:03.400\n{TEXT}\n"
    # segments without words: one cue per segment, as before
    assert to_srt([Segment(0.0, 1.5, "open the door")]) == "1\n00:00:00,000 --> 00:00:01,500\nopen the door\n"


def test_inline_word_times_wrap_between_words():
    words = _words(["alpha", "beta", "gamma", "delta"])
    cue = Cue(0.0, 1.9, "alpha beta gamma delta", words, ("alpha ", "beta ", "gamma ", "delta"))
    body = to_vtt([cue], max_line=11, inline_words=True).split("\n", 3)[3]
    assert body.splitlines() == ["alpha <00:00:00.500>beta", "<00:00:01.000>gamma <00:00:01.500>delta"]
    body = to_vtt([cue], max_line=10, inline_words=True).split("\n", 3)[3]  # "gamma delta" is 11 characters
    assert body.splitlines() == ["alpha <00:00:00.500>beta", "<00:00:01.000>gamma", "<00:00:01.500>delta"]
