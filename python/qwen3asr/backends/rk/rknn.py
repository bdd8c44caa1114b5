"""RKNN encoder runner (Rockchip NPU, rknn-toolkit-lite2): runs the bundle's ``.rknn`` variants.

The ``.rknn`` files are made on an x86 PC by ``scripts/onnx2rknn.py`` and listed in the
bundle manifest under ``rk.rknn.<soc>``; each is checked against its own metadata
(:mod:`.rknn_meta`) before ``rknnlite`` is imported, which happens only when models are loaded.

A form's models have one of two shape kinds (the manifest entry's ``"shapes"``): ``"fixed"``,
one ``.rknn`` per duration, each with its own copy of the weights; or ``"dynamic"``, one
``.rknn`` for every duration (rknn-toolkit2 ``dynamic_input``), one copy of the weights. A
dynamic model is run like a fixed one: rknnlite takes inputs of any shape set the model
declares and runs the graph compiled for it (rknn-toolkit-lite2's dynamic_shape example), so
each call passes the shapes of the duration AudioEncoder picked, checked here against the
metadata before the call. The split front end (one 1 s chunk) is always fixed.

Graph inputs are fed in the order stored in the metadata (the converter fixes it with
``load_onnx(inputs=...)``); 4-D inputs are NCHW (``data_format='nchw'``; the toolkit's
default for 4-D arrays is NHWC), 3-D inputs are passed as they are.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Optional, Sequence

import numpy as np

from ...bundle import Bundle, BundleError
from ...encoder import AudioEncoder, EncoderVariant
from .elf import describe_library_file
from .rknn_meta import RknnEntry, check_entry, entry_shapes, manifest_entries
from .soc import SUPPORTED_SOCS, detect_soc, resolve_core_mask

logger = logging.getLogger(__name__)

INSTALL_HINT = ("pip install rknn-toolkit-lite2 (aarch64 boards only; it runs on the board's NPU, not on a PC). "
                "On a PC, use the ONNX Runtime backend, or rknn-toolkit2's simulator through scripts/onnx2rknn.py "
                "--verify.")


class RknnModel:
    """One loaded model: orders and checks inputs, runs, checks the output.

    ``handle`` is an RKNNLite (board) or an rknn-toolkit2 RKNN object after init_runtime
    (simulator; scripts/onnx2rknn.py --verify): both take ``inference(inputs=[...], data_format=...)``.
    """

    def __init__(self, handle, entry: RknnEntry):
        self.handle = handle
        self.entry = entry
        self.inputs: list[str] = list(entry.meta["inputs"])
        self.sizes: tuple[int, ...] = entry.sizes  # durations (s) the model takes: one unless dynamic
        self._shapes = {n: entry.shapes_of(n) for n in self.sizes}  # n -> (input shapes, output shape)

    def run(self, feeds: dict[str, np.ndarray], n_chunks: Optional[int] = None) -> np.ndarray:
        """``feeds`` name -> float32 array of size ``n_chunks``'s shapes (None: the model's only
        size); returns that size's output, float32."""
        name = os.path.basename(self.entry.path)
        if n_chunks is None:
            if len(self.sizes) != 1:
                raise ValueError(f"{name} takes sizes {list(self.sizes)} s: say which one")
            n_chunks = self.sizes[0]
        if int(n_chunks) not in self._shapes:
            raise ValueError(f"{name} takes sizes {list(self.sizes)} s, not {n_chunks} s")
        shapes, output_shape = self._shapes[int(n_chunks)]
        arrays = []
        for key in self.inputs:
            if key not in feeds:
                raise ValueError(f"{name}: input {key!r} missing (model inputs: {self.inputs})")
            a = np.ascontiguousarray(feeds[key], dtype=np.float32)
            if list(a.shape) != shapes[key]:
                raise ValueError(f"{name}: input {key!r} has shape {list(a.shape)}, the model takes {shapes[key]} "
                                 f"at {n_chunks} s")
            arrays.append(a)
        try:
            outs = self.handle.inference(inputs=arrays, data_format="nchw")
        except Exception as exc:  # the SDKs raise bare Exception/ValueError with their own text
            raise RuntimeError(f"RKNN inference failed for {self.entry.path}: {exc}") from exc
        if not outs:
            raise RuntimeError(f"RKNN inference failed for {self.entry.path} (the runtime returned nothing; "
                               f"see the RKNN log above)")
        out = np.asarray(outs[0], dtype=np.float32)
        if out.size != int(np.prod(output_shape)):
            raise RuntimeError(f"{name}: output shape {list(out.shape)}, expected {output_shape}")
        out = out.reshape(output_shape)
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
      sizes: durations in seconds to use (default: all of ``form``). Fixed-shape models: only
        these files are loaded; a dynamic-shape model is loaded whole (one weight copy) and
        only these of its sizes are used.
      soc: "rk3588" / "rk3576"; default from /proc/device-tree/compatible.
      core_mask: RKNNLite core mask (int or CORE_MASKS name); default all cores of the SoC.
      lite_class: the RKNNLite class (default ``rknnlite.api.RKNNLite``; tests pass a double).

    Every file is checked (exists, not an LFS pointer, RKNN magic, metadata matches the
    manifest) before rknnlite is imported. ``shapes`` says which kind the bundle has for ``form``
    ("fixed" or "dynamic", from the manifest).
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
        main = [e for e in entries if e["part"] != "frontend"]
        kinds = {entry_shapes(e) for e in main}
        if len(kinds) > 1:
            raise BundleError(f"the bundle lists both fixed and dynamic-shape {form} RKNN models for {self.soc}; "
                              f"re-run scripts/onnx2rknn.py --forms {form} (it keeps one kind)")
        self.shapes = kinds.pop() if kinds else "fixed"  # "fixed" or "dynamic" (rknn_meta.SHAPE_KINDS)
        if self.shapes == "dynamic":
            if len(main) > 1:
                raise BundleError(f"the bundle lists {len(main)} dynamic-shape {form} RKNN models for {self.soc}, "
                                  f"one expected; re-run scripts/onnx2rknn.py --forms {form}")
            offered = sorted(int(s) for s in main[0].get("sizes") or ())
        else:
            offered = sorted({int(e["n_chunks"]) for e in main})
        wanted = None if sizes is None else {int(s) for s in sizes}
        if wanted is not None and wanted - set(offered):
            raise BundleError(f"RKNN encoder sizes {sorted(wanted - set(offered))} s not converted for {self.soc} "
                              f"({form} offers {offered} s); re-run scripts/onnx2rknn.py with --sizes")
        if self.shapes == "dynamic":
            selected = [e for e in entries if e["part"] == "frontend"] + main
        else:
            selected = [e for e in entries
                        if e["part"] == "frontend" or wanted is None or int(e["n_chunks"]) in wanted]
        if not any(e["part"] != "frontend" for e in selected):
            raise BundleError(f"the bundle has no {form} RKNN encoder models for {self.soc}; re-run "
                              f"scripts/onnx2rknn.py --forms {form}")
        checked = [check_entry(bundle, self.soc, e) for e in selected]
        if form == "split" and not any(c.part == "frontend" for c in checked):
            raise BundleError(f"the split RKNN models for {self.soc} lack the front end; re-run scripts/onnx2rknn.py")
        # one EncoderVariant per duration; a dynamic model's all share its path (one loaded model)
        self.variants = [EncoderVariant(c.form, n, c.path) for c in checked if c.part != "frontend"
                         for n in c.sizes if wanted is None or n in wanted]
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
            self.close()
            raise
        logger.info("%s RKNN encoder on %s: %s shapes, sizes %s s in %d model(s)", form, self.soc, self.shapes,
                    [v.n_chunks for v in self.variants], len(checked))

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

    def load(self, variant: EncoderVariant) -> None:
        """Every model is loaded at start: checks that ``variant``'s is one of them."""
        self._model(variant)

    def run_merged(self, variant, mel, conv_mask1, conv_mask2, attn_bias):
        return self._model(variant).run(
            {"mel": mel, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2, "attn_bias": attn_bias}, variant.n_chunks)

    def run_frontend(self, mel_chunk, conv_mask1, conv_mask2):
        if self._frontend is None:
            raise RuntimeError("the split-encoder front end is not loaded (form='merged')")
        return self._frontend.run({"mel": mel_chunk, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2})

    def run_backend(self, variant, hidden, attn_bias):
        return self._model(variant).run({"hidden": hidden, "attn_bias": attn_bias}, variant.n_chunks)

    def close(self) -> None:
        """Free every loaded model (safe to call twice)."""
        models = list(self._models.values()) + ([self._frontend] if self._frontend else [])
        self._models, self._frontend = {}, None
        for m in models:
            m.handle.release()


def create_rknn_encoder(bundle, form: str = "merged", sizes: Optional[Sequence[int]] = None,
                        soc: Optional[str] = None, core_mask: Any = None, lite_class=None) -> AudioEncoder:
    """An :class:`AudioEncoder` on the NPU for ``bundle`` (a Bundle or its directory).

    ``encoder.close()`` frees the NPU.
    """
    if not isinstance(bundle, Bundle):
        bundle = Bundle.load(bundle)
    runner = RknnEncoderRunner(bundle, form, sizes, soc, core_mask, lite_class)
    return AudioEncoder(runner, runner.variants, bundle.manifest["encoder"]["window_tokens"],
                        int(bundle.audio_config["num_mel_bins"]), form)


__all__ = ["INSTALL_HINT", "RKNN_RUNTIME", "RknnEncoderRunner", "RknnModel", "check_rknn_runtime",
           "create_rknn_encoder", "install_hint"]
