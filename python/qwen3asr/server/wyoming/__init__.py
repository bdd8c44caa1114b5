"""Wyoming speech-to-text server (Home Assistant voice pipelines), on the ``wyoming`` package.

One module per part, as wyoming-faster-whisper splits it:

- ``protocol``: events read and written with size limits, one connection's event loop
  (EventConnection), WyomingProtocolError.
- ``utterance``: one audio-start .. audio-stop (Utterance), the server's WyomingOptions, a
  ``transcribe`` event's language and biasing text.
- ``handler``: WyomingHandler, the class answering the events (the list is in its docstring).
- ``server``: the listening socket, graceful stop, zeroconf (serve, serve_wyoming).
- ``__main__``: the ``qwen3asr-wyoming`` program (build_parser, main).

The names below are importable from the package itself, as from the single module it was.
"""

from __future__ import annotations

# protocol first: it explains a missing ``wyoming`` package (the others import it too)
from .protocol import EventConnection, WyomingProtocolError, read_event
from .handler import PROJECT_URL, WyomingHandler, info_event
from .server import DEFAULT_URI, check_uri, serve, serve_wyoming
from .utterance import (FINALS, Utterance, UtteranceError, UtteranceOptions, WyomingOptions, biasing_text,
                        pcm_format, resolve_wyoming_language)

__all__ = ["DEFAULT_URI", "FINALS", "PROJECT_URL", "EventConnection", "Utterance", "UtteranceError",
           "UtteranceOptions", "WyomingHandler", "WyomingOptions", "WyomingProtocolError", "biasing_text",
           "build_parser", "check_uri", "info_event", "main", "pcm_format", "read_event",
           "resolve_wyoming_language", "serve", "serve_wyoming"]


def __getattr__(name: str):
    # The program (main, build_parser) is imported only when asked for: imported here, it would
    # already be loaded when ``python -m qwen3asr.server.wyoming`` runs it (runpy warns of that).
    if name in ("main", "build_parser"):
        from . import __main__ as program

        return getattr(program, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
