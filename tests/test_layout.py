"""The package layout's rules, checked on the source (ast), so a new module is covered without
editing this file: who may import the hardware SDKs and the backends, what the backends may
import, and that every module path of the flat layout still works for one release."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(ROOT, "python", "qwen3asr")

# Module paths of the flat layout (before 0.2) -> names users imported from them.
SHIMS = {
    "qwen3asr.stream": ("StreamSession", "StreamResult", "StreamStats", "ChunkStats", "StreamOptions",
                        "positions_needed", "LEFT_CONTEXT", "LOOKAHEAD", "HEADER_TOKENS", "EDGE_FRAMES"),
    "qwen3asr.onnx_backend": ("OnnxDecoder", "OnnxTextDecoder", "OnnxEncoderRunner", "KVCache", "make_session",
                              "create_onnx_decoder", "create_onnx_encoder", "CACHE_STEP"),
    "qwen3asr.prefix": ("PrefixCache", "PrefixCacheOptions", "NO_PREFIX_CACHE", "checked_prefix_len"),
    "qwen3asr.rk_backend": ("RKOptions", "RKLLMTextDecoder", "RKBackendError", "create_rk_backend", "rkllm_entry",
                            "rkllm_options", "decoder_path", "ENV_SOC", "BASE_DOMAIN_ID"),
    "qwen3asr.rknn_backend": ("RknnEncoderRunner", "RknnModel", "RknnModelError", "create_rknn_encoder",
                              "read_rknn_metadata", "custom_string", "encoder_digest", "detect_soc",
                              "resolve_core_mask", "SUPPORTED_SOCS", "CORE_MASKS", "META_VERSION", "RKNN_MAGIC",
                              "install_hint", "check_rknn_runtime"),
    "qwen3asr.rkllm": ("RKLLMRuntime", "RKLLMOptions", "RKLLMError", "RepetitionGuard", "load_library",
                       "resolve_abi", "describe_library_file", "ENV_LIB", "ENV_ABI"),
}
SHIM_FILES = {name.split(".")[1] + ".py" for name in SHIMS}


def _modules():
    """(path relative to the package, dotted module name, ast) of every module of qwen3asr."""
    for dirpath, _, files in os.walk(PKG):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, PKG)
            parts = ["qwen3asr"] + rel[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            with open(path, encoding="utf-8") as fh:
                yield rel, ".".join(parts), ast.parse(fh.read(), path)


def _imports(module: str, tree: ast.AST, is_package: bool):
    """(line, absolute module name) of every import in ``tree``; ``from . import x`` gives ``pkg.x``."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            yield node.lineno, mod
            for a in node.names:  # `from .backends import rk` / `from . import stream` name modules too
                yield node.lineno, f"{mod}.{a.name}"


def _all_imports():
    for rel, module, tree in _modules():
        for line, name in _imports(module, tree, rel.endswith("__init__.py")):
            yield rel, module, line, name


def test_the_import_walker_resolves_relative_imports():
    tree = ast.parse("from ..mel import HOP\nfrom . import session\nimport ctypes\n")
    got = {name for _, name in _imports("qwen3asr.streaming.window", tree, False)}
    assert {"qwen3asr.mel", "qwen3asr.mel.HOP", "qwen3asr.streaming", "qwen3asr.streaming.session", "ctypes"} <= got


def test_only_the_rk_backend_touches_the_hardware_sdks():
    """rknnlite and ctypes (librkllmrt.so) are imported only under backends/rk/."""
    offenders = [f"{rel}:{line} imports {name}" for rel, _, line, name in _all_imports()
                 if name.split(".")[0] in ("rknnlite", "ctypes")
                 and not rel.startswith(os.path.join("backends", "rk") + os.sep)]
    assert offenders == []


def test_stages_and_layers_never_import_the_backends():
    """Only the engine (the one orchestrator), the package's public names, the programs (cli,
    server) and the deprecation shims reach into qwen3asr.backends."""
    allowed_top = {"engine.py", "__init__.py"} | SHIM_FILES
    offenders = []
    for rel, _, line, name in _all_imports():
        first = rel.split(os.sep)[0]
        if first in ("backends", "cli", "server") or rel in allowed_top:
            continue
        if name == "qwen3asr.backends" or name.startswith("qwen3asr.backends."):
            offenders.append(f"{rel}:{line} imports {name}")
    assert offenders == []


def test_backends_sit_below_the_engine():
    """A backend fills the seams; it never calls up into the engine, streaming, long files or programs."""
    above = ("qwen3asr.engine", "qwen3asr.streaming", "qwen3asr.longform", "qwen3asr.server", "qwen3asr.cli",
             "qwen3asr.stream")
    offenders = [f"{rel}:{line} imports {name}" for rel, _, line, name in _all_imports()
                 if rel.startswith("backends" + os.sep)
                 and any(name == a or name.startswith(a + ".") for a in above)]
    assert offenders == []


def test_nothing_in_the_package_imports_a_deprecated_path():
    offenders = [f"{rel}:{line} imports {name}" for rel, _, line, name in _all_imports()
                 if rel not in SHIM_FILES and any(name == s or name.startswith(s + ".") for s in SHIMS)]
    assert offenders == []


@pytest.mark.parametrize("old", sorted(SHIMS))
def test_every_flat_layout_path_still_works_and_warns(old):
    code = (f"import warnings\nwarnings.simplefilter('error', DeprecationWarning)\n"
            f"try:\n    import {old}\nexcept DeprecationWarning as w:\n    print('warned:', w)\n"
            f"warnings.simplefilter('ignore', DeprecationWarning)\nimport {old} as m\n"
            f"print(sorted(n for n in {list(SHIMS[old])!r} if not hasattr(m, n)))\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    warned, missing = out.stdout.strip().split("\n")
    assert warned.startswith(f"warned: {old} moved to qwen3asr.") and "next release" in warned
    assert missing == "[]"
