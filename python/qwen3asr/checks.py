"""Range checks of option values: one function per kind, each returning the problem or None.

Every options object (TranscribeOptions, DecodingOptions, VADOptions, RKOptions, the server
settings, ...) and every front end (CLI flags, HTTP fields, the WebSocket start message,
Wyoming events) checks its numbers here, so a value is refused the same way everywhere: a
wrong type (a bool, a string, a list where a number is expected), NaN, an infinity, or a
value outside the range. A problem is one message naming the field, the value and what is
accepted: ``"memory_num must be an integer >= 1 and <= 6000 (got 0)"``. The ranges themselves
live next to what they bound (qwen3asr.options, qwen3asr.decoding, qwen3asr.vad, ...), each
with where it comes from.

Values are quoted with :func:`show`, which never echoes more than ``SHOW_CHARS`` characters
(a 1 MB string or a 10,000-digit integer in a request stays out of the message and the log).
"""

from __future__ import annotations

import math
import numbers
import os
import reprlib
from typing import Optional

SHOW_CHARS = 60  # longest quote of a refused value in a message
PATH_MAX = 4096  # longest file path Linux accepts (limits.h PATH_MAX)

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = _repr.maxlong = SHOW_CHARS
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 6


def show(value) -> str:
    """``repr(value)`` cut to about SHOW_CHARS characters (huge strings, containers, integers)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * SHOW_CHARS:
        return f"<an integer of {value.bit_length()} bits>"  # repr() of > 4300 digits even raises
    try:
        return _repr.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still refused by name
        return f"<a {type(value).__name__}>"


def is_integer(value) -> bool:
    """An int (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite real number (int or float, numpy's too), not a bool."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _bound(x) -> str:
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:g}" if isinstance(x, float) else str(x)


def requirement(kind: str, low, high=None, *, low_open: bool = False, high_open: bool = False,
                optional: bool = False) -> str:
    """What is accepted, as the messages say it: ``"an integer >= 1 and <= 6000"``, ``"in (0, 1]"``."""
    if high is None:
        rng = f"{'>' if low_open else '>='} {_bound(low)}"
    elif low_open or high_open:
        rng = f"in {'(' if low_open else '['}{_bound(low)}, {_bound(high)}{')' if high_open else ']'}"
    else:
        rng = f">= {_bound(low)} and <= {_bound(high)}"
    return (f"{kind} {rng}" if kind else rng) + (" or None" if optional else "")


def problem(name: str, accepted: str, value) -> str:
    """The one message of a refused value."""
    return f"{name} must be {accepted} (got {show(value)})"


def integer(name: str, value, low: int, high: Optional[int] = None, *, optional: bool = False) -> Optional[str]:
    """The problem of ``value`` as an integer in [low, high] (None: no upper bound), or None.
    ``optional``: None is accepted too."""
    if optional and value is None:
        return None
    if is_integer(value) and low <= value and (high is None or value <= high):
        return None
    return problem(name, requirement("an integer", low, high, optional=optional), value)


def number(name: str, value, low: float, high: Optional[float] = None, *, kind: str = "a number",
           low_open: bool = False, high_open: bool = False, optional: bool = False) -> Optional[str]:
    """The problem of ``value`` as a finite number in the range from ``low`` to ``high`` (None:
    no upper bound; ``low_open`` / ``high_open``: the bound itself is excluded), or None.
    ``kind`` names the quantity ("a number of seconds"; "" for a bare interval).
    ``optional``: None is accepted too."""
    if optional and value is None:
        return None
    if is_number(value):
        above = value > low if low_open else value >= low
        below = high is None or (value < high if high_open else value <= high)
        if above and below:
            return None
    return problem(name, requirement(kind, low, high, low_open=low_open, high_open=high_open, optional=optional),
                   value)


def flag(name: str, value, *, optional: bool = False) -> Optional[str]:
    """The problem of ``value`` as True or False (``optional``: or None), or None."""
    if isinstance(value, bool) or (optional and value is None):
        return None
    return problem(name, "True, False or None" if optional else "True or False", value)


def text(name: str, value, max_chars: Optional[int] = None) -> Optional[str]:
    """The problem of ``value`` as a str of at most ``max_chars`` characters, or None."""
    if not isinstance(value, str):
        return f"{name} must be str (got {type(value).__name__})"
    if max_chars is not None and len(value) > max_chars:
        return f"{name} is {len(value)} characters, over the limit of {max_chars}"
    return None


def choice(name: str, value, accepted) -> Optional[str]:
    """The problem of ``value`` as one of the strings ``accepted``, or None."""
    if isinstance(value, str) and value in accepted:
        return None
    return problem(name, "one of " + ", ".join(repr(a) for a in accepted), value)


def path(name: str, value, *, optional: bool = False) -> Optional[str]:
    """The problem of ``value`` as a file path (str or os.PathLike, at most PATH_MAX characters), or None."""
    if optional and value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        return problem(name, "a path" + (" or None" if optional else ""), value)
    n = len(os.fspath(value))
    if n > PATH_MAX:
        return f"{name} is {n} characters, longer than any path ({PATH_MAX}): {show(value)}"
    return None


__all__ = ["PATH_MAX", "SHOW_CHARS", "choice", "flag", "integer", "is_integer", "is_number", "number", "path", "problem",
           "requirement", "show", "text"]
