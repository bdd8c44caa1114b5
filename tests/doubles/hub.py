"""A loopback stand-in for a model hub's HTTP file API, driven by the real huggingface_hub client
(``HF_ENDPOINT`` pointed at it).

Contract checked: the requests huggingface_hub 0.2x-0.3x makes for ``HfApi.model_info`` and
``hf_hub_download`` / ``snapshot_download``, answered as huggingface.co answers them:

- ``GET /api/models/<repo>/revision/<rev>``: ``{"id", "sha": <commit>, "siblings": [{"rfilename",
  "size", "lfs": {"sha256", "size"}}]}`` (sizes and LFS hashes always; the hub sends them when
  ``blobs=True`` is asked, which ``files_metadata=True`` does);
- ``HEAD|GET /<repo>/resolve/<rev>/<path>``: small files answer 200 with ``X-Repo-Commit``,
  ``ETag`` (the git blob sha1) and ``Content-Length``; LFS files (weights, graphs) answer 302 to
  an absolute CDN ``Location`` with ``X-Linked-Etag`` (their SHA-256) and ``X-Linked-Size``;
- ``GET /cdn/<sha256>``: the bytes, honouring ``Range: bytes=N-`` (206, ``Content-Range``);
- errors as ``X-Error-Code`` headers: ``RepoNotFound`` (401, as the hub answers an unknown repo),
  ``GatedRepo`` (401 without a token, 403 with a wrong one), ``RevisionNotFound`` and
  ``EntryNotFound`` (404).

Faults a test turns on: ``cut`` (path -> times the transfer stops half-way, the connection closed
with the promised length unsent) and ``corrupt`` (path -> times a byte is flipped in the body,
the headers still naming the right hash). Every request is logged (``requests``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import re
import threading
from typing import Optional

LFS_SUFFIXES = (".safetensors", ".onnx", ".data", ".bin", ".npy", ".npz", ".rknn", ".rkllm")


@dataclasses.dataclass
class Repo:
    files: dict  # path -> bytes
    commit: str
    revisions: dict  # branch/tag -> commit
    gated_token: Optional[str] = None  # set: only this token may read


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class StandInHub:
    """``with StandInHub() as hub: hub.add(repo, directory); os.environ["HF_ENDPOINT"] = hub.url``."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.cut: dict[str, int] = {}
        self.corrupt: dict[str, int] = {}
        self.requests: list[tuple[str, str, Optional[str]]] = []  # (method, path, Range header)
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, repo: str, directory: str, *, gated_token: Optional[str] = None, tags=()) -> str:
        """Serve the files under ``directory`` as ``repo`` at a new commit (returned), as "main"."""
        files = {}
        for dirpath, _, names in os.walk(directory):
            for name in names:
                if name.startswith("."):
                    continue
                full = os.path.join(dirpath, name)
                with open(full, "rb") as f:
                    files[os.path.relpath(full, directory).replace(os.sep, "/")] = f.read()
        h = hashlib.sha1()
        for path in sorted(files):
            h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
        commit = h.hexdigest()
        with self._lock:
            for data in files.values():
                self._blobs[hashlib.sha256(data).hexdigest()] = data
            old = self.repos.get(repo)
            revisions = dict(old.revisions) if old else {}
            revisions.update({"main": commit, **{t: commit for t in tags}})
            self.repos[repo] = Repo(files, commit, revisions, gated_token)
            self.repos[f"{repo}@{commit}"] = self.repos[repo]  # older commits stay readable
        return commit

    def calls(self, prefix: str = "") -> list:
        return [r for r in self.requests if r[1].startswith(prefix)]

    # ------------------------------------------------------------------ HTTP
    def _handler(self):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._serve(self, head=True)

            def do_GET(self):
                hub._serve(self, head=False)

        return Handler

    def _error(self, h, status: int, code: str, message: str = "") -> None:
        body = json.dumps({"error": message or code}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        if message:
            h.send_header("X-Error-Message", message)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _repo(self, h, name: str, rev: str) -> Optional[tuple[Repo, str]]:
        repo = self.repos.get(name)
        if repo is None:
            self._error(h, 401, "RepoNotFound", "Repository not found")
            return None
        if repo.gated_token is not None:
            auth = h.headers.get("Authorization", "")
            if auth != f"Bearer {repo.gated_token}":
                self._error(h, 403 if auth else 401, "GatedRepo", "Access to model is restricted")
                return None
        commit = repo.revisions.get(rev) or (rev if rev == repo.commit else None)
        if commit is None and f"{name}@{rev}" in self.repos:
            return self.repos[f"{name}@{rev}"], rev
        if commit is None:
            self._error(h, 404, "RevisionNotFound", "Invalid rev id")
            return None
        return repo, commit

    def _serve(self, h, head: bool) -> None:
        from urllib.parse import unquote, urlsplit

        path = unquote(urlsplit(h.path).path)
        with self._lock:
            self.requests.append((h.command, path, h.headers.get("Range")))
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$", path)
        if m:
            found = self._repo(h, m[1], m[2] or "main")
            if found:
                repo, commit = found
                siblings = []
                for rel, data in sorted(repo.files.items()):
                    s = {"rfilename": rel, "size": len(data), "blobId": _git_sha1(data)}
                    if rel.endswith(LFS_SUFFIXES):
                        s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                    siblings.append(s)
                body = json.dumps({"id": m[1], "modelId": m[1], "sha": commit, "private": False,
                                   "gated": "manual" if repo.gated_token else False, "siblings": siblings}).encode()
                h.send_response(200)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                if not head:
                    h.wfile.write(body)
            return
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            found = self._repo(h, m[1], m[2])
            if not found:
                return
            repo, commit = found
            data = repo.files.get(m[3])
            if data is None:
                self._error(h, 404, "EntryNotFound", "Entry not found")
                return
            if m[3].endswith(LFS_SUFFIXES):  # the hub sends large files to its CDN
                sha = hashlib.sha256(data).hexdigest()
                h.send_response(302)
                h.send_header("Location", f"{self.url}/cdn/{sha}?file={m[3]}")
                h.send_header("X-Repo-Commit", commit)
                h.send_header("X-Linked-Etag", f'"{sha}"')
                h.send_header("X-Linked-Size", str(len(data)))
                h.send_header("ETag", f'"{_git_sha1(data)}"')
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            self._body(h, head, m[3], data, {"X-Repo-Commit": commit, "ETag": f'"{_git_sha1(data)}"'})
            return
        m = re.match(r"^/cdn/([0-9a-f]{64})$", path)
        if m and m[1] in self._blobs:
            name = re.search(r"file=([^&]+)", h.path)
            self._body(h, head, unquote(name[1]) if name else "", self._blobs[m[1]], {"ETag": f'"{m[1]}"'})
            return
        self._error(h, 404, "NotFound", "no such endpoint in the stand-in hub")

    def _take(self, faults: dict, rel: str) -> bool:
        with self._lock:
            if faults.get(rel, 0) > 0:
                faults[rel] -= 1
                return True
        return False

    def _body(self, h, head: bool, rel: str, data: bytes, headers: dict) -> None:
        start = 0
        rng = re.match(r"bytes=(\d+)-$", h.headers.get("Range", ""))
        if rng and not head:
            start = int(rng[1])
        if not head and self._take(self.corrupt, rel):
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        part = data[start:]
        h.send_response(206 if start else 200)
        for k, v in headers.items():
            h.send_header(k, v)
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.send_header("Content-Length", str(len(part)))
        h.send_header("Accept-Ranges", "bytes")
        h.end_headers()
        if head:
            return
        if self._take(self.cut, rel):
            h.wfile.write(part[:len(part) // 2])
            h.wfile.flush()
            h.close_connection = True
            try:
                import socket

                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        h.wfile.write(part)
