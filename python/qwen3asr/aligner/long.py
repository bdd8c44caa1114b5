"""A given transcript aligned over audio of any length (``Qwen3ASREngine.align``, the
``/v1/audio/alignments`` endpoint).

Audio within one aligner pass (``ForcedAligner.piece_seconds``) is aligned in that one pass.
Longer audio is cut where the engine's own long-file plan cuts it (VAD speech segments, chunks of
at most one aligner piece) and transcribed; the given text's word units are matched to the
recognised ones (difflib's matching blocks over the units, case-folded), so each unit goes to the
piece whose recognised words it matches. A unit with no match goes with the unit before it (the
first ones with the first matched piece), and the pieces' order is kept. Each piece's units are
then aligned on its audio. The text the ASR model got wrong still lands in the right piece as
long as enough of its neighbours were recognised; a piece with no unit gets no words.
"""

from __future__ import annotations

import difflib
from typing import List, Optional

import numpy as np

from ..audio import SAMPLE_RATE
from ..results import Segment
from ..work import NO_WORK, Work
from .words import align_words

LONG_CHUNK_SECONDS = 30.0  # the long-file chunk (longform), lowered to the aligner's piece when that is shorter


def assign_units(units: List[str], pieces: List[List[str]]) -> List[int]:
    """The index of the piece each of ``units`` belongs to, from the recognised units of each
    piece (``pieces``): matched units take their match's piece, the others their neighbour's,
    never going back to an earlier piece. All 0 when nothing matches."""
    hyp, owner = [], []
    for i, p in enumerate(pieces):
        hyp += [u.casefold() for u in p]
        owner += [i] * len(p)
    sm = difflib.SequenceMatcher(None, [u.casefold() for u in units], hyp, autojunk=False)
    got: List[Optional[int]] = [None] * len(units)
    for a, b, n in sm.get_matching_blocks():
        for k in range(n):
            got[a + k] = owner[b + k]
    first = next((g for g in got if g is not None), 0)
    out, last = [], first
    for g in got:
        last = max(last, g) if g is not None else last
        out.append(last)
    return out


def align_long(engine, pcm: np.ndarray, text: str, language: str, *, offset: float = 0.0,
               work: Work = NO_WORK, spans: str = "speech") -> List[Segment]:
    """The Words of ``text`` in (n,) float32 16 kHz ``pcm`` as Segments (one per aligned piece,
    times in seconds plus ``offset``); ``language`` a language the engine's aligner covers;
    ``spans`` each piece's word spans as TranscribeOptions.word_spans ("speech", "raw" or
    "checked": qwen3asr.aligner.refine, a collapse flagged in ``Segment.words_flag`` each way)."""
    from .checked import AsrReader
    from .refine import refined

    from .shifted import for_spans

    aligner = for_spans(engine.aligner, spans)
    piece = aligner.piece_seconds
    reader = AsrReader(engine) if spans == "checked" else None

    def aligned(a: int, b: int, piece_text: str) -> Segment:
        t0 = offset + a / SAMPLE_RATE
        with work.unit():
            words, flag = refined(aligner, pcm[a:b], t0, aligner.align(pcm[a:b], piece_text, language, offset=t0),
                                  language, spans, reader, piece_text)
        return Segment(t0, offset + b / SAMPLE_RATE, piece_text, language, tuple(words), words_flag=flag)

    if pcm.shape[0] <= piece * SAMPLE_RATE:
        return [aligned(0, pcm.shape[0], text)]
    chunk = float(min(LONG_CHUNK_SECONDS, piece))
    heard = engine.transcribe(pcm, language=language, vad=True, chunk_size=chunk, word_timestamps=False, work=work)
    segs = [s for s in heard.segments if s.text]
    units = align_words(text, language)
    if not segs or not units:
        return []
    owner = assign_units(units, [align_words(s.text, language) for s in segs])
    out = []
    for i, seg in enumerate(segs):
        mine = [u for u, o in zip(units, owner) if o == i]
        if not mine:
            continue
        a, b = int(round(seg.start * SAMPLE_RATE)), min(pcm.shape[0], int(round(seg.end * SAMPLE_RATE)))
        out.append(aligned(a, b, " ".join(mine)))
    return out


__all__ = ["align_long", "assign_units"]
