"""How one request shares the loaded model with others: a turn gate and a cancel flag.

The engine runs a request as units of model work: one unit for a clip decoded in one pass,
one unit per chunk for streams and long files (encode the chunk, decode the window). A
:class:`Work` passed to ``Qwen3ASREngine.transcribe`` or ``create_stream`` lets a caller (the
server's scheduler, qwen3asr.server.scheduler) decide when each unit may run, and stop a request
whose client has gone: the flag is checked before each unit and after every generated token.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, ContextManager, Iterator, Optional, Protocol

from .errors import Qwen3ASRError


class Cancelled(Qwen3ASRError, RuntimeError):
    """The request was cancelled (``Work.cancel`` was set): its remaining work was not run."""


class Flag(Protocol):
    def is_set(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Work:
    """Scheduling hooks of one request (both optional).

    gate: called before each unit of model work; the context manager it returns is held while
      the unit runs (e.g. a fair turn on the one NPU). It may raise (e.g. Cancelled) to refuse.
    cancel: anything with ``is_set()`` (a threading.Event); once set, the request stops at the
      next generated token or unit and raises :class:`Cancelled`.
    newer: anything with ``is_set()``; set when newer work waits: a live stream's end (its final
      pass comes next) or other requests waiting for the model. Work that only shows something
      early (a stream's preview) is then not started, or stopped at its next token and dropped.
      The required work is never skipped.
    """

    gate: Optional[Callable[[], ContextManager]] = None
    cancel: Optional[Flag] = None
    newer: Optional[Flag] = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    @property
    def superseded(self) -> bool:
        """Whether optional work should not run now (``newer``)."""
        return self.newer is not None and self.newer.is_set()

    def check(self) -> None:
        """Raise Cancelled if the request was cancelled."""
        if self.cancelled:
            raise Cancelled("the request was cancelled")

    @contextlib.contextmanager
    def unit(self) -> Iterator[None]:
        """Hold the gate for one unit of model work (checks cancellation before and after)."""
        self.check()
        with (self.gate() if self.gate is not None else contextlib.nullcontext()):
            self.check()
            yield
        self.check()


NO_WORK = Work()


def check_hooks(where: str, work: Work, **callbacks) -> None:
    """TypeError unless every callback is callable or None and ``work`` is a Work."""
    from .checks import show

    for name, fn in callbacks.items():
        if fn is not None and not callable(fn):
            raise TypeError(f"{where}(): {name} must be a function or None (got {show(fn)})")
    if not isinstance(work, Work):
        raise TypeError(f"{where}(): work must be a qwen3asr.work.Work (got {show(work)})")


__all__ = ["Cancelled", "NO_WORK", "Work", "check_hooks"]
