"""Double of ``rknn.api.RKNN`` (rknn-toolkit2, the x86 converter to .rknn files and its simulator).

Contract checked: qwen3asr_tools.onnx2rknn checks the return code of every toolkit call
(config, load_onnx, build, export_rknn, init_runtime) and releases the toolkit whatever
happens. ``FailingRKNN`` returns -1 from the call named by ``failing`` and 0 from the others,
and logs every call (``log``) so a test can see that release came last.
"""

from __future__ import annotations


class FailingRKNN:
    """Stand-in for rknn.api.RKNN whose ``failing`` call returns -1 (every call is logged)."""

    failing = "build"
    log: list = []

    def __init__(self, verbose=False):
        pass

    def _ret(self, name):
        self.log.append(name)
        return -1 if name == self.failing else 0

    def config(self, **kw):
        return self._ret("config")

    def load_onnx(self, **kw):
        return self._ret("load_onnx")

    def build(self, **kw):
        return self._ret("build")

    def export_rknn(self, path):
        return self._ret("export_rknn")

    def init_runtime(self, **kw):
        return self._ret("init_runtime")

    def release(self):
        self.log.append("release")
