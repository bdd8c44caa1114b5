"""The development tools as an importable package (python/qwen3asr_tools/) with thin launchers at
scripts/NAME.py: every launcher runs its tool, a missing install is a one-line error, children
run this checkout's code, the runtime never imports the tools, and no file edits sys.path."""

from __future__ import annotations

import ast
import glob
import os
import subprocess
import sys

import pytest

import qwen3asr_tools

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "python")
LAUNCHERS = sorted(p for p in glob.glob(os.path.join(ROOT, "scripts", "*.py")) if not os.path.basename(p).startswith("_"))
ENV = dict(os.environ, PYTHONPATH=PYTHON)


def _python_files(*dirs: str):
    for d in dirs:
        yield from glob.glob(os.path.join(ROOT, d, "**", "*.py"), recursive=True)


def _imported_modules(path: str) -> set:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_package_is_this_checkout():
    assert qwen3asr_tools.PYTHON_DIR == PYTHON and qwen3asr_tools.REPO_ROOT == ROOT


# Launchers whose tool is a module of a tools package (the board cost model: qwen3asr_tools.board).
LAUNCHER_TARGETS = {"board_model": "board.cli"}


def test_each_launcher_is_a_tool_with_a_main():
    names = {LAUNCHER_TARGETS.get(os.path.basename(p)[:-3], os.path.basename(p)[:-3]) for p in LAUNCHERS}
    modules = {os.path.relpath(p, os.path.join(PYTHON, "qwen3asr_tools"))[:-3].replace(os.sep, ".")
               for p in glob.glob(os.path.join(PYTHON, "qwen3asr_tools", "**", "*.py"), recursive=True)}
    assert names and names <= modules, names - modules
    for path in LAUNCHERS:
        name = LAUNCHER_TARGETS.get(os.path.basename(path)[:-3], os.path.basename(path)[:-3])
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        runs = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "run"
                and n.args and isinstance(n.args[0], ast.Constant)]
        assert runs == [name] and "_launch" in _imported_modules(path), path


@pytest.mark.parametrize("launcher", LAUNCHERS, ids=lambda p: os.path.basename(p))
def test_launcher_runs_its_tool(launcher, tmp_path):
    """`python scripts/NAME.py --help` from another directory: the tool's own argparse answers."""
    r = subprocess.run([sys.executable, launcher, "--help"], cwd=tmp_path, env=ENV, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"usage: {os.path.basename(launcher)}"), r.stdout[:200]


def test_launcher_without_the_package_says_what_to_install(tmp_path):
    # -E -S: no PYTHONPATH, no site-packages (an editable install there would be found otherwise).
    r = subprocess.run([sys.executable, "-E", "-S", os.path.join(ROOT, "scripts", "export_onnx.py"), "--help"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip() == ("error: the qwen3asr_tools package is not installed: run `pip install -e .` "
                                "in the checkout (or set PYTHONPATH=python)")


def test_child_env_runs_this_checkouts_tools(tmp_path):
    """child_env() is what train_tiny and eval_streaming give `python -m qwen3asr_tools.make_dataset`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path)  # a foreign entry is kept, after ours
    r = subprocess.run([sys.executable, "-c", "import qwen3asr_tools, sys; print(qwen3asr_tools.__file__)"],
                       cwd=tmp_path, env=qwen3asr_tools.child_env(env), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == os.path.join(PYTHON, "qwen3asr_tools", "__init__.py")
    assert qwen3asr_tools.child_env(env)["PYTHONPATH"] == os.pathsep.join([PYTHON, str(tmp_path)])
    r = subprocess.run([sys.executable, "-m", "qwen3asr_tools.make_dataset", "--help"], cwd=tmp_path,
                       env=qwen3asr_tools.child_env(env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("usage: make_dataset.py"), r.stderr[-2000:]


# The runtime's only doors into the tools, both inside functions (never at import): an official
# checkpoint fetched by name is converted with the exporter (qwen3asr.hub.resolve), and
# `qwen3asr-models convert --target` runs the board conversion (qwen3asr.cli.models). The tools
# ship in the same wheel; these need the `convert` extra (onnx), and the runtime never imports
# them otherwise.
TOOL_DOORS = {os.path.join("hub", "resolve.py"): {"qwen3asr_tools.export_onnx"},
              os.path.join("cli", "models.py"): {"qwen3asr_tools.board_convert"}}


def _module_level_imports(path: str) -> set:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_runtime_never_imports_the_tools():
    pkg = os.path.join(PYTHON, "qwen3asr")
    bad = [p for p in _python_files("python/qwen3asr")
           if any(m.split(".")[0] == "qwen3asr_tools" for m in _module_level_imports(p))
           or {m for m in _imported_modules(p) if m.split(".")[0] == "qwen3asr_tools"}
           - TOOL_DOORS.get(os.path.relpath(p, pkg), set())]
    bad += [p for p in (os.path.join(PYTHON, "transcribe.py"), os.path.join(PYTHON, "mic_stream.py"))
            if any(m.split(".")[0] == "qwen3asr_tools" for m in _imported_modules(p))]
    assert not bad


def test_no_file_touches_sys_path():
    """The import path comes from the install (or PYTHONPATH, or pytest's pythonpath setting)."""
    offenders = []
    for path in _python_files("python", "scripts", "tests"):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                    and node.value.id == "sys"):
                offenders.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not offenders
