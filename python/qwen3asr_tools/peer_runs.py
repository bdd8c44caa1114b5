"""One process of the peer benchmark (bench_peers): load one runtime, transcribe a clip, report.

    python -m qwen3asr_tools.peer_runs ours --model BUNDLE --audio clip.wav --tokens 32 --threads 2 \\
        --calls 2 [-- any qwen3asr-transcribe engine flag, e.g. --memory lean]
    python -m qwen3asr_tools.peer_runs crispasr --gguf model.gguf --audio clip.wav --tokens 32 --threads 2

Each run prints one line ``PEER_RESULT {json}`` on stdout (``ProcessReport`` fields). The parent
(bench_peers) times the whole process and reads its peak RSS; llama.cpp's ``llama-mtmd-cli`` is
run directly and its log parsed by ``parse_llama_log`` here.

What is timed per call (each call = the whole clip, N decoded tokens, end of sequence ignored):

- ours: the engine's own stages, as ``Qwen3ASREngine.transcribe`` runs them for one pass
  (file read, mel, encoder, official prompt, prefill, N greedy steps), but with no end-of-sequence
  ids and no loop guard, so every call decodes exactly N tokens; the engine is built from the
  ``qwen3asr-transcribe`` flags (``engine_from_args``), so any engine flag can be passed through,
  and, as that CLI does, told the clip's length (``preload_seconds``);
- crispasr: the Qwen3-ASR stages of libcrispasr through the C API it exports (``qwen3_asr_*``:
  mel, encoder, tokenizer, embeddings, KV-cache forward; ``CrispStages``), driven the same way
  (official prompt, N greedy steps). Its ``Session.transcribe`` has a token cap but no setting to
  ignore the end of sequence, and printed no stage times (``CRISPASR_QWEN3_ASR_BENCH=1``) in the
  0.8.45 wheel, so the stages are driven directly;
- llama.cpp: one call per process (the CLI has none other): ``--ignore-eos -n N``; stage times
  from its ``mtmd batch encoding done in`` (older builds: ``audio slice encoded in``) line and the
  ``llama_perf_context_print`` lines (``--perf``); the call is their sum.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import re
import sys
import time
import wave
from typing import Optional, Sequence

MARK = "PEER_RESULT "


@dataclasses.dataclass(frozen=True)
class CallTimes:
    """One transcription call."""

    call_ms: float  # the whole call, wall time
    encoder_ms: Optional[float]  # mel + audio encoder (llama.cpp: the encoder alone)
    prompt_tokens: Optional[int]  # prefill positions (audio rows included)
    prefill_ms: Optional[float]
    decode_tokens: Optional[int]  # single-token decoder steps
    decode_ms: Optional[float]


@dataclasses.dataclass(frozen=True)
class ProcessReport:
    """What one process measured itself (the parent adds wall time and peak RSS)."""

    load_ms: float  # import + model load, from the process's first line of Python (llama.cpp: its load time)
    calls: tuple  # CallTimes, in call order
    audio_rows: Optional[int] = None  # audio embedding rows the encoder produced
    note: str = ""


def read_wav_f32(path: str):
    """A 16-bit mono WAV as float32 in [-1, 1] (numpy), without importing qwen3asr."""
    import numpy as np

    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise ValueError(f"{path}: expected 16-bit mono PCM")
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


# ----------------------------------------------------------------------------- ours
def run_ours(model: str, audio: str, tokens: int, threads: int, calls: int, dtype: str,
             extra: Sequence[str], t_start: float) -> ProcessReport:
    from qwen3asr.audio import SAMPLE_RATE, AudioFile, prepare_audio
    from qwen3asr.cli.common import engine_from_args
    from qwen3asr.cli.transcribe import build_parser
    from qwen3asr.decoding import DecodingOptions, Generation

    args = build_parser().parse_args(["--audio", audio, "--model", model, "--backend", "onnx", "--threads",
                                      str(threads), "--decoder-dtype", dtype, *extra])
    with AudioFile(audio) as f:  # as qwen3asr-transcribe: the clip's encoder graphs load beside the decoder
        seconds = f.n_samples / SAMPLE_RATE
    engine = engine_from_args(args, preload_seconds=seconds)
    load_ms = (time.perf_counter() - t_start) * 1000
    out = []
    rows = None
    for _ in range(calls):
        t0 = time.perf_counter()
        mel = engine.features(prepare_audio(audio))
        emb = engine.encode(mel)
        enc_ms = (time.perf_counter() - t0) * 1000
        rows = emb.shape[0]
        x = engine.embed_prompt(engine.prompt(rows), emb)
        # no end-of-sequence ids: exactly `tokens` steps after the prefill (the last token chosen needs no step)
        gen = Generation(engine.decoder.kv, x, (), engine.embeddings.row, DecodingOptions(max_new_tokens=tokens + 1))
        gen.run()
        t = gen.times
        out.append(CallTimes((time.perf_counter() - t0) * 1000, enc_ms, t.prefill_tokens, t.prefill_ms,
                             t.decode_tokens, t.decode_ms))
    engine.close()
    return ProcessReport(load_ms, tuple(out), rows)


# ----------------------------------------------------------------------------- crispasr
class _Qwen3AsrParams(ctypes.Structure):
    # qwen3_asr_context_params of libcrispasr 0.8.45: two ints and two flags (12 bytes, returned
    # in registers by qwen3_asr_context_default_params); only n_threads and verbosity are set here
    _fields_ = [("n_threads", ctypes.c_int), ("verbosity", ctypes.c_int), ("flag0", ctypes.c_bool),
                ("flag1", ctypes.c_bool)]


OFFICIAL_PROMPT = ("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|>{pads}<|audio_end|><|im_end|>\n"
                   "<|im_start|>assistant\n")  # the official template, empty context, no language forced
AUDIO_PAD = "<|audio_pad|>"


class CrispStages:
    """CrispASR's Qwen3-ASR stages through the C API its library exports (``qwen3_asr_*`` in
    libcrispasr): mel, encoder, tokenizer, embedding lookup and the KV-cache decoder forward."""

    def __init__(self, lib_path: str, gguf: str, threads: int, max_ctx: int = 4096):
        import numpy as np

        self.np = np
        f, P, I32 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int32)
        lib = self.lib = ctypes.CDLL(lib_path)
        self.free = ctypes.CDLL(None).free
        self.free.argtypes = [ctypes.c_void_p]
        lib.qwen3_asr_context_default_params.restype = _Qwen3AsrParams
        lib.qwen3_asr_init_from_file.argtypes = [ctypes.c_char_p, _Qwen3AsrParams]
        lib.qwen3_asr_init_from_file.restype = ctypes.c_void_p
        lib.qwen3_asr_free.argtypes = [ctypes.c_void_p]
        lib.qwen3_asr_kv_init.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.qwen3_asr_kv_init.restype = ctypes.c_bool
        lib.qwen3_asr_kv_reset.argtypes = [ctypes.c_void_p]
        lib.qwen3_asr_compute_mel.argtypes = [ctypes.c_void_p, f, ctypes.c_int, P, P]
        lib.qwen3_asr_compute_mel.restype = ctypes.c_void_p
        lib.qwen3_asr_run_encoder.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, P, P]
        lib.qwen3_asr_run_encoder.restype = ctypes.c_void_p
        lib.qwen3_asr_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, P]
        lib.qwen3_asr_tokenize.restype = ctypes.c_void_p
        lib.qwen3_asr_embed_tokens.argtypes = [ctypes.c_void_p, I32, ctypes.c_int]
        lib.qwen3_asr_embed_tokens.restype = ctypes.c_void_p
        lib.qwen3_asr_run_llm_kv.argtypes = [ctypes.c_void_p, f, ctypes.c_int, ctypes.c_int, P, P]
        lib.qwen3_asr_run_llm_kv.restype = ctypes.c_void_p
        params = lib.qwen3_asr_context_default_params()
        params.n_threads, params.verbosity = threads, 0
        self.ctx = lib.qwen3_asr_init_from_file(gguf.encode(), params)
        if not self.ctx:
            raise RuntimeError(f"qwen3_asr_init_from_file failed for {gguf}")
        if not lib.qwen3_asr_kv_init(self.ctx, max_ctx):
            raise RuntimeError("qwen3_asr_kv_init failed")
        self.d_model = 0  # the decoder width (= the encoder's output width), known after the first encode

    def _take(self, ptr, shape, dtype):
        """A numpy copy of a malloc'd result, then free() it."""
        if not ptr:
            raise RuntimeError("a qwen3_asr_* call returned NULL")
        n = int(self.np.prod(shape))
        ct = ctypes.c_float if dtype == "f4" else ctypes.c_int32
        arr = self.np.ctypeslib.as_array((ct * n).from_address(ptr)).reshape(shape).copy()
        self.free(ptr)
        return arr

    def encode(self, pcm):
        np = self.np
        a, b = ctypes.c_int(), ctypes.c_int()
        pcm = np.ascontiguousarray(pcm, np.float32)
        mel_ptr = self.lib.qwen3_asr_compute_mel(self.ctx, pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                                 len(pcm), ctypes.byref(a), ctypes.byref(b))
        if not mel_ptr:
            raise RuntimeError("qwen3_asr_compute_mel failed")
        n_mels, frames = a.value, b.value
        enc_ptr = self.lib.qwen3_asr_run_encoder(self.ctx, mel_ptr, n_mels, frames, ctypes.byref(a), ctypes.byref(b))
        self.free(mel_ptr)
        return self._take(enc_ptr, (a.value, b.value), "f4")

    def tokenize(self, text: str):
        n = ctypes.c_int()
        return self._take(self.lib.qwen3_asr_tokenize(self.ctx, text.encode(), ctypes.byref(n)), (n.value,), "i4")

    def embed(self, ids):
        ids = self.np.ascontiguousarray(ids, self.np.int32)
        ptr = self.lib.qwen3_asr_embed_tokens(self.ctx, ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), len(ids))
        return self._take(ptr, (len(ids), self.d_model), "f4")

    def forward(self, x, n_past: int):
        """Logits of the last row after writing ``x`` (n, d_model) into the KV cache at n_past."""
        a, b = ctypes.c_int(), ctypes.c_int()
        x = self.np.ascontiguousarray(x, self.np.float32)
        ptr = self.lib.qwen3_asr_run_llm_kv(self.ctx, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), x.shape[0],
                                            n_past, ctypes.byref(a), ctypes.byref(b))
        return self._take(ptr, (a.value, b.value), "f4")[-1]

    def call(self, pcm, tokens: int) -> tuple:
        """One transcription with exactly ``tokens`` decoder steps: (CallTimes fields, audio rows)."""
        np = self.np
        t0 = time.perf_counter()
        emb = self.encode(pcm)
        enc_ms = (time.perf_counter() - t0) * 1000
        self.d_model = emb.shape[1]
        ids = self.tokenize(OFFICIAL_PROMPT.format(pads=AUDIO_PAD * emb.shape[0]))
        pad_id = int(self.tokenize(AUDIO_PAD)[0])
        x = self.embed(ids)
        x[ids == pad_id] = emb
        self.lib.qwen3_asr_kv_reset(self.ctx)
        t1 = time.perf_counter()
        tok = int(np.argmax(self.forward(x, 0)))
        prefill_ms = (time.perf_counter() - t1) * 1000
        t2 = time.perf_counter()
        n_past = len(ids)
        for _ in range(tokens):
            tok = int(np.argmax(self.forward(self.embed([tok]), n_past)))
            n_past += 1
        dec_ms = (time.perf_counter() - t2) * 1000
        return CallTimes((time.perf_counter() - t0) * 1000, enc_ms, len(ids), prefill_ms, tokens, dec_ms), emb.shape[0]

    def close(self) -> None:
        self.lib.qwen3_asr_free(self.ctx)


def run_crispasr(gguf: str, audio: str, tokens: int, threads: int, calls: int, t_start: float) -> ProcessReport:
    import crispasr

    lib = os.path.join(os.path.dirname(crispasr.__file__), "libcrispasr.so")
    stages = CrispStages(lib, gguf, threads)
    load_ms = (time.perf_counter() - t_start) * 1000
    out, rows = [], None
    for _ in range(calls):
        t0 = time.perf_counter()
        pcm = read_wav_f32(audio)
        c, rows = stages.call(pcm, tokens)
        out.append(dataclasses.replace(c, call_ms=(time.perf_counter() - t0) * 1000))
    stages.close()
    return ProcessReport(load_ms, tuple(out), rows)


# ----------------------------------------------------------------------------- llama.cpp
_LL_ENC = re.compile(r"(?:audio slice encoded|mtmd batch encoding done) in (\d+) ms")
_LL_LOAD = re.compile(r"load time =\s+([0-9.]+) ms")
_LL_PROMPT = re.compile(r"prompt eval time =\s+([0-9.]+) ms /\s+(\d+) tokens")
_LL_EVAL = re.compile(r"\beval time =\s+([0-9.]+) ms /\s+(\d+) runs")
_LL_ROWS = re.compile(r"n_tokens_batch\s*=\s*(\d+)|audio.*?(\d+) tokens")


def parse_llama_log(log: str) -> ProcessReport:
    """A ProcessReport from ``llama-mtmd-cli``'s log (one call). ValueError if a line is missing."""
    def need(rx, what):
        m = rx.search(log)
        if not m:
            raise ValueError(f"llama-mtmd-cli log has no {what} line")
        return m

    enc = float(need(_LL_ENC, "audio encoding time").group(1))
    load = float(need(_LL_LOAD, "'load time'").group(1))
    p = need(_LL_PROMPT, "'prompt eval time'")
    e = [m for m in _LL_EVAL.finditer(log) if not log[max(0, m.start() - 7):m.start()].endswith("prompt ")]
    if not e:
        raise ValueError("llama-mtmd-cli log has no 'eval time' line")
    dec_ms, dec_n = float(e[-1].group(1)), int(e[-1].group(2))
    call = CallTimes(enc + float(p.group(1)) + dec_ms, float(enc), int(p.group(2)), float(p.group(1)), dec_n, dec_ms)
    return ProcessReport(load, (call,))


# ----------------------------------------------------------------------------- child entry
def main(argv=None) -> int:
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runtime", choices=["ours", "crispasr"])
    ap.add_argument("--model", help="ours: bundle directory")
    ap.add_argument("--gguf", help="crispasr: model file")
    ap.add_argument("--audio", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--dtype", default="int4", help="ours: decoder dtype")
    args, extra = ap.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if args.runtime == "ours":
        rep = run_ours(args.model, args.audio, args.tokens, args.threads, args.calls, args.dtype, extra, t_start)
    else:
        rep = run_crispasr(args.gguf, args.audio, args.tokens, args.threads, args.calls, t_start)
    sys.stdout.write(MARK + json.dumps(dataclasses.asdict(rep)) + "\n")
    return 0


def report_from_stdout(stdout: str) -> ProcessReport:
    """The ProcessReport a child printed (ValueError if it printed none)."""
    for line in stdout.splitlines():
        if line.startswith(MARK):
            d = json.loads(line[len(MARK):])
            d["calls"] = tuple(CallTimes(**c) for c in d["calls"])
            return ProcessReport(**d)
    raise ValueError("the process printed no result line")


if __name__ == "__main__":
    sys.exit(main())
