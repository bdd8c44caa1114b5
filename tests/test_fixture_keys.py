"""Cache keys of the generated fixtures (tests/fixtures.py, tests/bundles.py): they cover the
source of every module the generator imports, found by walking the imports (so a moved or new
module is covered without a list to edit), and nothing else."""

from __future__ import annotations

import os
import shutil
import textwrap

import pytest

import fixtures

EXPORTER = "qwen3asr_tools.export_onnx"

# A small tree laid out as the library will be (modules inside packages, a shim left at an old
# path): tools.export imports through a shim, a relative import two levels up, a function-level
# import and a package it only passes through; pkg/__init__.py re-exports a runtime the exporter
# never calls.
TREE = {
    "pkg/__init__.py": "from .engine import Engine\n",
    "pkg/engine.py": "from .streaming.session import Session\n\n\nclass Engine:\n    pass\n",
    "pkg/unused.py": "X = 1\n",
    "pkg/streaming/__init__.py": "",
    "pkg/streaming/session.py": "class Session:\n    pass\n",
    "pkg/backends/__init__.py": "from .onnx import make_session\n",
    "pkg/backends/onnx.py": "from ..bundle import load\n\n\ndef make_session():\n    return load()\n",
    "pkg/bundle.py": "def load():\n    from .encoder import variant\n    return variant\n",
    "pkg/encoder.py": "variant = 1\n",
    "pkg/old_backend.py": "from .backends.onnx import *  # noqa: F401,F403\n",
    "tools/__init__.py": "",
    "tools/export.py": "import os\n\nimport pkg.streaming.session\nfrom pkg.old_backend import make_session\n\n"
                       "from . import graphs\n",
    "tools/graphs.py": "from pkg import bundle\n",
}


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
    return str(root)


def _append(root, rel, text="# edited\n"):
    with open(os.path.join(root, rel), "a") as f:
        f.write(text)


def test_the_walk_follows_shims_packages_relative_and_function_level_imports(tmp_path):
    root = _write(tmp_path, TREE)
    found = fixtures.source_modules("tools.export", root=root)
    assert sorted(found) == ["pkg", "pkg.backends", "pkg.backends.onnx", "pkg.bundle", "pkg.encoder",
                             "pkg.old_backend", "pkg.streaming", "pkg.streaming.session", "tools", "tools.export",
                             "tools.graphs"]
    assert found["pkg.backends"] == os.path.join(root, "pkg", "backends", "__init__.py")
    assert found["pkg.encoder"] == os.path.join(root, "pkg", "encoder.py")
    # importing a name from the package itself follows its __init__.py (here: into the engine)
    _append(root, "tools/graphs.py", "from pkg import Engine\n")
    assert {"pkg.engine"} <= set(fixtures.source_modules("tools.export", root=root))
    with pytest.raises(ValueError, match="no module tools.nothing under"):
        fixtures.source_modules("tools.nothing", root=root)


def test_the_key_changes_with_every_module_read_and_only_with_those(tmp_path):
    root = _write(tmp_path / "a", TREE)
    key = fixtures._generator_hash("tools.export", root=root)
    assert key == fixtures._generator_hash("tools.export", root=_write(tmp_path / "b", TREE))  # any checkout
    for unread in ("pkg/engine.py", "pkg/unused.py"):
        _append(root, unread)
    assert fixtures._generator_hash("tools.export", root=root) == key
    for read in ("pkg/encoder.py", "pkg/backends/__init__.py", "pkg/__init__.py", "pkg/streaming/session.py"):
        _append(root, read)
        new = fixtures._generator_hash("tools.export", root=root)
        assert new != key, read
        key = new
    # a new module imported by one that is read is covered without editing a list
    _write(root, {"pkg/newmod.py": "Y = 2\n"})
    assert fixtures._generator_hash("tools.export", root=root) == key
    _append(root, "pkg/encoder.py", "from . import newmod\n")
    key = fixtures._generator_hash("tools.export", root=root)
    _append(root, "pkg/newmod.py")
    assert fixtures._generator_hash("tools.export", root=root) != key


def test_the_exporters_key_covers_the_runtime_modules_it_imports(tmp_path):
    """The key of the cached test bundle: export_onnx also imports qwen3asr.bundle and
    qwen3asr.encoder (missing from the list the key was once built from); a change to one of them,
    in a copy of python/, changes the key, a change to the engine (not imported) does not."""
    found = fixtures.source_modules(EXPORTER)
    assert {EXPORTER, "qwen3asr_tools.onnx_graphs", "qwen3asr_tools.checkpoint", "qwen3asr.bundle",
            "qwen3asr.encoder", "qwen3asr", "qwen3asr_tools"} <= set(found)
    assert "qwen3asr.engine" not in found
    copy = str(tmp_path / "python")
    for pkg in ("qwen3asr", "qwen3asr_tools"):
        shutil.copytree(os.path.join(fixtures.PYTHON, pkg), os.path.join(copy, pkg),
                        ignore=shutil.ignore_patterns("__pycache__", "data", "static"))
    key = fixtures._generator_hash(EXPORTER)
    assert fixtures._generator_hash(EXPORTER, root=copy) == key
    _append(copy, "qwen3asr/engine.py")
    assert fixtures._generator_hash(EXPORTER, root=copy) == key
    _append(copy, os.path.relpath(found["qwen3asr.encoder"], fixtures.PYTHON))
    assert fixtures._generator_hash(EXPORTER, root=copy) != key


def test_the_checkpoint_key_covers_the_languages_table():
    """make_random_checkpoint writes the languages of qwen3asr.languages into the config; the
    list the checkpoint key was once built from missed it."""
    found = fixtures.source_modules("qwen3asr_tools.make_random_checkpoint")
    assert {"qwen3asr.languages", "qwen3asr.tokenizer", "qwen3asr_tools.official_ref",
            "qwen3asr_tools.make_tokenizer_files"} <= set(found)
