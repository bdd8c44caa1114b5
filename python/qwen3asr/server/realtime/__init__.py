"""OpenAI Realtime transcription sessions (``/v1/realtime?intent=transcription``).

| module        | what it does                                                              |
|---------------|---------------------------------------------------------------------------|
| config.py     | the session's settings from session.update (both forms); audio formats    |
| items.py      | the input audio buffer cut into items (server VAD or commits), each an    |
|               | engine stream session; the item events (blocking, worker threads)         |
| connection.py | the WebSocket endpoint: key, admission, receiving, backpressure, drain    |
"""

from .connection import realtime_endpoint

__all__ = ["realtime_endpoint"]
