"""The library's base exception: ``except qwen3asr.Qwen3ASRError`` catches every error this
package raises on purpose (bad audio, a bundle that does not fit, a closed engine, a runtime
that cannot start, ...), each also an instance of the built-in class it always was
(``AudioError`` is a ``ValueError``, ``BundleError`` a ``RuntimeError``), so older handlers
keep working."""


class Qwen3ASRError(Exception):
    """Base of every exception qwen3asr raises on purpose; the message says what to do."""


__all__ = ["Qwen3ASRError"]
