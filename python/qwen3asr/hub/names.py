"""Model names: what a ``--model`` / ``model_dir`` / ``aligner`` string means.

A string that names an existing path is a directory, as before. Otherwise it is a hub id
``Org/Name`` with an optional ``@revision`` (a branch, a tag or a commit), or one of the short
names below. Anything else is refused with the accepted forms.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional

from ..bundle import BundleError

DEFAULT_REVISION = "main"


class HubError(BundleError):
    """A model that cannot be named, fetched, converted or trusted; the message is one line
    that says what to do."""


@dataclasses.dataclass(frozen=True)
class KnownModel:
    repo: str  # the official hub id
    kind: str  # "asr" or "aligner": what the checkpoint converts into
    aliases: tuple[str, ...]  # short names, lower case
    about: str  # one line for `qwen3asr-models list --known`


KNOWN_MODELS = (
    KnownModel("Qwen/Qwen3-ASR-0.6B", "asr", ("0.6b", "qwen3-asr-0.6b"),
               "speech recognition, 0.6B parameters (1.9 GB checkpoint); the board default"),
    KnownModel("Qwen/Qwen3-ASR-1.7B", "asr", ("1.7b", "qwen3-asr-1.7b"),
               "speech recognition, 1.7B parameters (4.7 GB checkpoint); more accurate, slower"),
    KnownModel("Qwen/Qwen3-ForcedAligner-0.6B", "aligner", ("aligner", "forced-aligner", "qwen3-forcedaligner-0.6b"),
               "forced aligner: word timestamps (--aligner)"),
)

# Hub repo ids: an owner and a name of letters, digits, '-', '_', '.' (huggingface_hub's rule)
_REPO = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}"
_REVISION = r"[A-Za-z0-9][A-Za-z0-9_./-]{0,255}"
_ID = re.compile(rf"^(?P<repo>{_REPO})(?:@(?P<rev>{_REVISION}))?$")


@dataclasses.dataclass(frozen=True)
class ModelRef:
    """A model on the hub: ``repo`` at ``revision`` (a branch, tag or commit)."""
    repo: str
    revision: str = DEFAULT_REVISION

    def __str__(self) -> str:
        return self.repo if self.revision == DEFAULT_REVISION else f"{self.repo}@{self.revision}"

    @property
    def known(self) -> Optional[KnownModel]:
        return next((m for m in KNOWN_MODELS if m.repo.lower() == self.repo.lower()), None)


def known_names() -> str:
    """``0.6b, 1.7b, aligner`` (the first alias of each known model) for messages."""
    return ", ".join(m.aliases[0] for m in KNOWN_MODELS)


def parse(spec: str) -> ModelRef:
    """The hub model ``spec`` names (an alias, ``Org/Name`` or ``Org/Name@revision``);
    HubError "unknown model" otherwise."""
    text = os.fspath(spec).strip()
    name, _, rev = text.partition("@")
    for m in KNOWN_MODELS:
        if name.lower() in m.aliases:
            return ModelRef(m.repo, rev or DEFAULT_REVISION)
    match = _ID.match(text)
    if match is None:
        raise HubError(f"unknown model {text!r}: give a model directory, a hub id (Org/Name or Org/Name@revision) "
                       f"or a known name ({known_names()})")
    return ModelRef(match["repo"], match["rev"] or DEFAULT_REVISION)


def is_directory(spec) -> bool:
    """Whether ``spec`` means a directory: an existing path, or a path by its form (absolute,
    ``./``, ``~``, a Windows drive) that a hub id never has."""
    text = os.fspath(spec)
    if os.path.exists(text):
        return True
    return (os.path.isabs(text) or text.startswith((".", "~")) or text.endswith(("/", os.sep))
            or text.count("/") > 1 or (os.sep != "/" and os.sep in text))


__all__ = ["DEFAULT_REVISION", "HubError", "KNOWN_MODELS", "KnownModel", "ModelRef", "is_directory",
           "known_names", "parse"]
