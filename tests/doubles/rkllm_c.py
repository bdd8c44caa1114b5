"""The C test double of librkllmrt.so (tests/c/fake_rkllm.c): gcc builds and the test-side handle.

Contract checked: what qwen3asr.backends.rk.rkllm (the ctypes binding of Rockchip's RKLLM runtime) passes
through the runtime's C ABI 1.2 / 1.3: params, chat template, EMBED input and its bits, infer mode,
call order, a cleared KV cache before each hidden-state run, destroy once, several handles at once
(docs/rkllm_abi.md, "The test double"). The double records every call and every violation in a
text report (``Fake.calls``, ``Fake.violations``), replays a token script (``N``/``W``/``F``
items) through the result callback in GENERATE mode, in GET_LAST_HIDDEN_LAYER mode returns
``hidden_of(embeds)`` (pre-norm) or ``rms_norm(hidden_of(embeds), w, eps)`` (post-norm) rows, and in
GET_LOGITS mode the logits the test gave for the last input rows (``Fake.logits``).

``Builds.capturing`` links the double with tests/c/fake_rkllm_capture.c, whose ``rkllm_run``
keeps a copy of the embeddings it is handed (``Shim.embeds()``), so the engine's spliced prompt
can be compared bit for bit with the ONNX engine's.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np

from qwen3asr.backends.rk.rkllm import RKLLMOptions

C_DIR = Path(__file__).resolve().parents[1] / "c"
SOURCE = C_DIR / "fake_rkllm.c"
CAPTURE_SOURCE = C_DIR / "fake_rkllm_capture.c"
# variant -> gcc flags
VARIANTS = {
    "1.2": [],
    "1.3": ["-DABI_1_3"],
    "1.3-versioned": ["-DABI_1_3", '-DFAKE_VERSION_STRING="1.3.0"'],
    "1.2-versioned": ['-DFAKE_VERSION_STRING="1.2.3"'],
    "1.2-says-1.3": ['-DFAKE_VERSION_STRING="1.3.0"'],
    "1.4": ["-DABI_1_3", '-DFAKE_VERSION_STRING="1.4.0"'],
    "pre-1.2.1": ["-DFAKE_PRE_121"],
}
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-fPIC"]
LIBS = ["-lm"]  # sqrt of the post-norm rows
MODEL = "/models/decoder.rkllm"  # the model path the protocol tests hand the runtime


class Builds:
    """Shared libraries built with gcc into ``out_dir``, each once (the caller checks gcc exists)."""

    def __init__(self, out_dir: Path):
        self.out_dir = Path(out_dir)
        self.built: dict[str, str] = {}

    def double(self, variant: str) -> str:
        """Path of fake_rkllm.c built for ``variant`` (a key of VARIANTS)."""
        key = f"double-{variant}"
        if key not in self.built:
            so = self.out_dir / f"fake_rkllm_{variant}.so"
            subprocess.run(["gcc", *CFLAGS, "-shared", *VARIANTS[variant], "-I", str(C_DIR), "-o", str(so),
                            str(SOURCE), *LIBS], check=True, capture_output=True)
            self.built[key] = str(so)
        return self.built[key]

    def capturing(self, abi: str) -> str:
        """Path of a librkllmrt.so for ``abi`` ("1.2" or "1.3"): the double behind the capture shim."""
        key = f"capturing-{abi}"
        if key not in self.built:
            cc = ["gcc", *CFLAGS, *VARIANTS[abi], "-I", str(C_DIR)]
            fake_o = self.out_dir / f"fake_{abi}.o"
            shim_o = self.out_dir / f"shim_{abi}.o"
            so = self.out_dir / f"librkllmrt_{abi}.so"
            subprocess.run([*cc, "-Drkllm_run=fake_inner_rkllm_run", "-c", str(SOURCE), "-o", str(fake_o)],
                           check=True, capture_output=True)
            subprocess.run([*cc, "-c", str(CAPTURE_SOURCE), "-o", str(shim_o)], check=True, capture_output=True)
            subprocess.run(["gcc", "-shared", "-o", str(so), str(fake_o), str(shim_o), *LIBS], check=True,
                           capture_output=True)
            self.built[key] = str(so)
        return self.built[key]


class Fake:
    """Test-side handle on the double (same dlopen handle as the runtime's): expectations in,
    token script in, report out."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.fake_get_report.restype = ctypes.c_char_p
        self.lib.fake_expect.argtypes = [ctypes.c_char_p, ctypes.c_double]
        self.lib.fake_expect_for.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_double]
        self.lib.fake_set_hidden_norm.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_float]
        self.lib.fake_set_logits.argtypes = [ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, ctypes.c_size_t]
        self.lib.fake_expect_model_path.argtypes = [ctypes.c_char_p]
        self.lib.fake_expect_embed.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint]
        self.lib.fake_set_script.argtypes = [ctypes.c_char_p]
        self.lib.fake_set_option.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.lib.fake_pattern_bits.argtypes = [ctypes.c_uint, ctypes.c_uint]
        self.lib.fake_pattern_bits.restype = ctypes.c_uint
        self.lib.fake_abi.restype = ctypes.c_char_p
        self.lib.fake_reset()

    def expect(self, **fields):
        for name, value in fields.items():
            self.lib.fake_expect(name.encode(), float(value))

    def expect_for(self, model: str, **fields):
        """Expectations for the handles of ``model`` only (over the global ones of the same name)."""
        for name, value in fields.items():
            self.lib.fake_expect_for(str(model).encode(), name.encode(), float(value))

    def hidden_norm(self, weight: np.ndarray | None, eps: float = 1e-6):
        """Return post-norm rows (``rms_norm(hidden_of(x), weight, eps)``); None: pre-norm rows."""
        if weight is None:
            self.lib.fake_set_hidden_norm(None, 0, 0.0)
            return
        w = np.ascontiguousarray(weight, dtype=np.float32)
        self.lib.fake_set_hidden_norm(w.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), w.size, eps)

    def logits(self, rows: np.ndarray | None):
        """The logits (n_rows, vocab) a GET_LOGITS run returns for its last n_rows input rows; None: none."""
        if rows is None:
            self.lib.fake_set_logits(None, 0, 0)
            return
        r = np.ascontiguousarray(rows, dtype=np.float32)
        self.lib.fake_set_logits(r.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), r.shape[0], r.shape[1])

    def expect_options(self, o: RKLLMOptions, model=MODEL):
        self.lib.fake_expect_model_path(model.encode())
        self.expect(max_context_len=o.max_context_len, max_new_tokens=o.max_new_tokens,
                    top_k=o.top_k, top_p=o.top_p, temperature=o.temperature,
                    repeat_penalty=o.repeat_penalty, frequency_penalty=o.frequency_penalty,
                    presence_penalty=o.presence_penalty, mirostat=0,
                    skip_special_token=o.skip_special_token, is_async=0,
                    base_domain_id=o.base_domain_id, embed_flash=o.embed_flash, n_batch=1,
                    use_cross_attn=0)

    def expect_embed(self, n, hidden, seed):
        self.lib.fake_expect_embed(n, hidden, seed)

    def script(self, *items: str):
        assert self.lib.fake_set_script(";".join(items).encode()) == 0, self.report

    def option(self, **opts):
        for name, value in opts.items():
            self.lib.fake_set_option(name.encode(), value)

    @property
    def report(self) -> str:
        return self.lib.fake_get_report().decode()

    def lines(self, kind: str) -> list[str]:
        return [ln[len(kind) + 1:] for ln in self.report.splitlines() if ln.startswith(kind + " ")]

    @property
    def violations(self):
        return self.lines("VIOLATION")

    @property
    def calls(self):
        return self.lines("CALL")


class Shim(Fake):
    """Handle on a ``Builds.capturing`` library: also the last EMBED input, as (n, hidden) float32."""

    def __init__(self, path: str, hidden: int):
        super().__init__(path)
        self.hidden = hidden
        self.lib.shim_set_hidden.argtypes = [ctypes.c_size_t]
        self.lib.shim_n_tokens.restype = ctypes.c_size_t
        self.lib.shim_embeds.restype = ctypes.POINTER(ctypes.c_float)
        self.lib.shim_set_hidden(hidden)
        self.lib.shim_set_delay_ms.argtypes = [ctypes.c_long]
        self.lib.shim_set_delay_ms(0)
        self.lib.shim_run_n_tokens.argtypes = [ctypes.c_int]
        self.lib.shim_run_n_tokens.restype = ctypes.c_size_t
        self.lib.shim_run_embeds.argtypes = [ctypes.c_int]
        self.lib.shim_run_embeds.restype = ctypes.POINTER(ctypes.c_float)

    def embeds(self) -> np.ndarray:
        n = self.lib.shim_n_tokens()
        return np.ctypeslib.as_array(self.lib.shim_embeds(), shape=(n, self.hidden)).copy()

    def runs(self) -> list[np.ndarray]:
        """The EMBED inputs of the runs since the Shim was made, in order (at most 8)."""
        return [np.ctypeslib.as_array(self.lib.shim_run_embeds(k), shape=(self.lib.shim_run_n_tokens(k), self.hidden))
                .copy() for k in range(self.lib.shim_n_runs())]


# Token script items (parse_script() in fake_rkllm.c)

def N(token_id: int, text: str) -> str:
    """A NORMAL callback with ``text``."""
    return f"N {token_id} {text.encode().hex() or '-'}"


def W(token_id: int, raw: bytes) -> str:
    """A WAITING callback (a character split across tokens) with the bytes so far."""
    return f"W {token_id} {raw.hex() or '-'}"


def F(prefill_ms=12.5, prefill_tokens=40, gen_ms=250.25, gen_tokens=5, mem_mb=512.75) -> str:
    """The FINISH callback with its perf figures."""
    return f"F {prefill_ms} {prefill_tokens} {gen_ms} {gen_tokens} {mem_mb}"


def runtime_script(tokenizer, ids, finish=F(12.5, 40, 250.25, 9, 512.75)) -> list[str]:
    """What the runtime sends for ``ids``: NORMAL with complete text, WAITING while a character is split."""
    items, pending = [], b""
    for t in ids:
        buf = pending + tokenizer.token_bytes(t, True)
        try:
            text = buf.decode("utf-8")
        except UnicodeDecodeError:
            items.append(W(t, buf))
            pending = buf
            continue
        items.append(N(t, text))
        pending = b""
    return items + [finish]


def pattern(n: int, hidden: int, seed: int) -> np.ndarray:
    """The double's fake_pattern_bits() as a (n, hidden) float32 array."""
    i = np.arange(n * hidden, dtype=np.uint32)
    h = (i + np.uint32(seed)) * np.uint32(2654435761)
    h ^= h >> np.uint32(15)
    h *= np.uint32(2246822519)
    h ^= h >> np.uint32(13)
    exponent = np.uint32(112) + ((h >> np.uint32(23)) & np.uint32(15))
    bits = (h & np.uint32(0x807FFFFF)) | (exponent << np.uint32(23))
    return bits.view(np.float32).reshape(n, hidden)


SCRIBBLE = -7.5  # what the double writes over the hidden-state buffer after each callback


def hidden_of(x: np.ndarray) -> np.ndarray:
    """The double's GET_LAST_HIDDEN_LAYER rows for EMBED input ``x`` (n, E) float32 (pre-norm):
    ``2 x[i, j] - x[i, (j + 1) % E] + (i + 1) / 64`` in float32, bit for bit as the C code."""
    x = np.asarray(x, dtype=np.float32)
    rows = (np.arange(1, x.shape[0] + 1, dtype=np.float32) / np.float32(64))[:, None]
    return (np.float32(2) * x - np.roll(x, -1, axis=1)) + rows


def rms_norm(h: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """The final RMSNorm as the double applies it for post-norm rows (mean square in float64)."""
    ms = (h.astype(np.float64) ** 2).mean(axis=1, keepdims=True)
    inv = (1.0 / np.sqrt(ms + eps)).astype(np.float32)
    return (np.asarray(weight, np.float32) * (h * inv)).astype(np.float32)
