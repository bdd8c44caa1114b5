"""RKNN encoder backend (Rockchip NPU, rknn-toolkit-lite2): runs the bundle's ``.rknn`` variants.

The ``.rknn`` files are made on an x86 PC by ``scripts/onnx2rknn.py`` and listed in the
bundle manifest under ``rk.rknn.<soc>``. Each file carries its variant metadata in the
model's custom string (``qwen3asr-rknn:{json}``), which is read here straight from the file
bytes and checked against the manifest before the NPU library is touched, so a missing
file, a Git LFS pointer, a file that is not an RKNN model or a stale conversion all give a
clear error on any machine. ``rknnlite`` is imported only when models are loaded.

Graph inputs are fed in the order stored in the metadata (the converter fixes it with
``load_onnx(inputs=...)``); 4-D inputs are NCHW (``data_format='nchw'``; the toolkit's
default for 4-D arrays is NHWC), 3-D inputs are passed as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sys
from typing import Any, Optional, Sequence

import numpy as np

from .bundle import Bundle, BundleError, check_file
from .encoder import AudioEncoder, EncoderVariant

logger = logging.getLogger(__name__)

RKNN_MAGIC = b"RKNN"  # first 4 bytes of every .rknn file written by rknn-toolkit2 2.x
META_PREFIX = "qwen3asr-rknn:"  # custom string = META_PREFIX + compact JSON (see model_metadata)
META_VERSION = 1
SUPPORTED_SOCS = ("rk3576", "rk3588")
# NPU core masks (rknnlite's RKNNLite.NPU_CORE_* values)
CORE_MASKS = {"auto": 0, "0": 1, "1": 2, "2": 4, "0_1": 3, "0_1_2": 7}
DEFAULT_CORE_MASK = {"rk3588": 7, "rk3576": 3}  # all cores: NPU_CORE_0_1_2 / NPU_CORE_0_1
SOC_CORES = {"rk3588": 3, "rk3576": 2}
DEVICE_TREE_COMPATIBLE = "/proc/device-tree/compatible"
_MAX_META_SEARCH = 64 << 20  # bytes of a .rknn file searched for the custom string
INSTALL_HINT = ("pip install rknn-toolkit-lite2 (aarch64 boards only; it runs on the board's NPU, not on a PC). "
                "On a PC, use the ONNX Runtime backend, or rknn-toolkit2's simulator through scripts/onnx2rknn.py "
                "--verify.")


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
    """The custom string stored in a ``.rknn`` file for variant metadata ``meta``."""
    return META_PREFIX + json.dumps(meta, sort_keys=True, separators=(",", ":"))


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


def detect_soc(compatible_path: str = DEVICE_TREE_COMPATIBLE) -> str:
    """``"rk3588"`` or ``"rk3576"`` from the device tree (RK3588S counts as RK3588: same NPU)."""
    try:
        with open(compatible_path, "rb") as f:
            compat = f.read().split(b"\0")
    except OSError:
        raise RuntimeError(f"cannot read {compatible_path}: not a Rockchip board? Name the SoC: --soc rk3588|rk3576 "
                           f"(CLIs), RKOptions(soc=...) (API) or QWEN3ASR_SOC=rk3588|rk3576") from None
    for entry in compat:
        name = entry.decode("ascii", errors="replace").strip()
        for soc in SUPPORTED_SOCS:
            if name.startswith(f"rockchip,{soc}"):
                return soc
    found = ", ".join(e.decode("ascii", errors="replace") for e in compat if e)
    raise RuntimeError(f"unsupported SoC (device tree says: {found or 'nothing'}); the RKNN encoder supports "
                       f"{', '.join(SUPPORTED_SOCS)}. Override with --soc, RKOptions(soc=...) or QWEN3ASR_SOC.")


def resolve_core_mask(soc: str, core_mask: Any = None) -> int:
    """An RKNNLite core mask: None -> all cores of ``soc``; an int; or a name of CORE_MASKS."""
    if core_mask is None:
        return DEFAULT_CORE_MASK[soc]
    if isinstance(core_mask, str):
        key = core_mask.strip().lower().removeprefix("npu_core_")
        if key not in CORE_MASKS:
            raise ValueError(f"unknown NPU core mask {core_mask!r}; use one of {', '.join(CORE_MASKS)} or an int")
        mask = CORE_MASKS[key]
    else:
        mask = int(core_mask)
    if mask not in CORE_MASKS.values():
        raise ValueError(f"NPU core mask {mask} is not one of {sorted(CORE_MASKS.values())}")
    if mask >> SOC_CORES[soc]:
        raise ValueError(f"core mask {mask} names an NPU core {soc} does not have ({SOC_CORES[soc]} cores)")
    return mask


@dataclasses.dataclass(frozen=True)
class RknnEntry:
    """One ``.rknn`` file of the manifest's ``rk.rknn.<soc>`` list, checked against its own metadata."""

    form: str  # "merged" or "split"
    part: str  # "merged", "frontend" or "backend"
    n_chunks: int  # 1 s chunks the graph holds
    path: str  # absolute path of the .rknn file
    meta: dict  # the file's custom-string metadata (inputs, shapes, output shape, ...)


def manifest_entries(bundle: Bundle, soc: str) -> list[dict]:
    """The manifest's ``rk.rknn.<soc>`` list (BundleError if absent)."""
    per_soc = bundle.manifest.get("rk", {}).get("rknn", {})
    if soc not in per_soc or not per_soc[soc]:
        have = ", ".join(sorted(per_soc)) or "none"
        raise BundleError(f"the bundle has no RKNN encoder models for {soc} (it has: {have}). Convert them on a PC: "
                          f"python scripts/onnx2rknn.py --bundle {bundle.path} --target {soc}")
    return list(per_soc[soc])


def check_entry(bundle: Bundle, soc: str, entry: dict) -> RknnEntry:
    """Check one manifest entry's file (exists, not LFS, RKNN magic) and its metadata against the manifest."""
    path = os.path.join(bundle.path, entry["file"])
    meta = read_rknn_metadata(path)
    want = {"form": entry["form"], "part": entry["part"], "n_chunks": int(entry["n_chunks"]), "target": soc,
            "encoder_sha256": encoder_digest(bundle.manifest)}
    bad = [f"{k}: file has {meta.get(k)!r}, expected {v!r}" for k, v in want.items() if meta.get(k) != v]
    if bad:
        raise RknnModelError(
            f"{path} does not match this bundle ({'; '.join(bad)}). The bundle was re-exported or the file comes "
            f"from another one: re-run python scripts/onnx2rknn.py --bundle {bundle.path} --target {soc}")
    return RknnEntry(entry["form"], entry["part"], int(entry["n_chunks"]), path, meta)


class RknnModel:
    """One loaded model: orders and checks inputs, runs, checks the output.

    ``handle`` is an RKNNLite (board) or an rknn-toolkit2 RKNN object after init_runtime
    (simulator; scripts/onnx2rknn.py --verify): both take ``inference(inputs=[...], data_format=...)``.
    """

    def __init__(self, handle, entry: RknnEntry):
        self.handle = handle
        self.entry = entry
        self.inputs: list[str] = list(entry.meta["inputs"])
        self.shapes: dict[str, list[int]] = {k: list(v) for k, v in entry.meta["input_shapes"].items()}
        self.output_shape: list[int] = list(entry.meta["output_shape"])

    def run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """``feeds`` name -> float32 array of the stored shape; returns the output ``output_shape`` float32."""
        name = os.path.basename(self.entry.path)
        arrays = []
        for key in self.inputs:
            if key not in feeds:
                raise ValueError(f"{name}: input {key!r} missing (model inputs: {self.inputs})")
            a = np.ascontiguousarray(feeds[key], dtype=np.float32)
            if list(a.shape) != self.shapes[key]:
                raise ValueError(f"{name}: input {key!r} has shape {list(a.shape)}, the model takes {self.shapes[key]}")
            arrays.append(a)
        try:
            outs = self.handle.inference(inputs=arrays, data_format="nchw")
        except Exception as exc:  # the SDKs raise bare Exception/ValueError with their own text
            raise RuntimeError(f"RKNN inference failed for {self.entry.path}: {exc}") from exc
        if not outs:
            raise RuntimeError(f"RKNN inference failed for {self.entry.path} (the runtime returned nothing; "
                               f"see the RKNN log above)")
        out = np.asarray(outs[0], dtype=np.float32)
        if out.size != int(np.prod(self.output_shape)):
            raise RuntimeError(f"{name}: output shape {list(out.shape)}, expected {self.output_shape}")
        out = out.reshape(self.output_shape)
        if not np.all(np.isfinite(out)):
            raise FloatingPointError(f"{name} produced inf/nan on the NPU (fp16 overflow?); check the conversion "
                                     f"with scripts/onnx2rknn.py --verify")
        return out


RKNN_RUNTIME = "/usr/lib/librknnrt.so"  # where rknnlite loads the NPU runtime from (a fixed path in rknnlite)
RUNTIME_HINT = ("copy librknnrt.so from rknn-toolkit2's rknpu2/runtime/Linux/librknn_api/aarch64/ (the release whose "
                "toolkit converted the models) to /usr/lib; deploy/setup_board.sh checks it (docs/board_setup.md)")


def install_hint(version: Optional[tuple] = None) -> str:
    """How to install rknnlite on Python ``version`` (default this one; its wheels stop at 3.12)."""
    major, minor = tuple(version or sys.version_info)[:2]
    if (major, minor) >= (3, 13):
        return (f"rknn-toolkit-lite2 (2.5.0) has wheels for Python 3.7-3.12 only and this is {major}.{minor}: "
                "make the venv with a Python 3.10-3.12 (deploy/setup_board.sh), or use the CPU backend")
    return INSTALL_HINT


def _rknnlite_class():
    try:
        from rknnlite.api import RKNNLite
    except ImportError as exc:
        raise RuntimeError(f"the RKNN encoder needs rknnlite, which is not installed: {install_hint()}") from exc
    return RKNNLite


def check_rknn_runtime(path: str = RKNN_RUNTIME) -> None:
    """RuntimeError naming the fix when the NPU runtime rknnlite loads cannot be this machine's;
    checked before rknnlite's init_runtime, which otherwise prints its own traceback first."""
    from .rkllm import describe_library_file

    if not os.path.exists(path):
        raise RuntimeError(f"the RKNN NPU runtime {path} is missing: {RUNTIME_HINT}")
    problem = describe_library_file(path)
    if problem is not None:
        raise RuntimeError(f"the RKNN NPU runtime {path} {problem}: {RUNTIME_HINT}")


class RknnEncoderRunner:
    """:class:`qwen3asr.encoder.EncoderRunner` on the NPU.

    Args:
      bundle: the model bundle (manifest with an ``rk.rknn.<soc>`` list).
      form: "merged" or "split" (split also loads the front end).
      sizes: durations in seconds to load (default: all of ``form``).
      soc: "rk3588" / "rk3576"; default from /proc/device-tree/compatible.
      core_mask: RKNNLite core mask (int or CORE_MASKS name); default all cores of the SoC.
      lite_class: the RKNNLite class (default ``rknnlite.api.RKNNLite``; tests pass a double).

    Every file is checked (exists, not an LFS pointer, RKNN magic, metadata matches the
    manifest) before rknnlite is imported.
    """

    def __init__(self, bundle: Bundle, form: str = "merged", sizes: Optional[Sequence[int]] = None,
                 soc: Optional[str] = None, core_mask: Any = None, lite_class=None):
        if form not in ("merged", "split"):
            raise ValueError(f"encoder form must be 'merged' or 'split', got {form!r}")
        self.soc = soc or detect_soc()
        if self.soc not in SUPPORTED_SOCS:
            raise ValueError(f"soc must be one of {', '.join(SUPPORTED_SOCS)}, got {self.soc!r}")
        self.core_mask = resolve_core_mask(self.soc, core_mask)
        self.form = form
        entries = [e for e in manifest_entries(bundle, self.soc) if e["form"] == form]
        wanted = None if sizes is None else {int(s) for s in sizes}
        offered = sorted({int(e["n_chunks"]) for e in entries if e["part"] != "frontend"})
        if wanted is not None and wanted - set(offered):
            raise BundleError(f"RKNN encoder sizes {sorted(wanted - set(offered))} s not converted for {self.soc} "
                              f"({form} offers {offered} s); re-run scripts/onnx2rknn.py with --sizes")
        selected = [e for e in entries if e["part"] == "frontend" or wanted is None or int(e["n_chunks"]) in wanted]
        if not any(e["part"] != "frontend" for e in selected):
            raise BundleError(f"the bundle has no {form} RKNN encoder models for {self.soc}; re-run "
                              f"scripts/onnx2rknn.py --forms {form}")
        checked = [check_entry(bundle, self.soc, e) for e in selected]
        if form == "split" and not any(c.part == "frontend" for c in checked):
            raise BundleError(f"the split RKNN models for {self.soc} lack the front end; re-run scripts/onnx2rknn.py")
        self.variants = [EncoderVariant(c.form, c.n_chunks, c.path) for c in checked if c.part != "frontend"]
        lite = lite_class or _rknnlite_class()
        if lite_class is None and str(getattr(lite, "__module__", "")).startswith("rknnlite."):
            check_rknn_runtime()  # the real rknnlite: its runtime library must be there first
        self._models: dict[str, RknnModel] = {}
        self._frontend: Optional[RknnModel] = None
        try:
            for c in checked:
                model = RknnModel(self._load(lite, c.path), c)
                if c.part == "frontend":
                    self._frontend = model
                else:
                    self._models[c.path] = model
        except BaseException:
            self.release()
            raise

    def _load(self, lite_class, path: str):
        handle = lite_class()
        ret = handle.load_rknn(path)
        if ret != 0:
            handle.release()
            raise RuntimeError(f"RKNNLite.load_rknn({path}) failed with {ret}")
        ret = handle.init_runtime(core_mask=self.core_mask)
        if ret != 0:
            handle.release()
            raise RuntimeError(
                f"RKNNLite.init_runtime(core_mask={self.core_mask}) failed with {ret} for {path}: is the NPU driver "
                f"loaded and librknnrt.so as new as the rknn-toolkit2 that converted the model?")
        logger.info("loaded %s on %s (core mask %d)", path, self.soc, self.core_mask)
        return handle

    def _model(self, variant: EncoderVariant) -> RknnModel:
        model = self._models.get(variant.path)
        if model is None:
            raise ValueError(f"encoder variant {variant.path} is not loaded (loaded: {sorted(self._models)})")
        return model

    def run_merged(self, variant, mel, conv_mask1, conv_mask2, attn_bias):
        return self._model(variant).run(
            {"mel": mel, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2, "attn_bias": attn_bias})

    def run_frontend(self, mel_chunk, conv_mask1, conv_mask2):
        if self._frontend is None:
            raise RuntimeError("the split-encoder front end is not loaded (form='merged')")
        return self._frontend.run({"mel": mel_chunk, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2})

    def run_backend(self, variant, hidden, attn_bias):
        return self._model(variant).run({"hidden": hidden, "attn_bias": attn_bias})

    def release(self) -> None:
        """Free every loaded model (safe to call twice)."""
        models = list(self._models.values()) + ([self._frontend] if self._frontend else [])
        self._models, self._frontend = {}, None
        for m in models:
            m.handle.release()


def create_rknn_encoder(bundle, form: str = "merged", sizes: Optional[Sequence[int]] = None,
                        soc: Optional[str] = None, core_mask: Any = None, lite_class=None) -> AudioEncoder:
    """An :class:`AudioEncoder` on the NPU for ``bundle`` (a Bundle or its directory).

    The runner is ``encoder.runner`` (call ``encoder.runner.release()`` to free the NPU).
    """
    if not isinstance(bundle, Bundle):
        bundle = Bundle.load(bundle)
    runner = RknnEncoderRunner(bundle, form, sizes, soc, core_mask, lite_class)
    return AudioEncoder(runner, runner.variants, bundle.manifest["encoder"]["window_tokens"],
                        int(bundle.audio_config["num_mel_bins"]), form)
