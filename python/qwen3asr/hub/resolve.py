"""A model string to a bundle directory: a directory as it is, a hub id fetched (and, for an
official checkpoint, converted) once into the cache and loaded from there afterwards.

Order of a ``pull``:

1. the cache, with no request: the commit the revision was last pulled at (``refs/``) and an
   entry for it (a full commit hash is its own ref). ``qwen3asr-models pull`` skips this step
   to follow a branch that moved;
2. with ``HF_HUB_OFFLINE`` set, nothing more: an error that names the one command to run;
3. one request for the revision's commit and files; a repo whose root holds ``model.json`` is a
   converted bundle, downloaded as published (on a board only the files of its SoC); a repo with
   an official ``config.json`` is downloaded and converted with qwen3asr_tools.export_onnx
   (needs ``onnx``: the ``convert`` extra).

Writing an entry holds the cache lock of its key: a second process waits and then takes the
first one's result.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import os
import time
from typing import Optional

from ..bundle import BUNDLE_FORMAT
from . import cache, fetch
from .names import HubError, ModelRef, is_directory, known_names, parse

logger = logging.getLogger(__name__)

CONVERT_GROWTH = 2.5  # bundle bytes per checkpoint byte (bf16 in, fp32 + int8 decoders out: 0.6B 1.9 -> ~3.4 GB)
CHECKPOINT_SUFFIXES = (".json", ".safetensors", ".txt", ".model")  # config, weights, tokenizer (merges.txt)
CONVERT_HINT = "pip install 'qwen3asr-rk[convert]'"


def exporter_version() -> str:
    """qwen3asr_tools.export_onnx's EXPORTER_VERSION, read from its source (importing it needs onnx)."""
    spec = importlib.util.find_spec("qwen3asr_tools.export_onnx")
    if spec is None or spec.origin is None:
        raise HubError("qwen3asr_tools (the converter) is not installed: reinstall qwen3asr-rk")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXPORTER_VERSION" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise HubError("qwen3asr_tools.export_onnx has no EXPORTER_VERSION")


def converted_variant(memory: str) -> str:
    return f"x{exporter_version()}-{memory}"


def hub_variant(soc: Optional[str]) -> str:
    return f"hub-{soc or 'cpu'}"


def board_soc(backend: str = "auto", soc: Optional[str] = None) -> Optional[str]:
    """The SoC whose Rockchip files a published bundle is fetched with: None for the CPU backend
    or off a Rockchip board."""
    if backend == "onnx":
        return None
    if soc or os.environ.get("QWEN3ASR_SOC"):
        return soc or os.environ["QWEN3ASR_SOC"]
    from ..backends.rk.soc import detect_soc

    try:
        return detect_soc()
    except RuntimeError:  # not a Rockchip board
        return None


def resolve_model(spec, kind: Optional[str] = None, *, memory: str = "default", backend: str = "auto",
                  soc: Optional[str] = None, progress: Optional[bool] = None):
    """``spec`` as a bundle directory: a directory (or None) unchanged; a hub id or known name
    pulled into the cache (see the module docstring). ``kind``: "asr" or "aligner", what the
    caller loads (a checkpoint of the other kind is refused before its weights download)."""
    if spec is None or is_directory(spec):
        return spec
    return pull(parse(spec), kind, memory=memory, soc=board_soc(backend, soc), progress=progress).path


def cached(ref: ModelRef, memory: str = "default", soc: Optional[str] = None) -> Optional[cache.Entry]:
    """The cached entry of ``ref`` (no request), or None."""
    commit = cache.read_ref(ref.repo, ref.revision)
    if commit is None:
        return None
    for variant in (hub_variant(soc), converted_variant(memory)):
        entry = cache.find(ref.repo, commit, variant)
        if entry is not None:
            return entry
    return None


def pull(ref: ModelRef, kind: Optional[str] = None, *, memory: str = "default", soc: Optional[str] = None,
         progress: Optional[bool] = None, refresh: bool = False) -> cache.Entry:
    """The cache entry of ``ref``, fetched (and converted) if needed; HubError otherwise."""
    entry = _pull(ref, kind, memory, soc, progress, refresh)
    check_kind(entry.kind, kind, ref)
    return entry


def check_kind(got: str, want: Optional[str], ref: ModelRef) -> None:
    """HubError when ``ref`` is the other kind of model than the caller loads."""
    if want is not None and got != want:
        what = {"asr": "a speech recognition model", "aligner": "a forced aligner (word timestamps)"}
        where = "--aligner / aligner=" if got == "aligner" else "--model / model_dir"
        raise HubError(f"{ref} is {what[got]}, not {what[want]}: give it as {where}")


def _pull(ref: ModelRef, kind: Optional[str], memory: str, soc: Optional[str], progress: Optional[bool],
          refresh: bool) -> cache.Entry:
    if not refresh:
        entry = cached(ref, memory, soc)
        if entry is not None:
            logger.debug("%s from the cache: %s", ref, entry.path)
            return entry
    if fetch.offline():
        raise HubError(f"{ref} is not in the cache ({cache.cache_root()}) and HF_HUB_OFFLINE is set: run "
                       f"`qwen3asr-models pull {ref}` once with the network")
    files = fetch.repo_files(ref)
    for variant in (hub_variant(soc), converted_variant(memory)):
        entry = cache.find(ref.repo, files.commit, variant)
        if entry is not None:
            cache.record_ref(ref.repo, ref.revision, files.commit)
            return entry
    if "model.json" in files.sizes:
        return _pull_bundle(files, soc, progress)
    return _convert(files, kind, memory, progress)


# ---------------------------------------------------------------- a published bundle

def bundle_files(manifest: dict, soc: Optional[str]) -> dict:
    """The files (path -> SHA-256) of a bundle that a machine with ``soc`` (None: the CPU) needs:
    all but the Rockchip models of other SoCs."""
    rk = manifest.get("rk") or {}
    other = set()
    for soc_files in (rk.get("rknn") or {}).items():
        if soc_files[0] != soc:
            other |= {e["file"] for e in soc_files[1] or ()}
    for name, entry in (rk.get("rkllm") or {}).items():
        if name != soc and entry:
            other.add(entry["file"])
    return {rel: digest for rel, digest in manifest.get("files", {}).items() if rel not in other}


def _pull_bundle(files: fetch.RepoFiles, soc: Optional[str], progress: Optional[bool]) -> cache.Entry:
    ref = files.ref
    variant = hub_variant(soc)
    with cache.locked(ref.repo, variant):
        entry = cache.find(ref.repo, files.commit, variant)
        if entry is not None:  # another process made it while this one waited
            cache.record_ref(ref.repo, ref.revision, files.commit)
            return entry
        with fetch.progress(progress):
            man_path = fetch.download(files, "model.json")
        try:
            with open(man_path, encoding="utf-8") as f:
                manifest = json.load(f)
        except ValueError:
            raise HubError(f"{ref} has a model.json that is not JSON: not a qwen3asr-rk bundle") from None
        if manifest.get("format") != BUNDLE_FORMAT:
            raise HubError(f"{ref} holds a bundle of format {manifest.get('format')!r}; this qwen3asr-rk reads "
                           f"{BUNDLE_FORMAT!r}: upgrade qwen3asr-rk or ask the owner to re-export it")
        rk = manifest.get("rk") or {}
        socs = sorted(set(rk.get("rknn") or {}) | set(rk.get("rkllm") or {}))
        if soc is not None and socs and soc not in socs:
            raise HubError(f"{ref} holds Rockchip models for {', '.join(socs)}, not for this {soc}: convert the "
                           f"checkpoint for it on a PC (qwen3asr-models convert CHECKPOINT --target {soc}) or run on "
                           f"the CPU (--backend onnx)")
        wanted = bundle_files(manifest, soc)
        missing = sorted(set(wanted) - set(files.sizes))
        if missing:
            raise HubError(f"{ref}: model.json lists {', '.join(missing[:3])} but the repo lacks "
                           f"{'it' if len(missing) == 1 else 'them'}: the upload is incomplete; tell its owner")
        total = sum(files.sizes[rel] for rel in wanted)
        cache.check_disk(fetch.hf_cache(), total, f"downloading {ref}")
        logger.info("fetching the bundle %s (%d files, %.0f MB) from %s", ref, len(wanted) + 1, total / 1e6,
                    fetch.endpoint())
        with fetch.progress(progress):
            local = {rel: fetch.download(files, rel, digest) for rel, digest in sorted(wanted.items())}
        with cache.staging(ref.repo, variant) as tmp:
            cache.link_or_copy(man_path, os.path.join(tmp, "model.json"))
            for rel, path in local.items():
                cache.link_or_copy(path, os.path.join(tmp, rel))
            entry = cache.install(tmp, ref.repo, ref.revision, files.commit, variant, "hub",
                                  manifest.get("kind", "asr"), wanted)
    logger.info("%s ready: %s", ref, entry.path)
    return entry


# ---------------------------------------------------------------- an official checkpoint

def checkpoint_kind(config: dict, ref: ModelRef) -> str:
    """"asr" or "aligner" from an official config.json; HubError for any other model."""
    thinker = config.get("thinker_config")
    mt = str((thinker or {}).get("model_type", ""))
    if config.get("model_type") != "qwen3_asr" or not isinstance(thinker, dict) or not (
            "qwen3_asr" in mt or "forced_aligner" in mt):
        raise HubError(f"{ref} is not a Qwen3-ASR or Qwen3-ForcedAligner checkpoint (config.json model_type "
                       f"{config.get('model_type')!r}) nor a qwen3asr-rk bundle (no model.json): give one of "
                       f"{known_names()} or such a repo")
    return "aligner" if "forced_aligner" in mt else "asr"


def _exporter():
    try:
        import qwen3asr_tools.export_onnx as export_onnx
    except ImportError as exc:
        raise HubError(f"converting an official checkpoint needs {exc.name or 'onnx'}: {CONVERT_HINT} (or use a "
                       f"converted bundle from a hub: docs/models.md)") from None
    return export_onnx


def _checkpoint_file(rel: str) -> bool:
    return "/" not in rel and rel.endswith(CHECKPOINT_SUFFIXES)


def _convert(files: fetch.RepoFiles, kind: Optional[str], memory: str, progress: Optional[bool]) -> cache.Entry:
    ref = files.ref
    if "config.json" not in files.sizes:
        raise HubError(f"{ref} is not a Qwen3-ASR or Qwen3-ForcedAligner checkpoint nor a qwen3asr-rk bundle (no "
                       f"config.json, no model.json): give one of {known_names()} or such a repo")
    with fetch.progress(progress):
        with open(fetch.download(files, "config.json"), encoding="utf-8") as f:
            try:
                config = json.load(f)
            except ValueError:
                config = {}
    check_kind(checkpoint_kind(config, ref), kind, ref)  # before the weights download
    export_onnx = _exporter()
    variant = converted_variant(memory)
    with cache.locked(ref.repo, variant):
        entry = cache.find(ref.repo, files.commit, variant)
        if entry is not None:
            cache.record_ref(ref.repo, ref.revision, files.commit)
            return entry
        wanted = sorted(rel for rel in files.sizes if _checkpoint_file(rel))
        if not any(rel.endswith(".safetensors") for rel in wanted):
            raise HubError(f"{ref} has no .safetensors weights: not an official Qwen3-ASR checkpoint")
        weights = sum(files.sizes[rel] for rel in wanted)
        cache.check_disk(fetch.hf_cache(), weights, f"downloading {ref}")
        cache.check_disk(cache.cache_root(), CONVERT_GROWTH * weights, f"converting {ref}")
        logger.info("fetching the checkpoint %s (%d files, %.0f MB) from %s", ref, len(wanted), weights / 1e6,
                    fetch.endpoint())
        with fetch.progress(progress):
            local = [fetch.download(files, rel) for rel in wanted]
        ckpt_dir = os.path.dirname(local[wanted.index("config.json")])
        logger.info("converting %s (exporter %s, memory %s)", ref, exporter_version(), memory)
        t0 = time.time()
        quiet = logging.getLogger("export_onnx")
        level = quiet.level
        quiet.setLevel(logging.WARNING)  # one line per step, not one per graph
        try:
            with cache.staging(ref.repo, variant) as tmp:
                manifest = export_onnx.export(ckpt_dir, tmp, memory=memory)
                manifest_source(tmp, ref, files.commit)
                entry = cache.install(tmp, ref.repo, ref.revision, files.commit, variant, "converted",
                                      manifest["kind"], manifest["files"])
        except (ValueError, OSError) as exc:  # CheckpointError is a ValueError
            if isinstance(exc, OSError) and exc.errno == 28:
                raise HubError(f"the disk filled up while converting {ref}: free some space (or set "
                               f"{cache.CACHE_ENV}) and run the command again; nothing was cached") from None
            raise HubError(f"{ref} could not be converted: {exc}".splitlines()[0]) from None
        finally:
            quiet.setLevel(level)
    logger.info("%s converted in %.0f s: %s", ref, time.time() - t0, entry.path)
    return entry


def manifest_source(bundle_dir: str, ref: ModelRef, commit: str) -> None:
    """Record the hub repo and commit in the bundle's ``source`` (the exporter knows only the directory)."""
    from ..bundle import update_manifest

    def mutate(manifest: dict) -> None:
        manifest.setdefault("source", {}).update({"repo": ref.repo, "revision": ref.revision, "commit": commit})

    update_manifest(bundle_dir, mutate)


__all__ = ["board_soc", "bundle_files", "cached", "checkpoint_kind", "converted_variant", "exporter_version",
           "hub_variant", "pull", "resolve_model"]
