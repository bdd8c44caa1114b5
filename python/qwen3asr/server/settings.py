"""What one server process is allowed to do: limits, the API key, the served model name."""

from __future__ import annotations

import dataclasses
from typing import Optional

DEFAULT_MODEL_NAME = "qwen3-asr"


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

    def __post_init__(self):
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key must be a non-empty string or None (no key)")
        if not self.model_name or not self.model_name.strip():
            raise ValueError("model_name must be a non-empty string")
        if not isinstance(self.strict_model, bool):
            raise ValueError(f"strict_model must be True or False, got {self.strict_model!r}")
        for name in ("max_upload_mb", "max_audio_seconds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if isinstance(self.grace_seconds, bool) or not isinstance(self.grace_seconds, (int, float)) \
                or self.grace_seconds < 0:
            raise ValueError(f"grace_seconds must be a number >= 0, got {self.grace_seconds!r}")
        if isinstance(self.retry_after, bool) or not isinstance(self.retry_after, int) or self.retry_after < 0:
            raise ValueError(f"retry_after must be an integer >= 0, got {self.retry_after!r}")

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)
