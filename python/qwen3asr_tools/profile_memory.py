#!/usr/bin/env python3
"""Where a CPU process's bytes and seconds go, default against lean, in fresh processes.

    python scripts/profile_memory.py --bundle build/bundle-0.6b --lean-bundle build/bundle-0.6b-lean \\
        --rounds 5 --threads 2 [--aligner A --lean-aligner A_LEAN] [--json build/profile.json]

Every measurement is a new Python process (``--child``), as a user's one-shot
``qwen3asr-transcribe`` is. Per round and per profile (the order alternates from round to round,
so both sides see the same machine load):

- one-shot: import, load (``Qwen3ASREngine``), one call; the parent times the whole process from
  spawn to exit and reads its peak RSS (``ru_maxrss`` of the reaped child);
- process: import, load, two calls; the child reports the time split (import s, load s, first
  and second call ms: the first call's extra is what loading the encoder graph and ONNX
  Runtime's first run add) and the RSS after each stage;
- with ``--aligner``: a third call asks for word timestamps (``engine.align`` of a fixed text:
  the first request that needs the aligner loads it), so the report has its cost and the peak
  RSS with both models.

A call is what the one-shot CLI does for a clip that fits one encoder pass: log-mel, encoder,
prompt, prefill and ``--decode-tokens`` greedy steps with end of sequence ignored (random weights
give the real costs, not text).

``--parts`` adds one process per profile that loads the pieces one at a time as the backend
does (tokenizer, embedding table, decoder session, encoder session with its first run, a KV
cache of the call's length) and reports the RSS each adds, the KV-cache bytes, and the resident
bytes per mapping at the end (each bundle file that is memory-mapped, shared libraries,
anonymous memory: ONNX Runtime's arenas and prepacked weights, numpy, Python).

The report prints medians of the counted rounds and the lean / default ratio of each (< 1 is
smaller or faster for lean); the machine may be shared, so the ratios, measured in one run, are
the numbers to read. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ALIGN_TEXT = "open the back door and turn on the kitchen light"


# ----------------------------------------------------------------------------- in the child
def proc_status() -> dict:
    """VmRSS and VmHWM (peak) of this process in MB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def smaps_by_mapping(bundle_dirs) -> dict:
    """Resident MB per mapping at this moment: each file under ``bundle_dirs`` by its path relative
    to its bundle, and the groups of SMAPS_GROUPS for the rest."""
    roots = [os.path.realpath(d) for d in bundle_dirs if d]
    out: dict[str, float] = {}
    name = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if not head:
                continue
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                path = head[5] if len(head) > 5 else ""
                real = os.path.realpath(path) if path.startswith("/") else path
                name = next((f"{os.path.basename(r)}/{os.path.relpath(real, r)}" for r in roots
                             if real.startswith(r + os.sep)), None)
                if name is None:
                    if ".so" in os.path.basename(path):
                        name = "shared libraries"
                    elif path in ("", "[heap]") or path.startswith("[anon"):
                        name = "anonymous"
                    else:
                        name = "other"
            elif head[0] == "Rss:" and name is not None:
                out[name] = out.get(name, 0.0) + int(head[1]) / 1024
    return {k: round(v, 1) for k, v in sorted(out.items())}


def _clip(audio: str, seconds: float):
    from qwen3asr.audio import SAMPLE_RATE, prepare_audio

    from .bench import AUDIO_OFFSET_S

    pcm = prepare_audio(audio)
    start = int(AUDIO_OFFSET_S * SAMPLE_RATE)
    return pcm[start:start + int(seconds * SAMPLE_RATE)]


def one_call(engine, pcm, decode_tokens: int) -> dict:
    """The one-shot call (see the module docstring); times in ms."""
    from qwen3asr.decoding import DecodingOptions, Generation

    t0 = time.perf_counter()
    req = engine.prepare(pcm)
    gen = Generation(engine.decoder.kv, req.embeds, (), engine.embeddings.row,
                     DecodingOptions(max_new_tokens=decode_tokens + 1))
    gen.run()
    engine.decoder.kv.release_binding()
    t = gen.times
    return {"ms": (time.perf_counter() - t0) * 1000, "encoder_ms": req.encoder_ms, "prefill_ms": t.prefill_ms,
            "prefill_tokens": t.prefill_tokens, "decode_ms": t.decode_ms, "decode_tokens": t.decode_tokens}


def child_run(spec: dict) -> dict:
    """import, load, ``calls`` calls (and an align call with an aligner): times and RSS per stage."""
    t0 = time.perf_counter()
    rss = {"start": proc_status()["VmRSS"]}
    from qwen3asr import Qwen3ASREngine

    t_import = time.perf_counter() - t0
    rss["import"] = proc_status()["VmRSS"]
    pcm = _clip(spec["audio"], spec["seconds"])
    t1 = time.perf_counter()
    engine = Qwen3ASREngine(spec["bundle"], backend="onnx", threads=spec["threads"], memory=spec["memory"],
                            decoder_dtype=spec["dtype"], aligner=spec.get("aligner"))
    t_load = time.perf_counter() - t1
    rss["load"] = proc_status()["VmRSS"]
    calls = []
    for i in range(spec["calls"]):
        calls.append(one_call(engine, pcm, spec["decode_tokens"]))
        rss[f"call{i + 1}"] = proc_status()["VmRSS"]
    out = {"import_s": t_import, "load_s": t_load, "calls": calls, "decoder_dtype": engine.decoder_dtype}
    if spec.get("aligner"):
        # the aligner takes the engine's backend settings; its scorer is the bundle's "auto" choice
        # (int8), whatever decoder dtype the ASR side was given
        import dataclasses

        name, options = engine._backend_request
        engine._backend_request = (name, dataclasses.replace(options, decoder_dtype="auto"))
        t2 = time.perf_counter()
        engine.align(pcm, ALIGN_TEXT, language="English")
        out["first_align_ms"] = (time.perf_counter() - t2) * 1000
        rss["align1"] = proc_status()["VmRSS"]
        t2 = time.perf_counter()
        engine.align(pcm, ALIGN_TEXT, language="English")
        out["second_align_ms"] = (time.perf_counter() - t2) * 1000
        rss["align2"] = proc_status()["VmRSS"]
    status = proc_status()
    out.update(rss_mb=rss, peak_mb=status["VmHWM"],
               mappings=smaps_by_mapping([spec["bundle"], spec.get("aligner")]))
    engine.close()
    return out


def child_parts(spec: dict) -> dict:
    """The engine's pieces loaded one at a time: RSS (MB) and seconds each adds."""
    import numpy as np

    from qwen3asr.backends import BackendOptions
    from qwen3asr.backends.onnx import create_onnx_decoder, create_onnx_encoder
    from qwen3asr.bundle import Bundle, EmbeddingTable
    from qwen3asr.tokenizer import Tokenizer

    parts = []
    last = proc_status()["VmRSS"]
    parts.append({"part": "python, numpy, qwen3asr", "mb": last, "s": None})

    def step(name, fn):
        nonlocal last
        t = time.perf_counter()
        value = fn()
        now = proc_status()
        parts.append({"part": name, "mb": now["VmRSS"] - last, "s": time.perf_counter() - t, "peak_mb": now["VmHWM"]})
        last = now["VmRSS"]
        return value

    o = BackendOptions(decoder_dtype=spec["dtype"], threads=spec["threads"], memory=spec["memory"])
    bundle = Bundle.load(spec["bundle"])
    tok = step("tokenizer", lambda: Tokenizer.from_dir(bundle.path))
    emb = step("embedding table (mapped)", lambda: EmbeddingTable(bundle))
    dec = step("decoder session", lambda: create_onnx_decoder(
        bundle, o.decoder_dtype, o.threads, embed=emb.row, eos_ids=tok.eos_ids, memory=o.memory))
    enc = step("encoder (lazy: nothing yet)", lambda: create_onnx_encoder(bundle, "merged", None, o.threads,
                                                                          memory=o.memory))
    pcm = _clip(spec["audio"], spec["seconds"])
    from qwen3asr import mel as melmod

    mel = melmod.log_mel(pcm, int(bundle.audio_config["num_mel_bins"]))
    audio = step("encoder session + first run", lambda: enc.encode(mel))
    step("encoder second run", lambda: enc.encode(mel))
    prompt = np.concatenate([np.stack([emb.row(t) for t in tok.encode("<|im_start|>user\n")]), audio])
    from qwen3asr.decoding import DecodingOptions, Generation

    def decode():
        gen = Generation(dec.kv, prompt, (), emb.row, DecodingOptions(max_new_tokens=spec["decode_tokens"] + 1))
        gen.run()
        return gen

    gen = step("first decode (arena, KV cache)", decode)
    cache = gen._cache  # the KV cache of the call (the Generation keeps it while alive)
    kv_bytes = cache.nbytes if cache is not None else None
    step("second decode", decode)
    return {"parts": parts, "kv_cache_mb": None if kv_bytes is None else kv_bytes / 2**20,
            "kv_positions": None if cache is None else cache.capacity, "decoder_dtype": dec.dtype,
            "peak_mb": proc_status()["VmHWM"], "mappings": smaps_by_mapping([spec["bundle"]])}


# ----------------------------------------------------------------------------- in the parent
def spawn(spec: dict) -> dict:
    """Run one child; adds the parent's view: wall seconds from spawn to exit and ru_maxrss (MB)."""
    from . import child_env
    from .bench_peers import run_child

    wall, peak_mb, code, out, err = run_child([sys.executable, "-m", "qwen3asr_tools.profile_memory", "--child",
                                               json.dumps(spec)], child_env())
    if code != 0:
        raise RuntimeError(f"child failed ({code}): {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(wall_s=wall, maxrss_mb=peak_mb)
    return result


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: dict) -> dict:
    """Medians per profile of the numbers the report prints."""
    out = {}
    for name, rs in runs.items():
        one, proc = [r["oneshot"] for r in rs], [r["process"] for r in rs]
        row = {
            "oneshot_s": _median([r["wall_s"] for r in one]),
            "oneshot_peak_mb": _median([r["maxrss_mb"] for r in one]),
            "process_s": _median([r["wall_s"] for r in proc]),
            "process_peak_mb": _median([r["maxrss_mb"] for r in proc]),
            "import_s": _median([r["import_s"] for r in proc]),
            "load_s": _median([r["load_s"] for r in proc]),
            "first_call_ms": _median([r["calls"][0]["ms"] for r in proc]),
            "warm_call_ms": _median([r["calls"][1]["ms"] for r in proc]),
            "first_call_extra_ms": _median([r["calls"][0]["ms"] - r["calls"][1]["ms"] for r in proc]),
            "warm_encoder_ms": _median([r["calls"][1]["encoder_ms"] for r in proc]),
            "warm_decode_tok_s": _median([r["calls"][1]["decode_tokens"] / r["calls"][1]["decode_ms"] * 1000
                                          for r in proc]),
            "rss_after_load_mb": _median([r["rss_mb"]["load"] for r in proc]),
        }
        if rs[0]["process"].get("first_align_ms") is not None:
            row.update(first_align_ms=_median([r["first_align_ms"] for r in proc]),
                       second_align_ms=_median([r["second_align_ms"] for r in proc]),
                       rss_after_align_mb=_median([r["rss_mb"]["align1"] for r in proc]))
        out[name] = row
    return out


def format_report(summary: dict, parts: dict) -> str:
    names = list(summary)
    keys = list(summary[names[0]])
    lines = ["| quantity | " + " | ".join(names) + (" | ratio |" if len(names) == 2 else " |"),
             "|---|" + "---|" * (len(names) + (1 if len(names) == 2 else 0))]
    for k in keys:
        vals = [summary[n].get(k) for n in names]
        cells = ["-" if v is None else f"{v:.3g}" if abs(v) < 10 else f"{v:.0f}" for v in vals]
        if len(names) == 2:
            r = vals[1] / vals[0] if vals[0] and vals[1] is not None else None
            cells.append("-" if r is None else f"{r:.2f}")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    for name, p in parts.items():
        lines += ["", f"where the bytes go ({name}, decoder {p['decoder_dtype']}; peak {p['peak_mb']:.0f} MB):",
                  "| part | RSS added MB | s |", "|---|---|---|"]
        for row in p["parts"]:
            s = "-" if row["s"] is None else f"{row['s']:.2f}"
            lines.append(f"| {row['part']} | {row['mb']:.0f} | {s} |")
        if p.get("kv_cache_mb") is not None:
            lines.append(f"| (KV cache of the call: {p['kv_positions']} positions) | {p['kv_cache_mb']:.0f} | - |")
        lines += ["", f"resident MB per mapping at the end ({name}):"]
        lines += [f"  {k}: {v:.0f}" for k, v in p["mappings"].items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--bundle", help="the default profile's bundle")
    ap.add_argument("--lean-bundle", help="the lean profile's bundle (exported with --memory lean; default "
                                          "--bundle)")
    ap.add_argument("--aligner", help="an aligner bundle: a third call asks for words (default profile)")
    ap.add_argument("--lean-aligner", help="the lean profile's aligner bundle (default --aligner)")
    ap.add_argument("--default-dtype", default="int4", help="decoder dtype of the default profile "
                                                            "(default %(default)s: the fastest, as issue 25 compares)")
    ap.add_argument("--audio", default=None, help="clip source (default audio/long_mixed.wav)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--parts", action="store_true", help="also the per-piece breakdown (one process per profile)")
    ap.add_argument("--json", help="write the raw runs and the summary here")
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        result = child_parts(spec) if spec.get("parts") else child_run(spec)
        print(json.dumps(result))
        return 0
    if not args.bundle:
        ap.error("--bundle is required")
    from . import REPO_ROOT

    audio = args.audio or os.path.join(REPO_ROOT, "audio", "long_mixed.wav")
    base = {"audio": audio, "seconds": args.seconds, "threads": args.threads, "decode_tokens": args.decode_tokens}
    profiles = {
        "default": dict(base, bundle=args.bundle, memory="default", dtype=args.default_dtype, aligner=args.aligner),
        "lean": dict(base, bundle=args.lean_bundle or args.bundle, memory="lean", dtype="auto",
                     aligner=args.lean_aligner or args.aligner),
    }
    runs: dict[str, list] = {n: [] for n in profiles}
    for r in range(args.rounds):
        order = list(profiles) if r % 2 == 0 else list(reversed(profiles))
        for name in order:
            spec = profiles[name]
            one = spawn(dict(spec, calls=1, aligner=None))
            proc = spawn(dict(spec, calls=2))
            runs[name].append({"oneshot": one, "process": proc})
            print(f"round {r + 1} {name}: one-shot {one['wall_s']:.2f} s {one['maxrss_mb']:.0f} MB; process "
                  f"{proc['wall_s']:.2f} s {proc['maxrss_mb']:.0f} MB, load {proc['load_s']:.2f} s, calls "
                  f"{proc['calls'][0]['ms']:.0f} / {proc['calls'][1]['ms']:.0f} ms", file=sys.stderr, flush=True)
    parts = {n: spawn(dict(p, parts=True)) for n, p in profiles.items()} if args.parts else {}
    summary = summarize(runs)
    print(format_report(summary, parts))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "parts": parts, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
