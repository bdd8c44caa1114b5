"""ONNX Runtime sessions kept with their prepacked weights (``prepacked_cache``, an opt-in).

Making a session repacks every quantised weight into the layout of this CPU's kernels, into new
memory: for the 0.6B lean decoder about 100 k pages zeroed one fault at a time, a fifth to a
quarter of its session's CPU, on the load's critical path in a one-shot run (docs/benchmarks.md,
"The wait before the first call"). ONNX Runtime (1.20 and newer) can save the optimised graph with
those packed weights; loading it, the runtime still packs each weight and checks the saved blob
against the result, then keeps the blob, whose pages are the file's (already in the page cache on a
repeated run) instead of new ones. That file is only valid for the CPU, the ONNX Runtime version
and the model it was made from, so it is a cache made on the machine that uses it, never shipped:

    <cache>/<key>/<graph file name>        the optimised graph
    <cache>/<key>/<graph file name>.data   its weights: the originals and the packed ones
    <cache>/<key>/complete                 written last: the entry is whole

``key`` hashes the ONNX Runtime version, the CPU (its model and instruction-set flags), the
graph's path and the size and modification time of every file in its directory (the graph and
its weights). A miss makes the session from the bundle as usual and saves it (about the model's
packed and original weights together on disk: 1.1 GB for the 0.6B lean bundle's decoder and 3 s
encoder); a hit loads the saved graph. A cache that cannot be written (read-only, disk full) or an
entry that does not load is a warning, and the session is made from the bundle; it never fails a
load that would succeed without it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile

logger = logging.getLogger(__name__)

MIN_ORT = (1, 20)  # session.save_external_prepacked_constant_initializers
COMPLETE = "complete"
SAVE_ENTRIES = {
    "session.save_external_prepacked_constant_initializers": "1",
    "session.optimized_model_external_initializers_min_size_in_bytes": "1024",
}


def supported(ort) -> bool:
    """Whether this ONNX Runtime saves prepacked weights (1.20 and newer)."""
    try:
        return tuple(int(x) for x in ort.__version__.split(".")[:2]) >= MIN_ORT
    except ValueError:
        return False


def cpu_signature() -> str:
    """The CPU as its kernels see it: /proc/cpuinfo's first processor's model and flags (Linux),
    else the platform's processor name."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            first = f.read().split("\n\n", 1)[0]
        keep = ("vendor_id", "model name", "flags", "Features", "CPU implementer", "CPU part", "CPU variant")
        lines = sorted(line.strip() for line in first.splitlines() if line.split(":", 1)[0].strip() in keep)
        if lines:
            return "\n".join(lines)
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_key(ort, path: str) -> str:
    """The entry name of graph ``path``: a hash of what makes its packed weights valid."""
    folder = os.path.dirname(os.path.abspath(path))
    files = sorted([e.name, e.stat().st_size, e.stat().st_mtime_ns] for e in os.scandir(folder) if e.is_file())
    facts = {"ort": ort.__version__, "machine": platform.machine(), "cpu": cpu_signature(),
             "graph": os.path.abspath(path), "files": files}
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]
    return f"{os.path.splitext(os.path.basename(path))[0]}-{digest}"


def cached_session(ort, path: str, cache: str, create):
    """The session of graph ``path``, loaded from ``cache`` (a directory, made if missing) when it
    holds this graph's entry, else made from ``path`` with the entry saved. ``create(graph,
    entries, optimized=None)`` makes a session of ``graph`` with the session config ``entries`` (a
    dict) added and, given ``optimized``, its optimised graph saved there.
    Returns (session, the directory of the weight files it maps)."""
    cache = os.path.expanduser(cache)
    here = os.path.dirname(os.path.abspath(path))
    if not supported(ort):
        logger.warning("ONNX Runtime %s cannot save prepacked weights (%s or newer): prepacked_cache ignored",
                       ort.__version__, ".".join(map(str, MIN_ORT)))
        return create(path, {}), here
    entry = os.path.join(cache, cache_key(ort, path))
    name = os.path.basename(path)
    if os.path.isfile(os.path.join(entry, COMPLETE)):
        try:
            return create(os.path.join(entry, name), {}), entry
        except RuntimeError as exc:
            logger.warning("the prepacked cache entry %s does not load (%s): made again", entry, exc)
            shutil.rmtree(entry, ignore_errors=True)
    try:
        os.makedirs(cache, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".new-", dir=cache)
    except OSError as exc:
        logger.warning("cannot write the prepacked cache %s (%s): the session is made without it", cache, exc)
        return create(path, {}), here
    entries = dict(SAVE_ENTRIES, **{"session.optimized_model_external_initializers_file_name": name + ".data"})
    try:
        session = create(path, entries, os.path.join(work, name))
        with open(os.path.join(work, COMPLETE), "w", encoding="utf-8") as f:
            f.write(os.path.abspath(path) + "\n")
        if os.path.isdir(entry):  # another process saved it first
            shutil.rmtree(work, ignore_errors=True)
        else:
            os.rename(work, entry)
    except (OSError, RuntimeError) as exc:  # writing failed (a full disk fails the session's creation)
        shutil.rmtree(work, ignore_errors=True)
        logger.warning("cannot save the prepacked cache entry %s (%s): the session is made without it", entry, exc)
        return create(path, {}), here
    logger.info("prepacked weights of %s saved in %s", path, entry)
    return session, here  # made from the bundle: it maps the bundle's files


__all__ = ["cache_key", "cached_session", "cpu_signature", "supported"]
