"""A converted model bundle on disk: its manifest (``model.json``), files and embedding table."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
from typing import Callable

import numpy as np

from . import checks
from .encoder import EncoderVariant
from .errors import Qwen3ASRError

logger = logging.getLogger(__name__)

BUNDLE_FORMAT = "qwen3asr-rk-bundle/1"
BUNDLE_KINDS = ("asr", "aligner")
_LFS_MAGIC = b"version https://git-lfs.github.com/spec/"
DEFAULT_MODEL_ENV = "QWEN3ASR_MODEL"


class BundleError(Qwen3ASRError, RuntimeError):
    """A bundle that is missing, incomplete or from an incompatible exporter."""


BUNDLED_ALIGNER = "default-aligner"  # the demo aligner next to the bundled default model (models/)


def bundled_model_dir() -> str | None:
    """``models/default`` of the source checkout this package runs from, or None (an installed
    package carries no model)."""
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.normpath(os.path.join(here, "..", "..", "models", "default"))
    return checkout if os.path.isdir(checkout) else None


def default_model_dir() -> str:
    """``$QWEN3ASR_MODEL``, else ``models/default`` of the source checkout this package runs
    from; BundleError saying how to name a model when neither exists (an installed package
    carries no model)."""
    env = os.environ.get(DEFAULT_MODEL_ENV)
    if env:
        return env
    checkout = bundled_model_dir()
    if checkout is not None:
        return checkout
    raise BundleError(f"no model given: pass a model directory (--model DIR, or Qwen3ASREngine(model_dir)) or set "
                      f"{DEFAULT_MODEL_ENV}. The bundled demo model is models/default in the source checkout; "
                      "docs/conversion.md makes one from the official Qwen3-ASR checkpoint.")


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 stored as uint16 -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def sha256_file(path: str) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_lfs_pointer(path: str) -> bool:
    """True if ``path`` is a Git LFS pointer file instead of the real content."""
    try:
        with open(path, "rb") as f:
            return f.read(len(_LFS_MAGIC)) == _LFS_MAGIC
    except OSError:
        return False


_REEXPORT_HINT = "Re-export the bundle (scripts/export_onnx.py) or copy it again."


def check_file(path: str, what: str, hint: str = _REEXPORT_HINT) -> str:
    """Raise BundleError if ``path`` is missing (message ends with ``hint``) or an LFS pointer; return it."""
    if not os.path.isfile(path):
        raise BundleError(f"{what} missing: {path}. {hint}")
    if is_lfs_pointer(path):
        raise BundleError(
            f"{what} is a Git LFS pointer, not the file itself: {path}. Run `git lfs pull` in the repository "
            f"(or download the real file) and try again.")
    return path


def update_manifest(bundle_dir: str, mutate: Callable[[dict], None]) -> dict:
    """Apply ``mutate`` to ``bundle_dir/model.json`` in place and write it back atomically.

    The manifest is read right before writing (converters for other SoCs or parts merge their
    own keys) and replaced via a temporary file in the same directory, so a reader never sees
    a half-written file. Returns the written manifest.
    """
    path = os.path.join(bundle_dir, "model.json")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    mutate(manifest)
    fd, tmp = tempfile.mkstemp(prefix=".model.json.", dir=bundle_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
        os.chmod(tmp, os.stat(path).st_mode & 0o777)  # mkstemp makes it 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return manifest


@dataclasses.dataclass(frozen=True)
class Bundle:
    path: str
    manifest: dict

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Bundle":
        problem = checks.path("model directory", path)
        if problem:
            raise BundleError(problem)
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise BundleError(
                f"model directory not found: {path}. Convert a checkpoint with scripts/export_onnx.py "
                f"--checkpoint DIR --out {path}, or pass --model / model_dir.")
        man_path = os.path.join(path, "model.json")
        if not os.path.isfile(man_path):
            raise BundleError(f"{path} is not a qwen3asr bundle (no model.json); convert the checkpoint with "
                              f"scripts/export_onnx.py first")
        check_file(man_path, "bundle manifest")
        try:
            with open(man_path, encoding="utf-8") as f:
                manifest = json.load(f)
        except (ValueError, UnicodeDecodeError) as exc:
            raise BundleError(f"{man_path} is not valid JSON ({exc}); re-export the bundle") from None
        fmt = manifest.get("format")
        if fmt != BUNDLE_FORMAT:
            raise BundleError(f"{man_path} has format {fmt!r}; this version reads {BUNDLE_FORMAT!r}. "
                              f"Re-export with this version's scripts/export_onnx.py.")
        bundle = cls(path, manifest)
        bundle.one_pass_seconds  # a malformed limit is refused at load, not mid-job
        bundle.kind
        return bundle

    @classmethod
    def named(cls, spec, kind: str = "asr", memory: str = "default", backend: str = "auto") -> "Bundle":
        """``load`` of a directory, or of a hub id or known name (``Qwen/Qwen3-ASR-0.6B``, ``0.6b``)
        fetched, and converted where it is an official checkpoint, once into the cache
        (qwen3asr.hub.resolve_model)."""
        from .hub import resolve_model

        return cls.load(resolve_model(spec, kind, memory=memory, backend=backend))

    def file(self, rel: str, what: str = "model file") -> str:
        return check_file(os.path.join(self.path, rel), what)

    @property
    def kind(self) -> str:
        """"asr" (a Qwen3-ASR model) or "aligner" (Qwen3-ForcedAligner: word timestamps); bundles
        written before aligners existed are "asr"."""
        kind = self.manifest.get("kind", "asr")
        if kind not in BUNDLE_KINDS:
            raise BundleError(f"{self.path}/model.json: kind {kind!r} is not one of {', '.join(BUNDLE_KINDS)}; "
                              "this bundle needs a newer qwen3asr-rk")
        return kind

    def require_kind(self, kind: str) -> None:
        """BundleError unless this is a ``kind`` bundle, saying where the bundle belongs instead."""
        if self.kind != kind:
            what = {"asr": "a speech recognition model", "aligner": "a forced aligner (word timestamps)"}
            where = ("give it as the aligner (aligner=DIR, --aligner DIR)" if self.kind == "aligner" else
                     "give it as the model (model_dir, --model DIR)")
            raise BundleError(f"{self.path} is {what[self.kind]}, not {what[kind]}: {where}")

    def require_float_encoder(self, purpose: str) -> None:
        """BundleError when the encoder graphs hold int8 weights (exported with ``--memory lean``,
        for ONNX Runtime on the CPU only), which ``purpose`` cannot take."""
        if self.manifest["encoder"].get("dtype", "float32") != "float32":
            raise BundleError(f"{self.path} was exported with --memory lean (int8 encoder weights, for the CPU "
                              f"only); {purpose} needs the fp32 encoder: export again without --memory lean")

    @property
    def aligner(self) -> dict:
        """An aligner bundle's settings (classify_num, timestamp_token_id, timestamp_segment_ms,
        languages, head, norm)."""
        self.require_kind("aligner")
        return dict(self.manifest["aligner"])

    @property
    def audio_config(self) -> dict:
        return self.manifest["config"]["audio"]

    @property
    def text_config(self) -> dict:
        return self.manifest["config"]["text"]

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self.manifest["special_tokens"])

    @property
    def eos_token_ids(self) -> frozenset:
        """End-of-sequence ids both backends stop on (written by scripts/export_onnx.py)."""
        ids = self.manifest.get("eos_token_ids")
        if not ids:
            raise BundleError(f"{self.path}/model.json has no eos_token_ids; re-export the bundle with "
                              "scripts/export_onnx.py")
        return frozenset(int(i) for i in ids)

    @property
    def max_context(self) -> int:
        return int(self.manifest["decoder"]["max_context"])

    @property
    def one_pass_seconds(self) -> float | None:
        """Longest audio the model transcribes well in one pass, when its maker says so
        (``model.json`` ``limits.one_pass_seconds``); None: as long as the context holds (the
        official model decodes up to 1200 s at once). Tools segment longer audio."""
        v = self.manifest.get("limits", {}).get("one_pass_seconds")
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise BundleError(f"{self.path}/model.json: limits.one_pass_seconds must be a positive number, got {v!r}")
        return float(v)

    def encoder_variants(self, form: str, sizes=None) -> list[EncoderVariant]:
        """Encoder graphs of ``form`` (merged: whole graphs; split: back ends), optionally only ``sizes`` seconds."""
        out = []
        for v in self.manifest["encoder"]["variants"]:
            if v["form"] != form or v.get("part") == "frontend":
                continue
            if sizes is not None and v["n_chunks"] not in sizes:
                continue
            out.append(EncoderVariant(form, int(v["n_chunks"]), os.path.join(self.path, v["file"])))
        if sizes is not None:
            have = {v.n_chunks for v in out}
            missing = sorted(set(sizes) - have)
            if missing:
                offered = sorted({int(v["n_chunks"]) for v in self.manifest["encoder"]["variants"]
                                  if v["form"] == form and v.get("part") != "frontend"})
                raise BundleError(f"encoder sizes {missing} s not in the bundle ({form} offers {offered} s)")
        return out

    def frontend_path(self) -> str | None:
        for v in self.manifest["encoder"]["variants"]:
            if v.get("part") == "frontend":
                return os.path.join(self.path, v["file"])
        return None

    def decoder_dtypes(self) -> list[str]:
        return [v["dtype"] for v in self.manifest["decoder"]["variants"]]

    def decoder_path(self, dtype: str) -> str:
        for v in self.manifest["decoder"]["variants"]:
            if v["dtype"] == dtype:
                return self.file(v["file"], f"decoder ({dtype})")
        raise BundleError(f"the bundle has no {dtype} decoder (it has {', '.join(self.decoder_dtypes())})")

    # ---------------------------------------------------------------- Rockchip models
    # The ``rk`` section, written by scripts/onnx2rknn.py (``rk.rknn.<soc>``: a list of encoder
    # files) and scripts/export_rkllm.py (``rk.rkllm.<soc>``: the decoder file). Read only here.
    def _rk(self, kind: str) -> dict:
        section = self.manifest.get("rk") or {}
        if not isinstance(section, dict) or not isinstance(section.get(kind) or {}, dict):
            raise BundleError(f"{self.path}/model.json: the rk section is malformed; re-run the converter")
        return dict(section.get(kind) or {})

    @property
    def has_rk_models(self) -> bool:
        """Whether any Rockchip model (RKNN encoder or RKLLM decoder) was converted into the bundle."""
        return bool(self._rk("rknn") or self._rk("rkllm"))

    def rkllm_socs(self) -> tuple[str, ...]:
        """SoCs with an RKLLM decoder in the bundle."""
        return tuple(sorted(self._rk("rkllm")))

    def rkllm_entry(self, soc: str) -> dict | None:
        """The ``rk.rkllm.<soc>`` entry (file, quant, max_context, ...), or None."""
        entry = self._rk("rkllm").get(soc)
        return dict(entry) if entry else None

    def rknn_socs(self) -> tuple[str, ...]:
        """SoCs with RKNN encoder models in the bundle."""
        return tuple(sorted(soc for soc, files in self._rk("rknn").items() if files))

    def rknn_entries(self, soc: str) -> list[dict]:
        """The ``rk.rknn.<soc>`` list (form, part, n_chunks, file per model); empty if none."""
        return [dict(e) for e in self._rk("rknn").get(soc) or []]

    def verify_checksums(self) -> list[str]:
        """Files whose SHA-256 differs from the manifest (empty list = all good)."""
        bad = []
        for rel, digest in self.manifest.get("files", {}).items():
            try:
                if sha256_file(os.path.join(self.path, rel)) != digest:
                    bad.append(rel)
            except OSError:
                bad.append(rel)
        return bad


def check_tokenizer(bundle: "Bundle", tokenizer) -> None:
    """BundleError when the bundle's tokenizer files and its manifest disagree on the special
    tokens or the end-of-sequence ids (a bundle put together from two exports)."""
    for name, tid in bundle.special_tokens.items():
        if tokenizer.token_id(name) != tid:
            raise BundleError(f"{bundle.path}: the tokenizer and model.json disagree on {name} "
                              f"({tokenizer.token_id(name)} vs {tid}); re-export the bundle with "
                              "scripts/export_onnx.py")
    eos = bundle.eos_token_ids
    if eos != set(tokenizer.eos_ids):
        raise BundleError(f"manifest end-of-sequence ids {sorted(eos)} differ from the tokenizer's "
                          f"{list(tokenizer.eos_ids)}; re-export the bundle")


class EmbeddingTable:
    """The token embedding table, memory-mapped; rows come back as float32 (bf16 widened exactly)."""

    def __init__(self, bundle: Bundle):
        meta = bundle.manifest["embed_tokens"]
        path = bundle.file(meta["file"], "embedding table")
        try:
            self._table = np.load(path, mmap_mode="r")
        except ValueError as exc:
            raise BundleError(f"cannot read the embedding table {path}: {exc}") from None
        self.dtype = meta["dtype"]
        if list(self._table.shape) != list(meta["shape"]):
            raise BundleError(f"embedding table {path} has shape {self._table.shape}, manifest says {meta['shape']}")
        self.vocab_size, self.hidden_size = self._table.shape

    def __call__(self, ids) -> np.ndarray:
        """``ids`` (n,) int -> (n, hidden) float32."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token id out of range [0, {self.vocab_size})")
        rows = np.asarray(self._table[ids])
        if self.dtype == "bfloat16":
            return bf16_to_f32(rows)
        return rows.astype(np.float32)

    def row(self, token_id: int) -> np.ndarray:
        return self([token_id])[0]
