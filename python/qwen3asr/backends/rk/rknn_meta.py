"""The ``.rknn`` files' metadata: what variant a file holds and which bundle export it came from.

``scripts/onnx2rknn.py`` stores each model's metadata in its custom string
(``qwen3asr-rknn:{json}``: form, part, duration, inputs and shapes, target SoC, the digest of
the encoder export). A file has one of two shape kinds (``"shapes"``; absent in files made
before dynamic shapes existed: fixed):

- ``"fixed"``: one duration, ``n_chunks`` seconds, inputs of ``input_shapes``;
- ``"dynamic"``: one model, one copy of the weights, for every duration in ``sizes``
  (rknn-toolkit2 ``dynamic_input``); ``n_chunks`` is the largest, ``size_shapes[str(n)]`` lists
  the shapes of size n: each input in ``inputs`` order, then the output (kept compact: the
  toolkit takes custom strings of fewer than 1024 bytes).

 It is read here straight from the file bytes and checked against the
bundle manifest before the NPU library is touched, so a missing file, a Git LFS pointer, a
file that is not an RKNN model or a stale conversion give a clear error on any machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from ...bundle import Bundle, BundleError, check_file

RKNN_MAGIC = b"RKNN"  # first 4 bytes of every .rknn file written by rknn-toolkit2 2.x
META_PREFIX = "qwen3asr-rknn:"  # custom string = META_PREFIX + compact JSON (see model_metadata)
MAX_CUSTOM_STRING = 1023  # bytes: rknn-toolkit2 config() refuses 1024 or more (rknn_custom_string is char[1024])
META_VERSION = 1
SHAPE_KINDS = ("dynamic", "fixed")  # the "shapes" of a manifest entry / file (absent: "fixed")
_MAX_META_SEARCH = 64 << 20  # bytes of a .rknn file searched for the custom string


class RknnModelError(BundleError):
    """A ``.rknn`` file that is not an RKNN model, or not the one the bundle manifest expects."""


def encoder_digest(manifest: dict) -> str:
    """SHA-256 of what an encoder conversion depends on: the manifest's encoder section, the audio
    config and the checksums of the ``encoder/`` files.

    Not the hash of model.json itself, which changes whenever a backend adds its section (the
    ``rk`` entries written by onnx2rknn, the decoder's); this changes when the encoder is re-exported.
    """
    files = {k: v for k, v in sorted(manifest.get("files", {}).items()) if k.startswith("encoder/")}
    key = {"encoder": manifest.get("encoder"), "audio": manifest.get("config", {}).get("audio"), "files": files}
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def custom_string(meta: dict) -> str:
    """The custom string stored in a ``.rknn`` file for variant metadata ``meta`` (ValueError
    beyond MAX_CUSTOM_STRING bytes, which the toolkit refuses)."""
    text = META_PREFIX + json.dumps(meta, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > MAX_CUSTOM_STRING:
        raise ValueError(f"the model's metadata is {len(text.encode())} bytes; an .rknn custom string holds at most "
                         f"{MAX_CUSTOM_STRING} (convert fewer sizes into one dynamic-shape model, or --shapes fixed)")
    return text


def read_rknn_metadata(path: str) -> dict:
    """Check that ``path`` is a real RKNN model and return the metadata in its custom string.

    Raises:
      BundleError: the file is missing or a Git LFS pointer (with the ``git lfs pull`` hint).
      RknnModelError: not an RKNN model (wrong magic bytes), or no/invalid qwen3asr metadata.
    """
    check_file(path, "RKNN model", hint="Convert it on an x86 PC with scripts/onnx2rknn.py (docs/board.md) or copy "
                                         "it again.")
    with open(path, "rb") as f:
        head = f.read(len(RKNN_MAGIC))
        if head != RKNN_MAGIC:
            raise RknnModelError(
                f"{path} is not an RKNN model (starts with {head!r}, expected {RKNN_MAGIC!r}); the file is "
                f"damaged or something else. Convert it again with scripts/onnx2rknn.py or copy it again.")
        f.seek(0)
        data = f.read(_MAX_META_SEARCH)
    pos = data.find(META_PREFIX.encode())
    if pos < 0:
        raise RknnModelError(
            f"{path} has no qwen3asr metadata in its custom string: it was not made by scripts/onnx2rknn.py. "
            f"Re-run scripts/onnx2rknn.py for this bundle.")
    text = data[pos + len(META_PREFIX):pos + len(META_PREFIX) + 8192].decode("utf-8", errors="replace")
    try:
        meta, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        raise RknnModelError(f"{path}: its qwen3asr metadata is not valid JSON; re-run scripts/onnx2rknn.py") from None
    if not isinstance(meta, dict) or meta.get("meta_version") != META_VERSION:
        raise RknnModelError(f"{path}: metadata version {meta.get('meta_version') if isinstance(meta, dict) else None}"
                             f", this version reads {META_VERSION}; re-run scripts/onnx2rknn.py")
    return meta


@dataclasses.dataclass(frozen=True)
class RknnEntry:
    """One ``.rknn`` file of the manifest's ``rk.rknn.<soc>`` list, checked against its own metadata."""

    form: str  # "merged" or "split"
    part: str  # "merged", "frontend" or "backend"
    n_chunks: int  # 1 s chunks the graph holds (dynamic: the largest size)
    path: str  # absolute path of the .rknn file
    meta: dict  # the file's custom-string metadata (inputs, shapes, output shape, ...)

    @property
    def shapes(self) -> str:
        """"fixed" (one size) or "dynamic" (every size of ``sizes`` in one model)."""
        return entry_shapes(self.meta)

    @property
    def sizes(self) -> tuple[int, ...]:
        """The durations (s) the model takes: ``(n_chunks,)`` for a fixed one."""
        return tuple(int(s) for s in self.meta["sizes"]) if self.shapes == "dynamic" else (self.n_chunks,)

    def shapes_of(self, n_chunks: int) -> tuple[dict[str, list[int]], list[int]]:
        """(input name -> shape, output shape) of size ``n_chunks`` (KeyError if the model lacks it)."""
        if self.shapes == "dynamic":
            *ins, out = self.meta["size_shapes"][str(int(n_chunks))]
            return {k: list(v) for k, v in zip(self.meta["inputs"], ins)}, list(out)
        if int(n_chunks) != self.n_chunks:
            raise KeyError(n_chunks)
        return {k: list(v) for k, v in self.meta["input_shapes"].items()}, list(self.meta["output_shape"])


def entry_shapes(entry: dict) -> str:
    """The shape kind of a manifest ``rk.rknn.<soc>`` entry ("fixed" when the entry predates the field)."""
    return entry.get("shapes", "fixed")


def manifest_entries(bundle: Bundle, soc: str) -> list[dict]:
    """The manifest's ``rk.rknn.<soc>`` list (BundleError naming the conversion if absent)."""
    entries = bundle.rknn_entries(soc)
    if not entries:
        have = ", ".join(bundle.rknn_socs()) or "none"
        raise BundleError(f"the bundle has no RKNN encoder models for {soc} (it has: {have}). Convert them on a PC: "
                          f"python scripts/onnx2rknn.py --bundle {bundle.path} --target {soc}")
    return entries


def check_entry(bundle: Bundle, soc: str, entry: dict) -> RknnEntry:
    """Check one manifest entry's file (exists, not LFS, RKNN magic) and its metadata against the manifest."""
    path = os.path.join(bundle.path, entry["file"])
    meta = read_rknn_metadata(path)
    kind = entry_shapes(entry)
    if kind not in SHAPE_KINDS:
        raise RknnModelError(f"model.json lists {entry['file']} with shapes {kind!r}; accepted: "
                             f"{', '.join(SHAPE_KINDS)}. Re-run python scripts/onnx2rknn.py --bundle {bundle.path} "
                             f"--target {soc}")
    want = {"form": entry["form"], "part": entry["part"], "n_chunks": int(entry["n_chunks"]), "target": soc,
            "encoder_sha256": encoder_digest(bundle.manifest), "shapes": kind}
    if kind == "dynamic":
        want["sizes"] = sorted(int(s) for s in entry.get("sizes") or ())
    got = dict(meta, shapes=entry_shapes(meta))
    bad = [f"{k}: file has {got.get(k)!r}, expected {v!r}" for k, v in want.items() if got.get(k) != v]
    if bad:
        raise RknnModelError(
            f"{path} does not match this bundle ({'; '.join(bad)}). The bundle was re-exported or the file comes "
            f"from another one: re-run python scripts/onnx2rknn.py --bundle {bundle.path} --target {soc}")
    return RknnEntry(entry["form"], entry["part"], int(entry["n_chunks"]), path, meta)


__all__ = ["MAX_CUSTOM_STRING", "META_PREFIX", "META_VERSION", "RKNN_MAGIC", "RknnEntry", "RknnModelError",
           "SHAPE_KINDS", "check_entry", "custom_string", "encoder_digest", "entry_shapes", "manifest_entries",
           "read_rknn_metadata"]
