"""A board bundle in one command on an x86 PC (``qwen3asr-models convert``): fetch, export ONNX, convert the encoder with
rknn-toolkit2 in its own venv and the decoder with rkllm-toolkit where it is installed.

``convert_for_board(["0.6b", "aligner"], "rk3588")`` leaves ``qwen3asr-rk3588/<Name>/`` (one
bundle per model, the ONNX files kept so the board can fall back to its CPU) and
``qwen3asr-rk3588.tar`` to copy to the board. Each bundle is built in ``<Name>.tmp`` beside it,
checked as the rk backend checks it (every RKNN file's metadata against the manifest), and only
then renamed; a step cut off leaves only the ``.tmp`` directory, removed by the next run.

The toolkits come from elsewhere: rknn-toolkit2 needs numpy<2, so it runs in its own venv
(``--rknn-python``, ``$QWEN3ASR_RKNN_PYTHON``, else ``.venv-rknn`` of a source checkout:
scripts/setup_rknn_env.sh); rkllm-toolkit is not on any package registry (Rockchip's
airockchip/rknn-llm releases): it runs in this interpreter if it imports here, else in
``--rkllm-python`` / ``$QWEN3ASR_RKLLM_PYTHON``. A missing toolkit is reported with what to
install and the command that finishes the job; everything else is done.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import tarfile
from typing import Optional, Sequence

from qwen3asr.hub import cache, fetch
from qwen3asr.hub.names import HubError, ModelRef, parse
from qwen3asr.hub.resolve import pull

logger = logging.getLogger(__name__)

RKNN_PYTHON_ENV = "QWEN3ASR_RKNN_PYTHON"
RKLLM_PYTHON_ENV = "QWEN3ASR_RKLLM_PYTHON"
TARGETS = ("rk3576", "rk3588")
RKLLM_SOURCE = "https://github.com/airockchip/rknn-llm (rkllm-toolkit/, not on PyPI)"
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # holds qwen3asr/ and qwen3asr_tools/


@dataclasses.dataclass(frozen=True)
class BoardModel:
    ref: ModelRef
    path: str  # the finished bundle directory
    rknn: bool  # RKNN encoder models converted
    rkllm: bool  # RKLLM decoder converted


@dataclasses.dataclass(frozen=True)
class BoardResult:
    out_dir: str
    tarball: Optional[str]
    models: tuple  # BoardModel per name
    missing: tuple  # one line per step not done: what is missing, where it comes from, what to run


def rknn_python(given: Optional[str] = None) -> Optional[str]:
    """The interpreter of the rknn-toolkit2 venv, or None."""
    for candidate in (given, os.environ.get(RKNN_PYTHON_ENV),
                      os.path.join(os.path.dirname(_PACKAGE_ROOT), ".venv-rknn", "bin", "python")):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def _subprocess_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)  # this code
    return env


def _run_logged(cmd: list, log_path: str, what: str) -> None:
    logger.info("%s (log: %s)", what, log_path)
    with open(log_path, "w", encoding="utf-8") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=_subprocess_env()).returncode
    if rc != 0:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = [line.strip() for line in f if line.strip()][-1:] or ["(no output)"]
        raise HubError(f"{what} failed (exit {rc}): {tail[0]} (full log: {log_path})")


def check_board_bundle(bundle_dir: str, target: str, rkllm: bool) -> None:
    """The rk backend's load-time checks of the Rockchip files, on the PC: every RKNN entry's
    file and metadata against the manifest, and the RKLLM entry when one was built."""
    from qwen3asr.backends.rk import rknn_meta
    from qwen3asr.bundle import Bundle

    bundle = Bundle.load(bundle_dir)
    for entry in rknn_meta.manifest_entries(bundle, target):
        rknn_meta.check_entry(bundle, target, entry)
    if rkllm:
        entry = bundle.rkllm_entry(target)
        if entry is None:
            raise HubError(f"{bundle_dir}: the RKLLM step ran but model.json has no rk.rkllm.{target}")
        bundle.file(entry["file"], "RKLLM decoder")


def _checkpoint_dir(ref: ModelRef, commit: str) -> str:
    from huggingface_hub import try_to_load_from_cache

    path = try_to_load_from_cache(ref.repo, "config.json", revision=commit, cache_dir=fetch.hf_cache())
    if not isinstance(path, str):
        raise HubError(f"the checkpoint of {ref} is no longer in the huggingface_hub cache: run "
                       f"`qwen3asr-models rm {ref}` and convert again")
    return os.path.dirname(path)


def _toolkit_imports() -> bool:
    """Whether rkllm-toolkit imports in this interpreter."""
    try:
        from rkllm.api import RKLLM  # noqa: F401
    except ImportError:
        return False
    return True


def _rkllm_step(ckpt_dir: str, stage: str, work: str, target: str, python: Optional[str],
                calib_audio: Sequence[str]) -> Optional[str]:
    """Build the RKLLM decoder into ``stage``; None when done, else the line saying what is missing."""
    args = ["--checkpoint", ckpt_dir, "--bundle", stage, "--out", work, "--target", target]
    if calib_audio:
        args += ["--calib-audio", *calib_audio]
    python = python or os.environ.get(RKLLM_PYTHON_ENV)
    if python:
        _run_logged([python, "-m", "qwen3asr_tools.export_rkllm", *args], os.path.join(work, "rkllm.log"),
                    f"RKLLM decoder for {target} with {python}")
        return None
    if _toolkit_imports():
        from qwen3asr_tools import export_rkllm

        logger.info("RKLLM decoder for %s (rkllm-toolkit in this interpreter)", target)
        rc = export_rkllm.main(args)
        if rc != 0:
            raise HubError(f"the RKLLM conversion for {target} failed (exit {rc}); its message is above")
        return None
    return (f"RKLLM decoder for {target} not built: rkllm-toolkit is not installed here; it comes from "
            f"{RKLLM_SOURCE}. Install its wheel (in its own venv if its numpy pin clashes; then give "
            f"--rkllm-python or {RKLLM_PYTHON_ENV}) and run: python -m qwen3asr_tools.export_rkllm "
            + " ".join(args))


def convert_for_board(specs: Sequence[str], target: str, out_dir: Optional[str] = None, *,
                      rknn_py: Optional[str] = None, rkllm_py: Optional[str] = None,
                      calib_audio: Sequence[str] = (), rknn_args: Sequence[str] = (), tarball: bool = True,
                      progress: Optional[bool] = None) -> BoardResult:
    """Board bundles of ``specs`` (ids or known names) for ``target`` under ``out_dir``; see the
    module docstring. ``rknn_args``: extra onnx2rknn flags (``--sizes 2``, ``--shapes fixed``)."""
    if target not in TARGETS:
        raise HubError(f"unknown target {target!r}: give one of {', '.join(TARGETS)}")
    out_dir = os.path.abspath(out_dir or f"qwen3asr-{target}")
    refs = [parse(s) for s in specs]
    rknn = rknn_python(rknn_py)
    models, missing = [], []
    if rknn is None:
        missing.append(f"RKNN encoder for {target} not built: no rknn-toolkit2 venv (it needs numpy<2): create one "
                       f"with bash scripts/setup_rknn_env.sh (a source checkout) and give --rknn-python PATH or "
                       f"{RKNN_PYTHON_ENV}; rknn-toolkit2 comes from PyPI / github.com/airockchip/rknn-toolkit2")
    os.makedirs(out_dir, exist_ok=True)
    for ref in refs:
        entry = pull(ref, memory="default", soc=None, progress=progress)
        if entry.source != "converted":
            raise HubError(f"{ref} is a published bundle, not an official checkpoint: the board conversion starts "
                           f"from the checkpoint (or pull the bundle on the board if it has {target} models)")
        name = ref.repo.split("/")[-1]
        final, stage = os.path.join(out_dir, name), os.path.join(out_dir, name + ".tmp")
        shutil.rmtree(stage, ignore_errors=True)  # left by an interrupted run
        cache.check_disk(out_dir, entry.size_bytes, f"the {target} bundle of {ref}")
        for rel in entry.files:
            cache.link_or_copy(os.path.join(entry.path, rel), os.path.join(stage, rel))
        work = os.path.join(out_dir, f".work-{name}")
        os.makedirs(work, exist_ok=True)
        try:
            did_rknn = did_rkllm = False
            if rknn is not None:
                _run_logged([rknn, "-m", "qwen3asr_tools.onnx2rknn", "--bundle", stage, "--target", target,
                             *rknn_args], os.path.join(work, "rknn.log"), f"RKNN encoder of {ref} for {target}")
                did_rknn = True
            note = _rkllm_step(_checkpoint_dir(ref, entry.commit), stage, work, target, rkllm_py, calib_audio)
            if note:
                missing.append(note.replace(stage, final))
            else:
                did_rkllm = True
            if did_rknn:
                check_board_bundle(stage, target, did_rkllm)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(stage, final)
        except BaseException:
            shutil.rmtree(stage, ignore_errors=True)
            raise
        models.append(BoardModel(ref, final, did_rknn, did_rkllm))
        logger.info("%s for %s: %s (RKNN %s, RKLLM %s)", ref, target, final, "yes" if did_rknn else "no",
                    "yes" if did_rkllm else "no")
    tar = None
    if tarball:
        tar = out_dir.rstrip(os.sep) + ".tar"
        tmp = tar + ".tmp"
        with tarfile.open(tmp, "w") as t:
            for m in models:
                t.add(m.path, arcname=os.path.join(os.path.basename(out_dir), os.path.basename(m.path)))
        os.replace(tmp, tar)
        logger.info("tarball: %s (%.0f MB)", tar, os.path.getsize(tar) / 1e6)
    return BoardResult(out_dir, tar, tuple(models), tuple(missing))


__all__ = ["BoardModel", "BoardResult", "RKLLM_PYTHON_ENV", "RKNN_PYTHON_ENV", "TARGETS", "check_board_bundle",
           "convert_for_board", "rknn_python"]
