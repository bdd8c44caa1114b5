"""The ggml peers of the peer benchmark (bench_peers), installed from the package registries into a
work directory outside the checkout, and the random-weight checkpoint converted for each.

Layout of the work directory (default ``~/.cache/qwen3asr-peers``; every step is skipped when
its output is there, so a second run costs nothing):

- ``site/``: ``crispasr`` (its wheel bundles libcrispasr and ggml), ``gguf`` (PyPI, the GGUF
  container writer) and ``sentencepiece`` (llama.cpp's converter), installed with
  ``pip install --target``: never into the project's venv;
- ``dl/``, ``src/``: the ``llama-cpp-python`` sdist and the llama.cpp source inside it;
- ``build/llama.cpp-VERSION/``: a Release CMake build of the two targets needed,
  ``llama-mtmd-cli`` and ``llama-quantize`` (``-j2``, no tests, examples or server);
- ``models/KEY/``: the converted files of one checkpoint (KEY: its path, size and mtime):
  ``crispasr-q4_k.gguf`` (qwen3asr_tools.crispasr_gguf), and llama.cpp's own conversion,
  ``convert_hf_to_gguf.py`` of the same source, the text model quantised by ``llama-quantize``
  to Q4_K_M (``llama-q4_k_m.gguf``) and the audio part (``--mmproj``) in F16
  (``llama-mmproj-f16.gguf``).

Each step runs a subprocess and raises ``SetupError`` with the tail of its log when it fails.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import logging
import os
import subprocess
import sys
import tarfile
from typing import Optional, Sequence

from . import PYTHON_DIR, child_env

log = logging.getLogger(__name__)

CRISPASR_VERSION = "0.8.45"
GGUF_VERSION = "0.19.0"
SENTENCEPIECE_VERSION = "0.2.3"  # llama.cpp's converter imports it before it falls back to the BPE vocab
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_TARGETS = ("llama-mtmd-cli", "llama-quantize")
DEFAULT_WORK = os.path.join(os.path.expanduser("~"), ".cache", "qwen3asr-peers")
LOG_TAIL = 3000  # characters of a failed step's output quoted in the error


class SetupError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class PeerFiles:
    """What the runs need."""

    site: str  # PYTHONPATH entry holding crispasr and gguf
    mtmd_cli: Optional[str]  # llama-mtmd-cli binary (None: llama.cpp not set up)
    crispasr_gguf: Optional[str]
    llama_text: Optional[str]
    llama_mmproj: Optional[str]


def _run(cmd: Sequence[str], what: str, env: Optional[dict] = None, cwd: Optional[str] = None) -> None:
    log.info("%s: %s", what, " ".join(cmd))
    p = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    if p.returncode != 0:
        raise SetupError(f"{what} failed (exit {p.returncode}): ...{p.stdout[-LOG_TAIL:]}")


def install_python_peers(work: str) -> str:
    """crispasr, gguf and sentencepiece into ``work/site`` (pip --target, no dependencies: numpy,
    torch and transformers, which llama.cpp's converter also needs, are the dev venv's)."""
    site = os.path.join(work, "site")
    wanted = {"crispasr": CRISPASR_VERSION, "gguf": GGUF_VERSION, "sentencepiece": SENTENCEPIECE_VERSION}
    missing = [f"{n}=={v}" for n, v in wanted.items() if not os.path.isdir(os.path.join(site, f"{n}-{v}.dist-info"))]
    if missing:
        _run([sys.executable, "-m", "pip", "install", "--no-deps", "--upgrade", "--target", site, *missing],
             "pip install of the peers' Python packages")
    return site


def llama_source(work: str) -> str:
    """The llama.cpp tree of the llama-cpp-python sdist (downloaded and unpacked when missing)."""
    src = os.path.join(work, "src", f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}", "vendor", "llama.cpp")
    if os.path.isfile(os.path.join(src, "CMakeLists.txt")):
        return src
    dl = os.path.join(work, "dl")
    sdist = os.path.join(dl, f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz")
    if not os.path.isfile(sdist):
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--dest", dl,
              f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"], "pip download of the llama-cpp-python sdist")
    with tarfile.open(sdist) as tar:
        tar.extractall(os.path.join(work, "src"), filter="data")
    if not os.path.isfile(os.path.join(src, "CMakeLists.txt")):
        raise SetupError(f"{sdist} holds no vendor/llama.cpp")
    return src


def build_llama(work: str, jobs: int = 2) -> str:
    """Build LLAMA_TARGETS (Release, CPU) once; returns the build's bin/ directory."""
    src = llama_source(work)
    build = os.path.join(work, "build", f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}")
    bin_dir = os.path.join(build, "bin")
    if all(os.path.isfile(os.path.join(bin_dir, t)) for t in LLAMA_TARGETS):
        return bin_dir
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        flags = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                 "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
                 "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"]
        _run(["cmake", "-S", src, "-B", build, *flags], "cmake configure of llama.cpp")
    log.info("building %s with -j%d (slow on 2 cores: tens of minutes the first time)", ", ".join(LLAMA_TARGETS), jobs)
    _run(["cmake", "--build", build, "--target", *LLAMA_TARGETS, f"-j{jobs}"], "llama.cpp build")
    return bin_dir


def checkpoint_key(ckpt: str) -> str:
    """A directory name for the converted files of ``ckpt`` (changes when its weights change)."""
    parts = [os.path.abspath(ckpt)]
    for f in sorted(glob.glob(os.path.join(ckpt, "*.safetensors")) + [os.path.join(ckpt, "config.json")]):
        st = os.stat(f)
        parts.append(f"{os.path.basename(f)}:{st.st_size}:{st.st_mtime_ns}")
    return f"{os.path.basename(os.path.normpath(ckpt))}-{hashlib.sha1('|'.join(parts).encode()).hexdigest()[:10]}"


def env_with_site(site: str) -> dict:
    """child_env() with the peers' site directory after this checkout's python/."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR, site, *env["PYTHONPATH"].split(os.pathsep)[1:]])
    return env


def convert_crispasr(ckpt: str, out_dir: str, site: str) -> str:
    out = os.path.join(out_dir, "crispasr-q4_k.gguf")
    if not os.path.isfile(out):
        _run([sys.executable, "-m", "qwen3asr_tools.crispasr_gguf", ckpt, out], "CrispASR GGUF conversion",
             env=env_with_site(site))
    return out


def convert_llama(ckpt: str, out_dir: str, src: str, bin_dir: str, site: str) -> tuple[str, str]:
    """(text model Q4_K_M, mmproj F16) by llama.cpp's own converter and quantiser."""
    text, mmproj = os.path.join(out_dir, "llama-q4_k_m.gguf"), os.path.join(out_dir, "llama-mmproj-f16.gguf")
    conv = os.path.join(src, "convert_hf_to_gguf.py")
    if not os.path.isfile(text):
        f16 = os.path.join(out_dir, "llama-f16.gguf")
        if not os.path.isfile(f16):
            _run([sys.executable, conv, ckpt, "--outfile", f16, "--outtype", "f16"], "llama.cpp text conversion",
                 env=env_with_site(site))
        _run([os.path.join(bin_dir, "llama-quantize"), f16, text, "Q4_K_M"], "llama-quantize")
        os.remove(f16)
    if not os.path.isfile(mmproj):
        _run([sys.executable, conv, ckpt, "--mmproj", "--outfile", mmproj, "--outtype", "f16"],
             "llama.cpp mmproj conversion", env=env_with_site(site))
    return text, mmproj


def prepare(ckpt: str, work: str = DEFAULT_WORK, crispasr: bool = True, llama: bool = True,
            jobs: int = 2) -> PeerFiles:
    """Install, build and convert what the chosen peers need (each step cached in ``work``)."""
    os.makedirs(work, exist_ok=True)
    site = install_python_peers(work)
    out_dir = os.path.join(work, "models", checkpoint_key(ckpt))
    os.makedirs(out_dir, exist_ok=True)
    crisp = convert_crispasr(ckpt, out_dir, site) if crispasr else None
    cli = text = mmproj = None
    if llama:
        bin_dir = build_llama(work, jobs)
        cli = os.path.join(bin_dir, "llama-mtmd-cli")
        text, mmproj = convert_llama(ckpt, out_dir, llama_source(work), bin_dir, site)
    return PeerFiles(site, cli, crisp, text, mmproj)
