"""Files from a model hub through ``huggingface_hub`` (its cache, ``HF_ENDPOINT``, ``HF_TOKEN``,
``HF_HUB_OFFLINE``), every failure turned into one line that says what to do.

The environment is read at each call (not when huggingface_hub is imported), so a mirror set
with ``HF_ENDPOINT=https://hf-mirror.com`` or ``HF_HUB_OFFLINE=1`` applies to the next fetch.
Downloads land in the huggingface_hub cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``); a file cut
off mid-transfer is resumed from its ``.incomplete`` part (an HTTP Range request) up to
RESUME_TRIES times; a file whose SHA-256 differs from the one expected is fetched once more,
then refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import sys
from typing import Iterator, Optional

from ..bundle import sha256_file
from .names import HubError, ModelRef, known_names

logger = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
RESUME_TRIES = 3  # attempts at one file whose transfer is cut off (each resumes the last)


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    """``HF_HUB_OFFLINE`` (huggingface_hub's switch) is set: no request leaves the machine."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")


def hf_cache() -> str:
    """huggingface_hub's cache directory, by its own rules."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def _hub():
    try:
        import huggingface_hub
    except ImportError:
        raise HubError("fetching a model by name needs huggingface_hub, which qwen3asr-rk depends on: "
                       "pip install huggingface_hub (or reinstall qwen3asr-rk)") from None
    return huggingface_hub


@contextlib.contextmanager
def progress(show: Optional[bool] = None) -> Iterator[None]:
    """Download progress bars on (a terminal: ``show`` None and stderr a tty) or off (a server's log)."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if show is None:
        show = sys.stderr.isatty()
    was_disabled = are_progress_bars_disabled()
    (enable_progress_bars if show else disable_progress_bars)()
    try:
        yield
    finally:
        (disable_progress_bars if was_disabled else enable_progress_bars)()


@dataclasses.dataclass(frozen=True)
class RepoFiles:
    """A repo at one commit: its files, their sizes and (large files) their SHA-256."""
    ref: ModelRef
    commit: str
    sizes: dict  # path -> bytes
    sha256: dict  # path -> hex SHA-256 (files stored in LFS; the hub gives it)


def translate(exc: BaseException, ref: ModelRef, filename: Optional[str] = None) -> HubError:
    """The one-line HubError for a huggingface_hub or network failure."""
    from huggingface_hub import errors as hf
    import requests

    where = endpoint()
    if isinstance(exc, hf.GatedRepoError):
        return HubError(f"{ref.repo} is gated: accept its terms at {where}/{ref.repo} and set HF_TOKEN to a token "
                        f"of that account (huggingface-cli login also works)")
    if isinstance(exc, hf.RevisionNotFoundError):
        return HubError(f"{ref.repo} has no revision {ref.revision!r}: give a branch, tag or commit of the repo")
    if isinstance(exc, hf.RepositoryNotFoundError):
        token = " (HF_TOKEN is set: does that account see it?)" if os.environ.get("HF_TOKEN") else \
            " (a private repo needs HF_TOKEN)"
        return HubError(f"no model repo {ref.repo} on {where}{token}, and no such directory here: check the name "
                        f"or use a known one ({known_names()})")
    if isinstance(exc, hf.EntryNotFoundError):
        return HubError(f"{ref} has no file {filename}: the repo is incomplete or not a Qwen3-ASR model")
    if isinstance(exc, hf.HfHubHTTPError) and getattr(exc.response, "status_code", None) in (401, 403):
        return HubError(f"{where} refused access to {ref.repo} ({exc.response.status_code}): set HF_TOKEN to a valid "
                        f"token of an account that may read it")
    if isinstance(exc, (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled, requests.ConnectionError,
                        requests.Timeout)) and not isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return HubError(f"cannot reach {where} for {ref} and it is not in the cache: check the network, or set "
                        f"HF_ENDPOINT to a mirror (e.g. https://hf-mirror.com)")
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return HubError(f"the disk filled up while fetching {ref}: free some space (or set HF_HOME and "
                        f"QWEN3ASR_CACHE to a larger disk) and run the command again")
    if isinstance(exc, hf.HfHubHTTPError):
        return HubError(f"{where} answered {getattr(exc.response, 'status_code', '?')} for {ref}"
                        f"{' ' + filename if filename else ''}: try again later")
    return HubError(f"fetching {ref}: {type(exc).__name__}: {exc}".splitlines()[0])


def repo_files(ref: ModelRef) -> RepoFiles:
    """The commit ``ref`` points at and its files (one request: /api/models/<repo>/revision/<rev>)."""
    hub = _hub()
    from huggingface_hub import errors as hf
    import requests

    try:
        info = hub.HfApi(endpoint=endpoint()).model_info(ref.repo, revision=ref.revision, files_metadata=True)
    except (hf.HfHubHTTPError, requests.RequestException, OSError) as exc:
        raise translate(exc, ref) from None
    sizes, sha = {}, {}
    for s in info.siblings or ():
        sizes[s.rfilename] = int(s.size or 0)
        if s.lfs and s.lfs.get("sha256"):
            sha[s.rfilename] = s.lfs["sha256"]
    if not info.sha:
        raise HubError(f"{endpoint()} gave no commit for {ref}: is HF_ENDPOINT a model hub?")
    return RepoFiles(ref, info.sha, sizes, sha)


def _download(ref: ModelRef, commit: str, filename: str, force: bool) -> str:
    from huggingface_hub import errors as hf
    import requests

    for attempt in range(1, RESUME_TRIES + 1):
        try:
            return _hub().hf_hub_download(ref.repo, filename, revision=commit, endpoint=endpoint(),
                                          cache_dir=hf_cache(), force_download=force and attempt == 1)
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ReadTimeout) as exc:
            if attempt == RESUME_TRIES:
                raise HubError(f"the download of {filename} of {ref} was cut off {RESUME_TRIES} times ({exc}); "
                               f"run the command again: it resumes where it stopped") from None
            logger.warning("the download of %s was cut off; resuming (%d of %d)", filename, attempt + 1, RESUME_TRIES)
        except (hf.HfHubHTTPError, requests.RequestException, OSError) as exc:
            raise translate(exc, ref, filename) from None
    raise AssertionError("unreachable")


def download(files: RepoFiles, filename: str, sha256: Optional[str] = None) -> str:
    """Local path of ``filename`` at ``files.commit`` in the huggingface_hub cache, its SHA-256
    checked against ``sha256`` (else the hub's, for LFS files): fetched again once on a mismatch,
    then HubError."""
    want = sha256 or files.sha256.get(filename)
    path = _download(files.ref, files.commit, filename, force=False)
    if want is None or sha256_file(path) == want:
        return path
    logger.warning("%s of %s differs from its SHA-256: fetching it again", filename, files.ref)
    path = _download(files.ref, files.commit, filename, force=True)
    got = sha256_file(path)
    if got != want:
        raise HubError(f"{filename} of {files.ref} differs from its SHA-256 twice (expected {want[:12]}..., got "
                       f"{got[:12]}...): the repo or a mirror serves a damaged file; nothing was cached")
    return path


__all__ = ["DEFAULT_ENDPOINT", "RESUME_TRIES", "RepoFiles", "download", "endpoint", "hf_cache", "offline",
           "progress", "repo_files", "translate"]
