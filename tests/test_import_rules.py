"""Import rules, checked on the source with ast: no library module imports the engine (it
orchestrates the stages; the programs and servers sit on top of it); only backends/rk touches the
board SDKs; stages never import the backends, which never import upward; every module path of the
flat layout still works, with a warning, for one release; and test modules share
doubles through tests/doubles/ (and helpers through bundles, fixtures, server_proc), never by
importing another test module (which would run that module's fixtures, skips and module-level
code a second time under another name). The tools' board cost model (qwen3asr_tools/board)
has no import circle."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

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


# ------------------------------------------------------------------ the package layout's rules

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
    """rknnlite and ctypes (librkllmrt.so) are imported only under backends/rk/; the one other
    ctypes user is backends/pages.py, libc's madvise for the lean profile's mapped weights."""
    offenders = [f"{rel}:{line} imports {name}" for rel, _, line, name in _all_imports()
                 if name.split(".")[0] in ("rknnlite", "ctypes")
                 and not rel.startswith(os.path.join("backends", "rk") + os.sep)
                 and not (name.split(".")[0] == "ctypes" and rel == os.path.join("backends", "pages.py"))]
    assert offenders == []


def test_stages_and_layers_never_import_the_backends():
    """Only the orchestrators (the engine; the aligner's model, which loads its own backend), the
    package's public names, the programs (cli, server) and the deprecation shims reach into
    qwen3asr.backends; besides them the VAD takes the ONNX backend's session maker (its Silero
    model is an ONNX model whatever the backend) and nothing else."""
    allowed_top = {"engine.py", "__init__.py", os.path.join("aligner", "model.py")} | SHIM_FILES
    allowed = {("vad.py", "qwen3asr.backends.onnx"), ("vad.py", "qwen3asr.backends.onnx.make_session"),
               # which SoC's Rockchip files a published bundle is fetched with (the board's, as the rk backend finds it)
               (os.path.join("hub", "resolve.py"), "qwen3asr.backends.rk.soc"),
               (os.path.join("hub", "resolve.py"), "qwen3asr.backends.rk.soc.detect_soc")}
    offenders = []
    for rel, _, line, name in _all_imports():
        first = rel.split(os.sep)[0]
        if first in ("backends", "cli", "server") or rel in allowed_top or (rel, name) in allowed:
            continue
        if name == "qwen3asr.backends" or name.startswith("qwen3asr.backends."):
            offenders.append(f"{rel}:{line} imports {name}")
    assert offenders == []


def test_backends_sit_below_the_engine():
    """A backend fills the seams; it never calls up into the engine, streaming, long files or programs."""
    above = ("qwen3asr.engine", "qwen3asr.streaming", "qwen3asr.longform", "qwen3asr.onepass", "qwen3asr.plan",
             "qwen3asr.server", "qwen3asr.cli", "qwen3asr.stream")
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


# ------------------------------------------------------------------ the tools' cost model: no import circle

BOARD = os.path.join(ROOT, "python", "qwen3asr_tools", "board")


def package_import_graph(package: str, sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (at module level or inside a function), from
    ``sources``: module name relative to the package ("" for its __init__, "costs") -> source text.
    ``from . import x`` and ``from .x import y`` name module x; ``from . import name`` of something
    that is not a module names the package itself."""
    modules = {package + ("." + m if m else "") for m in sources}
    graph: dict[str, set[str]] = {}
    for rel, text in sources.items():
        module = package + ("." + rel if rel else "")
        here = module.split(".") if not rel else module.split(".")[:-1]  # what `from .` means in it
        deps = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])
                                if node.level else [node.module or ""])
                for a in node.names:
                    if f"{base}.{a.name}" in modules:
                        deps.add(f"{base}.{a.name}")
                    elif base in modules:
                        deps.add(base)
        graph[module] = deps - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` as [a, b, ..., a], or [] if it has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_import_graph_and_cycle_check_find_a_circle():
    sources = {"": '"""pkg"""\n', "low": "import os\n", "mid": "from .low import X\nfrom .. import ROOT\n",
               "high": "from . import low, mid\n", "late": "def f():\n    from pkg.high import g\n"}
    graph = package_import_graph("pkg", sources)
    assert graph == {"pkg": set(), "pkg.low": set(), "pkg.mid": {"pkg.low"}, "pkg.high": {"pkg.low", "pkg.mid"},
                     "pkg.late": {"pkg.high"}}
    assert find_cycle(graph) == []
    sources["low"] = "def f():\n    from .late import h\n"  # a function-level import closes a circle too
    assert find_cycle(package_import_graph("pkg", sources)) == ["pkg.high", "pkg.low", "pkg.late", "pkg.high"]


def test_the_board_cost_model_has_no_import_circle():
    """qwen3asr_tools/board: imports run one way, from the report down to the budget."""
    sources = {}
    for f in sorted(os.listdir(BOARD)):
        if f.endswith(".py"):
            with open(os.path.join(BOARD, f), encoding="utf-8") as fh:
                sources["" if f == "__init__.py" else f[:-3]] = fh.read()
    graph = package_import_graph("qwen3asr_tools.board", sources)
    assert {"qwen3asr_tools.board.costs", "qwen3asr_tools.board.words"} <= graph["qwen3asr_tools.board.report"]
    assert find_cycle(graph) == []
    # and in the order its docstring lists them, lowest first
    order = ["qwen3asr_tools.board." + m for m in re.findall(r"^- ``(\w+)``", ast.get_docstring(ast.parse(
        sources[""])), re.M)]
    assert sorted(order) == sorted(m for m in graph if m != "qwen3asr_tools.board")
    upward = [f"{m} imports {d}" for m in order for d in graph[m] if d in order and order.index(d) > order.index(m)]
    assert upward == []


# ------------------------------------------------------------------ module size (CONTRIBUTING.md)

MAX_MODULE_LINES = 500
LONG_BY_NATURE = {os.path.join("backends", "rk", "rkllm.py"),  # one ctypes declaration per C struct
                  "itn.py"}  # the inverse text normalization rules


def test_no_library_module_passes_500_lines():
    """A module past it has two jobs: a policy grown inside an orchestrator, or two stages."""
    over = []
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), PKG)
            if f.endswith(".py") and rel not in LONG_BY_NATURE:
                with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                    n = sum(1 for _ in fh)
                if n > MAX_MODULE_LINES:
                    over.append(f"{rel}: {n} lines")
    assert over == []


def test_the_orchestrators_stay_small():
    """The engine about 400 lines (420 at most); the stream session's class under 300 lines and 24 fields."""
    import ast

    with open(os.path.join(PKG, "engine.py"), encoding="utf-8") as fh:
        assert sum(1 for _ in fh) <= 420
    src = open(os.path.join(PKG, "streaming", "session.py"), encoding="utf-8").read()
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "StreamSession")
    assert cls.end_lineno - cls.lineno + 1 <= 300
    fields = {t.attr for n in ast.walk(cls) if isinstance(n, (ast.Assign, ast.AnnAssign))
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
              if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    assert len(fields) <= 24, sorted(fields)


def _changelog_removal() -> tuple[str, str]:
    """(the version the package says it is, the version CHANGELOG.md's "Deprecated" entry removes
    the flat layout's modules in), both read from the files."""
    import re

    with open(os.path.join(PKG, "__init__.py"), encoding="utf-8") as fh:
        version = re.search(r'^__version__ = "([^"]+)"', fh.read(), re.M).group(1)
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as fh:
        changelog = fh.read()
    deprecated = changelog.split("### Deprecated", 1)[1]
    removal = re.search(r"removed in (\d+\.\d+\.\d+)", deprecated).group(1)
    missing = [name for name in SHIMS if f"`{name}`" not in deprecated]
    assert missing == [], f"CHANGELOG.md's Deprecated entry does not name {missing}"
    assert f"## {version}" in changelog, f"CHANGELOG.md has no entry for version {version}"
    return version, removal


def test_the_deprecated_modules_go_away_in_the_version_the_changelog_names():
    """Once __version__ reaches the removal version of CHANGELOG.md, the deprecation shims (and
    _compat.py, which only they use) must be gone, and SHIMS above with them."""
    version, removal = _changelog_removal()

    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".")[:3])

    assert key(removal) > key("0.2.0")  # the shims came with 0.2.0 and live one release
    present = sorted(f for f in SHIM_FILES | {"_compat.py"} if os.path.exists(os.path.join(PKG, f)))
    if key(version) >= key(removal):
        assert present == [], (f"version {version} is the one CHANGELOG.md removes the flat layout's modules in; "
                               f"delete python/qwen3asr/{', '.join(present)} and SHIMS in this file")
