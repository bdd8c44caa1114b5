"""A scripted decoder in place of ``engine.generate`` (the TextDecoder seam of Qwen3ASREngine).

Contract checked: what a streaming session hands the decoder seam,
``generate(prompt_embeds, options, on_token=None, prefix_len=None) -> (token ids, DecodeStats)``:
every window's prompt starts with the engine's shared prefix (``prefix_len`` equals
``engine.prefix_len(engine.options)`` and those rows are the request prompt's). It answers each
call with the next scripted token list and records every prompt, so a test can check which
tokens the session put after the template (``tail_is``: compared as embeddings, forward).
"""

from __future__ import annotations

import numpy as np

from qwen3asr.results import DecodeStats


class ScriptedDecoder:
    """Replaces engine.generate (the decoder seam): returns scripted token lists and records the
    assistant-turn tail of each prompt (the rows after the template)."""

    def __init__(self, engine, outputs):
        self.engine, self.outputs, self.prompts = engine, list(outputs), []

    def __call__(self, x, options, on_token=None, prefix_len=None, guard=None):
        # every window shares the rows before the first audio pad (the decoder may reuse their KV)
        assert prefix_len == self.engine.prefix_len(self.engine.options) > 0
        assert np.array_equal(x[:prefix_len], self.engine.embeddings(
            self.engine.request_prompt(1, self.engine.options).ids[:prefix_len]))
        self.prompts.append(x)
        out = self.outputs.pop(0) if self.outputs else []
        return list(out), DecodeStats(len(x), 0.0, len(out), 0.0, "eos")

    def tail_is(self, k, ids):
        """Whether the last rows of prompt k are the embeddings of ``ids`` (the assistant-turn text)."""
        return np.array_equal(self.prompts[k][len(self.prompts[k]) - len(ids):], self.engine.embeddings(ids))
