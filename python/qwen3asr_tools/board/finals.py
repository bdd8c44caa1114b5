"""What the final pass costs after audio-stop on the board (docs/board.md section 10, "Final
passes"; part of scripts/board_model.py's report).

A voice-assistant utterance (one short bundled command) is streamed in 2 s chunks as the Wyoming
server does. At audio-stop its transcript is either

- **stream**: the streamed text; the last partial chunk is decoded after the stop, or
- **pieces** (the server's default, TranscribeOptions.final_pass): the utterance's one-pass
  decode; the last partial chunk is left to that pass (streaming.session), so the work after the
  stop is the pass, started once the decoder has finished the chunks streamed before it.

Both come from real runs on the CPU backend (``record.record_stream`` without final passes,
``record_one_pass`` for the pass: the same ``engine.transcribe(one_pass=True)`` call the session
makes), predicted with the board's unit costs. The segment is assumed to close at audio-stop
(a short command has no pause; the VAD's speech end comes with the stop).
"""

from __future__ import annotations

import os
import statistics
from typing import Dict, List, Sequence, Tuple

from .accounting import Accounting
from .costs import SOCS, UnitCosts, unit_costs
from .predict import predict
from .record import record_one_pass, record_stream

CHUNK_S = 2.0  # the Wyoming server's chunk (WyomingOptions.chunk_size)
CLIPS = ("en_1.wav", "en_2.wav", "en_3.wav", "zh_1.wav", "zh_2.wav", "zh_3.wav")


def runs(engine, root: str, clips: Sequence[str] = CLIPS) -> List[Tuple[str, Accounting, Accounting]]:
    """(clip, its stream without final passes, its one pass) for each clip in ``root``."""
    from qwen3asr.audio import prepare_audio

    out = []
    for c in clips:
        pcm = prepare_audio(os.path.join(root, c))
        stream = record_stream(engine, pcm, f"Wyoming stream, {CHUNK_S:g} s chunks, {c}", chunk_size=CHUNK_S)[0]
        one = record_one_pass(engine, pcm, f"final pass, {c}")[0]
        out.append((c, stream, one))
    return out


def after_stop(stream: Accounting, one: Accounting, costs: UnitCosts,
               overlap: bool = False) -> Tuple[float, float]:
    """(stream, pieces): seconds from audio-stop to the transcript under ``costs``. Stream: the
    last chunk's latency (its audio is complete at the stop). Pieces: the decoder's backlog of
    the chunks before the last at the stop, then the one pass (``one``'s wall time)."""
    last = predict(stream, costs, overlap).per_chunk[-1].latency_s
    end = stream.audio_seconds
    free = end
    if len(stream.chunks) > 1:
        before = Accounting(label=stream.label, audio_seconds=end, chunks=stream.chunks[:-1], live=True,
                            system_tokens=stream.system_tokens)
        p = predict(before, costs, overlap)
        free = max([end] + [c.ready + x.latency_s for c, x in zip(before.chunks, p.per_chunk)])
    return last, free - end + predict(one, costs, overlap).wall_s


def build(items: Sequence[Tuple[str, Accounting, Accounting]]) -> dict:
    """The report section: per clip and SoC, the seconds after audio-stop (serial stages, the
    published unit costs), and their medians."""
    rows: List[Dict] = []
    for clip, stream, one in items:
        row = {"clip": clip, "audio_s": stream.audio_seconds, "stream_chunks": len(stream.chunks)}
        for soc in SOCS:
            row[soc] = dict(zip(("stream_s", "pieces_s"), after_stop(stream, one, unit_costs(soc))))
        rows.append(row)
    med = {soc: {k: statistics.median(r[soc][k] for r in rows) for k in ("stream_s", "pieces_s")} for soc in SOCS}
    return {"chunk_s": CHUNK_S, "rows": rows, "median": med}


def print_section(f) -> None:
    if not f:
        return
    print(f"\n## Final passes: seconds from audio-stop to the transcript ({f['chunk_s']:g} s chunks, serial)\n")
    socs = list(f["median"])
    print("| clip | audio s | " + " | ".join(f"{s.upper()} stream / pieces" for s in socs) + " |")
    print("|---|---|" + "---|" * len(socs))
    for r in f["rows"]:
        print(f"| {r['clip']} | {r['audio_s']:.2f} | "
              + " | ".join(f"{r[s]['stream_s']:.2f} / {r[s]['pieces_s']:.2f}" for s in socs) + " |")
    print("| median | | " + " | ".join(f"{f['median'][s]['stream_s']:.2f} / {f['median'][s]['pieces_s']:.2f}"
                                      for s in socs) + " |")
