"""A text decoder that is still loading: the TextDecoder seam over a Future.

A one-shot run (Qwen3ASREngine's ``preload_seconds``) needs its decoder only after its audio is
encoded, and on the CPU the decoder's session (reading and prepacking the weights) takes longer
to make than the encoder's. So create_backend makes the decoder in a thread and hands the engine
this stand-in: the engine is ready once the encoder's graphs are, the first request's log-mel and
encoder run while the decoder finishes loading, and its first decoder use waits for it
(docs/benchmarks.md "The wait before the first call").
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable


class PendingDecoder:
    """Stands for the decoder ``make()`` returns, made in a thread from construction on.

    ``name``, ``max_context`` and ``dtype`` are known before the load ends (the engine's planner
    and its ``decoder_dtype`` read them at construction); any other attribute waits for the load
    and is the loaded decoder's (``generate``, ``start``, ``kv``, ...), and an error of the load is
    raised by that first use. ``close`` waits for the load too, then closes what it made.
    """

    def __init__(self, make: Callable[[], object], name: str, max_context: int, dtype=None):
        self.name = name
        self.max_context = int(max_context)
        self.dtype = dtype
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="qwen3asr-decoder-load")
        self._future = pool.submit(make)
        pool.shutdown(wait=False)  # the thread ends with the load
        self._closed = False

    @property
    def loaded(self) -> bool:
        """Whether the load has ended (made or failed)."""
        return self._future.done()

    def result(self):
        """The loaded decoder (waits for the load; raises its error)."""
        if self._closed:
            raise RuntimeError("this decoder was closed")
        return self._future.result()

    def __getattr__(self, attr: str):
        if attr.startswith("__") or attr in ("_future", "_closed"):  # copy, pickle, half-built
            raise AttributeError(attr)
        return getattr(self.result(), attr)

    def close(self) -> None:
        """Wait for the load, then close the decoder it made (a failed load leaves nothing to
        close). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._future.exception() is None:
            self._future.result().close()
