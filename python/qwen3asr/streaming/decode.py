"""One decoder run on a stream's window: the prompt with the window's audio, the language header
and the older chunks' text as the assistant turn's prefix, the run itself, and the tokens given
to the newest chunk."""

from __future__ import annotations

import numpy as np

from ..audio import SAMPLE_RATE
from ..options import TranscribeOptions
from ..results import decoder_costs
from ..work import Work
from .results import ChunkStats
from .window import Chunk, DecoderWindow


def decode_window(engine, window: DecoderWindow, chunk: Chunk, o: TranscribeOptions, *, prefix_len: int,
                  run: int, work: Work) -> ChunkStats:
    """Decode ``window`` (the encoded ``chunk`` newest in it) with the stream's options ``o``;
    ``prefix_len``: the prompt rows before the audio; ``run``: the stream's decoder runs so far
    (the sampling seed's index). The tokens are attributed to ``chunk``; returns its stats."""
    prefix = window.prefix()
    window.roll_back(prefix)
    in_text = o.language is not None or o.compact_prompt  # no language header to keep or split off
    header = window.header_for(prefix, in_text)
    extra = header + prefix.ids
    x = engine.decoder_input(np.concatenate([c.embeds for c in window], axis=0), o, extra)
    seconds = sum(c.end - c.start for c in window) / SAMPLE_RATE  # the audio this run reads
    out = engine.decode(x, o.decoding(seed=o.chunk_seed(run)), audio_seconds=seconds, prefix_len=prefix_len,
                        fallback=o.fallback, on_token=lambda _: not work.cancelled)
    work.check()
    ds = out.stats
    window.attribute(chunk, out.tokens, prefix, header, in_text, o.language)
    chunk.finish_reason = ds.finish_reason
    enc = chunk.enc
    return ChunkStats(
        start=chunk.start / SAMPLE_RATE, end=chunk.end / SAMPLE_RATE, encoder_calls=enc.calls,
        encoder_seconds=enc.graph_seconds, encoder_ms=chunk.enc_ms, window_chunks=len(window),
        prefix_tokens=len(extra), **decoder_costs(ds), generated=len(chunk.tokens),
        finish_reason=ds.finish_reason, fallback_tries=out.tries, loops=int(out.looped))


__all__ = ["decode_window"]
