"""The official Qwen3-ASR code (PyPI ``qwen-asr``, transformers backend) as a numerical oracle.

``qwen_asr/__init__.py`` imports the whole inference stack (librosa, nagisa, gradio, ...).
This module registers bare package modules for ``qwen_asr``, ``qwen_asr.core`` and
``qwen_asr.core.transformers_backend`` so that only the configuration, modeling and
processing modules are imported, then registers them with the transformers Auto classes.

Helpers:
- ``load_official_model(ckpt_dir, dtype)``: Qwen3ASRForConditionalGeneration in eval mode.
- ``official_processor(ckpt_dir)``: Qwen3ASRProcessor (WhisperFeatureExtractor + Qwen2TokenizerFast).
- ``official_features(ckpt_dir_or_none, wav16k)``: log-mel (128, T) float32 as the official
  processor computes it.
- ``official_prompt_text(processor, context, language)``: the official prompt string.
- ``official_text_utils()``: the official text helpers of ``inference/utils.py``.
- ``official_aligner_text()``: the official ``Qwen3ForceAlignProcessor`` (word units, repair),
  compiled from source without torch.
- ``official_aligner(ckpt_dir)`` / ``official_align(aligner, wav, text, language)``: the official
  ``Qwen3ForcedAligner`` and one ``align()`` call with the slot logits it computed.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import sys
import types
from typing import Optional

import numpy as np

_BACKEND = "qwen_asr.core.transformers_backend"

# WhisperFeatureExtractor settings of the real checkpoints' preprocessor_config.json.
FEATURE_EXTRACTOR_SETTINGS = {
    "feature_size": 128,
    "sampling_rate": 16000,
    "hop_length": 160,
    "n_fft": 400,
    "chunk_length": 30,
    "padding_value": 0.0,
    "padding_side": "right",
    "return_attention_mask": True,
    "dither": 0.0,
}


def _bare_package(name: str, path: str) -> None:
    if name in sys.modules:
        return
    import importlib.machinery

    mod = types.ModuleType(name)
    mod.__path__ = [path]  # type: ignore[attr-defined]
    mod.__package__ = name
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__spec__.submodule_search_locations = [path]
    sys.modules[name] = mod


def _package_root() -> str:
    """Directory of the installed official ``qwen_asr`` package (not imported)."""
    mod = sys.modules.get("qwen_asr")
    if mod is not None and getattr(mod, "__path__", None):
        return list(mod.__path__)[0]
    spec = importlib.util.find_spec("qwen_asr")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the official package is missing: pip install --no-deps qwen-asr==0.0.6")
    return list(spec.submodule_search_locations)[0]


_loaded: Optional[types.SimpleNamespace] = None


def official_modules() -> types.SimpleNamespace:
    """Import the official configuration/modeling/processing modules (once).

    Returns a namespace with ``Qwen3ASRConfig``, ``Qwen3ASRForConditionalGeneration``,
    ``Qwen3ASRProcessor`` and the three modules. Raises RuntimeError naming what to
    install when qwen-asr, torch or transformers are missing.
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    root = _package_root()
    if "qwen_asr" not in sys.modules:
        _bare_package("qwen_asr", root)
        _bare_package("qwen_asr.core", os.path.join(root, "core"))
        _bare_package(_BACKEND, os.path.join(root, "core", "transformers_backend"))
    try:
        conf = importlib.import_module(_BACKEND + ".configuration_qwen3_asr")
        modeling = importlib.import_module(_BACKEND + ".modeling_qwen3_asr")
        processing = importlib.import_module(_BACKEND + ".processing_qwen3_asr")
    except ImportError as exc:
        raise RuntimeError(
            f"cannot import the official Qwen3-ASR modules ({exc}); install torch==2.13.0 and "
            "transformers==4.57.6 (the dev extra: pip install -e '.[dev]')"
        ) from exc
    from transformers import AutoConfig, AutoModel, AutoProcessor

    try:
        AutoConfig.register("qwen3_asr", conf.Qwen3ASRConfig)
        AutoModel.register(conf.Qwen3ASRConfig, modeling.Qwen3ASRForConditionalGeneration)
        AutoProcessor.register(conf.Qwen3ASRConfig, processing.Qwen3ASRProcessor)
    except ValueError:
        pass  # already registered (for example by the official package's own import)
    _loaded = types.SimpleNamespace(
        configuration=conf,
        modeling=modeling,
        processing=processing,
        Qwen3ASRConfig=conf.Qwen3ASRConfig,
        Qwen3ASRForConditionalGeneration=modeling.Qwen3ASRForConditionalGeneration,
        Qwen3ASRProcessor=processing.Qwen3ASRProcessor,
    )
    return _loaded


def load_official_model(ckpt_dir: str, dtype=None):
    """Load a checkpoint directory with the official model class, in eval mode.

    ``dtype`` defaults to torch.float32 (bf16 checkpoints are upcast on load).
    """
    import torch

    mods = official_modules()
    dtype = torch.float32 if dtype is None else dtype
    model = mods.Qwen3ASRForConditionalGeneration.from_pretrained(
        ckpt_dir, dtype=dtype, attn_implementation="eager"
    )
    model.eval()
    return model


def official_processor(ckpt_dir: str):
    """The official Qwen3ASRProcessor loaded from a checkpoint directory."""
    mods = official_modules()
    return mods.Qwen3ASRProcessor.from_pretrained(ckpt_dir)


def _feature_extractor(ckpt_dir: Optional[str]):
    from transformers import WhisperFeatureExtractor

    if ckpt_dir is not None and os.path.isfile(os.path.join(ckpt_dir, "preprocessor_config.json")):
        return WhisperFeatureExtractor.from_pretrained(ckpt_dir)
    return WhisperFeatureExtractor(**FEATURE_EXTRACTOR_SETTINGS)


def official_features(ckpt_dir: Optional[str], wav16k: np.ndarray) -> np.ndarray:
    """Log-mel features as the official processor computes them.

    wav16k: (samples,) float32 at 16 kHz. Returns (128, T) float32, T = samples // 160,
    with the processor's own call options (padding=True, truncation=False), cut to the
    valid frames given by the attention mask.
    """
    wav = np.asarray(wav16k, dtype=np.float32)
    if wav.ndim != 1:
        raise ValueError(f"wav16k must be 1-D (samples,), got shape {wav.shape}")
    fe = _feature_extractor(ckpt_dir)
    out = fe(
        [wav],
        sampling_rate=16000,
        padding=True,
        truncation=False,
        return_attention_mask=True,
        return_tensors="np",
    )
    n = int(out["attention_mask"][0].sum())
    return np.ascontiguousarray(out["input_features"][0][:, :n].astype(np.float32))


def official_prompt_text(processor, context: str = "", language: Optional[str] = None) -> str:
    """The prompt string of the official Qwen3ASRModel._build_text_prompt."""
    msgs = [
        {"role": "system", "content": context or ""},
        {"role": "user", "content": [{"type": "audio", "audio": ""}]},
    ]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    if language:
        text = text + f"language {language}<asr_text>"
    return text


def official_input_ids(processor, n_audio: int, context: str = "", language: Optional[str] = None) -> list:
    """input_ids the official processor produces for a prompt with ``n_audio`` audio tokens.

    The audio pad is expanded by the processor's own replace_multimodal_special_tokens
    with the given length, exactly as in __call__ with audio.
    """
    text = official_prompt_text(processor, context, language)
    expanded = processor.replace_multimodal_special_tokens([text], iter([n_audio]))
    return list(processor.tokenizer(expanded)["input_ids"][0])


def read_config(ckpt_dir: str) -> dict:
    with open(os.path.join(ckpt_dir, "config.json"), encoding="utf-8") as f:
        return json.load(f)


_text_utils: Optional[types.SimpleNamespace] = None


def official_text_utils() -> types.SimpleNamespace:
    """The official text helpers of ``qwen_asr/inference/utils.py`` without importing it.

    That module imports librosa at the top; only its pure-Python text functions are
    needed here, so they are compiled from the module's source. Returns a namespace with
    SUPPORTED_LANGUAGES, normalize_language_name, validate_language,
    detect_and_fix_repetitions and parse_asr_output.
    """
    global _text_utils
    if _text_utils is not None:
        return _text_utils
    import ast
    import typing

    path = os.path.join(_package_root(), "inference", "utils.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    wanted_funcs = {"normalize_language_name", "validate_language", "detect_and_fix_repetitions", "parse_asr_output"}
    wanted_vars = {"SUPPORTED_LANGUAGES", "_ASR_TEXT_TAG", "_LANG_PREFIX"}
    body = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted_funcs:
            body.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in wanted_vars for t in targets):
                body.append(node)
    ns: dict = {name: getattr(typing, name) for name in ("Any", "List", "Optional", "Tuple", "Union")}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
    missing = (wanted_funcs | wanted_vars) - set(ns)
    if missing:
        raise RuntimeError(f"{path} no longer defines {sorted(missing)}")
    _text_utils = types.SimpleNamespace(**{k: ns[k] for k in wanted_funcs | wanted_vars})
    return _text_utils


_ALIGNER_MODULE = "inference/qwen3_forced_aligner.py"
_aligner_text: Optional[types.SimpleNamespace] = None


def _module_without(name: str, reason: str) -> types.ModuleType:
    """A stand-in module whose every attribute raises: it lets an official module that imports
    ``name`` at the top load when only its other parts are used."""
    mod = types.ModuleType(name)

    def missing(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise RuntimeError(f"{name} is not installed ({reason}); '{name}.{attr}' cannot be used")

    mod.__getattr__ = missing  # type: ignore[attr-defined]
    return mod


def official_aligner_text() -> types.SimpleNamespace:
    """The official ``Qwen3ForceAlignProcessor`` (word units, repair) without importing its module.

    ``qwen_asr/inference/qwen3_forced_aligner.py`` imports nagisa, torch and transformers at the
    top; the class itself needs only ``os``, ``unicodedata``, nagisa (Japanese) and soynlp
    (Korean, imported inside ``encode_timestamp``). It is compiled from the module's source
    with ``__file__`` set to that module, so it reads the official Korean word list from the
    installed package. When nagisa is not installed, Japanese raises RuntimeError on use.
    Returns a namespace with ``cls`` (the class), ``processor`` (an instance), ``path`` and
    ``has_nagisa``.
    """
    global _aligner_text
    if _aligner_text is not None:
        return _aligner_text
    import ast
    import typing
    import unicodedata

    path = os.path.join(_package_root(), *_ALIGNER_MODULE.split("/"))
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    body = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Qwen3ForceAlignProcessor"]
    if not body:
        raise RuntimeError(f"{path} no longer defines Qwen3ForceAlignProcessor")
    try:
        import nagisa
        has_nagisa = True
    except ImportError:
        nagisa = _module_without("nagisa", "the official Japanese word units need it")
        has_nagisa = False
    ns: dict = {"__file__": path, "__name__": "qwen_asr_official_aligner_text", "os": os,
                "unicodedata": unicodedata, "nagisa": nagisa}
    ns.update({name: getattr(typing, name) for name in ("Any", "Dict", "List", "Optional", "Union")})
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), ns)
    cls = ns["Qwen3ForceAlignProcessor"]
    _aligner_text = types.SimpleNamespace(cls=cls, processor=cls(), path=path, has_nagisa=has_nagisa)
    return _aligner_text


_aligner_module: Optional[types.ModuleType] = None


def official_aligner_module() -> types.ModuleType:
    """``qwen_asr.inference.qwen3_forced_aligner``, imported for real (once).

    It is imported without the package ``__init__`` (as ``official_modules`` does for the
    transformers backend). Its imports that the dev venv may lack are replaced while it
    loads, and only then: ``librosa`` (imported by ``inference/utils.py``; used there only
    to read audio files and to resample, so pass ``(wav, 16000)`` arrays) and ``nagisa``
    (Japanese words; with the stand-in a Japanese ``align()`` raises RuntimeError). Each
    stand-in is removed from ``sys.modules`` after the import, so later imports of the real
    package are unaffected. Needs torch and transformers.
    """
    global _aligner_module
    if _aligner_module is not None:
        return _aligner_module
    mods = official_modules()
    backend = sys.modules[_BACKEND]
    for name in ("Qwen3ASRConfig", "Qwen3ASRForConditionalGeneration", "Qwen3ASRProcessor"):
        if not hasattr(backend, name):  # what the real package __init__ exports
            setattr(backend, name, getattr(mods, name))
    _bare_package("qwen_asr.inference", os.path.join(_package_root(), "inference"))
    stand_ins = {}
    for name, reason in (("librosa", "the official code reads audio files and resamples with it"),
                         ("nagisa", "the official Japanese word units need it")):
        try:
            importlib.import_module(name)
        except ImportError:
            stand_ins[name] = sys.modules[name] = _module_without(name, reason)
    try:
        _aligner_module = importlib.import_module("qwen_asr.inference.qwen3_forced_aligner")
    finally:
        for name, mod in stand_ins.items():
            if sys.modules.get(name) is mod:
                del sys.modules[name]
    return _aligner_module


def official_aligner(ckpt_dir: str, mistral_regex: bool = False, dtype=None):
    """The official ``Qwen3ForcedAligner`` on a checkpoint directory, loaded by its own
    ``from_pretrained`` (float32 and eager attention unless ``dtype`` says otherwise).

    mistral_regex: keep the tokenizer that ``from_pretrained`` builds for a local directory.
    It passes ``fix_mistral_regex=True``, and transformers 4.57.6 then replaces the Qwen2
    pre-tokenizer regex with a Mistral one whenever the directory's config.json was written by
    transformers 4.57.3 to 4.x (the real aligner's says 4.57.6): "iPhone" becomes "i" + "Phone".
    Loading by hub name (online) keeps the Qwen2 regex. False (default) puts the Qwen2 regex
    processor in its place (``official_processor``), which is what ``qwen3asr.tokenizer`` does.
    """
    import torch

    mod = official_aligner_module()
    aligner = mod.Qwen3ForcedAligner.from_pretrained(
        ckpt_dir, dtype=torch.float32 if dtype is None else dtype, attn_implementation="eager")
    if not mistral_regex:
        aligner.processor = official_processor(ckpt_dir)
    return aligner


@dataclasses.dataclass(frozen=True)
class OfficialAlignment:
    """What the official ``align()`` returned for one input, and what it computed on the way."""

    items: tuple  # ((text, start_time, end_time), ...): the ForcedAlignItem fields (seconds)
    input_ids: np.ndarray  # (L,) int64: the processor's input_ids
    slot_logits: np.ndarray  # (n_slots, classify_num) float32: thinker logits at the <timestamp> positions


def official_align(aligner, wav16k: np.ndarray, text: str, language: str) -> OfficialAlignment:
    """Run ``aligner.align`` on one input and capture the thinker's logits of that very call.

    wav16k: (samples,) float32 at 16 kHz. The logits come from a forward hook on
    ``aligner.model.thinker`` (``align()`` calls it once), so they are the ones its argmax used.
    """
    captured = {}

    def hook(module, args, kwargs, output):
        captured["input_ids"] = kwargs["input_ids"].detach()
        captured["logits"] = output.logits.detach()

    handle = aligner.model.thinker.register_forward_hook(hook, with_kwargs=True)
    try:
        results = aligner.align(audio=(np.asarray(wav16k, dtype=np.float32), 16000), text=text, language=language)
    finally:
        handle.remove()
    ids = captured["input_ids"][0].cpu().numpy().astype(np.int64)
    logits = captured["logits"][0].float().cpu().numpy()
    slots = ids == aligner.timestamp_token_id
    items = tuple((it.text, it.start_time, it.end_time) for it in results[0])
    return OfficialAlignment(items=items, input_ids=ids, slot_logits=np.ascontiguousarray(logits[slots]))
