# Two entry points (see README): `make demo` and `make test`. Both set themselves up.
# `make test-fast` is the edit-run loop: the suite without the tests marked slow.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DEMO_AUDIO ?= audio/en_1.wav

RKNN_VENV ?= .venv-rknn

.PHONY: demo test test-fast setup setup-dev setup-rknn system-deps clean-venv rehearse-board

# The checkout installed editable (pyproject.toml is the one list of dependencies): the console
# scripts, the launchers in scripts/ and `import qwen3asr` then run this checkout's code.
$(VENV)/.runtime: pyproject.toml
	bash scripts/need_disk.sh $(VENV) 250 "the runtime venv $(VENV)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime pyproject.toml requirements-nodeps.txt
	bash scripts/need_disk.sh $(VENV) 1950 "the test packages (torch, transformers, ...) in $(VENV)"
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	touch $@

setup: $(VENV)/.runtime

setup-dev: $(VENV)/.dev system-deps setup-rknn

# rknn-toolkit2 (ONNX -> RKNN conversion and its simulator) needs numpy<2: its own venv,
# built from RKNN_PYTHON (default python3.11; not PYTHON, which builds $(VENV)).
# The script alone decides whether the venv is current (its stamp vs the pins and the script,
# and a toolkit import: about 3 s when nothing is to do), so make and a user running it agree.
setup-rknn:
	bash scripts/setup_rknn_env.sh $(RKNN_VENV)

# Debian packages the tests use (espeak-ng speech, sox, PortAudio, gcc for the RKLLM ABI test,
# chromium and nginx for the server tests);
# installed only if missing.
system-deps:
	bash scripts/install_system_deps.sh

# Transcribe a bundled clip with the bundled default model.
demo: setup
	$(PY) python/transcribe.py --audio $(DEMO_AUDIO)

# The whole test suite.
test: setup-dev
	$(PY) -m pytest -q

# The suite without the tests marked slow (install, browser, nginx, the rknn-toolkit2 simulator,
# CLI subprocesses, the official torch model, the load test: pyproject.toml's markers), for the
# edit-run loop; `make test` (and .ci/run) still runs everything. Sets up the venv only (run
# `make setup-dev` once for the Debian packages and the rknn venv; tests missing them skip).
test-fast: $(VENV)/.dev
	$(PY) -m pytest -q -m "not slow"

# A board install rehearsed in an arm64 Debian under qemu-user (needs root; not part of `make test`).
# See docs/board_rehearsal.md.
rehearse-board:
	bash deploy/rehearse_board.sh

clean-venv:
	rm -rf $(VENV)
