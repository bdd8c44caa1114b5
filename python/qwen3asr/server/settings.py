"""What one server process is allowed to do: limits, the API key, the served model name."""

from __future__ import annotations

import dataclasses
from typing import Optional

from .. import checks

DEFAULT_MODEL_NAME = "qwen3-asr"
# Context biasing text a request may send (HTTP prompt, WebSocket context): a longer one only
# fills the decoder's window.
MAX_CONTEXT_CHARS = 4000
# The largest upload: a WAV file holds at most 4 GiB (RIFF sizes are 32-bit). An upload is
# spooled to disk and decoded in blocks, so this bounds disk, not memory (docs/serving.md
# "Memory ceilings of one request").
MAX_UPLOAD_MB = 4096.0
# The longest upload: 4 GiB of 16 kHz 16-bit mono WAV, 37.3 hours.
MAX_AUDIO_SECONDS = MAX_UPLOAD_MB * 1024 * 1024 / (16000 * 2)
# The longest a shutdown waits for requests in flight: the longest upload decoded at real time.
MAX_GRACE_SECONDS = MAX_AUDIO_SECONDS
# The longest "try again later" (RFC 9110 sets no limit): an hour; a busy server that needs longer is
# better reported down.
MAX_RETRY_AFTER = 3600


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Settings shared by the HTTP, WebSocket (and Wyoming) front ends (validated here)."""

    api_key: Optional[str] = None  # required as "Authorization: Bearer KEY" (WS: also ?api_key=KEY); None: open
    model_name: str = DEFAULT_MODEL_NAME  # the id /v1/models lists
    # Requests naming another model: served anyway (logged), as whisper.cpp's server does, so
    # clients with a fixed name (whisper-1, gpt-4o-transcribe) work; True: 400 model_not_found.
    strict_model: bool = False
    max_upload_mb: float = 100.0  # largest request body of an upload (MiB)
    max_audio_seconds: float = 3600.0  # longest audio of an upload (s); live streams have no limit
    grace_seconds: float = 30.0  # on SIGTERM: how long in-flight requests may take to finish (s)
    retry_after: int = 1  # seconds a client told "busy" (503) should wait
    metrics_auth: bool = False  # /metrics needs the API key too (default: open, as scrapers expect)

    def __post_init__(self):
        if self.api_key is not None and not (isinstance(self.api_key, str) and self.api_key.strip()):
            raise ValueError("api_key must be a non-empty string or None (no key)")
        if not isinstance(self.model_name, str) or not self.model_name.strip():
            raise ValueError("model_name must be a non-empty string")
        problems = [p for p in (
            checks.flag("strict_model", self.strict_model),
            checks.flag("metrics_auth", self.metrics_auth),
            checks.number("max_upload_mb", self.max_upload_mb, 0, MAX_UPLOAD_MB, low_open=True),
            checks.number("max_audio_seconds", self.max_audio_seconds, 0, MAX_AUDIO_SECONDS, low_open=True),
            checks.number("grace_seconds", self.grace_seconds, 0, MAX_GRACE_SECONDS),
            checks.integer("retry_after", self.retry_after, 0, MAX_RETRY_AFTER)) if p]
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)
