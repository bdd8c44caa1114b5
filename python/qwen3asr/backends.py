"""The one factory of backends: a name -> (audio encoder, text decoder).

=========  =================================================================================
``onnx``   ONNX Runtime on any CPU: the reference the NPU path is checked against
``rk``     Rockchip RK3576/RK3588: RKNN encoder on the NPU, RKLLM decoder (librkllmrt.so)
``auto``   ``rk`` on a Rockchip board whose bundle has RK models for its SoC and whose runtimes
           load; otherwise ``onnx``, with a warning naming what is missing on a board
=========  =================================================================================

Hardware SDKs are imported only inside ``rk``'s creation.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from typing import Any, Optional, Sequence, Tuple

from .bundle import Bundle

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "onnx", "rk")


@dataclasses.dataclass
class Backend:
    """What a backend loaded: ``encoder`` (AudioEncoder), ``decoder`` (TextDecoder)."""

    name: str  # "onnx" or "rk"
    encoder: Any
    decoder: Any
    soc: Optional[str] = None  # the board's SoC with "rk"

    def close(self) -> None:
        """Free the decoder runtime and the encoder's models (safe to call twice)."""
        self.decoder.close()
        release = getattr(self.encoder.runner, "release", None)
        if release is not None:
            release()


def create_backend(name: str, bundle: Bundle, *, tokenizer, embeddings, encoder_form: str = "merged",
                   encoder_sizes: Optional[Sequence[int]] = None, decoder_dtype: str = "auto",
                   threads: Optional[int] = None, rk=None, decoding=None, prefix_cache=None,
                   spin_wait: bool = False) -> Backend:
    """Load backend ``name`` (one of BACKENDS) for ``bundle``; ``rk``: RKOptions (board settings);
    ``decoding``: the DecodingOptions a runtime that fixes them at load (RKLLM) starts with;
    ``prefix_cache``: the ONNX decoder's PrefixCacheOptions (qwen3asr.prefix); ``spin_wait``: ONNX
    Runtime's idle threads spin before they sleep (Qwen3ASREngine).

    ``backend="rk"`` fails with the error that says what is missing; ``auto`` falls back to the
    CPU with that error as a warning.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    from .rk_backend import RKOptions

    rk = rk or RKOptions()
    if name == "auto":
        soc, reason = _board_soc(bundle, rk)
        if soc is None:
            if reason:
                logger.warning("%s; using the CPU backend (ONNX Runtime)", reason)
            name = "onnx"
        else:
            try:
                return _create_rk(bundle, encoder_form, encoder_sizes, dataclasses.replace(rk, soc=soc), decoding)
            except (RuntimeError, OSError, ValueError) as exc:  # BundleError, RKLLMError, RKBackendError too
                logger.warning("the NPU backend cannot start on this %s board (%s); using the CPU backend "
                               "(ONNX Runtime). backend='rk' reports this as an error.", soc, exc)
                name = "onnx"
    if name == "rk":
        return _create_rk(bundle, encoder_form, encoder_sizes, rk, decoding)
    from .onnx_backend import create_onnx_decoder, create_onnx_encoder

    encoder = create_onnx_encoder(bundle, encoder_form, encoder_sizes, threads, spin_wait)
    decoder = create_onnx_decoder(bundle, decoder_dtype, threads, embed=embeddings.row, eos_ids=tokenizer.eos_ids,
                                  prefix_cache=prefix_cache, spin_wait=spin_wait)
    return Backend("onnx", encoder, decoder)


def _create_rk(bundle, encoder_form, encoder_sizes, rk, decoding) -> Backend:
    from .decoding import DecodingOptions
    from .rk_backend import create_rk_backend

    encoder, decoder = create_rk_backend(bundle, encoder_form, encoder_sizes, rk,
                                         options=decoding or DecodingOptions())
    return Backend("rk", encoder, decoder, decoder.soc)


def _board_soc(bundle: Bundle, rk) -> Tuple[Optional[str], Optional[str]]:
    """(SoC, None) when ``auto`` should try the NPU; (None, reason to warn or None) otherwise."""
    from .rk_backend import ENV_SOC
    from .rknn_backend import detect_soc

    soc = rk.soc or os.environ.get(ENV_SOC)
    if not soc:
        try:
            soc = detect_soc()
        except RuntimeError:
            return None, None  # not a (supported) Rockchip board: the CPU is the backend, no warning
    rkllm = bundle.manifest.get("rk", {}).get("rkllm", {})
    if soc not in rkllm:
        logger.info("%s board found but the bundle has no RKLLM decoder for it; using ONNX Runtime on the CPU", soc)
        return None, None
    try:
        installed = importlib.util.find_spec("rknnlite") is not None
    except (ImportError, ValueError):  # a broken or blocked install
        installed = False
    if not installed:
        return None, (f"{soc} board found but rknn-toolkit-lite2 is not installed "
                      "(pip install 'rknn-toolkit-lite2>=2.3'; deploy/setup_board.sh does it)")
    return soc, None


__all__ = ["BACKENDS", "Backend", "create_backend"]
