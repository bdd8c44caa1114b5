"""Double of ``rkllm.api.RKLLM`` (rkllm-toolkit, the x86 converter to .rkllm files; not on PyPI).

Contract checked: the calls qwen3asr_tools.export_rkllm makes to build a decoder:
``load_huggingface(**kw)`` -> ``build(**kw)`` -> ``export_rkllm(path)``, each returning 0 on
success and a code otherwise; the arguments are recorded for the test to compare
(``calls``), and ``codes`` (call name -> return code) scripts failures. export_rkllm writes a
small file so the manifest's checksum has something to hash.
"""

from __future__ import annotations

import sys
import types


class FakeRKLLM:
    """Stands in for rkllm.api.RKLLM: records calls, returns scripted codes, writes the file."""

    calls: list = []
    codes: dict = {}

    def load_huggingface(self, **kw):
        FakeRKLLM.calls.append(("load_huggingface", kw))
        return FakeRKLLM.codes.get("load_huggingface", 0)

    def build(self, **kw):
        FakeRKLLM.calls.append(("build", kw))
        return FakeRKLLM.codes.get("build", 0)

    def export_rkllm(self, path):
        FakeRKLLM.calls.append(("export_rkllm", path))
        rc = FakeRKLLM.codes.get("export_rkllm", 0)
        if rc == 0:
            with open(path, "wb") as f:
                f.write(b"RKLLM fake model")
        return rc


def install(monkeypatch) -> type[FakeRKLLM]:
    """Make ``import rkllm.api`` give FakeRKLLM as RKLLM (undone by ``monkeypatch``), with no
    calls recorded and no failures scripted."""
    api = types.ModuleType("rkllm.api")
    api.RKLLM = FakeRKLLM
    pkg = types.ModuleType("rkllm")
    pkg.api = api
    monkeypatch.setitem(sys.modules, "rkllm", pkg)
    monkeypatch.setitem(sys.modules, "rkllm.api", api)
    FakeRKLLM.calls, FakeRKLLM.codes = [], {}
    return FakeRKLLM
