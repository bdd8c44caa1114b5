"""Backends: where the model parts run. One factory keyed by a single name.

=========  =================================================================================
``onnx``   ONNX Runtime on any CPU (:mod:`.onnx`): the reference the NPU path is checked against
``rk``     Rockchip RK3576/RK3588 (:mod:`.rk`): RKNN encoder on the NPU, RKLLM decoder
           (librkllmrt.so)
``auto``   ``rk`` on a Rockchip board whose bundle has RK models for its SoC and whose runtimes
           load; otherwise ``onnx``, with a warning naming what is missing on a board (one
           choice for the ASR model and the aligner)
=========  =================================================================================

A backend fills the engine's two seams: an :class:`~qwen3asr.encoder.AudioEncoder` over an
:class:`~qwen3asr.encoder.EncoderRunner`, and a :class:`~qwen3asr.decoding.TextDecoder`; for a
forced aligner, the encoder and a :class:`~qwen3asr.scoring.SlotScorer`.
Hardware SDKs are imported only inside ``rk``'s creation; the stages never import this package.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
from typing import Callable, Optional, Tuple, TypeVar, Union

from .. import checks
from ..bundle import Bundle
from ..decoding import DecodingOptions, TextDecoder
from ..encoder import AudioEncoder
from ..options import MAX_CHUNK_SECONDS
from ..scoring import SlotScorer
from . import host
from .prefix_cache import PrefixCacheOptions
from .rk.options import RKOptions

logger = logging.getLogger(__name__)
T = TypeVar("T")

BACKENDS = ("auto", "onnx", "rk")
ENCODER_FORMS = ("merged", "split")
DECODER_DTYPES = ("auto", "fp32", "int8", "int4")
# "lean": the CPU profile for small machines and one-shot runs (int4 decoder by default, smaller
# KV-cache steps; with a bundle exported with --memory lean, int8 encoder weights and memory-mapped
# decoder weights); docs/benchmarks.md "Lean profile"
MEMORY_PROFILES = ("default", "lean")
MAX_THREADS = 256  # ONNX Runtime intra-op threads accepted (more than any board or desktop has cores)
MAX_PRELOAD_SECONDS = 86400.0  # preload_seconds accepted: a day of audio (it only picks encoder graphs)


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """How a backend loads the bundle's models (validated on creation; Qwen3ASREngine builds it
    from its keyword arguments)."""

    encoder_form: str = "merged"  # "merged" (one graph per duration) or "split" (front end + back end)
    encoder_sizes: Optional[Tuple[int, ...]] = None  # load only these encoder durations (s); None: all
    decoder_dtype: str = "auto"  # ONNX decoder weights: auto (int8 if present, else fp32), fp32, int8, int4
    threads: Optional[int] = None  # ONNX Runtime intra-op threads; None: its own choice
    # ONNX Runtime's idle threads spin before they sleep: True, False, or "auto" (Qwen3ASREngine)
    spin_wait: Union[bool, str] = False
    prefix_cache: PrefixCacheOptions = PrefixCacheOptions()  # the ONNX decoder's prompt-prefix KV reuse
    rk: RKOptions = RKOptions()  # board settings of the rk backend
    memory: str = "default"  # ONNX memory profile: "default" or "lean" (MEMORY_PROFILES)
    # audio length (s) whose ASR encoder graphs load with the backend instead of on first use, the
    # ONNX decoder then loading in a thread (backends/pending.py); None: on first use
    # (Qwen3ASREngine's preload_seconds)
    preload_seconds: Optional[float] = None
    # a directory that keeps the ONNX sessions' prepacked weights for the next load (backends/prepacked.py;
    # Qwen3ASREngine's prepacked_cache); None: none
    prepacked_cache: Optional[str] = None

    def __post_init__(self):
        problems = []
        if self.encoder_form not in ENCODER_FORMS:
            problems.append(f"the encoder form (encoder_form) must be 'merged' or 'split' "
                            f"(got {checks.show(self.encoder_form)})")
        if self.encoder_sizes is not None:
            sizes = _encoder_sizes(self.encoder_sizes)
            if sizes is None:
                problems.append(checks.problem("encoder_sizes", f"whole seconds in 1..{MAX_CHUNK_SECONDS:g}, e.g. "
                                                                "[2, 4], or None", self.encoder_sizes))
            else:
                object.__setattr__(self, "encoder_sizes", sizes)
        if self.decoder_dtype not in DECODER_DTYPES:
            problems.append(f"decoder_dtype must be one of {', '.join(DECODER_DTYPES)} "
                            f"(got {checks.show(self.decoder_dtype)})")
        problems += filter(None, (checks.integer("threads", self.threads, 1, MAX_THREADS, optional=True),
                                  None if isinstance(self.spin_wait, bool) or self.spin_wait == "auto"
                                  else checks.problem("spin_wait", "True, False or \"auto\"", self.spin_wait),
                                  checks.choice("memory", self.memory, MEMORY_PROFILES),
                                  checks.number("preload_seconds", self.preload_seconds, 0, MAX_PRELOAD_SECONDS,
                                                kind="a number of seconds", low_open=True, optional=True),
                                  checks.path("prepacked_cache", self.prepacked_cache, optional=True)))
        if isinstance(self.prepacked_cache, os.PathLike):
            object.__setattr__(self, "prepacked_cache", os.fspath(self.prepacked_cache))
        if not isinstance(self.prefix_cache, PrefixCacheOptions):
            problems.append(f"prefix_cache must be a qwen3asr.PrefixCacheOptions "
                            f"(got {type(self.prefix_cache).__name__})")
        if not isinstance(self.rk, RKOptions):
            problems.append(f"rk must be a qwen3asr.RKOptions (got {type(self.rk).__name__})")
        if problems:
            raise ValueError("invalid backend options: " + "; ".join(problems))


def engine_backend_options(backend, *, rk=None, platform=None, enabled_cpus=None, prefix_cache=None,
                           **fields) -> BackendOptions:
    """The BackendOptions of Qwen3ASREngine's arguments (ValueError / TypeError naming the one
    that is wrong): ``backend`` one of BACKENDS, ``rk`` an RKOptions (default RKOptions()) with the
    reference design's ``platform`` / ``enabled_cpus`` spellings of ``soc`` / ``cpus`` applied,
    ``prefix_cache`` None for the default PrefixCacheOptions; ``fields``: the other options."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"unknown backend {checks.show(backend)}; choose one of {', '.join(BACKENDS)}")
    if rk is not None and not isinstance(rk, RKOptions):
        raise TypeError(f"rk must be a qwen3asr.RKOptions, got {type(rk).__name__}")
    rk = rk or RKOptions()
    if platform is not None or enabled_cpus is not None:
        rk = dataclasses.replace(rk, soc=platform if platform is not None else rk.soc,
                                 cpus=enabled_cpus if enabled_cpus is not None else rk.cpus)
    return BackendOptions(rk=rk, prefix_cache=PrefixCacheOptions() if prefix_cache is None else prefix_cache,
                          **fields)


def _encoder_sizes(sizes) -> Optional[Tuple[int, ...]]:
    """Encoder durations as sorted unique whole seconds in 1..MAX_CHUNK_SECONDS (a graph longer
    than the longest pass is never run), or None when they are not."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, (list, tuple, set, frozenset)) or not sizes:
        return None
    if not all(checks.is_number(s) and float(s).is_integer() and 1 <= s <= MAX_CHUNK_SECONDS for s in sizes):
        return None
    return tuple(sorted({int(s) for s in sizes}))


@dataclasses.dataclass(frozen=True)
class Backend:
    """What a backend loaded: the engine's two seams."""

    name: str  # "onnx" or "rk"
    encoder: AudioEncoder  # over the backend's EncoderRunner
    decoder: TextDecoder
    soc: Optional[str] = None  # the board's SoC with "rk"

    def close(self) -> None:
        """Free the decoder runtime and the encoder's models (safe to call twice)."""
        self.decoder.close()
        self.encoder.close()


def create_backend(name: str, bundle: Bundle, options: BackendOptions = BackendOptions(), *, tokenizer,
                   embeddings, decoding: Optional[DecodingOptions] = None) -> Backend:
    """Load backend ``name`` (one of BACKENDS) for ``bundle``.

    ``tokenizer`` / ``embeddings``: the engine's (end-of-sequence ids, embedding rows);
    ``decoding``: the DecodingOptions a runtime that fixes them at load (RKLLM) starts with.
    ``backend="rk"`` fails with the error that says what is missing; ``auto`` falls back to the
    CPU with that error as a warning.
    """
    o = _checked(name, options)
    chosen = _choose("the ASR model", name, bundle, o, lambda rk_o: _create_rk(bundle, rk_o, decoding, embeddings.row))
    if chosen is not None:
        return chosen
    from .onnx import create_onnx_decoder, create_onnx_encoder, pick_dtype

    encoder_threads, encoder_spins, decoder_spins = host.one_shot(o.threads, o.spin_wait, o.preload_seconds)
    encoder = create_onnx_encoder(bundle, o.encoder_form, o.encoder_sizes, encoder_threads, encoder_spins, o.memory,
                                  o.prepacked_cache)

    def make_decoder():
        return create_onnx_decoder(bundle, o.decoder_dtype, o.threads, embed=embeddings.row,
                                   eos_ids=tokenizer.eos_ids, prefix_cache=o.prefix_cache,
                                   spin_wait=decoder_spins, memory=o.memory, prepacked=o.prepacked_cache)

    if o.preload_seconds is None:
        try:
            return Backend("onnx", encoder, make_decoder())
        except BaseException:
            encoder.close()
            raise
    # preload (a one-shot run): the decoder's session is made in a thread (ONNX Runtime releases
    # the interpreter lock while it loads) while this one makes the encoder's; the engine is ready
    # when the encoder is, so the first request's log-mel and encoder run while the decoder, the
    # longer load, finishes (backends/pending.py; docs/benchmarks.md "The wait before the first call")
    from .pending import PendingDecoder

    dtype = pick_dtype(bundle, o.decoder_dtype, o.memory)
    bundle.decoder_path(dtype)  # a missing file is the engine's error, not its first request's
    decoder = PendingDecoder(make_decoder, "onnx", bundle.max_context, dtype)
    try:
        encoder.preload(o.preload_seconds)
    except BaseException:
        decoder.close()
        encoder.close()
        raise
    return Backend("onnx", encoder, decoder)


@dataclasses.dataclass(frozen=True)
class AlignerBackend:
    """What a backend loaded for a forced aligner: its encoder and its slot scorer."""

    name: str  # "onnx" or "rk"
    encoder: AudioEncoder
    scorer: SlotScorer
    soc: Optional[str] = None

    def close(self) -> None:
        self.scorer.close()
        self.encoder.close()


def create_aligner_backend(name: str, bundle: Bundle, options: BackendOptions = BackendOptions()) -> AlignerBackend:
    """Load backend ``name`` for an aligner ``bundle`` (the same names and fallbacks as
    create_backend: ``auto`` takes the NPU when the bundle has Rockchip models for this board)."""
    o = _checked(name, options)
    bundle.require_kind("aligner")
    chosen = _choose("the aligner", name, bundle, o, lambda rk_o: _create_rk_aligner(bundle, rk_o))
    if chosen is not None:
        return chosen
    from .onnx import create_onnx_encoder, create_onnx_scorer

    encoder = create_onnx_encoder(bundle, o.encoder_form, o.encoder_sizes, o.threads, o.spin_wait is True, o.memory,
                                  o.prepacked_cache)
    try:
        scorer = create_onnx_scorer(bundle, o.decoder_dtype, o.threads, o.spin_wait is True, o.memory,
                                    o.prepacked_cache)
    except BaseException:
        encoder.close()
        raise
    return AlignerBackend("onnx", encoder, scorer)


def _checked(name: str, options: BackendOptions) -> BackendOptions:
    """``options`` once ``name`` is one of BACKENDS and ``options`` a BackendOptions (both factories)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if not isinstance(options, BackendOptions):
        raise TypeError(f"options must be a BackendOptions, got {type(options).__name__}")
    return options


def _choose(part: str, name: str, bundle: Bundle, o: BackendOptions, create_rk: Callable[[BackendOptions], T]
            ) -> Optional[T]:
    """The one backend choice of both factories, for ``part`` ("the ASR model", "the aligner").

    ``rk``: what ``create_rk(o)`` makes (its error raised). ``auto``: what ``create_rk`` makes with
    the board's SoC in ``o.rk`` on a Rockchip board whose bundle has RK models for that SoC. None:
    ``part`` runs on the CPU (``onnx``; ``auto`` off a board, or on one with a warning naming what
    is missing, also when ``create_rk`` fails)."""
    if name == "rk":
        return create_rk(o)
    if name == "onnx":
        return None
    soc, reason = _board_soc(bundle, o.rk)
    if soc is None:
        if reason:
            logger.warning("%s; using the CPU backend (ONNX Runtime) for %s", reason, part)
        return None
    try:
        return create_rk(dataclasses.replace(o, rk=dataclasses.replace(o.rk, soc=soc)))
    except (RuntimeError, OSError, ValueError) as exc:  # BundleError, RKLLMError, RKBackendError too
        logger.warning("the NPU backend cannot start on this %s board (%s); using the CPU backend (ONNX Runtime) "
                       "for %s. backend='rk' reports this as an error.", soc, exc, part)
        return None


def _create_rk_aligner(bundle: Bundle, o: BackendOptions) -> AlignerBackend:
    from .rk.aligner import create_rk_aligner

    encoder, scorer = create_rk_aligner(bundle, o.encoder_form, o.encoder_sizes, o.rk)
    return AlignerBackend("rk", encoder, scorer, scorer.soc)


def _create_rk(bundle: Bundle, o: BackendOptions, decoding: Optional[DecodingOptions], embed) -> Backend:
    from .rk.backend import create_rk_backend

    encoder, decoder = create_rk_backend(bundle, o.encoder_form, o.encoder_sizes, o.rk,
                                         options=decoding or DecodingOptions(), embed=embed)
    return Backend("rk", encoder, decoder, decoder.soc)


def _board_soc(bundle: Bundle, rk: RKOptions) -> Tuple[Optional[str], Optional[str]]:
    """(SoC, None) when ``auto`` should try the NPU; (None, reason to warn or None) otherwise."""
    from .rk.soc import ENV_SOC, detect_soc

    soc = rk.soc or os.environ.get(ENV_SOC)
    if not soc:
        try:
            soc = detect_soc()
        except RuntimeError:
            return None, None  # not a (supported) Rockchip board: the CPU is the backend, no warning
    if soc not in bundle.rkllm_socs():
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


__all__ = ["BACKENDS", "MEMORY_PROFILES", "AlignerBackend", "Backend", "BackendOptions", "engine_backend_options", "PrefixCacheOptions", "RKOptions",
           "create_aligner_backend", "create_backend"]
