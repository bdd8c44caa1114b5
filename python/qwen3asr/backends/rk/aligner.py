"""The forced aligner on the board: RKNN encoder + the aligner's LLM on RKLLM, its head on the host.

One alignment (the orchestration is :class:`qwen3asr.aligner.ForcedAligner`'s)::

    audio -> log-mel -> RKNN encoder (NPU) -> embedded input (host) -> RKLLMSlotScorer.score:
    rkllm_run(EMBED, GET_LAST_HIDDEN_LAYER) -> (L, hidden) states -> slot rows only -> final
    RMSNorm if the rows are not normalised yet -> aligner_head.npy (classes x hidden) -> logits

The aligner's head classifies time bins (5000 classes in the official model), not tokens, so
the ``.rkllm`` model carries a stand-in vocabulary head (scripts/export_rkllm.py ties it to the
embeddings) and the real head is applied here, to the 2 x words slot rows only.

Whether the runtime's "last hidden layer" is taken before or after the model's final RMSNorm
is not documented. The scorer tells them apart on every run: rows after the norm satisfy
``RMS(row / norm weight) == 1`` (up to eps and the NPU's precision), rows before it do not
(the residual stream of a trained model is far from unit RMS). It logs what it found the first
time and whenever it changes, and refuses to guess when the rows disagree.
``$QWEN3ASR_RK_HIDDEN_NORM`` = ``pre`` / ``post`` skips the detection (a board check, see
docs/board_checklist.md, "Forced aligner").

The aligner's RKLLM handle lives next to the ASR decoder's when both run in one engine: two
handles of one librkllmrt in one process (multi-instance inference is documented from runtime
1.2.2; docs/board_checklist.md has the 1.2.1 check). Both take NPU IOMMU domain 1
(``base_domain_id``), as an RKNN model shares the process.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional, Sequence

import numpy as np

from ...bundle import Bundle, BundleError, bf16_to_f32
from ...encoder import AudioEncoder
from .backend import BASE_DOMAIN_ID, RKBackendError, resolve_rkllm
from .options import RKOptions

logger = logging.getLogger(__name__)

ENV_HIDDEN_NORM = "QWEN3ASR_RK_HIDDEN_NORM"  # "pre" / "post": skip the detection; "auto" (default)
NORM_MODES = ("auto", "pre", "post")
UNIT_RMS_TOLERANCE = 0.02  # |RMS(row / norm weight) - 1| of a row that is already normalised
POST_SHARE = 0.9  # post-norm when at least this share of the rows has unit RMS ...
PRE_SHARE = 0.1   # ... pre-norm when at most this share has; in between: refuse to guess


@dataclasses.dataclass(frozen=True)
class NormCheck:
    """What one run's hidden states say about the final RMSNorm."""

    found: str           # "pre" (the scorer applies the norm) or "post" (already applied)
    median_rms: float    # median over the rows of RMS(row / norm weight)
    unit_share: float    # share of rows with |RMS(row / norm weight) - 1| <= UNIT_RMS_TOLERANCE
    rows: int            # rows looked at


def check_norm(states: np.ndarray, weight: np.ndarray) -> NormCheck:
    """Whether ``states`` (L, hidden) float32 are already normalised by the RMSNorm of ``weight``.

    A normalised row is ``weight * x / rms(x)``, so ``row / weight`` has RMS 1 (a little less
    for a row whose mean square is near eps). Columns whose weight is near 0 are left out.
    RKBackendError when the rows disagree (neither at least POST_SHARE nor at most PRE_SHARE
    of them look normalised).
    """
    w = np.abs(weight.astype(np.float32))
    keep = w > 1e-3 * max(float(w.max()), 1e-30)
    if not keep.any():
        raise RKBackendError("the aligner's final norm weight is all zeros; re-export the aligner bundle")
    ratio = states[:, keep] / weight[keep]
    rms = np.sqrt(np.mean(np.square(ratio, dtype=np.float64), axis=1))
    share = float(np.mean(np.abs(rms - 1.0) <= UNIT_RMS_TOLERANCE))
    median = float(np.median(rms))
    if share >= POST_SHARE:
        return NormCheck("post", median, share, int(states.shape[0]))
    if share <= PRE_SHARE:
        return NormCheck("pre", median, share, int(states.shape[0]))
    raise RKBackendError(
        f"cannot tell whether the RKLLM hidden states are before or after the final norm: {share:.0%} of "
        f"{states.shape[0]} rows have RMS(row / norm weight) within {UNIT_RMS_TOLERANCE:.0%} of 1 (median "
        f"{median:.4g}). Compare both with the ONNX aligner as docs/board_checklist.md (\"Forced aligner\") "
        f"shows, then set {ENV_HIDDEN_NORM}=pre or post")


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """The model's final RMSNorm in float32 as the official code computes it: (K, hidden) -> (K, hidden)."""
    x = x.astype(np.float32)
    variance = np.mean(np.square(x), axis=-1, keepdims=True)
    return weight * (x / np.sqrt(variance + np.float32(eps)))


def load_head(bundle: Bundle) -> tuple[np.ndarray, np.ndarray, float]:
    """An aligner bundle's head (classes, hidden) float32, final norm weight (hidden,) float32 and
    eps; BundleError naming the file when one is missing or of the wrong shape."""
    cfg = bundle.aligner
    classes, hidden = int(cfg["classify_num"]), int(bundle.text_config["hidden_size"])
    head_meta, norm_meta = cfg["head"], cfg["norm"]
    raw = np.load(bundle.file(head_meta["file"], "aligner head"))  # read whole (20 MB for 5000 x 1024 fp32)
    head = bf16_to_f32(raw) if head_meta["dtype"] == "bfloat16" else np.asarray(raw, dtype=np.float32)
    norm = np.asarray(np.load(bundle.file(norm_meta["file"], "aligner final norm")), dtype=np.float32)
    if head.shape != (classes, hidden) or norm.shape != (hidden,):
        raise BundleError(f"{bundle.path}: aligner head {head.shape} / norm {norm.shape} do not fit classify_num "
                          f"{classes} and hidden size {hidden}; re-export the aligner bundle with scripts/export_onnx.py")
    return np.ascontiguousarray(head), norm, float(norm_meta["eps"])


class RKLLMSlotScorer:
    """The aligner's SlotScorer on the board (qwen3asr.scoring): the aligner's ``.rkllm``
    in EMBED + GET_LAST_HIDDEN_LAYER mode, then on the host the final RMSNorm (when the rows are
    not normalised already) and the head, at the slot rows only.

    Attributes: name "rk", soc, decoder_file, quant, max_positions (rows one run takes),
    runtime (the RKLLMRuntime once loaded), last_norm (the NormCheck of the last run; None
    with ``norm`` forced), norm_mode ("auto", "pre" or "post").
    """

    name = "rk"

    def __init__(self, decoder_file: str, soc: str, quant: str, max_context: int, head: np.ndarray,
                 norm_weight: np.ndarray, eps: float, rk: RKOptions = RKOptions(), norm: Optional[str] = None):
        norm = norm if norm is not None else (os.environ.get(ENV_HIDDEN_NORM) or "auto")
        if norm not in NORM_MODES:
            raise ValueError(f"{ENV_HIDDEN_NORM} must be one of {', '.join(NORM_MODES)}, got {norm!r}")
        self.decoder_file, self.soc, self.quant = decoder_file, soc, quant
        self.max_context = int(max_context)
        self.max_positions = self.max_context - 1  # the runtime takes < max_context rows, one token is generated
        self.head, self.norm_weight, self.eps = head, norm_weight, float(eps)
        self.rk = rk
        self.norm_mode = norm
        self.last_norm: Optional[NormCheck] = None
        self._logged: Optional[str] = None
        self.runtime = None

    def options(self):
        """The RKLLMOptions of the aligner's handle: no sampling (nothing is generated but the one
        token a run makes), the context of the conversion, the board settings of ``rk``."""
        from .rkllm import RKLLMOptions

        return RKLLMOptions(max_context_len=self.max_context, max_new_tokens=1, top_k=1, repeat_penalty=1.0,
                            base_domain_id=BASE_DOMAIN_ID, embed_flash=self.rk.embed_flash,
                            enabled_cpus_mask=self.rk.cpu_mask(), hidden_size=int(self.head.shape[1]))

    def load(self) -> None:
        """Initialise the RKLLM runtime (once)."""
        from .rkllm import RKLLMRuntime

        if self.runtime is None:
            self.runtime = RKLLMRuntime(self.decoder_file, lib_path=self.rk.lib_path, abi=self.rk.abi,
                                        options=self.options())

    def score(self, embeds: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``embeds`` (L, hidden) float32, the whole embedded input; ``rows`` (K,) int64 slot rows
        -> logits (K, classes) float32."""
        if self.runtime is None:
            raise RuntimeError("this scorer is closed (or was never loaded)")
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= len(embeds)):
            raise ValueError(f"slot rows must lie in [0, {len(embeds)}), got {rows.min()}..{rows.max()}")
        states = self.runtime.run_hidden(np.ascontiguousarray(embeds, dtype=np.float32))
        found = self.norm_mode
        if found == "auto":
            self.last_norm = check_norm(states, self.norm_weight)
            found = self.last_norm.found
            self._log_norm(self.last_norm)
        x = states[rows]
        if found == "pre":
            x = rms_norm(x, self.norm_weight, self.eps)
        return np.ascontiguousarray(x @ self.head.T, dtype=np.float32)

    def _log_norm(self, check: NormCheck) -> None:
        if check.found == self._logged:
            return
        what = ("before the final RMSNorm (pre-norm): the scorer applies it" if check.found == "pre" else
                "after the final RMSNorm (post-norm): the scorer applies the head only")
        log = logger.info if self._logged is None else logger.warning
        log("RKLLM hidden states of %s are %s (median RMS(row / norm weight) %.4g, %.0f%% of %d rows at 1)%s",
            os.path.basename(self.decoder_file), what, check.median_rms, 100 * check.unit_share, check.rows,
            "" if self._logged is None else f"; the previous run's were {self._logged}-norm")
        self._logged = check.found

    def close(self) -> None:
        """Destroy the RKLLM handle (safe to call twice)."""
        if self.runtime is not None:
            runtime, self.runtime = self.runtime, None
            runtime.close()


def create_rk_aligner(bundle: Bundle, encoder_form: str = "merged", encoder_sizes: Optional[Sequence[int]] = None,
                      rk: RKOptions = RKOptions()) -> tuple[AudioEncoder, RKLLMSlotScorer]:
    """The rk backend of an aligner ``bundle``: (RKNN encoder from ``rk.rknn.<soc>``, the slot
    scorer on the ``rk.rkllm.<soc>`` model), both loaded.

    Raises RKBackendError / BundleError / RKLLMError with what to do: not a board, no ``rk``
    section or no model for this SoC, a missing file or Git LFS pointer (the head, the norm,
    the .rkllm, an .rknn), missing rknnlite or librkllmrt.so.
    """
    bundle.require_kind("aligner")
    soc, entry, decoder_file, context = resolve_rkllm(bundle, rk, "aligner's RKLLM model")
    from .rknn import create_rknn_encoder
    head, norm, eps = load_head(bundle)
    scorer = RKLLMSlotScorer(decoder_file, soc, str(entry["quant"]), context, head, norm, eps, rk)
    encoder = create_rknn_encoder(bundle, encoder_form, encoder_sizes, soc=soc, core_mask=rk.npu_cores)
    try:
        scorer.load()
    except BaseException:
        encoder.close()
        raise
    logger.info("aligner on %s: %d encoder variants (%s), %s (%s, context %d, ABI %s), head %d x %d on the host",
                soc, len(encoder.variants), encoder_form, decoder_file, scorer.quant, scorer.max_context,
                scorer.runtime.abi, *head.shape)
    return encoder, scorer


__all__ = ["ENV_HIDDEN_NORM", "NormCheck", "RKLLMSlotScorer", "check_norm", "create_rk_aligner", "load_head",
           "rms_norm"]
