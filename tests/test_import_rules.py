"""Import rules, checked on the source with ast: no library module imports the engine (it
orchestrates the stages; the programs and servers sit on top of it), and test modules share
doubles through tests/doubles/ (and helpers through bundles, fixtures, server_proc), never by
importing another test module (which would run that module's fixtures, skips and module-level
code a second time under another name)."""

from __future__ import annotations

import ast
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
PKG = os.path.join(ROOT, "python", "qwen3asr")


def _test_module_names() -> set[str]:
    return {f[:-3] for f in os.listdir(TESTS) if f.startswith("test_") and f.endswith(".py")}


def imported_test_modules(source: str, test_modules: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every import of a module in ``test_modules`` in ``source``: ``import x``,
    ``from x import y``, ``from . import x`` and ``importlib.import_module("x")`` /
    ``__import__("x")`` with a literal name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if node.module else []
            if node.level:
                names += [a.name for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names = [node.args[0].value]
        found += [(node.lineno, n) for n in names if n.split(".")[0] in test_modules]
    return sorted(found)


def test_the_import_check_finds_every_spelling():
    src = ("import os\nimport test_a\nfrom test_b import Fake\nfrom . import test_c\n"
           "import importlib\nm = importlib.import_module('test_d')\nn = __import__('test_e.x')\n"
           "from doubles.rkllm_c import Fake\nimport test_other_thing_not_a_module\n")
    assert imported_test_modules(src, {"test_a", "test_b", "test_c", "test_d", "test_e"}) == [
        (2, "test_a"), (3, "test_b"), (4, "test_c"), (6, "test_d"), (7, "test_e.x")]


def test_no_test_module_imports_another_test_module():
    modules = _test_module_names()
    offenders = []
    for dirpath, dirnames, files in os.walk(TESTS):  # symlinked dirs (the .cache) are not entered
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    for line, name in imported_test_modules(fh.read(), modules):
                        offenders.append(f"{os.path.relpath(path, TESTS)}:{line} imports {name}")
    assert offenders == []


# ------------------------------------------------------------------ the library: no cycle

def test_no_library_module_imports_the_engine():
    allowed = {"__init__.py", "engine.py"}
    offenders = []
    for dirpath, _, files in os.walk(PKG):
        rel_dir = os.path.relpath(dirpath, PKG)
        if rel_dir.split(os.sep)[0] in ("cli", "server"):
            continue  # the programs and servers sit on top of the engine
        for f in files:
            if not f.endswith(".py") or (rel_dir == "." and f in allowed):
                continue
            tree = ast.parse(open(os.path.join(dirpath, f)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1] == "engine":
                    offenders.append(f"{rel_dir}/{f}:{node.lineno}")  # from .engine / qwen3asr.engine import
                if isinstance(node, ast.ImportFrom) and any(a.name in ("engine", "Qwen3ASREngine")
                                                            for a in node.names) and \
                        (node.level or (node.module or "").split(".")[0] == "qwen3asr"):
                    offenders.append(f"{rel_dir}/{f}:{node.lineno}")  # from . / qwen3asr import engine, Qwen3ASREngine
                if isinstance(node, ast.Import) and any(a.name.split(".")[-1] == "engine" and
                                                        a.name.startswith("qwen3asr") for a in node.names):
                    offenders.append(f"{rel_dir}/{f}:{node.lineno}")  # import qwen3asr.engine
    assert offenders == []
