"""Test doubles: stand-ins for what the code under test calls and a test cannot (or should not)
run here: the Rockchip SDKs and runtime libraries, a board, the decoder. Each module's docstring
names the real contract its double checks. Test modules import doubles from here, never from
another test module (tests/test_import_rules.py checks that).

- rkllm_c: the C double of librkllmrt.so (tests/c/fake_rkllm.c): gcc builds, the test-side
  handle, token script items; with a capture shim for the embeddings it is handed.
- rknnlite: rknnlite.api.RKNNLite (rknn-toolkit-lite2) over ONNX Runtime, and stand-in .rknn files.
- rknn_toolkit: rknn.api.RKNN (rknn-toolkit2, the converter) failing at a chosen call.
- rkllm_toolkit: rkllm.api.RKLLM (rkllm-toolkit, the converter) recording its calls.
- board: a fake board root (sysfs, procfs, debugfs of RK3588 / RK3576) and stand-in ELF libraries.
- programs: shell-script doubles of a Python interpreter, sudo and apt-get for setup_board.sh.
- decoder: a scripted decoder in place of engine.generate (the TextDecoder seam).
- tokenizer: a tokenizer with given pieces (encode/decode) for the word-timing code.
"""
