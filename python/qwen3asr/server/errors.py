"""Errors as the OpenAI API sends them: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from typing import Optional

# HTTP status -> OpenAI error type
_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          413: "invalid_request_error", 500: "server_error", 503: "server_error"}


class ApiError(Exception):
    """A request refused with an HTTP status and an OpenAI-style error body.

    status: HTTP status (400 bad field or audio, 401 key, 413 too large, 503 busy or loading).
    code: short machine-readable reason ("invalid_audio", "server_busy", ...).
    param: the request field at fault, if any.
    retry_after: seconds, sent as the Retry-After header (503).
    """

    def __init__(self, status: int, message: str, *, code: str, param: Optional[str] = None,
                 retry_after: Optional[int] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.retry_after = retry_after

    @property
    def type(self) -> str:
        return _TYPES.get(self.status, "invalid_request_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict:
        h = {}
        if self.retry_after is not None:
            h["Retry-After"] = str(self.retry_after)
        if self.status == 401:
            h["WWW-Authenticate"] = "Bearer"
        return h
