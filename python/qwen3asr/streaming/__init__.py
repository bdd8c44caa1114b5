"""Streaming recognition: chunks encoded once, a sliding decoder window, token rollback, VAD.

==============  ==========================================================================
``session``     :class:`StreamSession`: wires the stages below for one stream (no policy of its own)
``buffer``      the audio a stream keeps
``front``       a chunk's log-mel (running ceiling), levels and one encoder pass
``window``      the decoder window: chunks, prefix with rollback, language header, attribution
``decode``      one decoder run on the window, and what it cost
``committed``   committed text: ids to text, segments, ``on_text`` pieces, ITN at segment ends
``final``       final passes: a finished piece of speech decoded again in one pass
``pause``       the speech level and the pause rules (where chunks end, where windows end)
``tally``       the running totals: chunk stats, sums, the worst finish reason
``results``     what a stream reports: StreamResult, StreamStats, ChunkStats
==============  ==========================================================================

Long files run the same session over the whole file (qwen3asr.longform). The algorithm, its
rules and their measurements: docs/streaming.md.
"""

from ..options import TranscribeOptions
from .results import ChunkStats, StreamResult, StreamStats
from .session import StreamSession
from .window import positions_needed

# A session's settings are the request's TranscribeOptions (stream defaults filled in by
# ``TranscribeOptions.for_stream``); the old name stays for callers that built them directly.
StreamOptions = TranscribeOptions

__all__ = ["ChunkStats", "StreamOptions", "StreamResult", "StreamSession", "StreamStats", "positions_needed"]
