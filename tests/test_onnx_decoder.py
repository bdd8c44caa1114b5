"""The ONNX decoder's in-place KV cache: growth, clones and the context limit (tiny bundle)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from qwen3asr.backends import onnx as onnx_backend
from qwen3asr.bundle import Bundle

pytest.importorskip("torch", reason="building the random checkpoint needs torch (the dev extra: pip install -e '.[dev]')")


def make_decoder(bundle_dir, **kw):
    b = Bundle.load(bundle_dir)
    t = b.text_config
    return onnx_backend.OnnxDecoder(b.decoder_path("fp32"), t["num_hidden_layers"], t["num_key_value_heads"],
                                    t["head_dim"], threads=1, **kw), t["hidden_size"]


def run(dec, embeds, n_prompt):
    cache = dec.new_cache()
    out, cache = dec.forward(embeds[:n_prompt], cache, np.array([n_prompt - 1]))
    logits = [out[0]]
    for i in range(n_prompt, len(embeds)):
        out, cache = dec.forward(embeds[i:i + 1], cache, np.array([0]))
        logits.append(out[0])
    return np.stack(logits), cache


def test_growing_cache_gives_the_same_logits(bundle_dir, monkeypatch):
    dec, hidden = make_decoder(bundle_dir)
    x = np.random.default_rng(0).standard_normal((30, hidden)).astype(np.float32)
    ref, cache = run(dec, x, 10)
    assert cache.length == 30 and cache.capacity == onnx_backend.CACHE_STEP
    monkeypatch.setattr(onnx_backend, "CACHE_STEP", 8)
    ours, small = run(dec, x, 10)
    assert small.length == 30 and small.capacity == 32  # grew 16 -> 24 -> 32
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4)
    assert (np.argmax(ours, -1) == np.argmax(ref, -1)).all()


def test_clone_is_independent(bundle_dir):
    dec, hidden = make_decoder(bundle_dir)
    x = np.random.default_rng(1).standard_normal((14, hidden)).astype(np.float32)
    _, cache = dec.forward(x[:12], dec.new_cache(), np.array([11]))
    branch = cache.clone()
    a, cache = dec.forward(x[12:13], cache, np.array([0]))
    other, _ = dec.forward(x[13:14], cache, np.array([0]))  # the original goes on
    b, branch = dec.forward(x[12:13], branch, np.array([0]))  # the clone still holds 12 positions
    assert branch.length == 13 and cache.length == 13
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, other)


def test_context_limit_is_reported(bundle_dir):
    dec, hidden = make_decoder(bundle_dir, max_positions=16)
    x = np.zeros((17, hidden), np.float32)
    with pytest.raises(RuntimeError, match="decoder context full: 17 positions needed, the graph holds 16"):
        dec.forward(x, dec.new_cache(), np.array([0]))


def test_clone_branches_do_not_share_the_cache(bundle_dir):
    """Branches that diverge: the clone writes other tokens into rows 12 and 13 after the original
    wrote its own there; the original's next logits must equal an unbranched run (a clone that shared
    the in-place buffers would overwrite the original's rows)."""
    dec, hidden = make_decoder(bundle_dir)
    x = np.random.default_rng(1).standard_normal((16, hidden)).astype(np.float32)
    expected, _ = run(dec, x[:15], 12)
    _, cache = dec.forward(x[:12], dec.new_cache(), np.array([11]))
    branch = cache.clone()
    for i in (12, 13):
        _, cache = dec.forward(x[i:i + 1], cache, np.array([0]))
    for _ in range(2):
        _, branch = dec.forward(x[15:16], branch, np.array([0]))
    out, cache = dec.forward(x[14:15], cache, np.array([0]))
    np.testing.assert_array_equal(out[0], expected[-1])



def test_kept_binding_gives_bitwise_the_logits_of_a_fresh_one(bundle_dir):
    """Two caches decoded by turns on one decoder (the kept IOBinding must follow the buffers of
    the cache it is given), and a call from a second thread while the first holds the binding,
    give bitwise the logits of each run alone with a new binding every call."""
    import threading

    dec, hidden = make_decoder(bundle_dir)
    rng = np.random.default_rng(5)
    xa, xb = (rng.standard_normal((20, hidden)).astype(np.float32) for _ in range(2))

    def alone(x):
        ref = make_decoder(bundle_dir)[0]
        ref._binding = lambda cache: ref._bind_cache(ref.session.io_binding(), cache)  # never kept
        return run(ref, x, 8)[0]

    want_a, want_b = alone(xa), alone(xb)
    ca, cb = dec.new_cache(), dec.new_cache()
    got_a, got_b = [], []
    out, ca = dec.forward(xa[:8], ca, np.array([7]))
    got_a.append(out[0])
    out, cb = dec.forward(xb[:8], cb, np.array([7]))
    got_b.append(out[0])
    for i in range(8, 20):
        out, ca = dec.forward(xa[i:i + 1], ca, np.array([0]))
        got_a.append(out[0])
        if i == 12:  # another thread while this one holds the lock: it binds its own
            with dec._lock:
                res = {}
                t = threading.Thread(target=lambda: res.update(out=dec.forward(xb[i:i + 1], cb, np.array([0]))))
                t.start()
                t.join()
            out, cb = res["out"]
        else:
            out, cb = dec.forward(xb[i:i + 1], cb, np.array([0]))
        got_b.append(out[0])
    np.testing.assert_array_equal(np.stack(got_a), want_a)
    np.testing.assert_array_equal(np.stack(got_b), want_b)


def test_generate_does_not_keep_the_cache_alive(bundle_dir):
    from qwen3asr import Qwen3ASREngine

    with Qwen3ASREngine(bundle_dir, backend="onnx", threads=1) as e:
        e.transcribe("audio/en_1.wav", max_new_tokens=4)
        assert e.decoder.kv._kept is None

SPIN_KEY = "session.intra_op.allow_spinning"


@pytest.mark.parametrize("spin", [False, True])
def test_spin_wait_reaches_every_session(spin):
    """Qwen3ASREngine(spin_wait=...) sets ONNX Runtime's spinning on the decoder and on every
    encoder session (read back from the sessions themselves); the default is off."""
    from qwen3asr import Qwen3ASREngine
    from server_proc import MODEL

    kw = {"spin_wait": True} if spin else {}
    with Qwen3ASREngine(MODEL, backend="onnx", threads=1, **kw) as e:
        e.transcribe("audio/en_1.wav")  # loads the encoder sessions it needs
        sessions = [e.decoder.kv.session] + list(e.encoder.runner._sessions.values())
        assert len(sessions) >= 2
        want = "1" if spin else "0"
        assert [s.get_session_options().get_session_config_entry(SPIN_KEY) for s in sessions] == [want] * len(sessions)



@pytest.mark.parametrize("quiet, preload, want", [(True, 3.0, "1"), (False, 3.0, "0"), (True, None, "0")])
def test_spin_wait_auto_spins_a_quiet_one_shot_decoder(monkeypatch, quiet, preload, want):
    """spin_wait="auto": the decoder's threads spin only in a one-shot run (preload_seconds) on a
    host where nothing else is running (backends.host.quiet, asked once at load); the encoder's
    sessions never spin with it."""
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.backends import host
    from server_proc import MODEL

    asked = []
    monkeypatch.setattr(host, "quiet", lambda: asked.append(1) or quiet)
    with Qwen3ASREngine(MODEL, backend="onnx", threads=1, spin_wait="auto", preload_seconds=preload) as e:
        text = e.transcribe("audio/en_1.wav").text
        assert e.decoder.kv.session.get_session_options().get_session_config_entry(SPIN_KEY) == want
        encoders = list(e.encoder.runner._sessions.values())
        assert encoders and {s.get_session_options().get_session_config_entry(SPIN_KEY) for s in encoders} == {"0"}
    assert len(asked) == (1 if preload else 0)
    assert text  # the run itself is the same either way (test_cli checks the text of the default run)


@pytest.mark.parametrize("value", [1, "on", None, "AUTO"])
def test_spin_wait_refuses_other_values(value):
    from qwen3asr.backends import BackendOptions

    with pytest.raises(ValueError, match='spin_wait must be True, False or "auto"'):
        BackendOptions(spin_wait=value)


@pytest.mark.parametrize("cpus, seconds, want", [(2, 3.0, 1), (2, 5.0, 1), (2, 8.0, 2), (4, 3.0, 2), (1, 3.0, 2)])
def test_a_short_one_shot_leaves_a_core_to_the_decoder_load(monkeypatch, cpus, seconds, want):
    """With preload_seconds up to SHORT_PRELOAD_SECONDS and threads = the CPUs (at least 2), the
    encoder's sessions get one thread fewer (the decoder's load, the one-shot's critical path, keeps
    a core); longer audio or spare CPUs leave them as asked; the decoder always has them all."""
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.backends import host
    from server_proc import MODEL

    monkeypatch.setattr(host, "cpus", lambda: cpus)
    with Qwen3ASREngine(MODEL, backend="onnx", threads=2, preload_seconds=seconds) as e:
        assert e.transcribe("audio/en_1.wav").text
        encoders = list(e.encoder.runner._sessions.values())
        assert encoders and {s.get_session_options().intra_op_num_threads for s in encoders} == {want}
        assert e.decoder.kv.session.get_session_options().intra_op_num_threads == 2


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_cpus_is_what_this_process_may_use():
    """A process pinned to one CPU counts one, whatever the machine has."""
    import subprocess
    import sys

    code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); " \
           "from qwen3asr.backends import host; print(host.cpus())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
