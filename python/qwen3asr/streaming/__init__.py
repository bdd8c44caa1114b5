"""Streaming recognition: chunks encoded once, a sliding decoder window, token rollback, VAD.

==============  ==========================================================================
``session``     :class:`StreamSession`: audio in, chunks cut, encoded and decoded (wires the rest)
``window``      the decoder window: chunks, prefix with rollback, language header, attribution
``committed``   committed text: ids to text, segments, ``on_text`` pieces, ITN at segment ends
``pause``       the speech level and the pause rules (where chunks end, where windows end)
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
