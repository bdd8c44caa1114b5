"""Cached generated test data (pytest-independent).

``checkpoint(preset)`` returns a random-weight official checkpoint directory and
``tokenizer_dir()`` a directory with only the tokenizer files, both built once under
tests/.cache/ (gitignored). The cache key holds the preset, seed, dtype, FIXTURE_VERSION
and a hash of the source of every module the generator imports (``source_modules``: found by
walking the imports from the generator's module, so a new or moved module is covered without a
list to edit), so a change to a generator rebuilds. Builds go to a temporary directory next to the
final one and are moved in with os.replace, so two pytest processes building the same fixture
at once both end with a complete directory.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import tempfile
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "python")
CACHE = os.path.join(ROOT, "tests", ".cache")
FIXTURE_VERSION = "1"
_COMPLETE = ".complete"


def _module_file(name: str, root: str) -> str | None:
    """The file of dotted module ``name`` under ``root``: name/as/path.py, or its __init__.py if it
    is a package; None if there is neither (an attribute, or no such module)."""
    base = os.path.join(root, *name.split("."))
    if os.path.isfile(base + ".py"):
        return base + ".py"
    if os.path.isfile(os.path.join(base, "__init__.py")):
        return os.path.join(base, "__init__.py")
    return None


def _imports(name: str, path: str, root: str, packages: set[str]) -> list[str]:
    """Dotted names of the modules in ``packages`` whose code module ``name`` (file ``path``) runs
    by importing from them, at any depth of its code (a function's imports run when it is
    called): ``import x.y`` gives x.y; ``from x import a, b`` gives x.a and x.b where they are
    submodules, and x itself if a name is not (it is then read from x, or x is only a package
    passed through); relative imports are resolved against the module's package."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = name.split(".") if os.path.basename(path) == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from the module's own package, up level - 1 packages
                if node.level - 1 >= len(package):
                    continue
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            subs = [f"{target}.{a.name}" for a in node.names if a.name != "*"]
            subs = [m for m in subs if _module_file(m, root) is not None]
            found += subs
            if len(subs) < len(node.names):
                found.append(target)
    return [m for m in found if m.split(".")[0] in packages]


def source_modules(*entries: str, root: str = PYTHON) -> dict[str, str]:
    """Dotted name -> file of every module under ``root`` (this checkout's python/) that the
    modules ``entries`` import, directly or through each other, themselves included.

    The walk follows the import statements into the packages under ``root`` (qwen3asr,
    qwen3asr_tools), resolving relative imports and telling modules from packages (x.py or
    x/__init__.py), so a module that moves into a package, or a new one, is found without a list
    to edit. The __init__.py of every package on a module's dotted path is included (Python runs
    it) but its own imports are followed only when the code imports a name from that package
    (``from qwen3asr import Qwen3ASREngine``, ``import qwen3asr``), not when it only passes
    through it (``from qwen3asr.bundle import X``, ``from . import checkpoint``):
    qwen3asr/__init__.py imports the whole runtime (engine, streaming, backends), which the
    exporter never calls, and following it would rebuild the cached bundles on every library
    edit. (Library modules have no import-time side effects: docs' style, habit 9.)"""
    packages = {d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "__init__.py"))}
    for name in entries:
        if _module_file(name, root) is None:
            raise ValueError(f"no module {name} under {root}")
    found: dict[str, str] = {}
    followed: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        path = _module_file(name, root)
        if name in followed or path is None:  # None: a name read from a module, not a module
            continue
        followed.add(name)
        found[name] = path
        parts = name.split(".")
        for i in range(1, len(parts)):  # the packages on its path: their __init__.py runs first
            package = _module_file(".".join(parts[:i]), root)
            if package is not None:
                found.setdefault(".".join(parts[:i]), package)
        todo += _imports(name, path, root, packages)
    return found


def _generator_hash(*modules: str, root: str = PYTHON) -> str:
    """12 hex digits over FIXTURE_VERSION and the dotted name and source of every module that
    ``modules`` (dotted names under ``root``, e.g. ``qwen3asr_tools.export_onnx``) import
    (``source_modules``), in the order of the names: the same sources give the same key in any
    checkout."""
    h = hashlib.sha256(FIXTURE_VERSION.encode())
    for name, path in sorted(source_modules(*modules, root=root).items()):
        with open(path, "rb") as f:
            data = f.read()
        h.update(f"\0{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()[:12]


def _cached_dir(key: str, build: Callable[[str], None]) -> str:
    """Directory CACHE/key, built by ``build(tmp_dir)`` if not already complete."""
    final = os.path.join(CACHE, key)
    if os.path.isfile(os.path.join(final, _COMPLETE)):
        return final
    os.makedirs(CACHE, exist_ok=True)
    if os.path.isdir(final):  # left incomplete by a crashed run
        shutil.rmtree(final, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix=f".{key}-", dir=CACHE)
    try:
        build(tmp)
        with open(os.path.join(tmp, _COMPLETE), "w") as f:
            f.write(key + "\n")
        try:
            os.replace(tmp, final)
        except OSError:
            # Another process moved its copy in first: keep that one.
            if not os.path.isfile(os.path.join(final, _COMPLETE)):
                raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def tokenizer_dir() -> str:
    """A directory with vocab.json, merges.txt, tokenizer_config.json, chat_template.json."""
    from qwen3asr_tools.make_tokenizer_files import write_tokenizer_files

    key = f"tokenizer-{_generator_hash('qwen3asr_tools.make_tokenizer_files')}"
    return _cached_dir(key, lambda d: write_tokenizer_files(d))


def checkpoint(preset: str = "tiny-a", seed: int = 0, dtype: str = "float32") -> str:
    """A random-weight official checkpoint directory for ``preset`` (see
    python/qwen3asr_tools/make_random_checkpoint.py). Needs torch, transformers and qwen-asr."""
    from qwen3asr_tools.make_random_checkpoint import make_checkpoint

    gen = _generator_hash("qwen3asr_tools.make_random_checkpoint")
    key = f"ckpt-{preset}-s{seed}-{dtype}-{gen}"
    return _cached_dir(key, lambda d: make_checkpoint(preset, d, seed=seed, dtype=dtype))


def aligner_checkpoint(preset: str = "fa-tiny-a", seed: int = 0, dtype: str = "float32") -> str:
    """A random-weight official Qwen3-ForcedAligner checkpoint directory for ``preset`` (an
    ``ALIGNER_PRESETS`` name of python/qwen3asr_tools/make_random_checkpoint.py), with the
    aligner's tokenizer files. Needs torch, transformers and qwen-asr."""
    from qwen3asr_tools.make_random_checkpoint import ALIGNER_PRESETS, make_checkpoint

    if preset not in ALIGNER_PRESETS:
        raise ValueError(f"unknown aligner preset {preset!r}; accepted: {', '.join(ALIGNER_PRESETS)}")
    gen = _generator_hash("qwen3asr_tools.make_random_checkpoint", "qwen3asr_tools.make_tokenizer_files",
                          "qwen3asr_tools.official_ref", "qwen3asr.tokenizer", "qwen3asr.aligner.words")
    key = f"ckpt-{preset}-s{seed}-{dtype}-{gen}"
    return _cached_dir(key, lambda d: make_checkpoint(preset, d, seed=seed, dtype=dtype))
