"""RKLLMRuntime against the C test double tests/c/fake_rkllm.c, for runtime ABI 1.2 and 1.3.

The double is compiled with gcc once per variant (tests/doubles/rkllm_c.py) and checks what
the binding passes (params, chat template, EMBED input, embedding bits, call order); its report
lists every call and every violation. The tests assert both the binding's results and an empty
violation list.
"""

import ctypes
import ctypes.util
import gc
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qwen3asr.backends.rk import rkllm
from qwen3asr.backends.rk.rkllm import (GenerationResult, RepetitionGuard, RKLLMError, RKLLMOptions,
                            RKLLMPerf, RKLLMRunError, RKLLMRuntime)

from doubles import rkllm_c
from doubles.rkllm_c import MODEL, SCRIBBLE, F, Fake, N, W, hidden_of, pattern, rms_norm

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

ABIS = ["1.2", "1.3"]


@pytest.fixture(scope="session")
def build_fake(tmp_path_factory):
    return rkllm_c.Builds(tmp_path_factory.mktemp("fake_rkllm")).double


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(rkllm.ENV_ABI, raising=False)
    monkeypatch.delenv(rkllm.ENV_LIB, raising=False)


@pytest.fixture(params=ABIS)
def abi(request):
    return request.param


@pytest.fixture
def fake(build_fake, abi):
    return Fake(build_fake(abi))


def make_runtime(fake_obj, path, **opts) -> RKLLMRuntime:
    options = RKLLMOptions(**opts)
    fake_obj.expect_options(options)
    return RKLLMRuntime(MODEL, lib_path=path, options=options)


# --------------------------------------------------------------------- full protocol

def test_pattern_matches_the_double(build_fake):
    f = Fake(build_fake("1.2"))
    x = pattern(3, 7, 11).reshape(-1).view(np.uint32)
    assert [int(v) for v in x] == [f.lib.fake_pattern_bits(11, i) for i in range(21)]
    assert np.isfinite(pattern(50, 64, 3)).all()


def test_full_run(build_fake, abi):
    path = build_fake(abi)
    f = Fake(path)
    options = RKLLMOptions(max_context_len=2048, max_new_tokens=100, top_k=1, top_p=0.95,
                           temperature=0.7, repeat_penalty=1.15, frequency_penalty=0.25,
                           presence_penalty=0.5, base_domain_id=1, embed_flash=True,
                           enabled_cpus_mask=0xF0, n_keep=7, hidden_size=64)
    f.expect_options(options)
    f.expect(enabled_cpus_mask=0xF0, enabled_cpus_num=4, n_keep=7, keep_history=0)
    if abi == "1.3":
        f.expect(ignore_eos_token=0, run_max_new_tokens=100)
    embeds = pattern(37, 64, 5)
    f.expect_embed(37, 64, 5)
    # "界" is e7 95 8c: the runtime first reports the token holding e7 95 as WAITING
    f.script(N(9707, "Hello"), N(1879, " wor"), W(100, b"\xe7\x95"), N(101, "界"), N(0, "!"),
             F(12.5, 37, 250.25, 5, 512.75))
    seen = []
    with RKLLMRuntime(MODEL, lib_path=path, options=options) as rt:
        assert rt.abi == abi
        res = rt.run_embed(embeds, on_token=lambda t, s: seen.append((t, s)))
    assert res == GenerationResult(
        token_ids=(9707, 1879, 100, 101, 0), text="Hello wor界!", finish_reason="eos",
        perf=RKLLMPerf(prefill_time_ms=12.5, prefill_tokens=37, generate_time_ms=250.25,
                       generate_tokens=5, memory_usage_mb=512.75))
    assert seen == [(9707, "Hello"), (1879, " wor"), (101, "界"), (0, "!")]
    assert f.violations == []
    # createDefaultParam twice: once for the ABI probe, once for the real parameters
    assert f.calls == ["rkllm_createDefaultParam"] * 2 + [
        "rkllm_init", "rkllm_set_chat_template", "rkllm_run", "rkllm_destroy"]


def test_double_catches_bad_embeddings_and_params(fake, build_fake, abi):
    """The checks in the double can fail: wrong bits, wrong n_tokens, wrong params."""
    path = build_fake(abi)
    rt = make_runtime(fake, path)
    fake.expect(top_k=3, keep_history=1)
    fake.expect_embed(4, 8, 1)
    fake.script(N(1, "a"), F())
    x = pattern(4, 8, 1).copy()
    x[2, 5] = -x[2, 5]
    rt.run_embed(x)
    rt.run_embed(pattern(5, 8, 1))
    rt.close()
    v = fake.violations
    assert any(s.startswith("embed[21] bits") for s in v), v
    assert "n_tokens = 5, expected 4" in v
    assert "keep_history = 0, expected 1" in v
    assert sum("keep_history" in s for s in v) == 2


def test_runtime_defaults_are_kept(fake, build_fake, abi):
    """n_keep=None and enabled_cpus_mask=0 keep createDefaultParam's values (-1; 4 CPUs 0xf0)."""
    fake.expect(n_keep=-1, enabled_cpus_num=4, enabled_cpus_mask=0xF0)
    make_runtime(fake, build_fake(abi)).close()
    assert fake.violations == []
    fake.lib.fake_reset()
    fake.expect(n_keep=-1)
    make_runtime(fake, build_fake(abi), n_keep=3).close()
    assert fake.violations == ["param n_keep = 3, expected -1"]


def test_keep_history_and_clear_cache(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.expect_embed(3, 16, 9)
    fake.script(N(5, "x"), F())
    fake.expect(keep_history=1)
    rt.run_embed(pattern(3, 16, 9), keep_history=True)
    fake.expect(keep_system_prompt=0)
    rt.clear_kv_cache()
    fake.expect(keep_system_prompt=1)
    rt.clear_kv_cache(keep_system_prompt=True)
    fake.expect(keep_history=0)
    res = rt.run_embed(pattern(3, 16, 9))
    rt.close()
    assert res.token_ids == (5,) and res.text == "x"
    assert fake.violations == []
    assert fake.calls[4:] == ["rkllm_run", "rkllm_clear_kv_cache keep_system_prompt=0",
                              "rkllm_clear_kv_cache keep_system_prompt=1", "rkllm_run",
                              "rkllm_destroy"]


def test_error_state_raises_after_run(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.script(N(1, "a"), N(2, "b"), "E")
    with pytest.raises(RKLLMRunError, match="RKLLM_RUN_ERROR.*after 2 tokens") as info:
        rt.run_embed(pattern(2, 4, 0))
    assert info.value.partial.token_ids == (1, 2)
    assert info.value.partial.finish_reason == "error"
    # the handle stays usable
    fake.script(N(3, "c"), F())
    assert rt.run_embed(pattern(2, 4, 0)).text == "c"
    rt.close()
    assert fake.violations == []


def test_run_return_code_is_checked(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.script(N(1, "a"), F())
    fake.option(run_rc=-5)
    with pytest.raises(RKLLMRunError, match=r"^rkllm_run failed with code -5$") as info:
        rt.run_embed(pattern(2, 4, 0))
    assert info.value.partial.text == "a"
    rt.close()


@pytest.mark.parametrize("sends_finish", [1, 0])
def test_abort_from_on_token(fake, build_fake, abi, sends_finish):
    rt = make_runtime(fake, build_fake(abi))
    fake.option(abort_sends_finish=sends_finish)
    fake.script(N(1, "one"), N(2, " two"), N(3, " three"), N(4, " four"), F())
    seen = []

    def on_token(token_id, text):
        seen.append(token_id)
        return token_id != 2

    res = rt.run_embed(pattern(2, 4, 0), on_token=on_token)
    rt.close()
    assert seen == [1, 2]
    assert res.token_ids == (1, 2) and res.text == "one two"
    assert res.finish_reason == "aborted"
    if sends_finish:
        assert res.perf is not None and res.perf.generate_tokens == 2
    else:
        assert res.perf is None
    assert fake.calls.count("rkllm_abort") == 1
    assert "aborted after 2 tokens" in fake.lines("EVENT")
    assert fake.violations == []


def test_on_token_returning_none_continues(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.script(N(1, "a"), N(2, "b"), F())
    res = rt.run_embed(pattern(2, 4, 0), on_token=lambda t, s: None)
    rt.close()
    assert res.text == "ab" and res.finish_reason == "eos"
    assert "rkllm_abort" not in fake.calls


def test_nonzero_run_code_after_abort_is_taken_as_the_abort(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.option(abort_run_rc=-1, abort_sends_finish=0)
    fake.script(N(1, "a"), N(2, "b"), F())
    res = rt.run_embed(pattern(2, 4, 0), on_token=lambda t, s: False)
    rt.close()
    assert (res.token_ids, res.finish_reason) == ((1,), "aborted")


def test_abort_return_code_is_checked(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.option(abort_rc=-3)
    fake.script(N(1, "a"), N(2, "b"), F())
    with pytest.raises(RKLLMRunError, match="rkllm_abort failed with code -3"):
        rt.run_embed(pattern(2, 4, 0), on_token=lambda t, s: False)
    rt.close()


def test_on_token_exception_aborts_and_propagates(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.script(N(1, "a"), N(2, "b"), N(3, "c"), F())

    def on_token(token_id, text):
        if token_id == 2:
            raise KeyError("boom")
        return True

    with pytest.raises(KeyError, match="boom"):
        rt.run_embed(pattern(2, 4, 0), on_token=on_token)
    assert fake.calls.count("rkllm_abort") == 1
    assert rt.run_embed(pattern(2, 4, 0)).text == "abc"  # still usable
    rt.close()
    assert fake.violations == []


def test_repetition_guard_same_token(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi), repetition=RepetitionGuard(max_same_token=5))
    fake.script(N(8, "so"), *[N(7, " la")] * 30, F())
    res = rt.run_embed(pattern(2, 4, 0))
    rt.close()
    assert res.finish_reason == "repetition"
    assert res.token_ids == (8, 7, 7, 7, 7, 7)
    assert fake.calls.count("rkllm_abort") == 1
    assert fake.violations == []


def test_the_guard_sees_the_ids_before_the_run(fake, build_fake, abi):
    """``history`` (a verified draft fed with the prompt) comes before the run's ids in the
    guard's view: three 7s before the run and two in it make the five of max_same_token."""
    rt = make_runtime(fake, build_fake(abi), repetition=RepetitionGuard(max_same_token=5))
    fake.script(*[N(7, " la")] * 30, F())
    res = rt.run_embed(pattern(2, 4, 0), history=[8, 7, 7, 7])
    assert res.finish_reason == "repetition" and res.token_ids == (7, 7)
    fake.script(*[N(7, " la")] * 30, F())
    assert rt.run_embed(pattern(2, 4, 0)).token_ids == (7,) * 5  # without: five of its own
    rt.close()
    assert fake.violations == []


def test_repetition_guard_pattern(fake, build_fake, abi):
    guard = RepetitionGuard(max_same_token=0, max_pattern_len=4, min_pattern_repeats=3)
    rt = make_runtime(fake, build_fake(abi), repetition=guard)
    fake.script(N(1, "a"), *[N(t, str(t)) for t in (4, 5, 6)] * 10, F())
    res = rt.run_embed(pattern(2, 4, 0))
    rt.close()
    assert res.finish_reason == "repetition"
    assert res.token_ids == (1,) + (4, 5, 6) * 3


def test_repetition_guard_rules():
    g = RepetitionGuard(max_same_token=4, max_pattern_len=3, min_pattern_repeats=3)
    assert not g.triggered([1, 1, 1])
    assert g.triggered([2, 1, 1, 1, 1])
    assert not g.triggered([1, 2, 1, 2, 1])
    assert g.triggered([9, 1, 2, 1, 2, 1, 2])
    assert not g.triggered([1, 2, 3, 1, 2, 3, 1, 2])
    assert g.triggered([1, 2, 3, 1, 2, 3, 1, 2, 3])
    assert not g.triggered([1, 2, 3, 4] * 3)  # pattern longer than max_pattern_len
    off = RepetitionGuard(max_same_token=0, min_pattern_repeats=0)
    assert not off.triggered([1] * 100 + [1, 2] * 50)
    with pytest.raises(ValueError, match="min_pattern_repeats must be 0"):
        RepetitionGuard(min_pattern_repeats=1)


def test_length_limit(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi), max_new_tokens=10)
    fake.script(*[N(t, "w") for t in range(1, 13)], F())
    # per-run limit below the init value: 1.3 passes it to the runtime, 1.2 cannot, so the
    # binding aborts at the limit itself
    if abi == "1.3":
        fake.expect(run_max_new_tokens=3)
    res = rt.run_embed(pattern(2, 4, 0), max_new_tokens=3)
    assert (res.token_ids, res.finish_reason) == ((1, 2, 3), "length")
    assert fake.calls.count("rkllm_abort") == (1 if abi == "1.2" else 0)
    # the init limit, applied by the runtime (FINISH after 10 tokens)
    if abi == "1.3":
        fake.expect(run_max_new_tokens=10)
    res = rt.run_embed(pattern(2, 4, 0))
    assert (res.token_ids, res.finish_reason) == (tuple(range(1, 11)), "length")
    assert "limit of 10 tokens reached" in fake.lines("EVENT")
    assert fake.calls.count("rkllm_abort") == (1 if abi == "1.2" else 0)
    if abi == "1.2":
        with pytest.raises(ValueError, match="runtime 1.2.x cannot raise it per run"):
            rt.run_embed(pattern(2, 4, 0), max_new_tokens=11)
    else:
        fake.expect(run_max_new_tokens=11)
        assert len(rt.run_embed(pattern(2, 4, 0), max_new_tokens=11).token_ids) == 11
    rt.close()
    assert fake.violations == []


def test_run_without_finish_is_unknown(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.script(N(1, "a"))
    res = rt.run_embed(pattern(2, 4, 0))
    rt.close()
    assert (res.finish_reason, res.perf) == ("unknown", None)


# ------------------------------------------------------- GET_LAST_HIDDEN_LAYER (run_hidden)

def hidden_runtime(fake_obj, path, abi, hidden=16, **opts) -> RKLLMRuntime:
    """A runtime for hidden-state runs, the double told the model width and to expect mode 1,
    keep_history 0, a full cache clear and (1.3) a one-token limit per run."""
    rt = make_runtime(fake_obj, path, max_new_tokens=1, hidden_size=hidden, **opts)
    fake_obj.option(embd_size=hidden)
    fake_obj.expect(mode=1, keep_history=0, keep_system_prompt=0)
    if abi == "1.3":
        fake_obj.expect(run_max_new_tokens=1)
    return rt


@pytest.mark.parametrize("empty_first", [0, 1, 2])
def test_run_hidden_returns_every_row(fake, build_fake, abi, empty_first):
    """Every input row's state comes back, copied, in order; empty results and tokens are ignored."""
    rt = hidden_runtime(fake, build_fake(abi), abi)
    fake.option(hidden_empty_first=empty_first, hidden_token_after=1)
    x = pattern(37, 16, 5)
    fake.expect_embed(37, 16, 5)
    got = rt.run_hidden(x)
    assert got.dtype == np.float32 and got.shape == (37, 16) and got.flags.c_contiguous
    assert np.array_equal(got.view(np.uint32), hidden_of(x).view(np.uint32))
    assert rt.last_perf == RKLLMPerf(prefill_time_ms=9.25, prefill_tokens=37, generate_time_ms=0.0,
                                     generate_tokens=1, memory_usage_mb=100.5)
    # a second run on the same handle: the cache is cleared again first
    y = pattern(5, 16, 9)
    fake.expect_embed(5, 16, 9)
    assert np.array_equal(rt.run_hidden(y), hidden_of(y))
    rt.close()
    assert fake.violations == []
    assert fake.calls[4:] == ["rkllm_clear_kv_cache keep_system_prompt=0", "rkllm_run"] * 2 + ["rkllm_destroy"]
    assert "rkllm_abort" not in fake.calls
    assert not any("released the buffer" in e for e in fake.lines("EVENT"))  # the callback returns 0


def test_run_hidden_post_norm_rows(fake, build_fake, abi):
    """The double's post-norm rows come back as they are (the binding does not normalise)."""
    rt = hidden_runtime(fake, build_fake(abi), abi, hidden=24)
    w = (1.0 + pattern(1, 24, 3)[0] / 4).astype(np.float32)
    fake.hidden_norm(w, 1e-6)
    x = pattern(11, 24, 2)
    got = rt.run_hidden(x)
    rt.close()
    np.testing.assert_allclose(got, rms_norm(hidden_of(x), w, 1e-6), rtol=2e-6, atol=1e-7)
    assert np.sqrt(((got / w) ** 2).mean(axis=1)) == pytest.approx(1.0, abs=1e-4)  # eps: 1 - 5e-5 at most here
    assert fake.violations == []
    assert "hidden states rows=11 embd_size=24 norm=post" in fake.lines("EVENT")


def test_a_binding_that_keeps_the_pointer_reads_the_scribble(fake, build_fake, abi, monkeypatch):
    """The double overwrites its buffer after each callback: keeping the pointer instead of
    copying the rows inside the callback would return garbage, so the tests above would fail."""
    rt = hidden_runtime(fake, build_fake(abi), abi)
    kept = []

    def keep_pointer(layer):
        n, width = layer.num_tokens, layer.embd_size
        arr = np.ctypeslib.as_array(layer.hidden_states, shape=(n * width,)).reshape(n, width)
        kept.append(arr)
        return arr  # no copy

    monkeypatch.setattr(rkllm, "_copy_hidden", keep_pointer)
    got = rt.run_hidden(pattern(4, 16, 1))
    assert np.all(got == np.float32(SCRIBBLE)) and not np.array_equal(got, hidden_of(pattern(4, 16, 1)))
    rt.close()


@pytest.mark.parametrize("options, message", [
    ({"hidden_rows": 0}, r"returned no hidden states for the 6 input rows.*scripts/export_rkllm.py"),
    ({"hidden_rows": 5}, r"returned hidden states of 5 x 16 \(rows x width\), not the 6 x 16 of the input: the "
                         r"runtime did not return a row for every input token"),
    ({"hidden_rows": 7}, r"hidden states of 7 x 16 \(rows x width\), not the 6 x 16"),
    ({"hidden_embd": 12}, r"hidden states of 6 x 12 \(rows x width\), not the 6 x 16.*another hidden size"),
    ({"hidden_rows": 0, "hidden_empty_first": 2}, r"returned no hidden states"),
    ({"hidden_error": 1}, r"GET_LAST_HIDDEN_LAYER\) reported RKLLM_RUN_ERROR"),
    ({"run_rc": -9}, r"^rkllm_run \(GET_LAST_HIDDEN_LAYER\) failed with code -9$"),
])
def test_run_hidden_errors(fake, build_fake, abi, options, message):
    rt = hidden_runtime(fake, build_fake(abi), abi)
    fake.option(**options)
    with pytest.raises(RKLLMRunError, match=message) as info:
        rt.run_hidden(pattern(6, 16, 0))
    assert info.value.partial.finish_reason == "error"
    fake.option(**{k: (-1 if k == "hidden_rows" else 0) for k in options})
    assert rt.run_hidden(pattern(6, 16, 0)).shape == (6, 16)  # the handle stays usable
    rt.close()
    assert fake.violations == []


def test_run_hidden_clear_cache_code_is_checked(fake, build_fake, abi):
    rt = hidden_runtime(fake, build_fake(abi), abi)
    fake.option(clear_rc=-4)
    with pytest.raises(RKLLMError, match="^rkllm_clear_kv_cache failed with code -4$"):
        rt.run_hidden(pattern(3, 16, 0))
    assert "rkllm_run" not in fake.calls
    rt.close()


def test_run_hidden_refuses_bad_embeddings(fake, build_fake, abi):
    rt = hidden_runtime(fake, build_fake(abi), abi, max_context_len=8)
    with pytest.raises(ValueError, match="hidden size 8, the model needs 16"):
        rt.run_hidden(pattern(3, 8, 0))
    with pytest.raises(ValueError, match=r"1\.\.7"):
        rt.run_hidden(pattern(8, 16, 0))
    rt.close()
    assert "rkllm_run" not in fake.calls and "rkllm_clear_kv_cache keep_system_prompt=0" not in fake.calls


def test_the_double_checks_the_hidden_mode(fake, build_fake, abi):
    """The double's checks can fail: mode 1 not expected, the cache not cleared between runs."""
    path = build_fake(abi)
    rt = make_runtime(fake, path, max_new_tokens=1, hidden_size=16)
    fake.option(embd_size=16)
    rt.run_hidden(pattern(3, 16, 0))  # mode 1 without fake_expect("mode", 1)
    assert fake.violations == ["infer mode = 1, expected 0 (GENERATE)"]
    fake.expect(mode=1)
    rt._fn = dict(rt._fn, rkllm_clear_kv_cache=lambda *a: 0)  # a binding that forgets to clear
    rt.run_hidden(pattern(3, 16, 0))
    rt.close()
    assert fake.violations[1:] == ["GET_LAST_HIDDEN_LAYER run on a KV cache not cleared since the previous run "
                                   "(rknn-llm issue #278)"]


# ------------------------------------------------------------------ GET_LOGITS (run_logits)

def logits_runtime(fake_obj, path, abi, hidden=16, **opts) -> RKLLMRuntime:
    """A runtime for draft verification: GENERATE and GET_LOGITS runs on one handle, each with
    keep_history 0 (the double also checks the cache is cleared before a GET_LOGITS run)."""
    rt = make_runtime(fake_obj, path, hidden_size=hidden, **opts)
    fake_obj.expect(mode_mask=0b101, keep_history=0, keep_system_prompt=0)
    return rt


def vocab_rows(n: int, vocab: int, seed: int) -> np.ndarray:
    return pattern(n, vocab, seed) * np.float32(3)


def test_run_logits_returns_the_last_rows(fake, build_fake, abi):
    """The last ``rows`` rows of the num_tokens x vocab buffer come back, copied and in order;
    the runs before and after on the same handle are unaffected."""
    rt = logits_runtime(fake, build_fake(abi), abi)
    want = vocab_rows(4, 50, 3)
    fake.logits(want)
    x = pattern(9, 16, 4)
    fake.expect_embed(9, 16, 4)
    if abi == "1.3":
        fake.expect(run_max_new_tokens=1)
    got = rt.run_logits(x, 4, 50)
    assert got.dtype == np.float32 and got.shape == (4, 50) and got.flags.c_contiguous
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert rt.last_perf == RKLLMPerf(prefill_time_ms=2.25, prefill_tokens=9, generate_time_ms=0.0,
                                     generate_tokens=1, memory_usage_mb=100.5)
    # fewer rows than the test gave: the last of them; then a GENERATE run on the same handle
    assert np.array_equal(rt.run_logits(x, 2, 50), want[2:])
    rt.close()
    assert fake.violations == []
    assert "logits rows=9 vocab=50" in fake.lines("EVENT")
    assert fake.calls[4:] == ["rkllm_clear_kv_cache keep_system_prompt=0", "rkllm_run"] * 2 + ["rkllm_destroy"]


def test_a_binding_reading_the_wrong_rows_or_keeping_the_pointer_gets_other_logits(fake, build_fake, abi,
                                                                                   monkeypatch):
    """The rows before the test's point elsewhere, and the buffer is scribbled after the callback:
    reading the first rows, or keeping the pointer, would not give the test's logits."""
    rt = logits_runtime(fake, build_fake(abi), abi)
    want = vocab_rows(2, 40, 1)
    fake.logits(want)
    x = pattern(6, 16, 2)
    first = rkllm._copy_last_logits

    def first_rows(result, rows):  # rows from the start of the buffer
        flat = np.ctypeslib.as_array(result.logits, shape=(result.num_tokens * result.vocab_size,))
        return flat[:rows * result.vocab_size].reshape(rows, result.vocab_size).copy()

    monkeypatch.setattr(rkllm, "_copy_last_logits", first_rows)
    got = rt.run_logits(x, 2, 40)
    assert list(got.argmax(axis=1)) == [0, 7919 % 40] and not np.array_equal(got, want)

    def keep_pointer(result, rows):
        flat = np.ctypeslib.as_array(result.logits, shape=(result.num_tokens * result.vocab_size,))
        return flat[-rows * result.vocab_size:].reshape(rows, result.vocab_size)

    monkeypatch.setattr(rkllm, "_copy_last_logits", keep_pointer)
    assert np.all(rt.run_logits(x, 2, 40) == np.float32(SCRIBBLE))
    monkeypatch.setattr(rkllm, "_copy_last_logits", first)
    assert np.array_equal(rt.run_logits(x, 2, 40), want)
    rt.close()


@pytest.mark.parametrize("options, rows, vocab, message", [
    ({"logits_rows": 1}, 3, 30, r"did not return logits for the last 3 input rows \(30 values each\); it returned: "
                                r"1 x 30"),
    ({"logits_rows": 0}, 3, 30, r"did not return logits for the last 3 input rows.*it returned: none"),
    ({}, 3, 31, r"did not return logits for the last 3 input rows \(31 values each\); it returned: 5 x 30"),
])
def test_run_logits_without_the_rows_is_unavailable(fake, build_fake, abi, options, rows, vocab, message):
    """A runtime that returns only the last row (or another width) raises RKLLMLogitsUnavailable,
    which the decoder takes as "no verification here"; the handle stays usable."""
    rt = logits_runtime(fake, build_fake(abi), abi)
    fake.logits(vocab_rows(3, 30, 0))
    fake.option(**options)
    with pytest.raises(rkllm.RKLLMLogitsUnavailable, match=message):
        rt.run_logits(pattern(5, 16, 0), rows, vocab)
    fake.option(logits_rows=-1)
    assert rt.run_logits(pattern(5, 16, 0), 3, 30).shape == (3, 30)
    rt.close()
    assert fake.violations == []


def test_run_logits_errors_and_bad_arguments(fake, build_fake, abi):
    rt = logits_runtime(fake, build_fake(abi), abi, max_context_len=8, max_new_tokens=4)
    fake.logits(vocab_rows(2, 30, 0))
    with pytest.raises(ValueError, match=r"rows must be 1\.\.3 \(the input rows\), got 4"):
        rt.run_logits(pattern(3, 16, 0), 4, 30)
    with pytest.raises(ValueError, match=r"1\.\.7"):
        rt.run_logits(pattern(8, 16, 0), 2, 30)
    assert "rkllm_run" not in fake.calls
    fake.option(run_rc=-9)
    with pytest.raises(RKLLMRunError, match=r"^rkllm_run \(GET_LOGITS\) failed with code -9$"):
        rt.run_logits(pattern(3, 16, 0), 2, 30)
    fake.option(run_rc=0)
    bad = vocab_rows(2, 30, 0)
    bad[1, 4] = np.nan
    fake.logits(bad)
    with pytest.raises(RKLLMRunError, match="logits contain NaN or inf"):
        rt.run_logits(pattern(3, 16, 0), 2, 30)
    rt.close()
    assert fake.violations == []


def test_the_double_checks_the_logits_mode(fake, build_fake, abi):
    """The double's checks can fail: mode 2 outside the allowed modes, the cache not cleared."""
    rt = make_runtime(fake, build_fake(abi), hidden_size=16)
    fake.logits(vocab_rows(1, 30, 0))
    rt.run_logits(pattern(3, 16, 0), 1, 30)
    assert fake.violations == ["infer mode = 2, expected 0 (GENERATE)"]
    fake.expect(mode_mask=0b011)
    rt.run_logits(pattern(3, 16, 0), 1, 30)
    assert fake.violations[1:] == ["infer mode = 2 (GET_LOGITS), not one of the mask 3"]
    fake.expect(mode_mask=0b101)
    rt._fn = dict(rt._fn, rkllm_clear_kv_cache=lambda *a: 0)  # a binding that forgets to clear
    rt.run_logits(pattern(3, 16, 0), 1, 30)
    rt.close()
    assert fake.violations[2:] == ["GET_LOGITS run on a KV cache not cleared since the previous run "
                                   "(rknn-llm issue #278)"]


def test_two_handles_in_one_process(fake, build_fake, abi):
    """The ASR decoder (GENERATE) and the aligner (GET_LAST_HIDDEN_LAYER) as two handles of one
    library: each run reaches its own handle's callback with its own parameters."""
    path = build_fake(abi)
    asr_model, aligner_model = "/models/asr.rkllm", "/models/aligner.rkllm"
    fake.expect_for(asr_model, max_new_tokens=100, max_context_len=2048, mode=0)
    fake.expect_for(aligner_model, max_new_tokens=1, max_context_len=1024, mode=1)
    fake.option(embd_size=16)
    asr = RKLLMRuntime(asr_model, lib_path=path, options=RKLLMOptions(max_context_len=2048, max_new_tokens=100))
    aligner = RKLLMRuntime(aligner_model, lib_path=path,
                           options=RKLLMOptions(max_context_len=1024, max_new_tokens=1, hidden_size=16))
    fake.script(N(1, "a"), N(2, "b"), F())
    for _ in range(2):  # interleaved, as the engine does: transcribe, then align
        assert asr.run_embed(pattern(5, 16, 0)).text == "ab"
        x = pattern(9, 16, 4)
        assert np.array_equal(aligner.run_hidden(x), hidden_of(x))
    aligner.close()
    assert asr.run_embed(pattern(5, 16, 0)).text == "ab"  # the other handle lives on
    asr.close()
    assert fake.violations == []
    inits = [e for e in fake.lines("EVENT") if e.startswith("init ")]
    assert inits == [f"init handle=0 model={asr_model} live=1", f"init handle=1 model={aligner_model} live=2"]
    runs = [e for e in fake.lines("EVENT") if e.startswith("run ")]
    assert runs == ["run handle=0 mode=0 n_tokens=5", "run handle=1 mode=1 n_tokens=9"] * 2 + [
        "run handle=0 mode=0 n_tokens=5"]
    assert fake.calls.count("rkllm_destroy") == 2


# ------------------------------------------------------------------ lifetime, codes

def test_close_destroys_once(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    rt.close()
    rt.close()
    with rt:
        pass
    assert rt.closed
    assert fake.calls.count("rkllm_destroy") == 1
    with pytest.raises(RKLLMError, match="closed"):
        rt.run_embed(pattern(2, 4, 0))
    with pytest.raises(RKLLMError, match="closed"):
        rt.clear_kv_cache()
    assert fake.violations == []


def test_callback_survives_gc(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    for _ in range(3):
        gc.collect()
    fake.script(N(1, "a"), F())
    assert rt.run_embed(pattern(2, 4, 0)).text == "a"
    rt.close()
    assert fake.violations == []


@pytest.mark.parametrize("option, function", [
    ("init_rc", "rkllm_init"), ("template_rc", "rkllm_set_chat_template")])
def test_init_return_codes(fake, build_fake, abi, option, function):
    fake.option(**{option: -7})
    with pytest.raises(RKLLMError, match=f"^{function} failed with code -7$"):
        make_runtime(fake, build_fake(abi))
    # a failed template still destroys the handle; a failed init has none
    assert fake.calls.count("rkllm_destroy") == (1 if option == "template_rc" else 0)
    assert fake.violations == []


def test_clear_and_destroy_return_codes(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi))
    fake.option(clear_rc=-2, destroy_rc=-4)
    with pytest.raises(RKLLMError, match="^rkllm_clear_kv_cache failed with code -2$"):
        rt.clear_kv_cache()
    with pytest.raises(RKLLMError, match="^rkllm_destroy failed with code -4$"):
        rt.close()
    rt.close()  # the handle is gone either way: no second destroy
    assert fake.calls.count("rkllm_destroy") == 1


def test_bad_embeddings_are_refused(fake, build_fake, abi):
    rt = make_runtime(fake, build_fake(abi), hidden_size=4, max_context_len=64, max_new_tokens=8)
    x = pattern(4, 4, 0)
    with pytest.raises(ValueError, match="float32"):
        rt.run_embed(x.astype(np.float64))
    with pytest.raises(ValueError, match=r"\(n_tokens, hidden\)"):
        rt.run_embed(x.reshape(-1))
    with pytest.raises(ValueError, match="C-contiguous"):
        rt.run_embed(pattern(4, 8, 0)[:, ::2])
    with pytest.raises(ValueError, match="hidden size 8, the model needs 4"):
        rt.run_embed(pattern(4, 8, 0))
    with pytest.raises(ValueError, match="1..63"):
        rt.run_embed(pattern(64, 4, 0))
    y = x.copy()
    y[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        rt.run_embed(y)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        rt.run_embed(x, max_new_tokens=0)
    rt.close()
    assert "rkllm_run" not in fake.calls


def test_options_validation():
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        RKLLMOptions(top_k=0)
    with pytest.raises(ValueError, match="must be smaller than max_context_len"):
        RKLLMOptions(max_context_len=100, max_new_tokens=100)
    with pytest.raises(ValueError, match="bitmask of CPUs 0-7"):
        RKLLMOptions(enabled_cpus_mask=0x100)
    with pytest.raises(ValueError, match="top_p must be in"):
        RKLLMOptions(top_p=0.0)


# ------------------------------------------------------------------ ABI detection

@pytest.mark.parametrize("variant, expected", [
    ("1.2", "1.2"), ("1.3", "1.3"), ("1.2-versioned", "1.2"), ("1.3-versioned", "1.3")])
def test_abi_detection(build_fake, variant, expected):
    path = build_fake(variant)
    f = Fake(path)
    lib = ctypes.CDLL(path)
    assert rkllm.resolve_abi(lib, path) == expected
    assert f.lib.fake_abi().decode() == expected
    found = rkllm.version_in_file(path)
    assert found == ((1, 2, 3, "") if variant == "1.2-versioned" else
                     (1, 3, 0, "") if variant == "1.3-versioned" else None)


def test_abi_detection_refuses_contradictions_and_old_or_new_runtimes(build_fake):
    path = build_fake("1.2-says-1.3")
    with pytest.raises(RKLLMError, match="version string says 1.3.0 but .* 1.2 layout"):
        rkllm.resolve_abi(ctypes.CDLL(path), path)
    path = build_fake("pre-1.2.1")
    with pytest.raises(RKLLMError, match="lacks rkllm_get_kv_cache_size.*older than 1.2.1"):
        rkllm.resolve_abi(ctypes.CDLL(path), path)
    path = build_fake("1.4")
    with pytest.raises(RKLLMError, match="version 1.4.0 is not supported"):
        rkllm.resolve_abi(ctypes.CDLL(path), path)


def test_abi_override(build_fake, monkeypatch):
    path = build_fake("1.3")
    lib = ctypes.CDLL(path)
    # explicit beats detection (here deliberately wrong, to show detection is skipped)
    assert rkllm.resolve_abi(lib, path, "1.2.3") == "1.2"
    monkeypatch.setenv(rkllm.ENV_ABI, "1.3")
    assert rkllm.resolve_abi(lib, path) == "1.3"
    monkeypatch.setenv(rkllm.ENV_ABI, "1.1")
    with pytest.raises(ValueError, match="QWEN3ASR_RKLLM_ABI: unsupported RKLLM ABI '1.1'"):
        rkllm.resolve_abi(lib, path)
    with pytest.raises(ValueError, match=r"accepted are 1\.2, 1\.3"):
        RKLLMRuntime(MODEL, lib_path=path, abi="2.0")


def test_abi_from_version_and_probe_rules():
    assert rkllm.abi_from_version(1, 2, 1) == "1.2"
    assert rkllm.abi_from_version(1, 2, 3) == "1.2"
    assert rkllm.abi_from_version(1, 3, 0) == "1.3"
    for bad in [(1, 2, 1, "b1"), (1, 2, 0), (1, 1, 4), (2, 0, 0)]:
        with pytest.raises(RKLLMError, match="is not supported"):
            rkllm.abi_from_version(*bad)
    assert rkllm.abi_from_default_param(bytes(256)) is None
    raw = bytearray(256)
    raw[72] = 1
    assert rkllm.abi_from_default_param(bytes(raw)) == "1.3"
    raw[100] = 1
    assert rkllm.abi_from_default_param(bytes(raw)) is None  # both fit: refuse to guess
    raw[72] = 0x40
    assert rkllm.abi_from_default_param(bytes(raw)) == "1.2"


def test_version_in_file(tmp_path):
    p = tmp_path / "lib.so"
    p.write_bytes(b"\x7fELF\x00junk\x00I rkllm: rkllm-runtime version: 1.2.1b1, rknpu\x00")
    assert rkllm.version_in_file(str(p)) == (1, 2, 1, "b1")
    p.write_bytes(b"rkllm-runtime version: %s, rknpu driver version: %s")
    assert rkllm.version_in_file(str(p)) is None
    p.write_bytes(b"")
    assert rkllm.version_in_file(str(p)) is None


# ------------------------------------------------------------------ missing library

def _assert_download_hint(message: str):
    assert "aarch64" in message
    assert "airockchip/rknn-llm" in message
    assert "rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so" in message
    assert "lib/ folder" in message and "QWEN3ASR_RKLLM_LIB" in message


def test_missing_library_explicit_path(tmp_path):
    with pytest.raises(RKLLMError, match="lib_path points to .*not a file") as info:
        RKLLMRuntime(MODEL, lib_path=tmp_path / "nope.so")
    _assert_download_hint(str(info.value))


def test_missing_library_env(tmp_path, monkeypatch):
    monkeypatch.setenv(rkllm.ENV_LIB, str(tmp_path / "nope.so"))
    with pytest.raises(RKLLMError, match="QWEN3ASR_RKLLM_LIB points to") as info:
        RKLLMRuntime(MODEL)
    _assert_download_hint(str(info.value))


def test_missing_library_nowhere(tmp_path, monkeypatch):
    monkeypatch.setattr(rkllm, "REPO_LIB_DIR", tmp_path)
    monkeypatch.setattr(rkllm, "LIB_NAME", "librkllmrt-not-installed-here.so")
    with pytest.raises(RKLLMError, match="cannot load librkllmrt.so") as info:
        RKLLMRuntime(MODEL)
    _assert_download_hint(str(info.value))


def test_unloadable_library(tmp_path):
    bogus = tmp_path / "librkllmrt.so"
    bogus.write_bytes(b"version https://git-lfs.github.com/spec/v1\n")  # an LFS pointer
    with pytest.raises(RKLLMError, match="cannot load librkllmrt.so") as info:
        RKLLMRuntime(MODEL, lib_path=bogus)
    _assert_download_hint(str(info.value))


def test_library_without_rkllm_symbols(tmp_path):
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc found by ctypes.util.find_library")
    lib = ctypes.CDLL(libc)
    with pytest.raises(RKLLMError, match="does not export rkllm_createDefaultParam"):
        rkllm.resolve_abi(lib, libc)


def test_import_does_not_load_the_library():
    code = ("import ctypes\n"
            "def refuse(*a, **k): raise AssertionError('library loaded at import')\n"
            "ctypes.CDLL = refuse\n"
            "import qwen3asr.backends.rk.rkllm\n"
            "print('imported')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(Path(rkllm.__file__).parents[3])})
    assert out.stdout.strip() == "imported", out.stderr
