"""Double of ``rknn.api.RKNN`` (rknn-toolkit2, the x86 converter to .rknn files and its simulator).

Contract checked: qwen3asr_tools.onnx2rknn checks the return code of every toolkit call
(config, load_onnx, build, export_rknn, init_runtime) and releases the toolkit whatever
happens. ``FailingRKNN`` returns -1 from the call named by ``failing`` and 0 from the others,
and logs every call (``log``) so a test can see that release came last, and the keyword
arguments of each (``kwargs``: call name -> dict) so it can see what the toolkit was given.
"""

from __future__ import annotations


class FailingRKNN:
    """Stand-in for rknn.api.RKNN whose ``failing`` call returns -1 (every call is logged)."""

    failing = "build"
    log: list = []
    kwargs: dict = {}  # call name -> its keyword arguments (the last call of that name)

    def __init__(self, verbose=False):
        pass

    def _ret(self, name, **kw):
        self.log.append(name)
        self.kwargs[name] = kw
        return -1 if name == self.failing else 0

    def config(self, **kw):
        return self._ret("config", **kw)

    def load_onnx(self, **kw):
        return self._ret("load_onnx", **kw)

    def build(self, **kw):
        with open("check_dynshape.onnx", "wb"):  # the real toolkit leaves check files in the working directory
            pass
        return self._ret("build", **kw)

    def export_rknn(self, path):
        with open(path, "wb"):  # written before the code is returned, as a failed export can leave a file
            pass
        return self._ret("export_rknn", path=path)

    def init_runtime(self, **kw):
        return self._ret("init_runtime", **kw)

    def release(self):
        self.log.append("release")
