"""The 30 languages Qwen3-ASR can be forced to, with BCP-47 codes.

Names follow the official package: a forced language is normalised by
``normalize_language_name`` (strip; first character upper case, the rest lower case,
so "cHINese" -> "Chinese") and must then be one of ``SUPPORTED_LANGUAGES``.
``resolve_language`` also accepts the BCP-47 code ("en", "zh", "yue", "fil", ...).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from .checks import show
from .errors import Qwen3ASRError

# Canonical name -> BCP-47 code, in the official order (qwen_asr.inference.utils).
LANGUAGE_CODES: Dict[str, str] = {
    "Chinese": "zh",
    "English": "en",
    "Cantonese": "yue",
    "Arabic": "ar",
    "German": "de",
    "French": "fr",
    "Spanish": "es",
    "Portuguese": "pt",
    "Indonesian": "id",
    "Italian": "it",
    "Korean": "ko",
    "Russian": "ru",
    "Thai": "th",
    "Vietnamese": "vi",
    "Japanese": "ja",
    "Turkish": "tr",
    "Hindi": "hi",
    "Malay": "ms",
    "Dutch": "nl",
    "Swedish": "sv",
    "Danish": "da",
    "Finnish": "fi",
    "Polish": "pl",
    "Czech": "cs",
    "Filipino": "fil",
    "Persian": "fa",
    "Greek": "el",
    "Romanian": "ro",
    "Hungarian": "hu",
    "Macedonian": "mk",
}
SUPPORTED_LANGUAGES: Tuple[str, ...] = tuple(LANGUAGE_CODES)
_NAME_BY_CODE: Dict[str, str] = {code: name for name, code in LANGUAGE_CODES.items()}


class LanguageError(Qwen3ASRError, ValueError):
    """A language name that is empty or not one of the 30 supported languages."""


def _accepted() -> str:
    return ", ".join(f"{name} ({code})" for name, code in LANGUAGE_CODES.items())


def normalize_language_name(language: str) -> str:
    """Official normalisation: strip, then first character upper, the rest lower.

    Raises LanguageError for None or an empty/blank string. Does not check support.
    """
    if language is None:
        raise LanguageError("language is None; give a language name such as 'English'")
    s = str(language).strip()
    if not s:
        raise LanguageError("language is empty; give a language name such as 'English'")
    return s[:1].upper() + s[1:].lower()


def validate_language(name: str) -> str:
    """Return ``name`` if it is a canonical supported name, else raise LanguageError."""
    if name not in LANGUAGE_CODES:
        raise LanguageError(f"unsupported language {show(name)}; accepted: {_accepted()}")
    return name


def resolve_language(language: Optional[str]) -> Optional[str]:
    """Canonical name for a user-given language, or None for "detect".

    None, "" and blank strings mean no forced language (as in the official
    ``transcribe``). Names are matched case-insensitively ("english", "ENGLISH");
    BCP-47 codes such as "en" or "yue" are accepted too (region subtags like "zh-CN"
    are not). Raises LanguageError listing the accepted names otherwise.
    """
    if language is None:
        return None
    if not isinstance(language, str):
        raise LanguageError(f"language must be a str or None (got {show(language)})")
    raw = language.strip()
    if not raw:
        return None
    code = raw.lower()
    if code in _NAME_BY_CODE:
        return _NAME_BY_CODE[code]
    return validate_language(normalize_language_name(raw))


def language_code(name: str) -> str:
    """BCP-47 code of a supported language name (any case): "Cantonese" -> "yue"."""
    return LANGUAGE_CODES[validate_language(normalize_language_name(name))]
