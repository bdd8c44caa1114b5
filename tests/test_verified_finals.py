"""The verified final (a final pass with the streamed ids as its draft) gives the ids of the one
pass without a draft, on speech like the demo model's test split: its first commands, digit
strings and times, made here with espeak-ng and sox as make_dataset.py makes them (the whole
split is measured by scripts/verified_finals.py, docs/streaming.md)."""

import shutil

import pytest

from qwen3asr import prepare_audio

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("espeak-ng", "sox")),
    reason="espeak-ng and sox are not installed (apt-get install $(cat scripts/apt-packages.txt))")

N_CLIPS = 8  # the first test-split utterances with text


@pytest.fixture(scope="module")
def test_split_clips(tmp_path_factory):
    """(name, 16 kHz pcm, reference) of the first N_CLIPS utterances of make_dataset's test split."""
    from qwen3asr_tools import make_dataset as md

    d = tmp_path_factory.mktemp("test_split")
    md.make_noise_pool(str(d))
    specs = [s for s in md.plan_split("test", 500, seed=0) if s.text][:N_CLIPS]
    out = []
    for spec in specs:
        md.render_clip(spec, str(d), str(d))
        out.append((spec.name, prepare_audio(str(d / spec.name)), spec.text))
    return out


@pytest.mark.slow
def test_verified_finals_are_the_one_pass_ids(default_engine, test_split_clips):
    from qwen3asr_tools.verified_finals import one_pass_ids, recorded_passes

    kept = generated = 0
    for name, pcm, _ in test_split_clips:
        s = default_engine.create_stream(chunk_size=2.0, final_pass=True)
        with recorded_passes() as calls:
            for a in range(0, pcm.shape[0], 1600):  # 0.1 s pieces, as the Wyoming server feeds them
                s.feed_audio(pcm[a:a + 1600])
            s.finish()
        assert calls, name
        for x, opts, draft, got in calls:
            want, plain = one_pass_ids(default_engine, x, opts)
            assert list(got.token_ids) == want, name
            assert plain.stats.verified_tokens == 0 and got.stats.draft_tokens == len(draft)
            kept += got.stats.verified_tokens
            generated += len(want)
    assert kept >= generated // 3, (kept, generated)  # the draft is confirmed, not only offered
