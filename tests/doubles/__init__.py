"""Test doubles: stand-ins for what the code under test calls and a test cannot run here (the
Rockchip SDKs and runtime libraries, a board). Each module's docstring names the real contract
its double checks. Test modules import doubles from here, never from another test module
(tests/test_import_rules.py checks that).

- rkllm_c: the C double of librkllmrt.so (tests/c/fake_rkllm.c): gcc builds, the test-side
  handle, token script items.
- rknnlite: rknnlite.api.RKNNLite (rknn-toolkit-lite2) over ONNX Runtime, and stand-in .rknn files.
"""
