"""ctypes binding of Rockchip's RKLLM runtime (``librkllmrt.so``), C ABI 1.2.x and 1.3.x.

All declarations for the C library live here; :class:`RKLLMRuntime` owns one model
handle and is the only thing the engine should need::

    with RKLLMRuntime("decoder.rkllm", options=RKLLMOptions(max_new_tokens=200)) as rt:
        res = rt.run_embed(embeds)          # (n_tokens, hidden) float32, C-contiguous
        res.token_ids, res.text, res.finish_reason, res.perf
        states = rt.run_hidden(embeds)      # (n_tokens, hidden) float32: the last hidden layer

The runtime exists only for aarch64 boards. Importing this module never loads it: the
library is opened by :func:`load_library` when a runtime is created.

ABI: the structs changed between runtime 1.2.1-1.2.3 ("1.2") and 1.3.0 ("1.3"); see
docs/rkllm_abi.md for the layouts, the header commits they were checked against and how
:func:`resolve_abi` tells the two apart (override: ``abi=`` or ``QWEN3ASR_RKLLM_ABI``).
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import re
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, Union, c_bool, c_char_p, c_float, c_int,
                    c_int8, c_int32, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ...decoding import RepetitionGuard, sampling_problems
from ...errors import Qwen3ASRError
from .elf import describe_library_file

logger = logging.getLogger(__name__)

LIB_NAME = "librkllmrt.so"
ENV_LIB = "QWEN3ASR_RKLLM_LIB"  # path of librkllmrt.so
ENV_ABI = "QWEN3ASR_RKLLM_ABI"  # "1.2" or "1.3": skip detection
SUPPORTED_ABIS = ("1.2", "1.3")
# <repo>/lib/librkllmrt.so (this file is <repo>/python/qwen3asr/backends/rk/rkllm.py)
REPO_LIB_DIR = Path(__file__).resolve().parents[4] / "lib"

_DOWNLOAD_HINT = (
    "librkllmrt.so exists only for aarch64 Rockchip boards (RK3576/RK3588). Get it from "
    "Rockchip's rknn-llm releases (https://github.com/airockchip/rknn-llm, file "
    "rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so, runtime 1.2.1-1.2.3 or 1.3.x) "
    f"and put it in the repository's lib/ folder or point {ENV_LIB} at it."
)


class RKLLMError(Qwen3ASRError, RuntimeError):
    """A librkllmrt call failed, the library is missing, or its ABI is unsupported."""


class RKLLMRunError(RKLLMError):
    """A run failed (error state, bad return code); ``partial`` holds what was generated."""

    def __init__(self, message: str, partial: "GenerationResult"):
        super().__init__(message)
        self.partial = partial


# ---------------------------------------------------------------------------- enums

class RKLLMLogitsUnavailable(RKLLMRunError):
    """A GET_LOGITS run gave no logits for the rows asked (this runtime returns fewer rows, or
    another width): the caller can decode without them (``run_embed``)."""


class LLMCallState(enum.IntEnum):
    NORMAL = 0   # a token with complete UTF-8 text
    WAITING = 1  # a token whose text ends inside a multi-byte UTF-8 character
    FINISH = 2   # generation ended; result.perf is filled
    ERROR = 3


class RKLLMInputType(enum.IntEnum):
    PROMPT = 0
    TOKEN = 1
    EMBED = 2
    MULTIMODAL = 3


class RKLLMInferMode(enum.IntEnum):
    GENERATE = 0
    GET_LAST_HIDDEN_LAYER = 1
    GET_LOGITS = 2


# ------------------------------------------------------- structs shared by both ABIs
# C enums are int; C++ bool is one byte (c_bool).

class RKLLMExtendParam(Structure):
    _fields_ = [
        ("base_domain_id", c_int32),
        ("embed_flash", c_int8),
        ("enabled_cpus_num", c_int8),
        ("enabled_cpus_mask", c_uint32),
        ("n_batch", c_uint8),         # 1.2.1+: must be >= 1
        ("use_cross_attn", c_int8),
        ("reserved", c_uint8 * 104),
    ]


class RKLLMEmbedInput(Structure):
    _fields_ = [("embed", POINTER(c_float)),  # n_tokens x hidden float32
                ("n_tokens", c_size_t)]


class RKLLMTokenInput(Structure):
    _fields_ = [("input_ids", POINTER(c_int32)), ("n_tokens", c_size_t)]


class RKLLMLoraParam(Structure):
    _fields_ = [("lora_adapter_name", c_char_p)]


class RKLLMPromptCacheParam(Structure):
    _fields_ = [("save_prompt_cache", c_int), ("prompt_cache_path", c_char_p)]


class RKLLMResultLastHiddenLayer(Structure):
    _fields_ = [("hidden_states", POINTER(c_float)), ("embd_size", c_int), ("num_tokens", c_int)]


class RKLLMResultLogits(Structure):
    _fields_ = [("logits", POINTER(c_float)), ("vocab_size", c_int), ("num_tokens", c_int)]


class RKLLMPerfStat(Structure):
    _fields_ = [
        ("prefill_time_ms", c_float),
        ("prefill_tokens", c_int),
        ("generate_time_ms", c_float),
        ("generate_tokens", c_int),
        ("memory_usage_mb", c_float),  # VmHWM
    ]


class RKLLMResult(Structure):
    _fields_ = [
        ("text", c_char_p),
        ("token_id", c_int32),
        ("last_hidden_layer", RKLLMResultLastHiddenLayer),
        ("logits", RKLLMResultLogits),
        ("perf", RKLLMPerfStat),
    ]


# result callback: 0 = continue, 1 = pause, (1.3) 2 = release the output buffer
LLMResultCallback = CFUNCTYPE(c_int, POINTER(RKLLMResult), c_void_p, c_int)
LLMTokenizerCallback = CFUNCTYPE(c_int, c_void_p, c_char_p, c_int32, POINTER(c_int32), c_int32)
LLMGetEmbedCallback = CFUNCTYPE(c_int, c_void_p, POINTER(c_int32), c_uint64, c_void_p, c_uint64)

_COMMON_PARAM_FIELDS = [
    ("model_path", c_char_p),
    ("max_context_len", c_int32),
    ("max_new_tokens", c_int32),
    ("top_k", c_int32),
    ("n_keep", c_int32),
    ("top_p", c_float),
    ("temperature", c_float),
    ("repeat_penalty", c_float),
    ("frequency_penalty", c_float),
    ("presence_penalty", c_float),
    ("mirostat", c_int32),
    ("mirostat_tau", c_float),
    ("mirostat_eta", c_float),
    ("skip_special_token", c_bool),
]


# ------------------------------------------------------------- ABI 1.2.1 - 1.2.3

class RKLLMParam12(Structure):
    _fields_ = _COMMON_PARAM_FIELDS + [
        ("is_async", c_bool),
        ("img_start", c_char_p),
        ("img_end", c_char_p),
        ("img_content", c_char_p),
        ("extend_param", RKLLMExtendParam),
    ]


class RKLLMMultiModalInput12(Structure):
    _fields_ = [
        ("prompt", c_char_p),
        ("image_embed", POINTER(c_float)),
        ("n_image_tokens", c_size_t),
        ("n_image", c_size_t),
        ("image_width", c_size_t),
        ("image_height", c_size_t),
    ]


class RKLLMInputUnion12(Union):
    _fields_ = [
        ("prompt_input", c_char_p),
        ("embed_input", RKLLMEmbedInput),
        ("token_input", RKLLMTokenInput),
        ("multimodal_input", RKLLMMultiModalInput12),
    ]


class RKLLMInput12(Structure):
    _anonymous_ = ("input",)
    _fields_ = [
        ("role", c_char_p),
        ("enable_thinking", c_bool),
        ("input_type", c_int),
        ("input", RKLLMInputUnion12),  # anonymous union in C
    ]


class RKLLMInferParam12(Structure):
    _fields_ = [
        ("mode", c_int),
        ("lora_params", POINTER(RKLLMLoraParam)),
        ("prompt_cache_params", POINTER(RKLLMPromptCacheParam)),
        ("keep_history", c_int),
    ]


# -------------------------------------------------------------------- ABI 1.3.x

class RKLLMParam13(Structure):
    _fields_ = _COMMON_PARAM_FIELDS + [
        ("ignore_eos_token", c_bool),
        ("is_async", c_bool),
        ("extend_param", RKLLMExtendParam),
    ]


class RKLLMImageInput13(Structure):  # anonymous nested struct `image` in C
    _fields_ = [
        ("image_embed", POINTER(c_float)),
        ("n_image_tokens", c_size_t),
        ("n_image", c_size_t),
        ("image_start", c_char_p),
        ("image_end", c_char_p),
        ("image_content", c_char_p),
        ("image_width", c_size_t),
        ("image_height", c_size_t),
    ]


class RKLLMVideoInput13(Structure):  # anonymous nested struct `video` in C
    _fields_ = [
        ("video_embed", POINTER(c_float)),
        ("n_frame_tokens", c_size_t),
        ("n_frame_per_video", c_size_t),
        ("n_video", c_size_t),
        ("video_start", c_char_p),
        ("video_end", c_char_p),
        ("video_content", c_char_p),
        ("frame_width", c_size_t),
        ("frame_height", c_size_t),
    ]


class RKLLMMultiModalInput13(Structure):
    _fields_ = [("prompt", c_char_p), ("image", RKLLMImageInput13), ("video", RKLLMVideoInput13)]


class RKLLMInputUnion13(Union):
    _fields_ = [
        ("prompt_input", c_char_p),
        ("embed_input", RKLLMEmbedInput),
        ("token_input", RKLLMTokenInput),
        ("multimodal_input", RKLLMMultiModalInput13),
    ]


class RKLLMInput13(Structure):
    _anonymous_ = ("input",)
    _fields_ = [
        ("role", c_char_p),
        ("enable_thinking", c_bool),
        ("input_type", c_int),
        ("input", RKLLMInputUnion13),
    ]


class RKLLMSamplingParam(Structure):
    _fields_ = [
        ("top_k", c_int32),
        ("top_p", c_float),
        ("temperature", c_float),
        ("repeat_penalty", c_float),
        ("frequency_penalty", c_float),
        ("presence_penalty", c_float),
        ("mirostat", c_int32),
        ("mirostat_tau", c_float),
        ("mirostat_eta", c_float),
    ]


class RKLLMInferParam13(Structure):
    _fields_ = [
        ("mode", c_int),
        ("lora_params", POINTER(RKLLMLoraParam)),
        ("prompt_cache_params", POINTER(RKLLMPromptCacheParam)),
        ("sampling_params", POINTER(RKLLMSamplingParam)),  # NULL: init values
        ("keep_history", c_int),
        ("max_new_tokens", c_int32),                       # <= 0: init value
    ]


class RKLLMCallback(Structure):
    _fields_ = [
        ("result_callback", LLMResultCallback),
        ("result_userdata", c_void_p),
        ("tokenizer_callback", LLMTokenizerCallback),  # NULL: the model's own tokenizer
        ("tokenizer_userdata", c_void_p),
        ("embed_callback", LLMGetEmbedCallback),      # NULL: the model's own embedding
        ("embed_userdata", c_void_p),
    ]


@dataclass(frozen=True)
class AbiLayout:
    """The ctypes types of one ABI version."""

    version: str
    param: type
    input: type
    infer_param: type


LAYOUTS = {
    "1.2": AbiLayout("1.2", RKLLMParam12, RKLLMInput12, RKLLMInferParam12),
    "1.3": AbiLayout("1.3", RKLLMParam13, RKLLMInput13, RKLLMInferParam13),
}


# ------------------------------------------------------------ loading, detection

def load_library(lib_path: Optional[str | os.PathLike] = None) -> tuple[ctypes.CDLL, str]:
    """Open librkllmrt.so; returns ``(library, path or name used)``.

    Search order: ``lib_path``, ``$QWEN3ASR_RKLLM_LIB``, ``<repo>/lib/librkllmrt.so``,
    then the system loader (``LD_LIBRARY_PATH``, /usr/lib, ...).
    """
    explicit = lib_path if lib_path is not None else os.environ.get(ENV_LIB) or None
    if explicit is not None:
        source = "lib_path" if lib_path is not None else ENV_LIB
        path = Path(explicit)
        if not path.is_file():
            raise RKLLMError(f"{source} points to {str(path)!r}, which is not a file. "
                             + _DOWNLOAD_HINT)
        candidates = [str(path)]
    else:
        repo_lib = REPO_LIB_DIR / LIB_NAME
        candidates = [str(repo_lib)] if repo_lib.is_file() else []
        candidates.append(LIB_NAME)  # system loader
    errors = []
    for cand in candidates:
        problem = describe_library_file(cand) if os.path.isfile(cand) else None
        if problem is not None:
            errors.append(f"{cand}: {problem}")
            continue
        try:
            lib = ctypes.CDLL(cand)
        except OSError as exc:
            errors.append(f"{cand}: {exc}")
            continue
        logger.info("loaded RKLLM runtime from %s", cand)
        return lib, cand
    raise RKLLMError("cannot load librkllmrt.so (" + "; ".join(errors) + "). " + _DOWNLOAD_HINT)


# The runtime logs "rkllm-runtime version: 1.2.3, ..." at init; if the version is a
# literal inside the library file, it names the ABI directly.
_VERSION_RE = re.compile(rb"rkllm-runtime version: ?v?(\d+)\.(\d+)\.(\d+)([A-Za-z0-9]*)")
_REQUIRED_SYMBOLS = ("rkllm_createDefaultParam", "rkllm_init", "rkllm_run", "rkllm_abort",
                     "rkllm_destroy", "rkllm_clear_kv_cache", "rkllm_set_chat_template")
# first exported in 1.2.1 (absent from 1.2.0 and 1.2.1b1, whose structs differ)
_SINCE_121_SYMBOLS = ("rkllm_get_kv_cache_size", "rkllm_set_function_tools",
                      "rkllm_set_cross_attn_params")


def normalize_abi(abi: str) -> str:
    """``"1.2"``, ``"1.2.3"``, ``"1.3.0"`` ... -> ``"1.2"`` or ``"1.3"``; ValueError otherwise."""
    parts = str(abi).strip().lower().lstrip("v").split(".")
    key = ".".join(parts[:2])
    if key not in SUPPORTED_ABIS or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"unsupported RKLLM ABI {abi!r}: accepted are "
                         f"{', '.join(SUPPORTED_ABIS)} (runtime 1.2.1-1.2.3 or 1.3.x)")
    return key


def abi_from_version(major: int, minor: int, patch: int, suffix: str = "") -> str:
    """Map a runtime version to its ABI; RKLLMError for unsupported versions."""
    text = f"{major}.{minor}.{patch}{suffix}"
    if (major, minor) == (1, 3):
        return "1.3"
    if (major, minor) == (1, 2) and (patch > 1 or (patch == 1 and not suffix)):
        return "1.2"
    raise RKLLMError(f"librkllmrt version {text} is not supported: use runtime 1.2.1-1.2.3 or "
                     f"1.3.x. {_DOWNLOAD_HINT}")


def version_in_file(path: str) -> Optional[tuple[int, int, int, str]]:
    """The version named by a ``rkllm-runtime version: X.Y.Z`` literal in the file, if any."""
    try:
        with open(path, "rb") as f:
            data = f.read()  # the runtime is some 10-20 MB
    except OSError:
        return None
    match = _VERSION_RE.search(data)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3]), match[4].decode("ascii")


class _DefaultParamProbe(Structure):
    # larger than both RKLLMParam layouts (208 / 184 bytes); the value is returned through
    # a caller-provided buffer in both cases (struct > 16 bytes on AArch64 and x86-64)
    _fields_ = [("raw", c_uint8 * 256)]


def abi_from_default_param(raw: bytes) -> Optional[str]:
    """Guess the ABI from the bytes of ``rkllm_createDefaultParam()``.

    Both layouts share the first 57 bytes. ``extend_param.n_batch`` defaults to 1 and
    sits at byte 100 in 1.2.x (after the three img_* pointers) and at byte 72 in 1.3.x,
    with ``use_cross_attn`` (0/1) right after it and the bool flags before it.
    Returns None when neither or both layouts fit.
    """
    def is_bool(i: int) -> bool:
        return raw[i] in (0, 1)

    fits_12 = (is_bool(56) and is_bool(57) and is_bool(92)
               and raw[100] == 1 and is_bool(101))
    fits_13 = (is_bool(56) and is_bool(57) and is_bool(58) and is_bool(64)
               and raw[72] == 1 and is_bool(73))
    if fits_12 == fits_13:
        return None
    return "1.2" if fits_12 else "1.3"


def resolve_abi(lib: ctypes.CDLL, lib_path: str, abi: Optional[str] = None) -> str:
    """The ABI of a loaded library: ``abi`` argument, then ``$QWEN3ASR_RKLLM_ABI``, then detection.

    Detection: the 1.2.1+ symbols must be exported; then a version literal in the file
    and the layout of ``rkllm_createDefaultParam()`` must agree (either alone suffices).
    """
    if abi is not None:
        return normalize_abi(abi)
    env = os.environ.get(ENV_ABI)
    if env:
        try:
            return normalize_abi(env)
        except ValueError as exc:
            raise ValueError(f"{ENV_ABI}: {exc}") from None
    missing = [s for s in _REQUIRED_SYMBOLS if not hasattr(lib, s)]
    if missing:
        raise RKLLMError(f"{lib_path} does not export {', '.join(missing)}: not an RKLLM runtime. "
                         + _DOWNLOAD_HINT)
    missing = [s for s in _SINCE_121_SYMBOLS if not hasattr(lib, s)]
    if missing:
        raise RKLLMError(f"{lib_path} lacks {', '.join(missing)}: it is a runtime older than "
                         f"1.2.1, which is not supported. {_DOWNLOAD_HINT}")
    found = version_in_file(lib_path) if os.path.isfile(lib_path) else None
    from_version = abi_from_version(*found) if found else None
    create = lib["rkllm_createDefaultParam"]
    create.argtypes = []
    create.restype = _DefaultParamProbe
    from_layout = abi_from_default_param(bytes(create().raw))
    if from_version and from_layout and from_version != from_layout:
        raise RKLLMError(
            f"{lib_path}: version string says {'.'.join(map(str, found[:3]))}{found[3]} but "
            f"rkllm_createDefaultParam() looks like the {from_layout} layout; set {ENV_ABI}=1.2 "
            "or 1.3 (or pass abi=) if you know which runtime this is.")
    detected = from_version or from_layout
    if detected is None:
        raise RKLLMError(f"cannot tell whether {lib_path} is runtime 1.2.x or 1.3.x; set "
                         f"{ENV_ABI}=1.2 or {ENV_ABI}=1.3 (or pass abi=).")
    logger.info("RKLLM runtime ABI %s (version string: %s, default-param layout: %s)",
                detected, found, from_layout)
    return detected


# ------------------------------------------------------------- options, results

@dataclass(frozen=True)
class RKLLMOptions:
    """Settings passed to rkllm_init (plus the host-side repetition guard)."""

    max_context_len: int = 4096       # tokens in the KV cache
    max_new_tokens: int = 256         # default generation limit per run
    top_k: int = 1                    # 1 = greedy
    top_p: float = 1.0
    temperature: float = 1.0
    repeat_penalty: float = 1.15      # what W4A16 ports use against loops
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    n_keep: Optional[int] = None      # KV entries kept on context shift; None = runtime default
    skip_special_token: bool = True
    base_domain_id: int = 1           # 1 when an RKNN model runs in the same process
    embed_flash: bool = True          # keep the embedding table in flash
    enabled_cpus_mask: int = 0        # bit i = CPU i; 0 = runtime default (num is derived)
    hidden_size: Optional[int] = None  # if set, run_embed checks embeds.shape[1]
    repetition: RepetitionGuard = field(default_factory=RepetitionGuard)

    def __post_init__(self):
        if self.max_context_len < 1 or self.max_new_tokens < 1:
            raise ValueError("max_context_len and max_new_tokens must be >= 1, got "
                             f"{self.max_context_len} and {self.max_new_tokens}")
        if self.max_new_tokens >= self.max_context_len:
            raise ValueError(f"max_new_tokens ({self.max_new_tokens}) must be smaller than "
                             f"max_context_len ({self.max_context_len})")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        problems = sampling_problems(temperature=self.temperature, top_p=self.top_p,
                                     repetition_penalty=self.repeat_penalty)
        if problems:
            raise ValueError("invalid RKLLM sampling settings: " + "; ".join(problems))
        if not 0 <= self.base_domain_id <= 255:
            raise ValueError(f"base_domain_id must be in 0..255, got {self.base_domain_id}")
        if not 0 <= self.enabled_cpus_mask <= 0xFF:
            raise ValueError(f"enabled_cpus_mask must be a bitmask of CPUs 0-7 (0..0xff), got "
                             f"{self.enabled_cpus_mask:#x}")
        if self.hidden_size is not None and self.hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1 or None, got {self.hidden_size}")


@dataclass(frozen=True)
class RKLLMPerf:
    """The runtime's RKLLMPerfStat of one run (received with the FINISH state)."""

    prefill_time_ms: float
    prefill_tokens: int
    generate_time_ms: float
    generate_tokens: int
    memory_usage_mb: float  # peak resident memory (VmHWM)


@dataclass(frozen=True)
class GenerationResult:
    """What one run produced."""

    token_ids: tuple[int, ...]  # every generated token, including WAITING ones
    text: str                   # concatenated text of the NORMAL callbacks
    finish_reason: str          # "eos" | "length" | "aborted" | "repetition" | "error" | "unknown"
    perf: Optional[RKLLMPerf]   # None if the runtime sent no FINISH (e.g. after an abort)


FINISH_REASONS = ("eos", "length", "aborted", "repetition", "error", "unknown")


@dataclass
class _RunState:
    on_token: Optional[Callable[[int, str], Optional[bool]]]
    on_id: Optional[Callable[[int], Optional[bool]]]
    limit: int                      # generation limit of this run
    enforce_limit: bool             # True when the runtime cannot apply the limit itself
    guard: RepetitionGuard = field(default_factory=RepetitionGuard)  # stops a runaway repetition
    history: list = field(default_factory=list)  # ids before this run's (the guard's view starts with them)
    token_ids: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    stop_reason: Optional[str] = None
    finished: bool = False
    error_state: bool = False
    perf: Optional[RKLLMPerf] = None
    exception: Optional[BaseException] = None
    abort_rc: int = 0
    hidden_shape: Optional[tuple[int, int]] = None  # GET_LAST_HIDDEN_LAYER: the rows wanted
    hidden: Optional[np.ndarray] = None             # ... the copy of the first matching result
    hidden_seen: list = field(default_factory=list)  # (num_tokens, embd_size) of every result with states
    logits_want: Optional[tuple[int, int]] = None  # GET_LOGITS: (the last rows wanted, vocabulary size)
    logits: Optional[np.ndarray] = None             # ... their copy, from the first result that has them


# ---------------------------------------------------------------------- runtime

def _copy_hidden(layer: RKLLMResultLastHiddenLayer) -> np.ndarray:
    """The rows of a result's last_hidden_layer as a new (num_tokens, embd_size) float32 array.

    Copied inside the callback: the runtime frees the buffer at its next callback.
    """
    n, width = int(layer.num_tokens), int(layer.embd_size)
    return np.ctypeslib.as_array(layer.hidden_states, shape=(n * width,)).reshape(n, width).copy()


def _copy_last_logits(result: RKLLMResultLogits, rows: int) -> np.ndarray:
    """The last ``rows`` rows of a result's logits as a new (rows, vocab_size) float32 array
    (copied inside the callback, as the hidden states; only those rows are read)."""
    n, vocab = int(result.num_tokens), int(result.vocab_size)
    flat = np.ctypeslib.as_array(result.logits, shape=(n * vocab,))
    return flat[(n - rows) * vocab:].reshape(rows, vocab).copy()


def _bind(lib: ctypes.CDLL, layout: AbiLayout) -> dict:
    """Fresh function objects with argtypes/restype for one ABI (lib[name] is never shared)."""
    h = c_void_p
    sigs = {
        "rkllm_createDefaultParam": ([], layout.param),
        "rkllm_init": ([POINTER(h), POINTER(layout.param),
                        POINTER(RKLLMCallback) if layout.version == "1.3" else LLMResultCallback],
                       c_int),
        "rkllm_set_chat_template": ([h, c_char_p, c_char_p, c_char_p], c_int),
        "rkllm_run": ([h, POINTER(layout.input), POINTER(layout.infer_param), c_void_p], c_int),
        "rkllm_abort": ([h], c_int),
        "rkllm_clear_kv_cache": ([h, c_int, POINTER(c_int), POINTER(c_int)], c_int),
        "rkllm_destroy": ([h], c_int),
    }
    fns = {}
    for name, (argtypes, restype) in sigs.items():
        try:
            fn = lib[name]
        except AttributeError:
            raise RKLLMError(f"the loaded librkllmrt does not export {name}: not a supported "
                             f"RKLLM runtime. {_DOWNLOAD_HINT}") from None
        fn.argtypes, fn.restype = argtypes, restype
        fns[name] = fn
    return fns


def _check(name: str, rc: int) -> None:
    if rc != 0:
        raise RKLLMError(f"{name} failed with code {rc}")


class RKLLMRuntime:
    """One RKLLM model handle: init on construction, ``run_embed`` per utterance (generation) or
    ``run_hidden`` per input (the last hidden layer of every row), ``close``.

    Several runtimes may live in one process (the ASR decoder and the forced aligner): each
    has its own handle and callback (runtime 1.2.2+ documents multi-instance inference).

    Args:
        model_path: the ``.rkllm`` decoder file.
        lib_path: librkllmrt.so; default: ``$QWEN3ASR_RKLLM_LIB``, ``<repo>/lib``, system.
        abi: "1.2" or "1.3" to skip detection (also ``$QWEN3ASR_RKLLM_ABI``).
        options: :class:`RKLLMOptions`.

    Not thread-safe: one run at a time per runtime.
    """

    def __init__(self, model_path: str | os.PathLike, lib_path: Optional[str | os.PathLike] = None,
                 abi: Optional[str] = None, *, options: Optional[RKLLMOptions] = None):
        self.options = options if options is not None else RKLLMOptions()
        self._handle: Optional[c_void_p] = None
        self._run: Optional[_RunState] = None
        self.last_perf: Optional[RKLLMPerf] = None  # of the last run_hidden or run_logits
        self._lock = threading.Lock()
        if abi is not None:
            abi = normalize_abi(abi)
        self._lib, self.lib_path = load_library(lib_path)
        self.abi = resolve_abi(self._lib, self.lib_path, abi)
        self._layout = LAYOUTS[self.abi]
        self._fn = _bind(self._lib, self._layout)

        self._param = self._make_param(os.fspath(model_path))
        # the runtime keeps these pointers: they must live as long as the handle
        self._c_callback = LLMResultCallback(self._on_result)
        handle = c_void_p()
        if self.abi == "1.3":
            self._callback_struct = RKLLMCallback(result_callback=self._c_callback)
            rc = self._fn["rkllm_init"](ctypes.byref(handle), ctypes.byref(self._param),
                                        ctypes.byref(self._callback_struct))
        else:
            self._callback_struct = None
            rc = self._fn["rkllm_init"](ctypes.byref(handle), ctypes.byref(self._param),
                                        self._c_callback)
        _check("rkllm_init", rc)
        if not handle.value:
            raise RKLLMError("rkllm_init returned 0 but no handle")
        self._handle = handle
        try:
            # no template of its own: the host builds the whole prompt as embeddings
            _check("rkllm_set_chat_template",
                   self._fn["rkllm_set_chat_template"](handle, b"", b"", b""))
        except BaseException:
            self.close()
            raise
        logger.info("RKLLM model %s loaded (ABI %s)", model_path, self.abi)

    def _make_param(self, model_path: str):
        o = self.options
        p = self._fn["rkllm_createDefaultParam"]()
        p.model_path = model_path.encode()
        p.max_context_len = o.max_context_len
        p.max_new_tokens = o.max_new_tokens
        p.top_k = o.top_k
        if o.n_keep is not None:
            p.n_keep = o.n_keep
        p.top_p = o.top_p
        p.temperature = o.temperature
        p.repeat_penalty = o.repeat_penalty
        p.frequency_penalty = o.frequency_penalty
        p.presence_penalty = o.presence_penalty
        p.mirostat = 0
        p.skip_special_token = o.skip_special_token
        p.is_async = False
        if self.abi == "1.3":
            p.ignore_eos_token = False
        ext = p.extend_param
        ext.base_domain_id = o.base_domain_id
        ext.embed_flash = int(o.embed_flash)
        if o.enabled_cpus_mask:
            ext.enabled_cpus_mask = o.enabled_cpus_mask
            ext.enabled_cpus_num = bin(o.enabled_cpus_mask).count("1")
        ext.n_batch = 1
        ext.use_cross_attn = 0
        return p

    # ------------------------------------------------------------------ running

    def run_embed(self, embeds: np.ndarray, *, keep_history: bool = False,
                  on_token: Optional[Callable[[int, str], Optional[bool]]] = None,
                  max_new_tokens: Optional[int] = None,
                  on_id: Optional[Callable[[int], Optional[bool]]] = None,
                  repetition: Optional[RepetitionGuard] = None, history=()) -> GenerationResult:
        """Generate from input embeddings, synchronously (greedy with the default options).

        Args:
            embeds: ``(n_tokens, hidden)`` float32, C-contiguous: the whole prompt, already
                embedded (the runtime adds no chat template).
            keep_history: keep this run in the KV cache for the next run.
            on_token: called as ``on_token(token_id, text)`` for each token with complete
                text; returning False stops the run (finish_reason "aborted").
            on_id: called as ``on_id(token_id)`` for EVERY generated token, WAITING ones
                included (whose bytes end inside a character; ``on_token`` skips them),
                before ``on_token``; returning False stops the run ("aborted").
            max_new_tokens: limit for this run; default ``options.max_new_tokens``
                (runtime 1.2.x cannot go above it).
            repetition: the loop guard of this run (host side, rkllm_abort when it fires);
                default ``options.repetition``.
            history: ids generated before this run (a verified draft fed with the prompt): the
                loop guard sees them before this run's ids.

        Raises:
            ValueError: bad ``embeds`` or limit.
            RKLLMRunError: the runtime reported an error (``.partial`` has the tokens so far).
            Any exception raised by ``on_token`` (the run is aborted first).
        """
        self._check_embeds(embeds)
        limit = self.options.max_new_tokens if max_new_tokens is None else int(max_new_tokens)
        if limit < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {limit}")
        if self.abi == "1.2" and limit > self.options.max_new_tokens:
            raise ValueError(f"max_new_tokens={limit} is above the init value "
                             f"{self.options.max_new_tokens}; runtime 1.2.x cannot raise it per "
                             "run: raise RKLLMOptions.max_new_tokens instead")
        handle = self._require_handle()
        if not self._lock.acquire(blocking=False):
            raise RKLLMError("run_embed called while another run is in progress")
        try:
            inp = self._embed_input(embeds)
            infer = self._layout.infer_param()
            infer.mode = RKLLMInferMode.GENERATE
            infer.keep_history = int(bool(keep_history))
            if self.abi == "1.3":
                infer.max_new_tokens = limit
            self._run = run = _RunState(
                on_token=on_token, on_id=on_id, limit=limit,
                enforce_limit=self.abi == "1.2" and limit < self.options.max_new_tokens,
                guard=self.options.repetition if repetition is None else repetition, history=[int(t) for t in history])
            try:
                rc = self._fn["rkllm_run"](handle, ctypes.byref(inp), ctypes.byref(infer), None)
            finally:
                self._run = None
            return self._finish_run(run, rc)
        finally:
            self._lock.release()

    def run_hidden(self, embeds: np.ndarray) -> np.ndarray:
        """The last hidden layer at every input row: one EMBED prefill in
        ``RKLLM_INFER_GET_LAST_HIDDEN_LAYER`` mode on an emptied KV cache.

        Args:
            embeds: ``(n_tokens, hidden)`` float32, C-contiguous: the whole input, embedded.

        Returns:
            ``(n_tokens, hidden)`` float32, a copy (the runtime's buffer lives only during its
            callback). Whether the rows are before or after the model's final RMSNorm is the
            runtime's business (unverified; docs/board_checklist.md); nothing here assumes it.

        The cache is cleared first (``rkllm_clear_kv_cache``; ``keep_history = 0``): without it
        only the first EMBED run in this mode was right (rknn-llm issue #278). Results without
        hidden states (``num_tokens == 0`` or a NULL pointer, as issue #278 saw before the real
        one) and any generated token are ignored; the first result whose states have
        ``n_tokens`` rows of ``hidden`` values is kept (a second one is logged and ignored).
        On ABI 1.3 the callback returns 0, not 2 ("release the buffer"): the buffer is copied
        at once and the runtime frees it at its next callback, the FINISH that follows.
        ``last_perf`` holds the run's RKLLMPerf (None without FINISH).

        Raises:
            ValueError: bad ``embeds``.
            RKLLMError: clearing the cache failed.
            RKLLMRunError: the run failed, or no hidden states of shape (n_tokens, hidden)
                came back, or they hold NaN/inf.
        """
        self._check_embeds(embeds)
        run = _RunState(on_token=None, on_id=None, limit=1, enforce_limit=False,
                        hidden_shape=(int(embeds.shape[0]), int(embeds.shape[1])))
        return self._finish_hidden(run, self._prefill_run("run_hidden", embeds, RKLLMInferMode.GET_LAST_HIDDEN_LAYER,
                                                          run))

    def run_logits(self, embeds: np.ndarray, rows: int, vocab_size: int) -> np.ndarray:
        """The logits after each of the last ``rows`` input rows: one EMBED prefill in
        ``RKLLM_INFER_GET_LOGITS`` mode on an emptied KV cache (as ``run_hidden``), for greedy
        verification of a draft (docs/rkllm_abi.md, "Draft verification").

        Returns ``(rows, vocab_size)`` float32, copied inside the callback from the end of the
        result's ``num_tokens x vocab_size`` buffer (the rows before them are not read).

        Raises:
            ValueError: bad ``embeds`` or ``rows``.
            RKLLMLogitsUnavailable: no result had at least ``rows`` rows of ``vocab_size`` logits
                (a runtime that returns only the last row, say): decode without them.
            RKLLMRunError: the run failed, or the logits hold NaN/inf.
        """
        self._check_embeds(embeds)
        if not 1 <= rows <= embeds.shape[0]:
            raise ValueError(f"rows must be 1..{embeds.shape[0]} (the input rows), got {rows}")
        run = _RunState(on_token=None, on_id=None, limit=1, enforce_limit=False,
                        logits_want=(int(rows), int(vocab_size)))
        return self._finish_logits(run, self._prefill_run("run_logits", embeds, RKLLMInferMode.GET_LOGITS, run))

    def _prefill_run(self, name: str, embeds: np.ndarray, mode: RKLLMInferMode, run: _RunState) -> int:
        """One EMBED run in ``mode`` (a prefill whose results ``run`` collects) on an emptied KV cache,
        ``keep_history = 0`` and (1.3) a one-token limit; rkllm_run's return code."""
        handle = self._require_handle()
        if not self._lock.acquire(blocking=False):
            raise RKLLMError(f"{name} called while another run is in progress")
        try:
            _check("rkllm_clear_kv_cache", self._fn["rkllm_clear_kv_cache"](handle, 0, None, None))
            inp = self._embed_input(embeds)
            infer = self._layout.infer_param()
            infer.mode = mode
            infer.keep_history = 0
            if self.abi == "1.3":
                infer.max_new_tokens = 1  # the states or logits come from the prefill; nothing to generate
            self._run = run
            try:
                return self._fn["rkllm_run"](handle, ctypes.byref(inp), ctypes.byref(infer), None)
            finally:
                self._run = None
        finally:
            self._lock.release()

    def _prefill_failed(self, run: _RunState, rc: int, mode: str) -> GenerationResult:
        """After a prefill run: its perf kept, the failures both modes share raised; the partial result."""
        self.last_perf = run.perf
        partial = GenerationResult(tuple(run.token_ids), "", "error", run.perf)
        if run.exception is not None:
            raise run.exception
        if rc != 0:
            raise RKLLMRunError(f"rkllm_run ({mode}) failed with code {rc}", partial)
        if run.error_state:
            raise RKLLMRunError(f"rkllm_run ({mode}) reported RKLLM_RUN_ERROR through the result callback", partial)
        if run.abort_rc != 0:
            raise RKLLMRunError(f"rkllm_abort failed with code {run.abort_rc}", partial)
        return partial

    def _finish_logits(self, run: _RunState, rc: int) -> np.ndarray:
        partial = self._prefill_failed(run, rc, "GET_LOGITS")
        rows, vocab = run.logits_want
        if run.logits is None:
            seen = ", ".join(f"{t} x {w}" for t, w in run.hidden_seen) or "none"
            raise RKLLMLogitsUnavailable(
                f"rkllm_run in GET_LOGITS mode did not return logits for the last {rows} input rows ({vocab} "
                f"values each); it returned: {seen} (rows x vocabulary)", partial)
        if not np.isfinite(run.logits).all():
            raise RKLLMRunError("the runtime's logits contain NaN or inf (fp16 overflow on the NPU?)", partial)
        if run.perf is None:
            logger.warning("rkllm_run (GET_LOGITS) returned without a FINISH state")
        return run.logits

    def _finish_hidden(self, run: _RunState, rc: int) -> np.ndarray:
        partial = self._prefill_failed(run, rc, "GET_LAST_HIDDEN_LAYER")
        n, hidden = run.hidden_shape
        if run.hidden is None:
            if not run.hidden_seen:
                raise RKLLMRunError(
                    f"rkllm_run in GET_LAST_HIDDEN_LAYER mode returned no hidden states for the {n} input rows: the "
                    "the .rkllm must be a plain Qwen3 model made by scripts/export_rkllm.py with the toolkit of this runtime; "
                    "run the checks of docs/board_checklist.md (\"Forced aligner\")", partial)
            seen = ", ".join(f"{t} x {w}" for t, w in run.hidden_seen)
            raise RKLLMRunError(
                f"rkllm_run in GET_LAST_HIDDEN_LAYER mode returned hidden states of {seen} (rows x width), not the "
                f"{n} x {hidden} of the input: the runtime did not return a row for every input token, or the .rkllm "
                "model has another hidden size (convert it from the aligner checkpoint of this bundle with "
                "scripts/export_rkllm.py; docs/board_checklist.md, \"Forced aligner\")", partial)
        if not np.isfinite(run.hidden).all():
            raise RKLLMRunError("the runtime's hidden states contain NaN or inf (fp16 overflow on the NPU?); check "
                                "the conversion (docs/board_checklist.md, \"Forced aligner\")", partial)
        if len(run.hidden_seen) > 1:
            logger.info("GET_LAST_HIDDEN_LAYER run sent hidden states %d times (%s); the first of %d x %d was used",
                        len(run.hidden_seen), run.hidden_seen, n, hidden)
        if run.perf is None:
            logger.warning("rkllm_run (GET_LAST_HIDDEN_LAYER) returned without a FINISH state")
        return run.hidden

    def _on_hidden_result(self, run: _RunState, result, state: int) -> None:
        """Result callback of a GET_LAST_HIDDEN_LAYER or GET_LOGITS run: copy the first states
        (logits) of the wanted shape, note the others, ignore tokens."""
        if state in (LLMCallState.NORMAL, LLMCallState.WAITING):
            if not result:
                return
            res = result.contents
            run.token_ids.append(int(res.token_id))  # a generated token, if any: only reported in errors
            if run.logits_want is not None:
                lg = res.logits
                if not lg.logits or lg.num_tokens <= 0 or lg.vocab_size <= 0:
                    return
                run.hidden_seen.append((int(lg.num_tokens), int(lg.vocab_size)))
                rows, vocab = run.logits_want
                if run.logits is None and lg.num_tokens >= rows and lg.vocab_size == vocab:
                    run.logits = _copy_last_logits(lg, rows)
                return
            layer = res.last_hidden_layer
            if not layer.hidden_states or layer.num_tokens <= 0 or layer.embd_size <= 0:
                return  # issue #278: a result without valid states before the real one
            shape = (int(layer.num_tokens), int(layer.embd_size))
            run.hidden_seen.append(shape)
            if run.hidden is None and shape == run.hidden_shape:
                run.hidden = _copy_hidden(layer)
        elif state == LLMCallState.FINISH:
            run.finished = True
            if result:
                p = result.contents.perf
                run.perf = RKLLMPerf(float(p.prefill_time_ms), int(p.prefill_tokens), float(p.generate_time_ms),
                                     int(p.generate_tokens), float(p.memory_usage_mb))
        elif state == LLMCallState.ERROR:
            run.error_state = True
        else:
            logger.warning("RKLLM callback with unknown state %d ignored", state)

    def _embed_input(self, embeds: np.ndarray):
        """The RKLLMInput of an EMBED run: empty role, thinking off, ``embeds`` (checked) by pointer."""
        inp = self._layout.input()
        inp.role = b""
        inp.enable_thinking = False
        inp.input_type = RKLLMInputType.EMBED
        inp.embed_input.embed = embeds.ctypes.data_as(POINTER(c_float))
        inp.embed_input.n_tokens = embeds.shape[0]
        return inp

    def _check_embeds(self, embeds) -> None:
        if not isinstance(embeds, np.ndarray) or embeds.dtype != np.float32 or embeds.ndim != 2:
            raise ValueError("embeds must be a (n_tokens, hidden) float32 numpy array, got "
                             f"{type(embeds).__name__} {getattr(embeds, 'dtype', '')} "
                             f"{getattr(embeds, 'shape', '')}")
        if not embeds.flags.c_contiguous:
            raise ValueError("embeds must be C-contiguous: pass np.ascontiguousarray(embeds)")
        n, hidden = embeds.shape
        if n < 1 or n >= self.options.max_context_len:
            raise ValueError(f"embeds has {n} tokens; need 1..{self.options.max_context_len - 1} "
                             "(max_context_len)")
        if self.options.hidden_size is not None and hidden != self.options.hidden_size:
            raise ValueError(f"embeds has hidden size {hidden}, the model needs "
                             f"{self.options.hidden_size}")
        if not np.isfinite(embeds).all():
            raise ValueError("embeds contains NaN or inf (check the encoder output)")

    def _stop(self, run: _RunState, reason: str) -> None:
        if run.stop_reason is not None:
            return
        run.stop_reason = reason
        rc = self._fn["rkllm_abort"](self._handle)
        if rc != 0:
            run.abort_rc = rc
            logger.warning("rkllm_abort failed with code %d", rc)

    def _on_result(self, result, userdata, state) -> int:
        """Result callback; runs inside rkllm_run. Never raises into C, always returns 0."""
        run = self._run
        if run is None:
            logger.warning("RKLLM callback (state %d) outside a run ignored", state)
            return 0
        try:
            if run.hidden_shape is not None or run.logits_want is not None:
                self._on_hidden_result(run, result, state)
                return 0
            if state in (LLMCallState.NORMAL, LLMCallState.WAITING):
                if run.stop_reason is not None or not result:
                    return 0  # tokens still in flight after rkllm_abort are dropped
                res = result.contents
                token_id = int(res.token_id)
                run.token_ids.append(token_id)
                if run.on_id is not None and run.on_id(token_id) is False:
                    self._stop(run, "aborted")
                    return 0
                if state == LLMCallState.NORMAL:
                    text = (res.text or b"").decode("utf-8", errors="replace")
                    run.texts.append(text)
                    if run.on_token is not None and run.on_token(token_id, text) is False:
                        self._stop(run, "aborted")
                        return 0
                if run.guard.triggered(run.history + run.token_ids):
                    logger.warning("runaway repetition after %d tokens: aborting",
                                   len(run.token_ids))
                    self._stop(run, "repetition")
                elif run.enforce_limit and len(run.token_ids) >= run.limit:
                    self._stop(run, "length")
            elif state == LLMCallState.FINISH:
                run.finished = True
                if result:
                    p = result.contents.perf
                    run.perf = RKLLMPerf(float(p.prefill_time_ms), int(p.prefill_tokens),
                                         float(p.generate_time_ms), int(p.generate_tokens),
                                         float(p.memory_usage_mb))
            elif state == LLMCallState.ERROR:
                run.error_state = True
            else:
                logger.warning("RKLLM callback with unknown state %d ignored", state)
        except BaseException as exc:  # re-raised by run_embed once rkllm_run has returned
            run.exception = exc
            self._stop(run, "error")
        return 0

    def _finish_run(self, run: _RunState, rc: int) -> GenerationResult:
        reason = run.stop_reason
        if reason is None:
            if run.finished:
                reason = "length" if len(run.token_ids) >= run.limit else "eos"
            else:
                reason = "unknown"
        failed = run.exception is not None or run.error_state or run.abort_rc != 0
        if rc != 0 and run.stop_reason is not None and not failed:
            logger.warning("rkllm_run returned %d after rkllm_abort; taken as the abort", rc)
            rc = 0
        result = GenerationResult(tuple(run.token_ids), "".join(run.texts),
                                  "error" if failed or rc != 0 else reason, run.perf)
        if run.exception is not None:
            raise run.exception
        if rc != 0:
            raise RKLLMRunError(f"rkllm_run failed with code {rc}", result)
        if run.error_state:
            raise RKLLMRunError("rkllm_run reported RKLLM_RUN_ERROR through the result callback "
                                f"after {len(run.token_ids)} tokens", result)
        if run.abort_rc != 0:
            raise RKLLMRunError(f"rkllm_abort failed with code {run.abort_rc}", result)
        if reason == "unknown":
            logger.warning("rkllm_run returned without a FINISH state")
        return result

    # ---------------------------------------------------------------- lifetime

    def clear_kv_cache(self, keep_system_prompt: bool = False) -> None:
        """Empty the KV cache (all of it; ``keep_system_prompt`` keeps the system part)."""
        handle = self._require_handle()
        if self._run is not None:
            raise RKLLMError("clear_kv_cache called during a run")
        _check("rkllm_clear_kv_cache",
               self._fn["rkllm_clear_kv_cache"](handle, int(bool(keep_system_prompt)), None, None))

    def close(self) -> None:
        """Destroy the handle (once; later calls do nothing)."""
        if self._run is not None:
            raise RKLLMError("close called during a run")
        handle, self._handle = self._handle, None
        if handle is None:
            return
        _check("rkllm_destroy", self._fn["rkllm_destroy"](handle))

    @property
    def closed(self) -> bool:
        return self._handle is None

    def _require_handle(self) -> c_void_p:
        if self._handle is None:
            raise RKLLMError("the RKLLM runtime is closed")
        return self._handle

    def __enter__(self) -> "RKLLMRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = [
    "AbiLayout", "FINISH_REASONS", "GenerationResult", "LAYOUTS", "LLMCallState", "RKLLMError",
    "RKLLMInferMode", "RKLLMInputType", "RKLLMLogitsUnavailable", "RKLLMOptions", "RKLLMPerf", "RKLLMRunError",
    "RKLLMRuntime", "RepetitionGuard", "SUPPORTED_ABIS", "load_library", "resolve_abi",
]
