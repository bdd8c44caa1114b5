"""Voice activity detection with the Silero VAD ONNX model (onnxruntime only, no torch).

The model file is the one shipped in the ``silero-vad`` wheel
(``silero_vad/data/silero_vad.onnx``, MIT). Install it without its torch
dependency with ``pip install --no-deps silero-vad``, or pass the path of a copy
(for example ``models/silero_vad.onnx``).

Model facts (checked on the shipped file):

- inputs ``input`` (batch, samples) float32, ``state`` (2, batch, 128) float32,
  ``sr`` int64 scalar; outputs ``output`` (batch, 1) speech probability and
  ``stateN`` (2, batch, 128), the recurrent state for the next call.
- At 16 kHz it consumes 512-sample windows (32 ms), each preceded by the last
  64 samples of the previous call's input (zeros at the start). Without that
  context the model returns ~0 on clear speech.

Three layers:

- :class:`SileroVAD` — the model and its recurrent state: one window in, one
  probability out.
- :func:`speech_segments` — whole-file segmentation with the same semantics as
  silero's ``get_speech_timestamps`` (thresholds with hysteresis, minimum speech,
  minimum silence, padding, split of over-long segments at the longest pause).
- :class:`VADStream` — the same algorithm fed in chunks of any length; emits
  :class:`SpeechStart` / :class:`SpeechEnd` events whose positions are exactly
  the boundaries :func:`speech_segments` returns for the same audio.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import List, Optional, Union

import numpy as np

from .audio import SAMPLE_RATE, PcmChecker, check_pcm  # 16000 Hz, the only rate this module accepts
from .vad_events import (MAX_VAD_MS, WINDOW_SAMPLES, SpeechEnd, SpeechSegment, SpeechStart, VADEvent,  # noqa: F401
                         VADOptions, _EventBuilder, segments_from_probabilities)

logger = logging.getLogger(__name__)

CONTEXT_SAMPLES = 64  # samples of the previous input prepended to each window
STATE_SIZE = 128  # width of the recurrent state, shape (2, 1, STATE_SIZE)
MODEL_FILENAME = "silero_vad.onnx"
PACKAGED_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", MODEL_FILENAME)
PACKAGED_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"  # silero-vad 6.2.3

_INSTALL_HINT = (
    "reinstall qwen3asr (it ships the model as package data), install it with "
    "`pip install --no-deps silero-vad` (it ships "
    f"silero_vad/data/{MODEL_FILENAME}; torch is not needed), or download "
    f"{MODEL_FILENAME} from the silero-vad release and pass its path, "
    f"for example models/{MODEL_FILENAME}"
)


def find_model(path: Optional[Union[str, os.PathLike]] = None) -> str:
    """Locate the Silero VAD ONNX file.

    ``path`` given: it must exist. Otherwise the copy shipped in this package
    (``qwen3asr/data/silero_vad.onnx``, MIT, from the silero-vad 6.2.3 wheel), else the one
    inside an installed ``silero_vad`` package. Raises FileNotFoundError naming what to do.
    """
    if path is not None:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Silero VAD model not found at {path!r}; {_INSTALL_HINT}")
        return path
    if os.path.isfile(PACKAGED_MODEL):
        return PACKAGED_MODEL
    spec = importlib.util.find_spec("silero_vad")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            candidate = os.path.join(base, "data", MODEL_FILENAME)
            if os.path.isfile(candidate):
                return candidate
    raise FileNotFoundError(f"Silero VAD model not found (not in {PACKAGED_MODEL}, and the silero_vad package is "
                            f"not installed); {_INSTALL_HINT}")


class SileroVAD:
    """The Silero VAD model with its recurrent state (one audio stream at a time).

    ``model_path``: the ONNX file; None takes the one shipped with this package (find_model()).
    The session is the ONNX backend's (``backends.onnx.make_session``): on the CPU with
    ``num_threads`` threads (one by default), its idle threads sleeping instead of spinning.
    """

    def __init__(self, model_path: Optional[Union[str, os.PathLike]] = None, *, num_threads: int = 1):
        from .backends.onnx import make_session  # the ONNX backend's CPU sessions, their thread settings

        self.model_path = find_model(model_path)
        try:
            self._session = make_session(self.model_path, threads=num_threads)
        except RuntimeError as exc:
            if isinstance(exc.__cause__, ImportError):
                raise  # onnxruntime is not installed: the message says what to install
            cause = exc.__cause__ or exc  # onnxruntime's own error for an unreadable file
            reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            raise RuntimeError(f"{self.model_path} is not a readable ONNX model ({reason}); "
                               f"{_INSTALL_HINT}") from exc
        names = [i.name for i in self._session.get_inputs()]
        if names != ["input", "state", "sr"]:
            raise RuntimeError(
                f"{self.model_path} is not the Silero VAD v5 model: inputs {names}, expected ['input', 'state', 'sr']"
            )
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._input = np.zeros((1, CONTEXT_SAMPLES + WINDOW_SAMPLES), dtype=np.float32)
        self.reset()
        logger.debug("Silero VAD loaded from %s", self.model_path)

    def reset(self) -> None:
        """Forget all audio seen so far (recurrent state and context to zeros)."""
        self._state = np.zeros((2, 1, STATE_SIZE), dtype=np.float32)
        self._input[:] = 0.0

    def __call__(self, window: np.ndarray) -> float:
        """Speech probability in [0, 1] of one (512,) float32 window at 16 kHz.

        Windows must be consecutive audio; the state carries over between calls.
        """
        if not isinstance(window, np.ndarray) or window.shape != (WINDOW_SAMPLES,) or window.dtype != np.float32:
            if isinstance(window, np.ndarray):
                got = f"shape {window.shape} dtype {window.dtype}"
            else:
                got = type(window).__name__
            raise ValueError(f"SileroVAD takes one ({WINDOW_SAMPLES},) float32 window at {SAMPLE_RATE} Hz, got {got}")
        # Context = the last CONTEXT_SAMPLES of the previous input, already at the end of the buffer.
        self._input[0, :CONTEXT_SAMPLES] = self._input[0, -CONTEXT_SAMPLES:]
        self._input[0, CONTEXT_SAMPLES:] = window
        out, self._state = self._session.run(None, {"input": self._input, "state": self._state, "sr": self._sr})
        return float(out[0, 0])

    def probabilities(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """Speech probability per 512-sample window of a whole signal, (n_windows,) float32.

        Resets the state first; the last partial window is zero-padded.
        """
        pcm = check_pcm(pcm, sample_rate, where="VAD")
        self.reset()
        n_windows = -(-len(pcm) // WINDOW_SAMPLES)
        padded = np.zeros(n_windows * WINDOW_SAMPLES, dtype=np.float32)
        padded[: len(pcm)] = pcm
        return np.array(
            [self(padded[i * WINDOW_SAMPLES : (i + 1) * WINDOW_SAMPLES]) for i in range(n_windows)], dtype=np.float32
        )


def speech_segments(
    pcm: np.ndarray,
    options: VADOptions = VADOptions(),
    *,
    model: Optional[SileroVAD] = None,
    sample_rate: int = SAMPLE_RATE,
) -> List[SpeechSegment]:
    """Speech segments of a whole recording.

    pcm: (samples,) float32 mono at 16 kHz (checked and clipped to [-1, 1] by
    qwen3asr.audio.check_pcm). ``model`` is reset before use; None
    loads the default model. Returns segments in time order, padding included,
    never overlapping, clipped to [0, len(pcm) / 16000].
    """
    pcm = check_pcm(pcm, sample_rate, where="VAD")
    model = model if model is not None else SileroVAD()
    probs = model.probabilities(pcm)
    return segments_from_probabilities(probs, len(pcm), options)


class VADStream:
    """Streaming speech detector over one audio stream.

    Feed consecutive chunks of any length with :meth:`process`; call :meth:`flush`
    at the end. The events together describe exactly the segments
    :func:`speech_segments` finds for the concatenated audio. A SpeechStart is
    reported once its segment is certain to outlast ``min_speech_ms`` (so with
    the default 250 ms it arrives about that late); a SpeechEnd once
    ``min_silence_ms`` of silence has passed (at least twice the padding later).
    """

    def __init__(self, options: VADOptions = VADOptions(), model: Optional[SileroVAD] = None):
        self.options = options
        self.model = model if model is not None else SileroVAD()
        self.reset()

    def reset(self) -> None:
        """Start a new stream: sample positions restart at 0."""
        self.model.reset()
        self._check = PcmChecker("VAD")
        self._builder = _EventBuilder(self.options)
        self._buffer = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
        self._filled = 0  # samples waiting in _buffer
        self._n_samples = 0  # samples received in total
        self._finished = False

    @property
    def samples_seen(self) -> int:
        """Samples received so far."""
        return self._n_samples

    @property
    def end_delay(self) -> int:
        """Samples by which a reported speech end can trail the audio seen: a stream may cut audio
        for decoding only this far behind ``samples_seen`` (no end can still come before it)."""
        o = self.options
        return int(SAMPLE_RATE * (o.min_silence_ms + 2 * o.speech_pad_ms) / 1000 + 3 * WINDOW_SAMPLES)

    @property
    def in_speech(self) -> bool:
        """True between an emitted SpeechStart and its SpeechEnd."""
        return self._builder.padder.open

    def process(self, pcm_chunk: np.ndarray, sample_rate: int = SAMPLE_RATE) -> List[VADEvent]:
        """Consume a (samples,) float32 chunk at 16 kHz; return the events it completes.

        Chunks are checked as StreamSession's are (qwen3asr.audio.PcmChecker: clipped to
        [-1, 1], one warning per stream)."""
        if self._finished:
            raise RuntimeError("VADStream.process after flush(); call reset() to start a new stream")
        pcm_chunk = self._check(pcm_chunk, sample_rate)
        events: List[VADEvent] = []
        self._n_samples += len(pcm_chunk)
        pos = 0
        while pos < len(pcm_chunk):
            take = min(WINDOW_SAMPLES - self._filled, len(pcm_chunk) - pos)
            self._buffer[self._filled : self._filled + take] = pcm_chunk[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == WINDOW_SAMPLES:
                events.extend(self._builder.push(self.model(self._buffer)))
                self._filled = 0
        return events

    def footprint(self) -> int:
        """Bytes of stream state held (the window buffer and the split candidates: at most one per
        pause within ``max_speech_s``, none when it is unbounded)."""
        return self._buffer.nbytes + 64 * len(self._builder.tracker.possible_ends)

    def flush(self) -> List[VADEvent]:
        """End of the stream: run the zero-padded last partial window and close any open segment."""
        if self._finished:
            return []
        events: List[VADEvent] = []
        self._builder.set_length(self._n_samples)
        if self._filled:
            self._buffer[self._filled :] = 0.0
            events.extend(self._builder.push(self.model(self._buffer)))
            self._filled = 0
        events.extend(self._builder.finish(self._n_samples))
        self._finished = True
        return events
