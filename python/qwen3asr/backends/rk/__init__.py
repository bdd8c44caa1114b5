"""The Rockchip backend: every line of code that touches the board's SDKs lives in this package.

==============  ============================================================================
``backend``     the rk backend: RKNN encoder + RKLLM text decoder (the engine's seams)
``aligner``     the forced aligner on the board: RKNN encoder + RKLLM hidden states, head on the host
``options``     ``RKOptions``, the board settings
``rknn``        the RKNN encoder runner (rknn-toolkit-lite2 on the NPU)
``rknn_meta``   the ``.rknn`` files' metadata format, checked against the bundle manifest
``rkllm``       the ctypes binding of librkllmrt.so (1.2.x and 1.3.x ABIs)
``soc``         which board: SoC, NPU cores, CPU speeds (device tree, sysfs)
``elf``         whether a shared library file can load on this machine
==============  ============================================================================

Importing this package loads nothing: ``rknnlite`` is imported and librkllmrt.so opened only
when a backend is created.
"""

from .options import RKOptions

__all__ = ["RKOptions"]
