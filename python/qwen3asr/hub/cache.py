"""The model cache: converted and downloaded bundles, one directory per (repo, commit, variant).

Layout under ``cache_root()`` (``$QWEN3ASR_CACHE``, else ``$XDG_CACHE_HOME/qwen3asr``, else
``~/.cache/qwen3asr``)::

    models/<org>--<name>/refs/<revision>        the commit a branch or tag was last pulled at
    models/<org>--<name>/<commit>-<variant>/    a bundle (model.json, ...) and ENTRY_FILE
    models/<org>--<name>/.tmp-<variant>-...     a bundle being written (never loaded)
    locks/<org>--<name>--<variant>.lock         held while an entry is written

``variant`` is ``x<exporter version>-<memory profile>`` for a bundle converted here, and
``hub-<soc or cpu>`` for a bundle downloaded as published. An entry is complete when its
ENTRY_FILE exists: it is written inside the staging directory after every file was checked
against the manifest's SHA-256, and the directory is then renamed into place in one step, so a
process cut off half-way leaves only a ``.tmp-`` directory, which the next writer of that key
removes under the lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from typing import Iterator, Optional, Sequence

from ..bundle import sha256_file
from .names import HubError

logger = logging.getLogger(__name__)

CACHE_ENV = "QWEN3ASR_CACHE"
ENTRY_FILE = ".qwen3asr-entry.json"
MARGIN_BYTES = 200_000_000  # room left free after a download or conversion (logs, temp files)


def cache_root() -> str:
    """The cache directory (not created)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return os.path.abspath(os.path.expanduser(env))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "qwen3asr")


def _repo_key(repo: str) -> str:
    return repo.replace("/", "--")


def repo_dir(repo: str) -> str:
    return os.path.join(cache_root(), "models", _repo_key(repo))


@dataclasses.dataclass(frozen=True)
class Entry:
    """One complete cached bundle."""
    path: str  # the bundle directory
    repo: str  # hub id it came from
    revision: str  # what was asked for (branch, tag or commit)
    commit: str  # the commit it was made from
    source: str  # "converted" (the official checkpoint through the exporter) or "hub" (a published bundle)
    variant: str  # the key's variant part (see the module docstring)
    kind: str  # "asr" or "aligner"
    files: dict  # relative path -> size in bytes of every file the entry holds (model.json included)
    hashed: dict  # relative path -> SHA-256 checked at install (the manifest's)
    created_unix: int

    @property
    def size_bytes(self) -> int:
        return sum(self.files.values())


def read_entry(path: str) -> Optional[Entry]:
    """The Entry of a complete cache directory, else None."""
    try:
        with open(os.path.join(path, ENTRY_FILE), encoding="utf-8") as f:
            data = json.load(f)
        return Entry(path=path, **{k: data[k] for k in (f.name for f in dataclasses.fields(Entry)) if k != "path"})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def intact(entry: Entry) -> bool:
    """Every file of the entry is there with its size (cheap; ``verify_entry`` hashes)."""
    for rel, size in entry.files.items():
        try:
            if os.path.getsize(os.path.join(entry.path, rel)) != size:
                return False
        except OSError:
            return False
    return True


def find(repo: str, commit: str, variant: str) -> Optional[Entry]:
    """The complete, intact entry of (repo, commit, variant), or None."""
    entry = read_entry(os.path.join(repo_dir(repo), f"{commit}-{variant}"))
    if entry is not None and not intact(entry):
        logger.warning("the cached %s is incomplete (a file was removed or cut): it is made again", entry.path)
        return None
    return entry


def record_ref(repo: str, revision: str, commit: str) -> None:
    """Remember that ``revision`` of ``repo`` was at ``commit`` (read offline by ``read_ref``)."""
    if revision == commit:
        return
    path = os.path.join(repo_dir(repo), "refs", revision)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ref-", dir=os.path.dirname(path))
    with os.fdopen(fd, "w") as f:
        f.write(commit + "\n")
    os.replace(tmp, path)


def read_ref(repo: str, revision: str) -> Optional[str]:
    """The commit ``revision`` was last pulled at (a full commit hash is its own), or None."""
    if len(revision) == 40 and all(c in "0123456789abcdef" for c in revision):
        return revision
    try:
        with open(os.path.join(repo_dir(repo), "refs", revision), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


@contextlib.contextmanager
def locked(repo: str, variant: str) -> Iterator[None]:
    """Hold the lock of (repo, variant) across processes (fcntl.flock; released if the process dies)."""
    import fcntl

    locks = os.path.join(cache_root(), "locks")
    os.makedirs(locks, exist_ok=True)
    with open(os.path.join(locks, f"{_repo_key(repo)}--{variant}.lock"), "a") as f:
        t0 = time.monotonic()
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for another process that is preparing %s (%s)", repo, variant)
            fcntl.flock(f, fcntl.LOCK_EX)
            logger.info("the other process finished after %.0f s", time.monotonic() - t0)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def check_disk(path: str, need_bytes: int, what: str) -> None:
    """HubError with the numbers when the filesystem of ``path`` has less than ``need_bytes``
    (plus MARGIN_BYTES) free; called before anything is written."""
    probe = path
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe) or "."
    free = shutil.disk_usage(probe).free
    need = int(need_bytes) + MARGIN_BYTES
    if free < need:
        raise HubError(f"not enough disk for {what}: it needs about {need / 1e6:.0f} MB in {probe}, which has "
                       f"{free / 1e6:.0f} MB free; free some space or set {CACHE_ENV} to a larger disk")


@contextlib.contextmanager
def staging(repo: str, variant: str) -> Iterator[str]:
    """A fresh staging directory for (repo, variant), removed on the way out (after ``install``
    moved it, nothing is left to remove). Stale staging directories of the same variant, left
    by a process that was cut off, are removed first (the caller holds the lock)."""
    base = repo_dir(repo)
    os.makedirs(base, exist_ok=True)
    for name in os.listdir(base):
        if name.startswith(f".tmp-{variant}-"):
            logger.info("removing %s, left half-written by an interrupted run", name)
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{variant}-", dir=base)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_hashes(directory: str, hashes: dict) -> list[str]:
    """Relative paths under ``directory`` whose SHA-256 differs from ``hashes`` (or are missing)."""
    bad = []
    for rel, digest in sorted(hashes.items()):
        try:
            if sha256_file(os.path.join(directory, rel)) != digest:
                bad.append(rel)
        except OSError:
            bad.append(rel)
    return bad


def install(tmp: str, repo: str, revision: str, commit: str, variant: str, source: str, kind: str,
            hashed: dict) -> Entry:
    """Check ``hashed`` (relative path -> the manifest's SHA-256) in ``tmp``, write ENTRY_FILE and
    move ``tmp`` to its place in one rename; HubError naming the files that differ."""
    bad = check_hashes(tmp, hashed)
    if bad:
        raise HubError(f"{repo}@{commit[:12]}: {len(bad)} file(s) differ from the SHA-256 in model.json "
                       f"({', '.join(bad[:3])}); nothing was cached: run the command again, and report it to the "
                       f"repo's owner if it persists")
    files = {}
    for dirpath, _, names in os.walk(tmp):
        for name in names:
            full = os.path.join(dirpath, name)
            files[os.path.relpath(full, tmp).replace(os.sep, "/")] = os.path.getsize(full)
    data = {"repo": repo, "revision": revision, "commit": commit, "source": source, "variant": variant,
            "kind": kind, "files": files, "hashed": dict(hashed), "created_unix": int(time.time())}
    with open(os.path.join(tmp, ENTRY_FILE), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    final = os.path.join(repo_dir(repo), f"{commit}-{variant}")
    if os.path.isdir(final):  # an entry found incomplete: replaced
        shutil.rmtree(final)
    os.replace(tmp, final)
    record_ref(repo, revision, commit)
    entry = read_entry(final)
    assert entry is not None
    return entry


def link_or_copy(src: str, dst: str) -> None:
    """``dst`` as a hard link of ``src`` (no extra disk), else a copy."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(os.path.realpath(src), dst)
    except OSError:
        shutil.copyfile(src, dst)


def entries(repo: Optional[str] = None) -> list[Entry]:
    """Every complete entry in the cache (of ``repo`` if given), newest first."""
    root = os.path.join(cache_root(), "models")
    out = []
    dirs = [_repo_key(repo)] if repo else (sorted(os.listdir(root)) if os.path.isdir(root) else [])
    for d in dirs:
        base = os.path.join(root, d)
        if not os.path.isdir(base):
            continue
        for name in sorted(os.listdir(base)):
            entry = read_entry(os.path.join(base, name)) if not name.startswith(".") else None
            if entry is not None:
                out.append(entry)
    return sorted(out, key=lambda e: -e.created_unix)


def verify_entry(entry: Entry) -> list[str]:
    """Files of ``entry`` that are missing, cut or differ from their SHA-256 (empty: all good)."""
    bad = []
    for rel, size in entry.files.items():
        path = os.path.join(entry.path, rel)
        if not os.path.isfile(path) or os.path.getsize(path) != size:
            bad.append(rel)
    return sorted(set(bad) | set(check_hashes(entry.path, entry.hashed)))


def remove(entry: Entry) -> None:
    """Delete ``entry`` (its ENTRY_FILE first, so a reader never takes a half-removed one)."""
    os.remove(os.path.join(entry.path, ENTRY_FILE))
    shutil.rmtree(entry.path, ignore_errors=True)


def latest_for(repo: str, variants: Sequence[str]) -> Optional[Entry]:
    """The newest intact entry of ``repo`` in one of ``variants`` (offline, revision unknown)."""
    for entry in entries(repo):
        if entry.variant in variants and intact(entry):
            return entry
    return None
